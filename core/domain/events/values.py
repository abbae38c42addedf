"""Owns the value objects events carry: ``NodeRecord`` (a search-tree node), ``StepVerdict`` (the
critic's judgement of one action) and ``CriticStrategyName`` (who judged)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class NodeRecord:
    """One search-tree node as written by NodesExpanded. The root has parent_id None, depth 0."""

    node_id: str
    parent_id: str | None
    depth: int
    action: str  # normalised action ("" for the root)
    thought: str
    observation: str
    reward: float = 0.0  # environment reward after this action, normalised to [0, 1]
    done: bool = False
    valid: bool = True


CriticStrategyName = Literal["model", "direct", "rules", "reflect", "value", "first", "oracle", "replay"]
"""Who judged a bad path: the registered critic strategies (``critic_service.strategies.REGISTRY``
holds one module per name; tests/unit/test_critic_strategies.py checks the two agree)."""


@dataclass(frozen=True)
class StepVerdict:
    """The critic's judgement of one action of a bad path."""

    step_index: int  # index into the bad trajectory's steps
    label: Literal["good", "bad", "uncertain"]
    scores: dict[str, float] = field(default_factory=dict)  # label -> log-probability
    method: Literal["scores", "text", "rule", "direct", "reflection", "first", "oracle", "replay"] = "scores"
    reason: str = ""
