"""Owns the search tree of Monte Carlo Tree Search: its nodes, UCT selection, expansion, backprop.

Pure (stdlib only, no I/O). The tree holds what the events say and nothing else: nodes come from
``NodesExpanded``, visit counts N and value sums Q come from ``RolloutFinished`` (the leaf a descent
ends at) and ``LeafRecorded`` (a terminal child recorded when it was stepped, on the way): each adds
one visit and its reward to the leaf and every ancestor. ``SearchTree.rollouts`` counts descents
(``RolloutFinished`` only). ``SearchTree.from_events`` therefore rebuilds a tree's statistics
exactly from its event sequence, and the search engine keeps its in-memory tree up to date by
applying the very events it appends (``SearchTree.apply``).

Keeping what the search sees (``SearchConfig.record_terminal_children``, the default): every child
that is terminal when it is created - the environment said done (success or failure) or it sits at
``max_depth`` - is a leaf at once: recorded, backed up once, and never selected again. A leaf is
*closed*; so is a node that failed to expand ("no valid action") and an expanded node whose children
are all closed (*exhausted*). Selection skips closed children, so no descent is spent re-walking to
an outcome already known; when the root is exhausted the search stops early (the engine says so in
``TreeCompleted.exhausted``). Nodes at ``max_depth`` are closed too, by decision: below them nothing
can be stepped, so a second descent there would only repeat the same reward. The old leaf-only rule
(``record_terminal_children=False``: only the leaf a descent ends at is recorded, terminal children
are re-selected) is kept solely as the baseline of ``bench/search.py``; closedness is derived from
the events whatever the rule, so replay does not depend on it.

Selection is UCT, ``Q/N + c_uct * sqrt(ln N(parent) / N)``, with unvisited children taken first
(in expansion order); ties go to the earlier child, so selection is deterministic. A node is terminal
when the environment said done (reason "done"; "failure" when it also said the action could not be
executed), when it sits at ``max_depth`` ("max_depth"), or when the policy produced no parseable
action there ("no valid action", learnt from that rollout's ``RolloutFinished``).

The search's settings (``SearchConfig``) are ``core.domain.search_config``'s, re-exported here.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from core.domain.events import (
    DomainEvent,
    LeafRecorded,
    NodeRecord,
    NodesExpanded,
    RolloutFinished,
    TreeStarted,
)
from core.domain.search_config import SearchConfig, SearchConfigError

__all__ = [
    "TERMINAL_REASONS",
    "SearchConfig",
    "SearchConfigError",
    "SearchTree",
    "TerminalReason",
    "TreeError",
    "TreeNode",
    "backpropagate",
    "clamp_reward",
    "distinct_by",
    "expansion_seed",
    "select_child",
    "select_path",
    "uct_score",
]

TerminalReason = Literal["done", "max_depth", "failure", "no valid action"]
TERMINAL_REASONS: tuple[str, ...] = ("done", "max_depth", "failure", "no valid action")


@dataclass
class TreeNode:
    """One node: the history up to here is the path from the root. N and Q come from rollouts."""

    node_id: str
    parent_id: str | None
    depth: int
    action: str
    thought: str
    observation: str
    reward: float
    done: bool
    valid: bool
    children: list[str] = field(default_factory=list)
    visits: int = 0
    value_sum: float = 0.0
    dead_end: bool = False  # the policy produced no parseable action here

    @property
    def mean_value(self) -> float:
        return self.value_sum / self.visits if self.visits else 0.0


class TreeError(ValueError):
    """An event or operation inconsistent with the tree (unknown node, duplicate node, bad depth)."""


class SearchTree:
    """A search tree rebuilt from (and kept in step with) its events."""

    def __init__(self, tree_id: str, root_id: str, max_depth: int) -> None:
        self.tree_id = tree_id
        self.root_id = root_id
        self.max_depth = max_depth
        self.nodes: dict[str, TreeNode] = {}
        self.rollouts = 0  # descents finished (RolloutFinished events)
        self.closed: set[str] = set()  # leaves, dead ends and exhausted nodes (never selected)
        self.leaf_rewards: dict[str, float] = {}  # leaf id -> terminal reward of rollouts ending there
        self.leaf_reasons: dict[str, str] = {}  # leaf id -> terminal reason
        self.best_reward = 0.0

    # ---- building -------------------------------------------------------------------------

    @classmethod
    def from_events(cls, events: Iterable[DomainEvent], max_depth: int | None = None) -> SearchTree:
        """Rebuild a tree from its stream's events (TreeStarted first; other event types ignored)."""
        tree: SearchTree | None = None
        for event in events:
            if isinstance(event, TreeStarted):
                depth = max_depth if max_depth is not None else int(event.search_config.get("max_depth", 20))
                tree = cls(event.tree_id, event.root_id, depth)
            elif tree is not None:
                tree.apply(event)
            elif isinstance(event, NodesExpanded | RolloutFinished | LeafRecorded):
                raise TreeError(f"{type(event).__name__} before TreeStarted")
        if tree is None:
            raise TreeError("no TreeStarted event in the sequence")
        return tree

    def apply(self, event: DomainEvent) -> None:
        """Apply one event; event types that do not change the tree are ignored."""
        if isinstance(event, NodesExpanded):
            self.add_nodes(event.nodes)
        elif isinstance(event, RolloutFinished):
            self.finish_rollout(event.leaf_id, event.reward, event.terminal_reason)
        elif isinstance(event, LeafRecorded):
            self.record_leaf(event.leaf_id, event.reward, event.terminal_reason)

    def add_nodes(self, records: Sequence[NodeRecord]) -> None:
        """Expansion: add nodes (the root has parent None); children keep their given order."""
        for record in records:
            if record.node_id in self.nodes:
                raise TreeError(f"node {record.node_id} added twice")
            if record.parent_id is None:
                if record.node_id != self.root_id or record.depth != 0:
                    raise TreeError(f"node {record.node_id} has no parent but is not the root")
            else:
                parent = self.nodes.get(record.parent_id)
                if parent is None:
                    raise TreeError(f"node {record.node_id}: unknown parent {record.parent_id}")
                if record.depth != parent.depth + 1:
                    raise TreeError(f"node {record.node_id}: depth {record.depth} under depth {parent.depth}")
                parent.children.append(record.node_id)
            self.nodes[record.node_id] = TreeNode(
                node_id=record.node_id,
                parent_id=record.parent_id,
                depth=record.depth,
                action=record.action,
                thought=record.thought,
                observation=record.observation,
                reward=record.reward,
                done=record.done,
                valid=record.valid,
            )

    def finish_rollout(self, leaf_id: str, reward: float, reason: str) -> None:
        """A descent ended at ``leaf_id``: backpropagation, and one more rollout counted."""
        self.record_leaf(leaf_id, reward, reason)
        self.rollouts += 1

    def record_leaf(self, leaf_id: str, reward: float, reason: str) -> None:
        """Backpropagation: one visit and ``reward`` to the leaf and every ancestor; the leaf closes."""
        if reason not in TERMINAL_REASONS:
            raise TreeError(f"unknown terminal reason {reason!r}")
        if not 0.0 <= reward <= 1.0:
            raise TreeError(f"rollout reward {reward} is outside [0, 1]")
        leaf = self.node(leaf_id)
        if reason == "no valid action":
            leaf.dead_end = True
        backpropagate(self, leaf_id, reward)
        self.leaf_rewards[leaf_id] = reward
        self.leaf_reasons[leaf_id] = reason
        self.best_reward = max(self.best_reward, reward)
        self._close(leaf_id)

    def _close(self, node_id: str) -> None:
        """Mark ``node_id`` closed, then each ancestor whose children are now all closed."""
        current: str | None = node_id
        while current is not None and current not in self.closed:
            node = self.node(current)
            if current != node_id and not all(child in self.closed for child in node.children):
                return
            self.closed.add(current)
            current = node.parent_id

    # ---- queries --------------------------------------------------------------------------

    @property
    def root(self) -> TreeNode:
        return self.node(self.root_id)

    def node(self, node_id: str) -> TreeNode:
        try:
            return self.nodes[node_id]
        except KeyError:
            raise TreeError(f"unknown node {node_id}") from None

    def path(self, node_id: str) -> list[TreeNode]:
        """Nodes from the root down to ``node_id`` (inclusive)."""
        out: list[TreeNode] = []
        current: str | None = node_id
        while current is not None:
            node = self.node(current)
            out.append(node)
            current = node.parent_id
        out.reverse()
        return out

    def terminal_reason(self, node_id: str) -> TerminalReason | None:
        """Why ``node_id`` ends a descent, or None when the search can go on below it."""
        node = self.node(node_id)
        if node.done:
            return "done" if node.valid else "failure"
        if node.dead_end:
            return "no valid action"
        if node.depth >= self.max_depth:
            return "max_depth"
        return None

    def is_expanded(self, node_id: str) -> bool:
        return bool(self.node(node_id).children)

    def is_closed(self, node_id: str) -> bool:
        """A recorded leaf, a dead end, or an expanded node whose children are all closed."""
        self.node(node_id)
        return node_id in self.closed

    @property
    def exhausted(self) -> bool:
        """Every path from the root has reached a recorded outcome: nothing is left to search."""
        return self.root_id in self.closed


