"""Owns the splice worker (`agentr worker splice`): its composition root, ``build_service``.

- ``FirstErrorMarked`` -> ``RevisionMaterialized`` / ``RevisionRejected``, and the iteration's
  ``IterationDatasetReady`` / ``IterationDatasetEmpty`` after each ``TreeCompleted``, ``SearchFailed``,
  ``RevisionMaterialized``, ``RevisionRejected``: ``splice_service.splicer``.
- ``FirstErrorCorrected`` (a reviewer's correction) -> ``SampleRespliced`` or ``CorrectionRejected``:
  the pair re-spliced at the reviewer's t' / with the reviewer's reflection
  (``splice_service.corrections``); ``ReviewUndone`` -> the earlier sample restored (``SampleRespliced``)
  or ``SampleWithdrawn`` (same module).
- ``TraceIngested`` with outcome ``success``, or ``TraceOutcomeSet`` to ``success`` later ->
  ``GoodTraceSampled``: the successful trace as a good sample (``splice_service.good_traces``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from core.domain.events import (
    FirstErrorCorrected,
    FirstErrorMarked,
    ReviewUndone,
    RevisionMaterialized,
    RevisionRejected,
    SearchFailed,
    TraceIngested,
    TraceOutcomeSet,
    TreeCompleted,
)
from core.envs.base import Env
from core.envs.registry import egress_checked as checked_env_opener
from core.llm.model_opener import egress_policy_opener, open_model
from core.llm.policy_cache import PolicyCache, service_cache
from core.llm.ports import Policy
from core.runtime.service import Service
from core.runtime.settings import Settings
from core.store.ports import EventStore
from splice_service.corrections import CorrectionHandlers
from splice_service.good_traces import GoodTraceHandlers
from splice_service.splicer import (
    REWARD_TOLERANCE,
    SERVICE_NAME,
    Replay,
    SpliceConfig,
    SpliceHandlers,
    _open_env,
    replay,
)

__all__ = [
    "REWARD_TOLERANCE",
    "SERVICE_NAME",
    "Replay",
    "SpliceConfig",
    "SpliceHandlers",
    "build_service",
    "replay",
]


def build_service(
    settings: Settings,
    store: EventStore,
    *,
    env_opener: Callable[[str], Env] = _open_env,
    policy_opener: Callable[[str], Policy] = open_model,
    policies: PolicyCache | None = None,
) -> Service:
    """The splice worker's composition root. ``policies``: a model cache shared with other services
    of this process (an embedded run's; its owner closes it, and checks its URLs), else the worker's
    own. Models and environments are opened behind ``settings.egress`` (the operator's allow-lists)."""
    egress = settings.egress
    if env_opener is _open_env:
        env_opener = functools.partial(_open_env, egress=egress)
    opener = egress_policy_opener(policy_opener, settings)
    cache, close = service_cache(policies, opener, settings.max_open_models, "splice")
    handlers = SpliceHandlers(settings, store, checked_env_opener(env_opener, egress), cache)
    goods = GoodTraceHandlers(store)
    corrections = CorrectionHandlers(handlers)
    return Service(
        name=SERVICE_NAME,
        handlers={
            FirstErrorMarked.event_type: handlers.on_first_error,
            TraceIngested.event_type: goods.on_trace_ingested,
            TraceOutcomeSet.event_type: goods.on_outcome_set,
            TreeCompleted.event_type: handlers.on_progress,
            SearchFailed.event_type: handlers.on_progress,
            RevisionMaterialized.event_type: handlers.on_progress,
            RevisionRejected.event_type: handlers.on_progress,
            FirstErrorCorrected.event_type: corrections.on_correction,
            ReviewUndone.event_type: corrections.on_undo,
        },
        concurrency=1,
        on_close=close,
    )
