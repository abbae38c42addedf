"""Owns the events of the run streams (``run-{run_id}``): a run's request, its iterations
(started, dataset ready or empty, model trained or training failed, evaluated) and its end."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.domain.events.base import DomainEvent, register


@register
@dataclass(frozen=True)
class RunRequested(DomainEvent):
    run_id: str
    project_id: str
    config: dict[str, Any]  # a serialised RunConfig


@register
@dataclass(frozen=True)
class IterationStarted(DomainEvent):
    run_id: str
    iteration: int  # 0-based
    model_ref: str  # model folder or OpenAI-compatible base URL (+ model name)
    alpha: float
    tree_ids: tuple[str, ...]


@register
@dataclass(frozen=True)
class IterationDatasetReady(DomainEvent):
    run_id: str
    iteration: int
    dataset_id: str
    revision_samples: int
    good_samples: int
    general_samples: int
    built_from: dict[str, Any] = field(default_factory=dict)  # positions, config, template ids


@register
@dataclass(frozen=True)
class IterationDatasetEmpty(DomainEvent):
    run_id: str
    iteration: int
    reason: str


@register
@dataclass(frozen=True)
class ModelTrained(DomainEvent):
    run_id: str
    iteration: int
    dataset_id: str
    checkpoint: str  # folder with weights + meta.json
    metrics: dict[str, Any] = field(default_factory=dict)


@register
@dataclass(frozen=True)
class TrainingFailed(DomainEvent):
    run_id: str
    iteration: int
    reason: str


@register
@dataclass(frozen=True)
class IterationEvaluated(DomainEvent):
    run_id: str
    iteration: int
    model_ref: str
    metrics: dict[str, Any]


@register
@dataclass(frozen=True)
class RunCompleted(DomainEvent):
    run_id: str
    final_model_ref: str
    summary: dict[str, Any] = field(default_factory=dict)


@register
@dataclass(frozen=True)
class RunCancelled(DomainEvent):
    run_id: str
    reason: str = "cancelled by user"


@register
@dataclass(frozen=True)
class RunFailed(DomainEvent):
    run_id: str
    reason: str