def uct_score(parent_visits: int, visits: int, value_sum: float, c_uct: float) -> float:
    """UCT of a child; an unvisited child scores +inf (visited first)."""
    if visits == 0:
        return math.inf
    exploration = math.sqrt(math.log(parent_visits) / visits) if parent_visits > 0 else 0.0
    return value_sum / visits + c_uct * exploration


def select_child(tree: SearchTree, node_id: str, c_uct: float, *, skip_closed: bool = False) -> str:
    """The child of ``node_id`` to descend into: first unvisited, else the highest UCT (first on ties).

    With ``skip_closed`` closed children (leaves, dead ends, exhausted nodes) are never chosen.
    """
    node = tree.node(node_id)
    children = [c for c in node.children if not (skip_closed and c in tree.closed)]
    if not children:
        what = "open children" if node.children else "children"
        raise TreeError(f"node {node_id} has no {what} to select from")
    best_id = children[0]
    best_score = -math.inf
    for child_id in children:
        child = tree.nodes[child_id]
        score = uct_score(node.visits, child.visits, child.value_sum, c_uct)
        if score > best_score:
            best_id, best_score = child_id, score
            if score == math.inf:
                break
    return best_id


def select_path(tree: SearchTree, c_uct: float, *, skip_closed: bool = False) -> list[str]:
    """Selection: from the root through expanded nodes by UCT until a terminal or unexpanded node.

    With ``skip_closed`` it only walks open nodes (TreeError when the root itself is exhausted).
    """
    if skip_closed and tree.exhausted:
        raise TreeError(f"tree {tree.tree_id} is exhausted: every path has a recorded outcome")
    path = [tree.root_id]
    while tree.terminal_reason(path[-1]) is None and tree.is_expanded(path[-1]):
        path.append(select_child(tree, path[-1], c_uct, skip_closed=skip_closed))
    return path


