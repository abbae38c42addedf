"""Pair selection rules of core.domain.pairs: alpha inclusive, deepest divergence, tie-breaks, cap."""

from __future__ import annotations

from core.domain.events import NodeRecord
from core.domain.mcts import SearchTree
from core.domain.pairs import bad_leaves, good_leaves, path_trajectory, select_pairs


def build(edges: list[tuple[str, str]], rewards: dict[str, float]) -> SearchTree:
    """A tree from (parent, child) edges in expansion order; ``rewards`` are the leaves' rollouts."""
    tree = SearchTree("t", "root", 20)
    tree.add_nodes([NodeRecord("root", None, 0, "", "", "task")])
    for parent, child in edges:
        depth = tree.node(parent).depth + 1
        tree.add_nodes([NodeRecord(child, parent, depth, f"act {child}", f"think {child}", f"obs {child}")])
    for leaf, reward in rewards.items():
        tree.finish_rollout(leaf, reward, "done")
    return tree


def test_alpha_is_inclusive_even_at_one():
    tree = build([("root", "g"), ("root", "b")], {"g": 1.0, "b": 0.0})
    assert good_leaves(tree, 1.0) == ["g"]
    assert bad_leaves(tree, 1.0) == ["b"]
    pairs = select_pairs(tree, alpha=1.0, beta=0.2, max_pairs=8)
    assert [(p.bad_leaf_id, p.good_leaf_id) for p in pairs] == [("b", "g")]


def test_alpha_inclusive_for_values_read_back_from_json():
    tree = build([("root", "g"), ("root", "b")], {"g": 0.7, "b": 0.1})
    assert good_leaves(tree, 0.7) == ["g"]
    assert good_leaves(tree, 0.7000001) == []


def test_beta_gap_required():
    tree = build([("root", "g"), ("root", "b"), ("root", "c")], {"g": 0.6, "b": 0.45, "c": 0.4})
    pairs = select_pairs(tree, alpha=0.5, beta=0.2, max_pairs=8)
    # b is below alpha but 0.6 - 0.45 < 0.2; c is exactly 0.2 below (inclusive)
    assert [p.bad_leaf_id for p in pairs] == ["c"]


def test_pairs_with_deepest_lowest_common_ancestor():
    # root -> x -> y -> {bad, near}; root -> far (good, shallow divergence)
    edges = [("root", "x"), ("x", "y"), ("y", "bad"), ("y", "near"), ("root", "far")]
    tree = build(edges, {"bad": 0.0, "near": 1.0, "far": 1.0})
    (pair,) = select_pairs(tree, alpha=1.0, beta=0.5, max_pairs=8)
    assert pair.good_leaf_id == "near"
    assert pair.divergence_node_id == "y"
    assert pair.shared_depth == 2


def test_ties_prefer_higher_reward_then_shorter_path():
    edges = [("root", "bad"), ("root", "g1"), ("root", "g2"), ("g2", "g2b"), ("root", "g3")]
    tree = build(edges, {"bad": 0.0, "g1": 0.8, "g2b": 0.9, "g3": 0.9})
    (pair,) = select_pairs(tree, alpha=0.5, beta=0.2, max_pairs=8)
    assert pair.good_leaf_id == "g3"  # 0.9 beats 0.8; among 0.9, g3 (depth 1) is shorter than g2b
    assert pair.divergence_node_id == "root"


def test_cap_keeps_deepest_divergences():
    edges = [
        ("root", "a"),
        ("a", "b"),
        ("b", "good"),
        ("b", "bad_deep"),
        ("a", "bad_mid"),
        ("root", "bad_top"),
    ]
    tree = build(edges, {"good": 1.0, "bad_deep": 0.0, "bad_mid": 0.0, "bad_top": 0.0})
    everything = select_pairs(tree, alpha=1.0, beta=0.1, max_pairs=8)
    assert [p.bad_leaf_id for p in everything] == ["bad_deep", "bad_mid", "bad_top"]
    assert [p.shared_depth for p in everything] == [2, 1, 0]
    capped = select_pairs(tree, alpha=1.0, beta=0.1, max_pairs=2)
    assert [p.bad_leaf_id for p in capped] == ["bad_deep", "bad_mid"]
    assert select_pairs(tree, alpha=1.0, beta=0.1, max_pairs=0) == []


def test_no_good_leaf_no_pairs():
    tree = build([("root", "a"), ("root", "b")], {"a": 0.0, "b": 0.2})
    assert select_pairs(tree, alpha=1.0, beta=0.2, max_pairs=8) == []


def test_path_trajectory_follows_root_to_leaf():
    tree = build([("root", "a"), ("a", "b")], {"b": 1.0})
    traj = path_trajectory(tree, "b", task="the task", instruction="sys", provenance={"model": "m"})
    assert traj.task == "the task" and traj.instruction == "sys"
    assert [s.action for s in traj.steps] == ["act a", "act b"]
    assert [s.observation for s in traj.steps] == ["obs a", "obs b"]
    assert traj.reward == 1.0
    assert traj.provenance["node_ids"] == ["root", "a", "b"]
    assert traj.provenance["model"] == "m"


def test_choices_follow_path_content_not_node_ids():
    # the same tree twice, as two runs with the same seeds grow it: the same thoughts and actions,
    # but node ids derived from another (random) run id, so they sort the other way round
    def grow(ids: dict[str, str]) -> SearchTree:
        tree = SearchTree("t", "root", 20)
        tree.add_nodes([NodeRecord("root", None, 0, "", "", "task")])
        for name in ("b1", "b2", "b3", "g1", "g2"):
            tree.add_nodes([NodeRecord(ids[name], "root", 1, f"act {name}", f"think {name}", "obs")])
        for name, reward in {"b1": 0.0, "b2": 0.0, "b3": 0.0, "g1": 1.0, "g2": 1.0}.items():
            tree.finish_rollout(ids[name], reward, "done")
        return tree

    names = ("b1", "b2", "b3", "g1", "g2")
    first = grow({n: f"id-{n}" for n in names})
    second = grow({n: f"{9 - i}-{n}" for i, n in enumerate(names)})  # reversed id order

    def chosen(tree: SearchTree) -> list[tuple[str, str]]:
        pairs = select_pairs(tree, alpha=1.0, beta=0.5, max_pairs=2)
        return [(tree.node(p.bad_leaf_id).action, tree.node(p.good_leaf_id).action) for p in pairs]

    assert chosen(first) == chosen(second) == [("act b1", "act g1"), ("act b2", "act g1")]
    assert [first.node(n).action for n in good_leaves(first, 1.0)] == ["act g1", "act g2"]
    assert [second.node(n).action for n in good_leaves(second, 1.0)] == ["act g1", "act g2"]
