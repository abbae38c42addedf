"""Search that keeps what it sees, on the real TextCraft environment with a scripted expert policy:
a terminal success stepped as a sibling (never descended into) is a recorded leaf and is paired;
exhausted subtrees are never re-entered and an exhausted root stops the search; the live tree, its
replay and the store's projections agree; the old leaf-only rule (the bench baseline) loses it."""

from __future__ import annotations

import re
from collections.abc import Sequence

from sqlalchemy import select

from core.domain.events import (
    LeafRecorded,
    NewEvent,
    PairFound,
    RolloutFinished,
    TreeCompleted,
)
from core.domain.ids import tree_stream
from core.domain.mcts import SearchConfig, SearchTree
from core.envs.textcraft import TextCraftEnv
from core.envs.textcraft.recipes import recipe_book
from core.envs.textcraft.solver import solve
from core.llm.ports import Completion, Conversation, Seeds
from core.llm.prompts import normalize_action, parse_action
from core.store.sql import SqlEventStore
from core.store.tables import nodes, trees
from search_service.engine import TreeRequest, TreeSearch

TASK = "5"  # black dye: get 1 ink sac, craft 1 black dye using 1 ink sac
PLAN = solve("black dye", recipe_book())


class ScriptedExpert:
    """Proposes [next expert action, "inventory"], except before the LAST expert action, where it
    proposes ["inventory", last action]: UCT (unvisited children first, in order) then always
    descends into ``inventory`` and only ever STEPS the winning craft as a sibling."""

    model_version = "scripted-expert"

    async def sample(
        self,
        conversations: Sequence[Conversation],
        n: int = 1,
        temperature: float = 1.0,
        max_tokens: int = 64,
        seed: Seeds = None,
        stop: Sequence[str] | None = None,
        logprobs: bool = False,
    ) -> list[list[Completion]]:
        out = []
        for conversation in conversations:
            taken = [parse_action(m.content) for m in conversation if m.role == "assistant"]
            done = 0
            for parsed in taken:
                if parsed and done < len(PLAN) and parsed.normalized == normalize_action(PLAN[done]):
                    done += 1
            actions = ["inventory", PLAN[done]] if done == len(PLAN) - 1 else [PLAN[done], "inventory"]
            out.append([Completion(f"Thought: step.\nAction: {a}", 5) for a in actions])
        return out

    async def score_labels(self, conversations, labels):  # type: ignore[no-untyped-def]
        raise NotImplementedError("not a critic")

    async def close(self) -> None:
        return None


class Sink:
    def __init__(self, store: SqlEventStore | None = None) -> None:
        self.events: list[NewEvent] = []
        self.store = store

    async def __call__(self, events: Sequence[NewEvent]) -> None:
        if self.store is not None:
            await self.store.append(events)
        self.events.extend(events)


async def run(
    iterations: int, *, keep: bool = True, store: SqlEventStore | None = None
) -> tuple[TreeSearch, Sink]:
    config = SearchConfig(
        n_candidates=2,
        iterations=iterations,
        max_depth=len(PLAN) + 1,
        alpha=1.0,
        record_terminal_children=keep,
    )
    sink = Sink(store)
    engine = TreeSearch(
        TreeRequest("keep-" + TASK, "textcraft", TASK, "scripted", config),
        TextCraftEnv(),
        ScriptedExpert(),
        sink,
    )
    await engine.run()
    return engine, sink


def test_the_scripted_plan_is_what_the_tests_assume() -> None:
    assert len(PLAN) == 2 and re.match(r"craft 1 black dye", PLAN[-1])