def backpropagate(tree: SearchTree, leaf_id: str, reward: float) -> None:
    """Add one visit and ``reward`` to ``leaf_id`` and each of its ancestors."""
    current: str | None = leaf_id
    while current is not None:
        node = tree.node(current)
        node.visits += 1
        node.value_sum += reward
        current = node.parent_id


T = TypeVar("T")


def distinct_by(candidates: Iterable[T], key: Callable[[T], str], limit: int) -> list[T]:
    """The first ``limit`` candidates with distinct non-empty keys (the parsed, normalised action)."""
    seen: set[str] = set()
    out: list[T] = []
    for candidate in candidates:
        k = key(candidate)
        if not k or k in seen:
            continue
        seen.add(k)
        out.append(candidate)
        if len(out) >= limit:
            break
    return out


def expansion_seed(base_seed: int, path_actions: Sequence[str]) -> int:
    """The sampling seed for expanding the node reached by ``path_actions`` (from the root).

    Keyed by the history rather than by node ids, so the same seed gives the same tree whatever
    the tree's id; stable across processes (sha256, no hash randomisation).
    """
    key = "\x1f".join(" ".join(action.lower().split()) for action in path_actions)
    digest = hashlib.sha256(f"{base_seed}\x1e{key}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def clamp_reward(reward: float) -> float:
    """Rewards are normalised to [0, 1]; anything outside (or NaN) is clamped."""
    if not math.isfinite(reward):
        return 0.0
    return min(1.0, max(0.0, reward))
