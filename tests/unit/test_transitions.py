"""Transitions from a hand-built tree (core.domain.transitions): rewards, done flags, next states,
invalid-action penalty, order, manifest and rebuild guarantees; preference pairs (core.domain.preferences)."""

from __future__ import annotations

import pytest

from core.domain.datasets import DatasetError, EmptyDatasetError
from core.domain.events import NodeRecord
from core.domain.mcts import SearchTree
from core.domain.preferences import PreferenceError, preference_manifest, preference_pair
from core.domain.trajectory import Step, Trajectory
from core.domain.transitions import (
    TrajectorySource,
    TransitionConfig,
    TreeSource,
    build_transitions,
    rebuild_transitions,
    tree_transitions,
)


def hand_tree() -> SearchTree:
    """root -> a -> b (success, 1.0) | c (rejected action, leaf 0.0); root -> d (open, never expanded)."""
    tree = SearchTree("tree-1", "root", 20)
    tree.add_nodes([NodeRecord("root", None, 0, "", "", "Goal: craft x.")])
    tree.add_nodes(
        [
            NodeRecord("a", "root", 1, "get 1 y", "need y", "Got 1 y"),
            NodeRecord("d", "root", 1, "inventory", "look", "Inventory: []"),
        ]
    )
    tree.add_nodes(
        [
            NodeRecord("b", "a", 2, "craft 1 x using 1 y", "craft", "Crafted 1 x", 1.0, True),
            NodeRecord("c", "a", 2, "craft 1 z", "oops", "Could not find enough items", 0.0, False, False),
        ]
    )
    tree.finish_rollout("b", 1.0, "done")
    tree.record_leaf("c", 0.0, "max_depth")
    return tree


def source(tree: SearchTree, position: int = 10) -> TreeSource:
    return TreeSource(tree, task="Goal: craft x.", instruction="You craft.", position=position)


def test_transitions_from_a_hand_built_tree_are_exact() -> None:
    ts = tree_transitions(source(hand_tree()), TransitionConfig(invalid_action_penalty=0.1))
    edges = [(t.parent_id, t.node_id) for t in ts]
    assert edges == [("root", "a"), ("root", "d"), ("a", "b"), ("a", "c")]
    by_node = {t.node_id: t for t in ts}
    a, d, b, c = by_node["a"], by_node["d"], by_node["b"], by_node["c"]
    # rewards: terminal reward at leaves, 0 elsewhere, the penalty on the rejected action
    assert [a.reward, d.reward, b.reward, c.reward] == [0.0, 0.0, 1.0, pytest.approx(-0.1)]
    assert [a.done, d.done, b.done, c.done] == [False, False, True, True]
    assert [a.invalid, d.invalid, b.invalid, c.invalid] == [False, False, False, True]
    # states: s = history before the action, s' = history after it
    assert a.history == () and [s.action for s in a.next_history] == ["get 1 y"]
    assert [s.action for s in b.history] == ["get 1 y"]
    assert [s.action for s in b.next_history] == ["get 1 y", "craft 1 x using 1 y"]
    assert c.history == b.history  # siblings share their state
    assert b.step.observation == "Crafted 1 x"
    # rendered state ends with the last observation; the action is the ReAct turn
    msgs = b.state_messages()
    assert [m.role for m in msgs] == ["system", "user", "assistant", "user"]
    assert msgs[-1].content == "Got 1 y" and all(m.weight == 0 for m in msgs)
    assert b.action_text() == "Thought: craft\nAction: craft 1 x using 1 y"
    assert b.next_state_messages()[-1].content == "Crafted 1 x"


def test_no_penalty_by_default_and_open_edges_can_be_dropped() -> None:
    ts = tree_transitions(source(hand_tree()))
    assert {t.node_id: t.reward for t in ts}["c"] == 0.0
    closed = tree_transitions(source(hand_tree()), TransitionConfig(include_open_edges=False))
    assert [t.node_id for t in closed] == ["a", "b", "c"]