async def test_sibling_terminal_success_stepped_but_not_descended_into_is_recorded_and_paired() -> None:
    engine, sink = await run(iterations=1)
    tree = engine.tree
    assert tree is not None
    kinds = [type(e.event).__name__ for e in sink.events]
    assert kinds.count("RolloutFinished") == 1 and kinds.count("LeafRecorded") == 2
    successes = [n for n in tree.nodes.values() if n.done and n.reward == 1.0]
    assert len(successes) == 2  # the winning craft, stepped twice as a sibling of "inventory"
    for success in successes:
        assert success.visits == 1 and tree.leaf_reasons[success.node_id] == "done"
        # never descended into: the one descent ended at a different (max_depth) leaf
    (finished,) = [e.event for e in sink.events if isinstance(e.event, RolloutFinished)]
    assert finished.terminal_reason == "max_depth" and finished.leaf_id not in {s.node_id for s in successes}
    final = engine.final_events()
    goods = [e.event for e in final if type(e.event).__name__ == "GoodTrajectoryFound"]
    pairs = [e.event for e in final if isinstance(e.event, PairFound)]
    # the one bad leaf pairs with each good one: stratified selection (the default) adds the bad
    # leaf's other partner in its second pass (core/domain/pairs.py)
    assert len(goods) == 2 and len(pairs) == 2
    assert {p.bad_leaf_id for p in pairs} == {finished.leaf_id}
    assert {p.good_leaf_id for p in pairs} == {s.node_id for s in successes}
    pair = pairs[0]
    bad, good = tree.node(pair.bad_leaf_id), tree.node(pair.good_leaf_id)
    assert bad.parent_id == good.parent_id == pair.divergence_node_id  # the adjacent correct path
    assert pair.shared_steps == len(PLAN) and pair.good.steps[-1].action == PLAN[-1]
    completed = final[-1].event
    assert isinstance(completed, TreeCompleted) and completed.good_leaves == 2 and completed.bad_leaves == 1
    # replay == live
    rebuilt = SearchTree.from_events([e.event for e in sink.events])
    assert {k: (n.visits, n.value_sum) for k, n in rebuilt.nodes.items()} == {
        k: (n.visits, n.value_sum) for k, n in tree.nodes.items()
    }
    assert rebuilt.leaf_rewards == tree.leaf_rewards and rebuilt.closed == tree.closed


async def test_old_leaf_only_rule_loses_the_stepped_success() -> None:
    engine, sink = await run(iterations=1, keep=False)
    assert engine.tree is not None
    assert any(n.done and n.reward == 1.0 for n in engine.tree.nodes.values())  # stepped...
    assert not any(isinstance(e.event, LeafRecorded) for e in sink.events)
    final = engine.final_events()
    completed = final[-1].event
    assert (
        isinstance(completed, TreeCompleted) and completed.good_leaves == 0 and completed.pairs == 0
    )  # ...lost


async def test_exhausted_subtrees_are_skipped_and_an_exhausted_root_stops_the_search() -> None:
    engine, sink = await run(iterations=50)
    tree = engine.tree
    assert tree is not None
    # the whole tree (branching 2, depth 3) is known after 3 descents; the other 47 are not spent
    assert tree.rollouts == 3 and tree.exhausted and engine.stats.exhausted
    assert engine.stats.policy_calls == 6
    leaf_ids = [e.event.leaf_id for e in sink.events if isinstance(e.event, RolloutFinished | LeafRecorded)]
    assert len(leaf_ids) == len(set(leaf_ids))  # no outcome recorded twice
    terminal = [n for n in tree.nodes if tree.terminal_reason(n) is not None]
    assert sorted(terminal) == sorted(leaf_ids) and all(tree.node(n).visits == 1 for n in terminal)
    completed = engine.final_events()[-1].event
    assert isinstance(completed, TreeCompleted) and completed.exhausted and completed.rollouts == 3


async def test_projections_match_the_replayed_tree(store: SqlEventStore) -> None:
    engine, sink = await run(iterations=50, store=store)
    await store.append(engine.final_events())
    stored = [r.event for r in await store.read_stream(tree_stream("keep-" + TASK))]
    replayed = SearchTree.from_events(stored)
    assert isinstance(stored[-1], TreeCompleted) and stored[-1].exhausted
    async with store.engine.connect() as conn:
        rows = (await conn.execute(select(nodes).where(nodes.c.tree_id == "keep-" + TASK))).mappings().all()
        tree_row = (
            (await conn.execute(select(trees).where(trees.c.tree_id == "keep-" + TASK))).mappings().one()
        )
    assert {r["node_id"]: (r["visits"], round(r["value_sum"], 9)) for r in rows} == {
        k: (n.visits, round(n.value_sum, 9)) for k, n in replayed.nodes.items()
    }
    assert tree_row["rollouts"] == replayed.rollouts == 3 and tree_row["best_reward"] == 1.0
