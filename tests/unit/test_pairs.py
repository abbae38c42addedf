"""Pair selection rules of core.domain.pairs: alpha inclusive, preferred partner, tie-breaks, the
stratified rule (the default) and the deepest rule (the baseline), the cap."""

from __future__ import annotations

import pytest

from core.domain.events import NodeRecord
from core.domain.mcts import SearchConfig, SearchConfigError, SearchTree
from core.domain.pairs import bad_leaves, candidate_pairs, good_leaves, path_trajectory, select_pairs


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
    (pair,) = select_pairs(tree, alpha=1.0, beta=0.5, max_pairs=8, selection="deepest")
    assert pair.good_leaf_id == "near"
    assert pair.divergence_node_id == "y"
    assert pair.shared_depth == 2


def test_ties_prefer_higher_reward_then_shorter_path():
    edges = [("root", "bad"), ("root", "g1"), ("root", "g2"), ("g2", "g2b"), ("root", "g3")]
    tree = build(edges, {"bad": 0.0, "g1": 0.8, "g2b": 0.9, "g3": 0.9})
    (pair,) = select_pairs(tree, alpha=0.5, beta=0.2, max_pairs=8, selection="deepest")
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
    everything = select_pairs(tree, alpha=1.0, beta=0.1, max_pairs=8, selection="deepest")
    assert [p.bad_leaf_id for p in everything] == ["bad_deep", "bad_mid", "bad_top"]
    assert [p.shared_depth for p in everything] == [2, 1, 0]
    capped = select_pairs(tree, alpha=1.0, beta=0.1, max_pairs=2, selection="deepest")
    assert [p.bad_leaf_id for p in capped] == ["bad_deep", "bad_mid"]
    assert select_pairs(tree, alpha=1.0, beta=0.1, max_pairs=0, selection="deepest") == []
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
        pairs = select_pairs(tree, alpha=1.0, beta=0.5, max_pairs=2, selection="deepest")
        return [(tree.node(p.bad_leaf_id).action, tree.node(p.good_leaf_id).action) for p in pairs]

    assert chosen(first) == chosen(second) == [("act b1", "act g1"), ("act b2", "act g1")]
    assert [first.node(n).action for n in good_leaves(first, 1.0)] == ["act g1", "act g2"]
    assert [second.node(n).action for n in good_leaves(second, 1.0)] == ["act g1", "act g2"]


def test_choices_follow_path_content_under_the_stratified_rule_too():
    def grow(ids: dict[str, str]) -> SearchTree:
        tree = SearchTree("t", "root", 20)
        tree.add_nodes([NodeRecord("root", None, 0, "", "", "task")])
        for name in ("a", "b", "g"):
            tree.add_nodes([NodeRecord(ids[name], "root", 1, f"act {name}", "", "obs")])
        for name in ("a", "b"):
            tree.add_nodes([NodeRecord(ids[name + "x"], ids[name], 2, f"act {name}x", "", "obs")])
        for name, reward in {"ax": 0.0, "bx": 0.0, "g": 1.0}.items():
            tree.finish_rollout(ids[name], reward, "done")
        return tree

    names = ("a", "b", "g", "ax", "bx")
    first = grow({n: f"id-{n}" for n in names})
    second = grow({n: f"{9 - i}-{n}" for i, n in enumerate(names)})
    chosen = [
        [tree.node(p.bad_leaf_id).action for p in select_pairs(tree, 1.0, 0.5, 1)] for tree in (first, second)
    ]
    assert chosen[0] == chosen[1] == ["act ax"]


