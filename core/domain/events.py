"""Owns the domain events: their types, the serialization registry, upcasting and envelopes.

Every fact in agentr is one of these frozen, past-tense, versioned dataclasses. ``register``
adds a type to the registry under (name, version); ``upcaster`` registers a function that lifts the
stored data of an old version one version up, so old rows still decode after a schema change.

``NewEvent`` is what a producer appends; ``RecordedEvent`` is the stored envelope (event id, stream
id, stream version, type, data, metadata, recorded time, global position) that readers get back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Literal, TypeVar

from core.domain.ids import new_id
from core.domain.serde import from_dict, to_dict
from core.domain.trace_datasets import DatasetManifest
from core.domain.trajectory import TrainingSample, Trajectory


class UnknownEventType(LookupError):
    """A stored event's type/version is not in the registry (and no upcaster reaches one that is)."""


@dataclass(frozen=True)
class DomainEvent:
    """Base class of every event. Subclasses are registered with ``@register``."""

    event_type: ClassVar[str] = ""
    event_version: ClassVar[int] = 1

    def to_data(self) -> dict[str, Any]:
        return to_dict(self)  # type: ignore[no-any-return]


E = TypeVar("E", bound=type[DomainEvent])

_REGISTRY: dict[str, type[DomainEvent]] = {}
_UPCASTERS: dict[tuple[str, int], Callable[[dict[str, Any]], dict[str, Any]]] = {}


def register(cls: E) -> E:
    """Class decorator: add an event type to the registry under its class name."""
    name = cls.__name__
    if name in _REGISTRY and _REGISTRY[name] is not cls:
        raise ValueError(f"event type {name!r} registered twice")
    cls.event_type = name
    _REGISTRY[name] = cls
    return cls


def upcaster(event_type: str, from_version: int) -> Callable[[Callable[..., dict[str, Any]]], Any]:
    """Decorator: register a function lifting ``event_type`` data from ``from_version`` to +1."""

    def deco(fn: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[dict[str, Any]], dict[str, Any]]:
        _UPCASTERS[(event_type, from_version)] = fn
        return fn

    return deco


def event_class(event_type: str) -> type[DomainEvent]:
    try:
        return _REGISTRY[event_type]
    except KeyError:
        raise UnknownEventType(f"unknown event type {event_type!r}") from None


def decode(event_type: str, version: int, data: dict[str, Any]) -> DomainEvent:
    """Decode stored data into its event, upcasting old versions step by step."""
    cls = event_class(event_type)
    while version < cls.event_version:
        step = _UPCASTERS.get((event_type, version))
        if step is None:
            raise UnknownEventType(f"no upcaster for {event_type} v{version} -> v{version + 1}")
        data = step(dict(data))
        version += 1
    if version > cls.event_version:
        raise UnknownEventType(f"{event_type} v{version} is newer than this code (v{cls.event_version})")
    return from_dict(cls, data)


@dataclass(frozen=True)
class Metadata:
    correlation_id: str | None = None
    causation_id: str | None = None
    producer: str | None = None
    project_id: str | None = None


@dataclass(frozen=True)
class NewEvent:
    """An event about to be appended to ``stream_id``."""

    stream_id: str
    event: DomainEvent
    metadata: Metadata = field(default_factory=Metadata)
    event_id: str = field(default_factory=new_id)


@dataclass(frozen=True)
class RecordedEvent:
    """A stored event: the envelope readers see."""

    event_id: str
    stream_id: str
    stream_version: int  # 0-based index within the stream
    event_type: str
    event_version: int
    data: dict[str, Any]
    metadata: Metadata
    recorded_at: datetime
    position: int  # global, gap-free-not-guaranteed, monotonic in commit order

    @property
    def event(self) -> DomainEvent:
        return decode(self.event_type, self.event_version, self.data)


def caused_by(parent: RecordedEvent, producer: str) -> Metadata:
    """Metadata for an event produced in reaction to ``parent`` (keeps the correlation chain)."""
    return Metadata(
        correlation_id=parent.metadata.correlation_id or parent.event_id,
        causation_id=parent.event_id,
        producer=producer,
        project_id=parent.metadata.project_id,
    )


# --------------------------------------------------------------------------------------------
# Value objects carried by events
# --------------------------------------------------------------------------------------------


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


@dataclass(frozen=True)
class StepVerdict:
    """The critic's judgement of one action of a bad path."""

    step_index: int  # index into the bad trajectory's steps
    label: Literal["good", "bad", "uncertain"]
    scores: dict[str, float] = field(default_factory=dict)  # label -> log-probability
    method: Literal["scores", "text", "rule", "direct", "reflection", "first"] = "scores"
    reason: str = ""


# --------------------------------------------------------------------------------------------
# Projects and keys
# --------------------------------------------------------------------------------------------


