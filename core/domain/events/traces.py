"""Owns the events of the production-trace streams (``trace-{trace_id}``, plus the OTLP buffer):
ingested traces, their outcomes, critiques and the good samples taken from them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from core.domain.events.base import DomainEvent, register
from core.domain.events.values import CriticStrategyName, StepVerdict
from core.domain.trajectory import Trajectory


@register
@dataclass(frozen=True)
class TraceIngested(DomainEvent):
    trace_id: str
    project_id: str
    task_key: str
    trajectory: Trajectory
    outcome: Literal["success", "failure", "unknown"]
    source_format: str
    external_id: str | None = None
    critic_strategy: str | None = None  # the upload's critic choice (None: the critic worker's settings)
    critic_model: str | None = None


@register
@dataclass(frozen=True)
class TraceOutcomeSet(DomainEvent):
    """The outcome of a trace ingested without one (PATCH /v1/traces); the critic then runs on it."""

    trace_id: str
    outcome: Literal["success", "failure"]
    reward: float | None


@register
@dataclass(frozen=True)
class OtlpSpansBuffered(DomainEvent):
    """OTLP spans of a trace whose root span has not arrived yet (kept until it does)."""

    buffer_id: str  # derived from (project, OTLP trace id)
    project_id: str
    otlp_trace_id: str
    spans: tuple[dict[str, Any], ...]  # core.formats.otlp.SpanRecord.to_data()


@register
@dataclass(frozen=True)
class TraceCritiqued(DomainEvent):
    trace_id: str
    strategy: CriticStrategyName
    transition_index: int | None  # None: no error found
    verdicts: tuple[StepVerdict, ...]
    model_version: str = ""


@register
@dataclass(frozen=True)
class GoodTraceSampled(DomainEvent):
    """A successful production trace became a good training sample (every assistant turn trained)."""

    sample_id: str
    trace_id: str
    project_id: str
    task_key: str
    trajectory: Trajectory  # provenance names the trace, task key and source "trace"
