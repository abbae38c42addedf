"""Owns the domain events: every fact in agentr is one of these frozen, past-tense, versioned
dataclasses, one module per stream family:

- ``base``: ``DomainEvent``, the registry (``register``, ``decode``), ``upcaster``, the envelopes
  (``NewEvent``, ``RecordedEvent``, ``Metadata``, ``caused_by``);
- ``values``: value objects carried by events (``NodeRecord``, ``StepVerdict``, ``CriticStrategyName``);
- ``projects``, ``runs``, ``search`` (trees), ``pairs`` (critic and splicer), ``traces``, ``datasets``,
  ``operations``: the events of each stream.

``register`` adds a type to the registry under (name, version); ``upcaster`` registers a function
that lifts the stored data of an old version one version up, so old rows still decode after a
schema change. Importing this package imports every stream module, so every event type is
registered; each name is re-exported here (``from core.domain.events import PairFound``). Where each
event is produced and consumed: ARCHITECTURE.md and docs/events.md.
"""

from core.domain.events.base import (
    DomainEvent,
    Metadata,
    NewEvent,
    RecordedEvent,
    UnknownEventType,
    all_event_types,
    caused_by,
    decode,
    event_class,
    register,
    replace,
    upcaster,
)
from core.domain.events.datasets import DatasetCreated
from core.domain.events.learners import EpisodePlayed
from core.domain.events.operations import MessageDeadLettered
from core.domain.events.pairs import (
    CorrectionRejected,
    FirstErrorAccepted,
    FirstErrorCorrected,
    FirstErrorMarked,
    PairClaimed,
    PairReleased,
    ReplayProbed,
    ReviewUndone,
    RevisionMaterialized,
    RevisionRejected,
    SampleRespliced,
    SampleWithdrawn,
)
from core.domain.events.projects import ApiKeyIssued, ApiKeyRevoked, ProjectCreated
from core.domain.events.runs import (
    IterationDatasetEmpty,
    IterationDatasetReady,
    IterationEvaluated,
    IterationStarted,
    ModelTrained,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunRequested,
    TrainingFailed,
)
from core.domain.events.search import (
    GoodTrajectoryFound,
    LeafRecorded,
    NodesExpanded,
    PairFound,
    RolloutFinished,
    SearchFailed,
    SearchRequested,
    TreeCompleted,
    TreeStarted,
)
from core.domain.events.traces import (
    GoodTraceSampled,
    ModelCallRecorded,
    OtlpSpansBuffered,
    TraceCritiqued,
    TraceIngested,
    TraceOutcomeSet,
    TraceUnpaired,
    current_trace,
)
from core.domain.events.values import CriticStrategyName, NodeRecord, StepVerdict

__all__ = [
    "ApiKeyIssued",
    "ApiKeyRevoked",
    "CorrectionRejected",
    "CriticStrategyName",
    "DatasetCreated",
    "EpisodePlayed",
    "DomainEvent",
    "FirstErrorAccepted",
    "FirstErrorCorrected",
    "FirstErrorMarked",
    "GoodTraceSampled",
    "GoodTrajectoryFound",
    "IterationDatasetEmpty",
    "IterationDatasetReady",
    "IterationEvaluated",
    "IterationStarted",
    "LeafRecorded",
    "MessageDeadLettered",
    "Metadata",
    "ModelTrained",
    "NewEvent",
    "NodeRecord",
    "NodesExpanded",
    "OtlpSpansBuffered",
    "PairClaimed",
    "PairFound",
    "PairReleased",
    "ProjectCreated",
    "RecordedEvent",
    "ReplayProbed",
    "RevisionMaterialized",
    "RevisionRejected",
    "ReviewUndone",
    "RolloutFinished",
    "RunCancelled",
    "RunCompleted",
    "RunFailed",
    "RunRequested",
    "SampleRespliced",
    "SampleWithdrawn",
    "SearchFailed",
    "SearchRequested",
    "StepVerdict",
    "TraceCritiqued",
    "TraceUnpaired",
    "TraceIngested",
    "TraceOutcomeSet",
    "ModelCallRecorded",
    "current_trace",
    "TrainingFailed",
    "TreeCompleted",
    "TreeStarted",
    "UnknownEventType",
    "all_event_types",
    "caused_by",
    "decode",
    "event_class",
    "register",
    "replace",
    "upcaster",
]