@register
@dataclass(frozen=True)
class ProjectCreated(DomainEvent):
    project_id: str
    name: str
    critic_strategy: str | None = None  # the critic for the project's failed traces (None: the worker's)
    critic_model: str | None = None


@register
@dataclass(frozen=True)
class ApiKeyIssued(DomainEvent):
    project_id: str
    key_id: str
    prefix: str  # the public part shown in listings
    salt: str
    key_hash: str
    scopes: tuple[str, ...]
    label: str = ""


@register
@dataclass(frozen=True)
class ApiKeyRevoked(DomainEvent):
    project_id: str
    key_id: str


# --------------------------------------------------------------------------------------------
# Runs and iterations
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Search (one stream per tree)
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Critic and splicer (one stream per pair / per trace)
# --------------------------------------------------------------------------------------------


@register
@dataclass(frozen=True)
class FirstErrorMarked(DomainEvent):
    event_version: ClassVar[int] = 2

    pair_id: str
    strategy: Literal["model", "direct", "rules", "reflect", "value", "first"]
    transition_index: int  # index into bad.steps of the first wrong action (t')
    verdicts: tuple[StepVerdict, ...]
    model_version: str = ""
    tokens_processed: int = 0
    fallback: bool = False  # no step judged bad: t' fell back to the last action (Direct-Revision)
    oracle_index: int | None = None  # the environment oracle's first error (None: no oracle / none)
    baselines: dict[str, int] = field(default_factory=dict)  # t' of baseline critics (reflect) on the pair


@upcaster("FirstErrorMarked", 1)
def _first_error_marked_v1(data: dict[str, Any]) -> dict[str, Any]:
    """v1 -> v2: ``fallback`` derived from the verdicts (direct, or no "bad" verdict), no oracle."""
    verdicts = data.get("verdicts") or []
    judged_bad = any(isinstance(v, dict) and v.get("label") == "bad" for v in verdicts)
    data["fallback"] = data.get("strategy") == "direct" or not judged_bad
    data["oracle_index"] = None
    return data


@register
@dataclass(frozen=True)
class RevisionMaterialized(DomainEvent):
    sample_id: str
    pair_id: str
    run_id: str | None
    iteration: int
    sample: TrainingSample
    template_id: str
    revision_length: int  # bad actions kept after the divergence (through t')
    verified: bool | None = None  # None: no environment to replay in


@register
@dataclass(frozen=True)
class RevisionRejected(DomainEvent):
    pair_id: str
    run_id: str | None
    iteration: int
    reason: str


@register
@dataclass(frozen=True)
class FirstErrorCorrected(DomainEvent):
    """A reviewer moved a pair's first-error step (t') and/or rewrote its reflection (human review).

    ``old_*`` are what the sample was spliced with before; ``new_reflection`` None keeps the
    reflection chosen the usual way (a template for the new wrong action). The splicer re-splices
    the pair from it (``SampleRespliced``, provenance origin "human-corrected") or says why not
    (``CorrectionRejected``).
    """

    pair_id: str
    correction_id: str
    reviewer: str  # the review key: "<prefix>" or "<prefix> (<label>)"
    corrected_at: str  # ISO 8601, the API's clock when the reviewer sent it
    old_transition_index: int | None
    new_transition_index: int
    old_reflection: str
    new_reflection: str | None = None
    trace_id: str | None = None  # set when the correction was made on a production trace
    note: str = ""


@register
@dataclass(frozen=True)
class SampleRespliced(DomainEvent):
    """A pair's revision sample re-spliced from a human correction; it replaces the earlier sample."""

    sample_id: str
    pair_id: str
    correction_id: str
    run_id: str | None
    iteration: int
    sample: TrainingSample  # provenance: origin "human-corrected", correction_id, corrected_by
    template_id: str
    revision_length: int
    verified: bool | None = None


@register
@dataclass(frozen=True)
class CorrectionRejected(DomainEvent):
    """A human correction could not be spliced (e.g. the replay no longer reaches the good reward)."""

    pair_id: str
    correction_id: str
    reason: str


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
    strategy: Literal["model", "direct", "rules", "reflect", "value", "first"]
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


# --------------------------------------------------------------------------------------------
# Datasets
# --------------------------------------------------------------------------------------------


@register
@dataclass(frozen=True)
class DatasetCreated(DomainEvent):
    """A named, versioned dataset was built from a query over the event log (immutable)."""

    dataset_id: str
    project_id: str
    manifest: DatasetManifest


# --------------------------------------------------------------------------------------------
# Operations
# --------------------------------------------------------------------------------------------


@register
@dataclass(frozen=True)
class MessageDeadLettered(DomainEvent):
    consumer: str
    topic: str
    position: int
    deliveries: int
    error: str


def all_event_types() -> dict[str, type[DomainEvent]]:
    return dict(_REGISTRY)


def replace(event: DomainEvent, **changes: Any) -> DomainEvent:
    return dataclasses.replace(event, **changes)