def test_trajectory_transitions_and_unknown_rewards() -> None:
    steps = (Step("t1", "get 1 y", "Got 1 y"), Step("t2", "craft 1 x using 1 y", "Crafted 1 x", 1.0, True))
    known = TrajectorySource("trace-1", Trajectory("Goal: craft x.", "", steps, reward=1.0), 5)
    unknown = TrajectorySource("trace-2", Trajectory("Goal: craft x.", "", steps, reward=None), 6)
    built = build_transitions(run_id="r", iteration=0, trajectories=[known, unknown])
    assert [(t.reward, t.done) for t in built.transitions] == [(0.0, False), (1.0, True)]
    assert built.manifest.skipped_trajectories == 1
    assert built.transitions[1].history == steps[:1]


def test_manifest_is_deterministic_and_rebuild_checks_sources() -> None:
    t1, t2 = hand_tree(), hand_tree()
    t2.tree_id = "tree-2"
    first = build_transitions(run_id="r", iteration=1, trees=[source(t2, 20), source(t1, 10)])
    again = build_transitions(run_id="r", iteration=1, trees=[source(t1, 10), source(t2, 20)])
    assert first.manifest == again.manifest  # input order does not matter
    assert [s.source_id for s in first.manifest.sources] == ["tree-1", "tree-2"]
    assert first.manifest.done == 4 and first.manifest.invalid == 2
    assert rebuild_transitions(first.manifest, trees=[source(t1, 10), source(t2, 20)]) == first.transitions
    with pytest.raises(DatasetError, match="not found"):
        rebuild_transitions(first.manifest, trees=[source(t1, 10)])
    changed = hand_tree()
    changed.tree_id = "tree-2"
    changed.add_nodes([NodeRecord("e", "d", 2, "get 1 q", "", "Got 1 q")])
    with pytest.raises(DatasetError, match="changed"):
        rebuild_transitions(first.manifest, trees=[source(t1, 10), source(changed, 20)])
    other = build_transitions(
        run_id="r", iteration=1, trees=[source(t1, 10)], config=TransitionConfig(invalid_action_penalty=0.5)
    )
    assert other.manifest.dataset_id != first.manifest.dataset_id


def test_empty_and_bad_config() -> None:
    with pytest.raises(EmptyDatasetError):
        build_transitions(run_id="r", iteration=0)
    with pytest.raises(DatasetError, match="invalid_action_penalty"):
        TransitionConfig(invalid_action_penalty=-1)
    with pytest.raises(DatasetError, match="unknown field"):
        TransitionConfig.from_dict({"gamma": 0.9})


def test_preference_pair_at_the_divergence_node() -> None:
    shared = Step("need y", "get 1 y", "Got 1 y")
    good = Trajectory(
        "Goal: craft x.",
        "You craft.",
        (shared, Step("craft", "craft 1 x using 1 y", "Crafted 1 x", 1.0, True)),
        reward=1.0,
    )
    bad = Trajectory(
        "Goal: craft x.",
        "You craft.",
        (shared, Step("oops", "craft 1 z", "Could not find z", valid=False), Step("?", "inventory", "[]")),
        reward=0.0,
    )
    pair = preference_pair("p1", bad, good, 1, position=7)
    assert [(m.role, m.weight) for m in pair.prompt] == [
        ("system", 0),
        ("user", 0),
        ("assistant", 0),
        ("user", 0),
    ]
    assert pair.prompt[-1].content == "Got 1 y"  # the observation both paths saw
    assert [(m.role, m.weight) for m in pair.chosen] == [("assistant", 1)]  # last observation dropped
    assert [(m.role, m.weight) for m in pair.rejected] == [("assistant", 1), ("user", 0), ("assistant", 1)]
    assert pair.rejected[1].content == "Could not find z"
    assert pair.chosen_sample().messages == pair.prompt + pair.chosen
    with pytest.raises(PreferenceError, match="identical"):
        preference_pair("p2", good, good, 1)
    ordered, manifest = preference_manifest("r", 0, [pair])
    assert manifest.pair_ids == ("p1",) and ordered == (pair,)
    with pytest.raises(EmptyDatasetError, match="1 pair"):
        preference_manifest("r", 0, [], {"p2": "identical"})
