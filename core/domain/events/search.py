"""Owns the events of the tree streams (``tree-{tree_id}``, one per searched task): the MCTS search,
its nodes, rollouts and leaves, and the good trajectories and (good, bad) pairs it finds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from core.domain.events.base import DomainEvent, register, upcaster
from core.domain.events.values import NodeRecord
from core.domain.trajectory import Trajectory


@register
@dataclass(frozen=True)
class SearchRequested(DomainEvent):
    tree_id: str
    run_id: str | None
    iteration: int
    env_uri: str
    task_id: str
    model_ref: str
    search_config: dict[str, Any]  # a serialised SearchConfig
    seed: int


@register
@dataclass(frozen=True)
class TreeStarted(DomainEvent):
    tree_id: str
    run_id: str | None
    iteration: int
    env_uri: str
    task_id: str
    instruction: str
    task: str  # the first observation
    model_version: str
    search_config: dict[str, Any]
    root_id: str


@register
@dataclass(frozen=True)
class NodesExpanded(DomainEvent):
    tree_id: str
    nodes: tuple[NodeRecord, ...]


@register
@dataclass(frozen=True)
class RolloutFinished(DomainEvent):
    tree_id: str
    rollout: int  # 0-based descent index
    leaf_id: str
    reward: float  # normalised terminal reward in [0, 1]
    terminal_reason: Literal["done", "max_depth", "failure", "no valid action"]


@register
@dataclass(frozen=True)
class LeafRecorded(DomainEvent):
    """A terminal child recorded when it was stepped, during descent ``rollout`` (not its end)."""

    tree_id: str
    rollout: int  # 0-based index of the descent that stepped it
    leaf_id: str
    reward: float  # normalised terminal reward in [0, 1]
    terminal_reason: Literal["done", "max_depth", "failure", "no valid action"]


@register
@dataclass(frozen=True)
class TreeCompleted(DomainEvent):
    event_version: ClassVar[int] = 2

    tree_id: str
    run_id: str | None
    iteration: int
    nodes: int
    rollouts: int
    best_reward: float
    good_leaves: int
    bad_leaves: int
    pairs: int
    exhausted: bool = False  # v2: the root was exhausted before the descent budget was spent


@upcaster("TreeCompleted", 1)
def _tree_completed_v1(data: dict[str, Any]) -> dict[str, Any]:
    """v1 -> v2: ``exhausted`` did not exist; a v1 tree always ran its whole descent budget."""
    return {**data, "exhausted": False}


@register
@dataclass(frozen=True)
class SearchFailed(DomainEvent):
    tree_id: str
    run_id: str | None
    iteration: int
    reason: str


@register
@dataclass(frozen=True)
class GoodTrajectoryFound(DomainEvent):
    sample_id: str
    tree_id: str
    run_id: str | None
    iteration: int
    leaf_id: str
    trajectory: Trajectory


@register
@dataclass(frozen=True)
class PairFound(DomainEvent):
    """A bad path and the good path it should be revised towards; they share ``shared_steps`` steps.

    Self-contained so that the critic and splicer need nothing else: pairs from search trees and
    from production traces travel the same way.
    """

    pair_id: str
    source: Literal["search", "trace"]
    task_key: str
    bad: Trajectory
    good: Trajectory
    shared_steps: int  # steps 0..shared_steps-1 are identical in both (the divergence node's depth)
    run_id: str | None = None
    iteration: int = 0
    tree_id: str | None = None
    bad_leaf_id: str | None = None
    good_leaf_id: str | None = None
    divergence_node_id: str | None = None
    env_uri: str | None = None
    task_id: str | None = None
