"""Owns the choice of (bad, good) leaf pairs from a finished search tree, and path trajectories.

Pure (stdlib only). Rules (DESIGN.md §1 step 2):

- a *good* leaf has terminal reward >= alpha (inclusive, so alpha = 1.0 admits perfect runs);
- a *bad* leaf has reward < alpha, and can pair only with a good leaf whose reward is at least
  ``bad + beta``;
- each bad leaf pairs with ONE good leaf: the one whose lowest common ancestor with it is DEEPEST
  (the adjacent correct path sharing the same parent; since the search records every terminal
  child as a leaf when it is stepped, a bad leaf's own sibling success is a candidate too); ties go
  to the higher reward, then the shorter good path, then the path's content (so the choice never
  depends on dict order);
- at most ``max_pairs_per_tree`` pairs are kept: the deepest divergences first (they make the
  shortest, most informative revisions), then the larger reward gap, then the bad path's content.

"Content" is the path's (thought, action) sequence, node id last: node ids derive from the tree id,
which derives from the random run id, so an id tie-break would make two runs with the same seeds
keep different pairs from the same tree.

Comparisons use a tolerance of 1e-9 so that 0.7 read back from JSON still counts as >= 0.7.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from core.domain.mcts import SearchTree
from core.domain.trajectory import Step, Trajectory

EPS = 1e-9


@dataclass(frozen=True)
class PairSpec:
    """A chosen pair: both leaves, their lowest common ancestor and how many steps they share."""

    bad_leaf_id: str
    good_leaf_id: str
    divergence_node_id: str
    shared_depth: int  # depth of the divergence node = number of shared steps
    bad_reward: float
    good_reward: float


def is_good(reward: float, alpha: float) -> bool:
    return reward >= alpha - EPS


def path_content(tree: SearchTree, node_id: str) -> tuple[tuple[str, str], ...]:
    """The (thought, action) steps from the root to ``node_id``: what a path holds, without ids."""
    return tuple((node.thought, node.action) for node in tree.path(node_id)[1:])


def _by_content(tree: SearchTree, leaves: Iterable[str]) -> list[str]:
    return sorted(leaves, key=lambda leaf: (path_content(tree, leaf), leaf))


def good_leaves(tree: SearchTree, alpha: float) -> list[str]:
    """Leaves of finished rollouts with reward >= alpha, sorted by path content (then id)."""
    return _by_content(tree, (leaf for leaf, r in tree.leaf_rewards.items() if is_good(r, alpha)))


def bad_leaves(tree: SearchTree, alpha: float) -> list[str]:
    """Leaves of finished rollouts with reward < alpha, sorted by path content (then id)."""
    return _by_content(tree, (leaf for leaf, r in tree.leaf_rewards.items() if not is_good(r, alpha)))


def lowest_common_ancestor(tree: SearchTree, a: str, b: str) -> str:
    ancestors_of_a = {node.node_id for node in tree.path(a)}
    for node in reversed(tree.path(b)):
        if node.node_id in ancestors_of_a:
            return node.node_id
    raise ValueError(f"nodes {a} and {b} share no ancestor")  # unreachable in one tree


def select_pairs(tree: SearchTree, alpha: float, beta: float, max_pairs: int) -> list[PairSpec]:
    """Pairs by the module's rules, deepest divergence first, at most ``max_pairs``.

    Both leaf lists come sorted by path content (then id), and ties keep the earlier one (a strict
    ``<`` below, a stable sort at the end), so content breaks every tie without being compared."""
    goods = good_leaves(tree, alpha)
    pairs: list[PairSpec] = []
    for bad in bad_leaves(tree, alpha):
        bad_reward = tree.leaf_rewards[bad]
        best: tuple[tuple[int, float, int], PairSpec] | None = None
        for good in goods:
            good_reward = tree.leaf_rewards[good]
            if bad_reward > good_reward - beta + EPS:
                continue
            lca = lowest_common_ancestor(tree, bad, good)
            depth = tree.node(lca).depth
            # sort key: deeper LCA, higher reward, shorter good path (then content: list order)
            key = (-depth, -good_reward, tree.node(good).depth)
            if best is None or key < best[0]:
                best = (key, PairSpec(bad, good, lca, depth, bad_reward, good_reward))
        if best is not None:
            pairs.append(best[1])
    pairs.sort(key=lambda p: (-p.shared_depth, -(p.good_reward - p.bad_reward)))  # stable: content order
    return pairs[:max_pairs]


def path_trajectory(
    tree: SearchTree, leaf_id: str, *, task: str, instruction: str, provenance: dict[str, Any] | None = None
) -> Trajectory:
    """The Trajectory of the root -> ``leaf_id`` path; its reward is the leaf's terminal reward."""
    path = tree.path(leaf_id)
    steps = tuple(
        Step(
            thought=node.thought,
            action=node.action,
            observation=node.observation,
            reward=node.reward,
            done=node.done,
            valid=node.valid,
        )
        for node in path[1:]
    )
    reward = tree.leaf_rewards.get(leaf_id, path[-1].reward)
    meta = {"tree_id": tree.tree_id, "node_ids": [node.node_id for node in path]}
    meta.update(provenance or {})
    return Trajectory(task=task, instruction=instruction, steps=steps, reward=reward, provenance=meta)