def stratified_tree() -> SearchTree:
    """A hand-built tree with bad leaves at several suffix lengths and divergence depths.

    root -> s1 -> s2 -> s3 -> good (1.0)          the good path, 4 actions
                        s3 -> b1 (0.0)            diverges at s3 (depth 3), 1 bad action
                  s2 -> c1 -> b2 (0.0)            diverges at s2 (depth 2), 2 bad actions
                  s2 -> c2 (0.0)                  diverges at s2, 1 bad action
            s1 -> d1 -> d2 -> b3 (0.0)            diverges at s1 (depth 1), 3 bad actions
    root -> e1 -> e2 -> e3 -> b4 (0.0)            diverges at root (depth 0), 4 bad actions
    root -> f1 (0.0)                              diverges at root, 1 bad action
    """
    edges = [
        ("root", "s1"), ("s1", "s2"), ("s2", "s3"), ("s3", "good"), ("s3", "b1"),
        ("s2", "c1"), ("c1", "b2"), ("s2", "c2"),
        ("s1", "d1"), ("d1", "d2"), ("d2", "b3"),
        ("root", "e1"), ("e1", "e2"), ("e2", "e3"), ("e3", "b4"),
        ("root", "f1"),
    ]  # fmt: skip
    rewards = {"good": 1.0, "b1": 0.0, "b2": 0.0, "c2": 0.0, "b3": 0.0, "b4": 0.0, "f1": 0.0}
    return build(edges, rewards)


def test_stratified_spreads_over_bad_suffix_lengths_longest_first():
    tree = stratified_tree()
    deepest = select_pairs(tree, 1.0, 0.5, 3, selection="deepest")
    assert [(p.bad_leaf_id, p.actions_after_divergence) for p in deepest] == [("b1", 1), ("b2", 2), ("c2", 1)]
    chosen = select_pairs(tree, 1.0, 0.5, 3)  # stratified is the default
    assert [(p.bad_leaf_id, p.actions_after_divergence) for p in chosen] == [("b4", 4), ("b3", 3), ("b2", 2)]
    assert all(p.good_leaf_id == "good" for p in chosen)
    mean = sum(p.actions_after_divergence for p in chosen) / 3
    assert mean >= 2 * sum(p.actions_after_divergence for p in deepest) / 3


def test_stratified_round_robin_reaches_every_stratum_and_divergence_depth():
    tree = stratified_tree()
    everything = select_pairs(tree, 1.0, 0.5, 100)
    # round 1: one pair per stratum, longest first; round 2: the second pair of stratum 1
    # (strata 4, 3 and 2 hold one each). Inside stratum 1 the divergence depths alternate
    # deepest first: b1 (depth 3), c2 (depth 2), f1 (depth 0).
    assert [p.bad_leaf_id for p in everything] == ["b4", "b3", "b2", "b1", "c2", "f1"]
    assert [p.shared_depth for p in everything] == [0, 1, 2, 3, 2, 0]
    # the cap keeps a prefix of that order; 0 keeps nothing
    assert select_pairs(tree, 1.0, 0.5, 4) == everything[:4]
    assert select_pairs(tree, 1.0, 0.5, 0) == []


def test_stratified_second_pass_adds_other_partners_of_a_bad_leaf():
    # bad pairs with two good leaves: its preferred partner (deepest LCA, 1 bad action after the
    # divergence) first; the cap's room left goes to the other partner (2 bad actions)
    edges = [("root", "a"), ("a", "near"), ("a", "bad"), ("root", "far")]
    tree = build(edges, {"near": 1.0, "bad": 0.0, "far": 1.0})
    (group,) = candidate_pairs(tree, 1.0, 0.5)
    assert [(p.good_leaf_id, p.actions_after_divergence) for p in group] == [("near", 1), ("far", 2)]
    assert [p.good_leaf_id for p in select_pairs(tree, 1.0, 0.5, 1)] == ["near"]
    assert [p.good_leaf_id for p in select_pairs(tree, 1.0, 0.5, 8)] == ["near", "far"]
    assert [p.good_leaf_id for p in select_pairs(tree, 1.0, 0.5, 8, selection="deepest")] == ["near"]


def test_unknown_pair_selection_is_refused():
    tree = stratified_tree()
    with pytest.raises(ValueError, match="pair selection"):
        select_pairs(tree, 1.0, 0.5, 3, selection="random")
    with pytest.raises(SearchConfigError, match="pair_selection"):
        SearchConfig(pair_selection="random")
    assert SearchConfig().pair_selection == "stratified"
    assert SearchConfig.from_dict({"pair_selection": "deepest"}).to_dict()["pair_selection"] == "deepest"
