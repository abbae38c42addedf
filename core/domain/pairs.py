"""Owns the choice of (bad, good) leaf pairs from a finished search tree, and path trajectories.

Pure (stdlib only). Rules (DESIGN.md §1 step 2):

- a *good* leaf has terminal reward >= alpha (inclusive, so alpha = 1.0 admits perfect runs);
- a *bad* leaf has reward < alpha, and can pair only with a good leaf whose reward is at least
  ``bad + beta``. The CANDIDATES are every such (bad, good) leaf pair (as the paper's released code
  pairs every leaf pair whose values differ by more than beta, then samples);
- a bad leaf's *preferred* partner is the good leaf whose lowest common ancestor with it is DEEPEST
  (the adjacent correct path sharing the same parent; since the search records every terminal
  child as a leaf when it is stepped, a bad leaf's own sibling success is a candidate too); ties go
  to the higher reward, then the shorter good path, then the path's content (so the choice never
  depends on dict order);
- at most ``max_pairs_per_tree`` pairs are kept, by ``selection``:

  * ``stratified`` (the default): spread over bad-suffix lengths and divergence depths. A pair's
    *stratum* is its number of bad actions after the divergence (``actions_after_divergence``: the
    bad leaf's depth minus the divergence node's). First pass: each bad leaf's preferred partner
    only (one pair per bad leaf). The pass is a round-robin over the strata, the LONGEST bad suffix
    first in every round (a pair with one bad action after the divergence leaves a critic nothing to
    find: every t' is that action); inside a stratum the pairs are themselves taken round-robin over
    divergence depths (deepest first), and inside one depth by the larger reward gap, then content.
    Second pass, while the cap allows: every other candidate (a bad leaf with another good partner,
    i.e. another divergence node), by the same round-robin.
  * ``deepest`` (the baseline, the rule before): each bad leaf with its preferred partner only, the
    deepest divergences first (the shortest revisions), then the larger reward gap, then content.
    On searched trees most of its pairs have exactly one bad action after the divergence.

"Content" is the path's (thought, action) sequence, node id last: node ids derive from the tree id,
which derives from the random run id, so an id tie-break would make two runs with the same seeds
keep different pairs from the same tree.

Comparisons use a tolerance of 1e-9 so that 0.7 read back from JSON still counts as >= 0.7.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from core.domain.mcts import SearchTree
from core.domain.trajectory import Step, Trajectory

EPS = 1e-9


PairSelection = Literal["stratified", "deepest"]
PAIR_SELECTIONS: tuple[PairSelection, ...] = ("stratified", "deepest")


@dataclass(frozen=True)
class PairSpec:
    """A chosen pair: both leaves, their lowest common ancestor and how many steps they share."""

    bad_leaf_id: str
    good_leaf_id: str
    divergence_node_id: str
    shared_depth: int  # depth of the divergence node = number of shared steps
    bad_reward: float
    good_reward: float
    actions_after_divergence: int = 1  # the bad path's actions after the divergence node

    @property
    def gap(self) -> float:
        return self.good_reward - self.bad_reward


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


def candidate_pairs(tree: SearchTree, alpha: float, beta: float) -> list[list[PairSpec]]:
    """Every (bad, good) leaf pair with the value gap, grouped per bad leaf (bad leaves in content
    order); each group starts with the bad leaf's preferred partner (deepest lowest common ancestor,
    then the higher reward, then the shorter good path, then content), the others follow in that
    order."""
    goods = good_leaves(tree, alpha)
    groups: list[list[PairSpec]] = []
    for bad in bad_leaves(tree, alpha):
        bad_reward = tree.leaf_rewards[bad]
        bad_depth = tree.node(bad).depth
        keyed: list[tuple[tuple[int, float, int], int, PairSpec]] = []
        for position, good in enumerate(goods):
            good_reward = tree.leaf_rewards[good]
            if bad_reward > good_reward - beta + EPS:
                continue
            lca = lowest_common_ancestor(tree, bad, good)
            depth = tree.node(lca).depth
            spec = PairSpec(bad, good, lca, depth, bad_reward, good_reward, bad_depth - depth)
            # deeper LCA, higher reward, shorter good path; then content (the goods' list order)
            keyed.append(((-depth, -good_reward, tree.node(good).depth), position, spec))
        if keyed:
            groups.append([spec for _, _, spec in sorted(keyed, key=lambda k: (k[0], k[1]))])
    return groups


def _round_robin(items: list[PairSpec], key: Callable[[PairSpec], int]) -> list[PairSpec]:
    """``items`` grouped by ``key`` and taken one group at a time, the LARGEST key first in every
    round, each group keeping the order it had in ``items``."""
    groups: dict[int, list[PairSpec]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    queues = [groups[k] for k in sorted(groups, reverse=True)]
    out: list[PairSpec] = []
    for turn in range(max((len(q) for q in queues), default=0)):
        out.extend(q[turn] for q in queues if turn < len(q))
    return out


def _stratified(specs: list[PairSpec]) -> list[PairSpec]:
    """One pass of the stratified rule (module docstring): round-robin over bad-suffix strata
    (longest first), each stratum round-robin over divergence depths (deepest first), each depth by
    the larger reward gap (stable: the given content order breaks ties)."""
    strata: dict[int, list[PairSpec]] = {}
    for spec in sorted(specs, key=lambda p: -p.gap):
        strata.setdefault(spec.actions_after_divergence, []).append(spec)
    spread = [p for s in sorted(strata) for p in _round_robin(strata[s], lambda p: p.shared_depth)]
    return _round_robin(spread, lambda p: p.actions_after_divergence)


def select_pairs(
    tree: SearchTree, alpha: float, beta: float, max_pairs: int, selection: str = "stratified"
) -> list[PairSpec]:
    """At most ``max_pairs`` pairs by the module's rules and ``selection`` (stratified | deepest).

    Both leaf lists come sorted by path content (then id), and every sort below is stable, so
    content breaks every remaining tie without being compared."""
    if selection not in PAIR_SELECTIONS:
        raise ValueError(f"pair selection must be one of {', '.join(PAIR_SELECTIONS)}, got {selection!r}")
    groups = candidate_pairs(tree, alpha, beta)
    preferred = [group[0] for group in groups]
    if selection == "deepest":
        preferred.sort(key=lambda p: (-p.shared_depth, -p.gap))  # stable: content order
        return preferred[:max_pairs]
    chosen = _stratified(preferred)
    if len(chosen) < max_pairs:
        chosen += _stratified([spec for group in groups for spec in group[1:]])
    return chosen[:max_pairs]


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
