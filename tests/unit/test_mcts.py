"""UCT selection, expansion and backpropagation invariants of core.domain.mcts (pure, no I/O)."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.domain.events import LeafRecorded, NodeRecord, NodesExpanded, RolloutFinished, TreeStarted
from core.domain.mcts import (
    SearchConfig,
    SearchConfigError,
    SearchTree,
    TreeError,
    backpropagate,
    distinct_by,
    expansion_seed,
    select_child,
    select_path,
    uct_score,
)


def _started(tree_id: str = "t", max_depth: int = 5) -> TreeStarted:
    return TreeStarted(
        tree_id=tree_id,
        run_id=None,
        iteration=0,
        env_uri="synthetic",
        task_id="0",
        instruction="",
        task="task",
        model_version="m",
        search_config={"max_depth": max_depth},
        root_id="root",
    )


def grow(seed: int, iterations: int, branching: int, max_depth: int, c_uct: float) -> list[object]:
    """Drive descents over a seeded synthetic tree; returns the event sequence (TreeStarted first).

    Each new node is terminal ("done") with probability 0.25 and then carries a random reward in
    [0, 1]; nodes at max_depth end with reward 0; a node may get no candidates ("no valid action").
    """
    rng = random.Random(seed)
    started = _started(max_depth=max_depth)
    tree = SearchTree("t", "root", max_depth)
    events: list[object] = [started]
    root = NodesExpanded("t", (NodeRecord("root", None, 0, "", "", "task"),))
    tree.apply(root)
    events.append(root)
    counter = 0
    for rollout in range(iterations):
        node_id = tree.root_id
        while True:
            reason = tree.terminal_reason(node_id)
            if reason is not None:
                break
            if not tree.is_expanded(node_id):
                k = rng.randint(0, branching)
                if k == 0:
                    reason = "no valid action"
                    break
                depth = tree.node(node_id).depth + 1
                records = []
                for _ in range(k):
                    counter += 1
                    done = rng.random() < 0.25
                    records.append(
                        NodeRecord(
                            f"n{counter}",
                            node_id,
                            depth,
                            f"a{counter}",
                            "",
                            "obs",
                            reward=round(rng.random(), 3) if done else 0.0,
                            done=done,
                        )
                    )
                event = NodesExpanded("t", tuple(records))
                tree.apply(event)
                events.append(event)
            node_id = select_child(tree, node_id, c_uct)
        finished = RolloutFinished("t", rollout, node_id, tree.node(node_id).reward, reason)
        tree.apply(finished)
        events.append(finished)
    return events


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    iterations=st.integers(1, 30),
    branching=st.integers(1, 4),
    max_depth=st.integers(1, 6),
    c_uct=st.floats(0.0, 2.0),
)
def test_visit_counts_add_up_and_q_in_unit_interval(seed, iterations, branching, max_depth, c_uct):
    events = grow(seed, iterations, branching, max_depth, c_uct)
    tree = SearchTree.from_events(events)  # type: ignore[arg-type]
    ends = Counter(e.leaf_id for e in events if isinstance(e, RolloutFinished))
    assert tree.rollouts == iterations
    assert tree.root.visits == iterations
    for node in tree.nodes.values():
        assert node.visits == sum(tree.nodes[c].visits for c in node.children) + ends[node.node_id]
        if node.visits:
            assert 0.0 <= node.value_sum / node.visits <= 1.0 + 1e-12
        else:
            assert node.value_sum == 0.0
        assert node.depth <= max_depth


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), iterations=st.integers(1, 20))
def test_replaying_events_reproduces_statistics_exactly(seed, iterations):
    events = grow(seed, iterations, 3, 5, 0.25)
    first = SearchTree.from_events(events)  # type: ignore[arg-type]
    again = SearchTree.from_events(list(events))  # type: ignore[arg-type]
    stats = {n.node_id: (n.visits, n.value_sum, tuple(n.children)) for n in first.nodes.values()}
    assert stats == {n.node_id: (n.visits, n.value_sum, tuple(n.children)) for n in again.nodes.values()}
    # and the incremental tree the driver kept equals a from-scratch recount per node
    for node in first.nodes.values():
        leaves = [e for e in events if isinstance(e, RolloutFinished)]
        through = [e for e in leaves if node.node_id in {p.node_id for p in first.path(e.leaf_id)}]
        assert node.visits == len(through)
        assert node.value_sum == pytest.approx(sum(e.reward for e in through), abs=1e-12)


def test_same_seed_same_tree_and_different_seed_differs():
    a = grow(7, 15, 3, 5, 0.25)
    b = grow(7, 15, 3, 5, 0.25)
    c = grow(8, 15, 3, 5, 0.25)
    assert a == b
    assert a != c


def test_unvisited_children_first_in_order_then_uct():
    tree = SearchTree("t", "root", 5)
    tree.add_nodes([NodeRecord("root", None, 0, "", "", "task")])
    tree.add_nodes([NodeRecord(c, "root", 1, c, "", "o") for c in ("a", "b", "c")])
    assert select_child(tree, "root", 0.25) == "a"
    tree.finish_rollout("a", 1.0, "done")
    assert select_child(tree, "root", 0.25) == "b"
    tree.finish_rollout("b", 0.0, "done")
    assert select_child(tree, "root", 0.25) == "c"
    tree.finish_rollout("c", 0.5, "done")
    # all visited: a has Q/N = 1 and the same exploration bonus as the others
    assert select_child(tree, "root", 0.25) == "a"
    expected = 1.0 + 0.25 * math.sqrt(math.log(3) / 1)
    assert uct_score(3, 1, 1.0, 0.25) == pytest.approx(expected)


def test_exploration_term_can_win_over_exploitation():
    tree = SearchTree("t", "root", 5)
    tree.add_nodes([NodeRecord("root", None, 0, "", "", "task")])
    tree.add_nodes([NodeRecord(c, "root", 1, c, "", "o") for c in ("a", "b")])
    for _ in range(50):
        backpropagate(tree, "a", 0.6)
    backpropagate(tree, "b", 0.5)
    assert select_child(tree, "root", 0.0) == "a"  # pure exploitation
    assert select_child(tree, "root", 2.0) == "b"  # b visited once, large bonus


def test_select_path_stops_at_terminal_and_unexpanded_nodes():
    tree = SearchTree("t", "root", 2)
    tree.add_nodes([NodeRecord("root", None, 0, "", "", "task")])
    assert select_path(tree, 0.25) == ["root"]
    tree.add_nodes([NodeRecord("a", "root", 1, "a", "", "o", reward=1.0, done=True)])
    tree.add_nodes([NodeRecord("b", "root", 1, "b", "", "o")])
    assert select_path(tree, 0.25) == ["root", "a"]
    assert tree.terminal_reason("a") == "done"
    tree.finish_rollout("a", 1.0, "done")
    assert select_path(tree, 0.25) == ["root", "b"]
    tree.add_nodes([NodeRecord("c", "b", 2, "c", "", "o")])
    assert tree.terminal_reason("c") == "max_depth"
    tree.add_nodes([NodeRecord("d", "b", 2, "d", "", "o", done=True, valid=False)])
    assert tree.terminal_reason("d") == "failure"


def test_no_valid_action_marks_dead_end_from_event():
    events = [_started(), NodesExpanded("t", (NodeRecord("root", None, 0, "", "", "task"),))]
    events.append(RolloutFinished("t", 0, "root", 0.0, "no valid action"))
    tree = SearchTree.from_events(events)
    assert tree.terminal_reason("root") == "no valid action"
    assert tree.root.visits == 1


def test_inconsistent_events_are_rejected_with_a_clear_error():
    tree = SearchTree("t", "root", 5)
    tree.add_nodes([NodeRecord("root", None, 0, "", "", "task")])
    with pytest.raises(TreeError, match="unknown parent"):
        tree.add_nodes([NodeRecord("x", "nope", 1, "x", "", "o")])
    with pytest.raises(TreeError, match="added twice"):
        tree.add_nodes([NodeRecord("root", None, 0, "", "", "task")])
    with pytest.raises(TreeError, match="depth"):
        tree.add_nodes([NodeRecord("y", "root", 3, "y", "", "o")])
    with pytest.raises(TreeError, match="outside"):
        tree.finish_rollout("root", 1.5, "done")
    with pytest.raises(TreeError, match="TreeStarted"):
        SearchTree.from_events([NodesExpanded("t", ())])


def test_distinct_candidates_compare_normalised_keys():
    texts = ["Get 1 Oak Logs", "get 1 oak logs", "", "inventory", "craft x", "inventory"]
    kept = distinct_by(texts, lambda t: " ".join(t.lower().split()), 3)
    assert kept == ["Get 1 Oak Logs", "inventory", "craft x"]


def test_expansion_seed_is_stable_and_history_specific():
    assert expansion_seed(1, ["get 1 a"]) == expansion_seed(1, ["Get  1 A"])
    assert expansion_seed(1, ["get 1 a"]) != expansion_seed(2, ["get 1 a"])
    assert expansion_seed(1, ["get 1 a"]) != expansion_seed(1, ["get 1 b"])
    assert expansion_seed(1, ["a", "b"]) != expansion_seed(1, ["a b"])
    assert 0 <= expansion_seed(5, []) < 2**31


def test_search_config_defaults_and_validation():
    config = SearchConfig()
    assert (config.n_candidates, config.iterations, config.max_depth, config.c_uct) == (4, 8, 20, 0.25)
    assert SearchConfig.from_dict(config.to_dict()) == config
    with pytest.raises(SearchConfigError, match="n_candidates"):
        SearchConfig(n_candidates=0)
    with pytest.raises(SearchConfigError, match="alpha"):
        SearchConfig(alpha=1.5)
    with pytest.raises(SearchConfigError, match="unknown field"):
        SearchConfig.from_dict({"iterationz": 3})
    with pytest.raises(SearchConfigError, match="c_uct"):
        SearchConfig(c_uct=float("nan"))


# ---- keeping what the search sees: terminal children are leaves at once, closed nodes skipped ----


def grow_keeping(
    seed: int, iterations: int, branching: int, max_depth: int
) -> tuple[list[object], SearchTree]:
    """Like ``grow`` but with the engine's rule: every terminal child is recorded when created
    (``LeafRecorded``; the descent's own end is its ``RolloutFinished``) and selection skips closed
    nodes; stops early when the root is exhausted. Returns the events and the live tree."""
    rng = random.Random(seed)
    tree = SearchTree("t", "root", max_depth)
    root = NodesExpanded("t", (NodeRecord("root", None, 0, "", "", "task"),))
    tree.apply(root)
    events: list[object] = [_started(max_depth=max_depth), root]
    counter = 0
    while tree.rollouts < iterations and not tree.exhausted:
        rollout = tree.rollouts
        node_id, reason = tree.root_id, None
        while reason is None:
            assert not tree.is_closed(node_id), "selection entered a closed node"
            assert tree.terminal_reason(node_id) is None
            if not tree.is_expanded(node_id):
                k = rng.randint(0, branching)
                if k == 0:
                    reason = "no valid action"
                    break
                depth = tree.node(node_id).depth + 1
                records = []
                for _ in range(k):
                    counter += 1
                    done = rng.random() < 0.35
                    reward = round(rng.random(), 3) if done else 0.0
                    records.append(
                        NodeRecord(f"n{counter}", node_id, depth, f"a{counter}", "", "o", reward, done)
                    )
                expanded = NodesExpanded("t", tuple(records))
                tree.apply(expanded)
                events.append(expanded)
                terminal = [(r.node_id, tree.terminal_reason(r.node_id)) for r in records]
                terminal = [(c, why) for c, why in terminal if why is not None]
                ends_here = len(terminal) == len(records)
                for child, why in terminal[1:] if ends_here else terminal:
                    recorded = LeafRecorded("t", rollout, child, tree.node(child).reward, why)  # type: ignore[arg-type]
                    tree.apply(recorded)
                    events.append(recorded)
                if ends_here:
                    node_id, reason = terminal[0]
                    break
            node_id = select_child(tree, node_id, 0.25, skip_closed=True)
        finished = RolloutFinished("t", rollout, node_id, tree.node(node_id).reward, reason)  # type: ignore[arg-type]
        tree.apply(finished)
        events.append(finished)
    return events, tree


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    iterations=st.integers(1, 30),
    branching=st.integers(1, 4),
    max_depth=st.integers(1, 5),
)
def test_keeping_rule_records_every_terminal_node_once_and_replays_exactly(
    seed, iterations, branching, max_depth
):
    events, live = grow_keeping(seed, iterations, branching, max_depth)
    replayed = SearchTree.from_events(events)  # type: ignore[arg-type]
    stats = {n.node_id: (n.visits, n.value_sum, tuple(n.children)) for n in live.nodes.values()}
    assert stats == {n.node_id: (n.visits, n.value_sum, tuple(n.children)) for n in replayed.nodes.values()}
    assert replayed.closed == live.closed and replayed.rollouts == live.rollouts
    leaf_events = [e for e in events if isinstance(e, RolloutFinished | LeafRecorded)]
    assert replayed.rollouts == sum(isinstance(e, RolloutFinished) for e in events)
    assert replayed.rollouts == iterations or replayed.exhausted  # stops early only when exhausted
    assert replayed.root.visits == len(leaf_events)
    # every node that is terminal is a recorded leaf, visited exactly once (never re-selected)
    for node in replayed.nodes.values():
        if replayed.terminal_reason(node.node_id) in ("done", "failure", "max_depth"):
            assert node.node_id in replayed.leaf_rewards and node.visits == 1
        if node.children:
            own = sum(1 for e in leaf_events if e.leaf_id == node.node_id)  # type: ignore[attr-defined]
            assert node.visits == sum(replayed.nodes[c].visits for c in node.children) + own
    assert len({e.leaf_id for e in leaf_events}) == len(leaf_events)  # type: ignore[attr-defined]


def test_exhausted_nodes_are_not_selected_and_exhaustion_propagates_to_the_root():
    tree = SearchTree("t", "root", 3)
    tree.apply(NodesExpanded("t", (NodeRecord("root", None, 0, "", "", "task"),)))
    tree.apply(
        NodesExpanded(
            "t", (NodeRecord("a", "root", 1, "a", "", "o"), NodeRecord("b", "root", 1, "b", "", "o"))
        )
    )
    tree.apply(
        NodesExpanded(
            "t",
            (
                NodeRecord("a1", "a", 2, "x", "", "o", 1.0, True),
                NodeRecord("a2", "a", 2, "y", "", "o", 0.0, True),
            ),
        )
    )
    assert select_child(tree, "root", 0.25, skip_closed=True) == "a"  # a is not exhausted yet
    tree.apply(LeafRecorded("t", 0, "a2", 0.0, "done"))
    assert not tree.is_closed("a")
    tree.apply(RolloutFinished("t", 0, "a1", 1.0, "done"))
    assert tree.is_closed("a1") and tree.is_closed("a") and not tree.exhausted
    assert tree.rollouts == 1 and tree.root.visits == 2 and tree.node("a").visits == 2
    # a has the best value, yet it is exhausted: only b can be selected now
    assert select_child(tree, "root", 0.25) == "b"  # (b unvisited: first either way)
    tree.apply(NodesExpanded("t", (NodeRecord("b1", "b", 2, "z", "", "o"),)))
    tree.apply(RolloutFinished("t", 1, "b1", 0.0, "no valid action"))  # b1 is a dead end
    assert tree.is_closed("b") and tree.exhausted
    assert select_child(tree, "root", 0.25) in ("a", "b")  # the old rule would still go on
    with pytest.raises(TreeError, match="no open children"):
        select_child(tree, "root", 0.25, skip_closed=True)
    with pytest.raises(TreeError, match="exhausted"):
        select_path(tree, 0.25, skip_closed=True)


def test_old_leaf_only_rule_switch_is_validated_and_serialised():
    assert SearchConfig().record_terminal_children is True
    old = SearchConfig.from_dict({"record_terminal_children": False})
    assert old.to_dict()["record_terminal_children"] is False
    with pytest.raises(SearchConfigError, match="record_terminal_children"):
        SearchConfig(record_terminal_children="yes")  # type: ignore[arg-type]


def test_tree_completed_v1_upcasts_to_v2_with_exhausted_false():
    from core.domain.events import TreeCompleted, decode

    v1 = {
        "tree_id": "t",
        "run_id": None,
        "iteration": 0,
        "nodes": 3,
        "rollouts": 2,
        "best_reward": 1.0,
        "good_leaves": 1,
        "bad_leaves": 1,
        "pairs": 1,
    }
    event = decode("TreeCompleted", 1, v1)
    assert isinstance(event, TreeCompleted) and event.exhausted is False and event.rollouts == 2
    assert TreeCompleted.event_version == 2
