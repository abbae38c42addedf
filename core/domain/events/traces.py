"""Owns the events of the production-trace streams (``trace-{trace_id}``, plus the OTLP buffer):
ingested traces, the capture proxy's recorded calls (and ``current_trace``, the stream folded),
their outcomes, critiques and the good samples taken from them."""

from __future__ import annotations

import dataclasses
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
    env_uri: str | None = None  # the environment the trace can be replayed in (POST /v1/traces environment)
    env_task_id: str | None = None  # its task there


@register
@dataclass(frozen=True)
class TraceOutcomeSet(DomainEvent):
    """The outcome of a trace ingested without one (PATCH /v1/traces); the critic then runs on it."""

    trace_id: str
    outcome: Literal["success", "failure"]
    reward: float | None


@register
@dataclass(frozen=True)
class ModelCallRecorded(DomainEvent):
    """One chat-completions call captured by the proxy (api/proxy), on its trace's stream.

    ``request``: the call's parameters, ``tools`` and the messages new since ``messages_from`` (the
    earlier ones are the trace's conversation); ``response``: the upstream's answer (a streamed one
    assembled into a ``chat.completion``), token ids and logprobs included when it sent them.
    ``trajectory``: the trace's conversation after this call (its messages + answer), or None when
    the call does not extend the trace's conversation (kept, not part of the trajectory). Never any
    header or credential."""

    trace_id: str
    call_id: str
    call_index: int
    request: dict[str, Any]
    response: dict[str, Any]
    stream: bool
    latency_ms: float
    trajectory: Trajectory | None = None


def current_trace(events: list[DomainEvent]) -> TraceIngested | None:
    """A trace stream folded: the ingested trace with the latest captured conversation
    (``ModelCallRecorded.trajectory``) and the outcome (and reward) a later TraceOutcomeSet gave it."""
    state: TraceIngested | None = None
    for event in events:
        if isinstance(event, TraceIngested):
            state = event
        elif state is not None and isinstance(event, ModelCallRecorded) and event.trajectory is not None:
            state = dataclasses.replace(state, trajectory=event.trajectory)
        elif state is not None and isinstance(event, TraceOutcomeSet):
            reward = event.reward if event.reward is not None else state.trajectory.reward
            trajectory = dataclasses.replace(state.trajectory, reward=reward)
            state = dataclasses.replace(state, outcome=event.outcome, trajectory=trajectory)
    return state


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
    tokens_processed: int = 0  # tokens the judging model read and wrote for this trace (0: no model)


@register
@dataclass(frozen=True)
class TraceUnpaired(DomainEvent):
    """A failed trace found no usable successful partner of its task key; ``reason`` says why (none
    yet, none diverging with a step after the divergence, or no step of its own to revise)."""

    trace_id: str
    task_key: str
    reason: str
    candidates: int  # successful traces of the task key looked at


@register
@dataclass(frozen=True)
class GoodTraceSampled(DomainEvent):
    """A successful production trace became a good training sample (every assistant turn trained)."""

    sample_id: str
    trace_id: str
    project_id: str
    task_key: str
    trajectory: Trajectory  # provenance names the trace, task key and source "trace"
