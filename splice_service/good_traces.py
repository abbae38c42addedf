"""Owns turning successful production traces into good training samples (the splice worker's
``TraceIngested`` / ``TraceOutcomeSet`` handlers).

A trace that succeeded is a trajectory worth imitating as it is: ``GoodTraceSampled`` on the
trace's stream carries it with provenance ``source: trace``, the trace id and task key, and the
reward (the upload's, the later outcome's, else 1.0). Tool steps stay native. The sample id is
``derived_id("good-trace", trace_id)`` and the event id ``derived_id("splice", "good-trace",
trace_id)``, so a redelivery, or an outcome set after an upload that already said success, adds
nothing. Traces without steps, failed traces and traces still waiting for an outcome yield none.
"""

from __future__ import annotations

import dataclasses
import logging

from core.domain.events import (
    GoodTraceSampled,
    Metadata,
    NewEvent,
    RecordedEvent,
    TraceIngested,
    TraceOutcomeSet,
    caused_by,
    current_trace,
)
from core.domain.ids import derived_id, trace_stream
from core.runtime.service import HandlerResult
from core.store.ports import EventStore

log = logging.getLogger(__name__)
PRODUCER = "splice"


def good_trace_event(trace: TraceIngested, reward: float | None, meta: Metadata) -> NewEvent:
    """The ``GoodTraceSampled`` event of a successful ``trace``."""
    if meta.project_id is None:
        meta = Metadata(meta.correlation_id, meta.causation_id, meta.producer, trace.project_id)
    provenance = {
        **trace.trajectory.provenance,
        "source": "trace",
        "trace_id": trace.trace_id,
        "task_key": trace.task_key,
    }
    trajectory = dataclasses.replace(
        trace.trajectory, reward=1.0 if reward is None else reward, provenance=provenance
    )
    good = GoodTraceSampled(
        sample_id=derived_id("good-trace", trace.trace_id),
        trace_id=trace.trace_id,
        project_id=trace.project_id,
        task_key=trace.task_key,
        trajectory=trajectory,
    )
    log.info("splice: successful trace %s -> good sample %s", trace.trace_id, good.sample_id)
    event_id = derived_id(PRODUCER, "good-trace", trace.trace_id)
    return NewEvent(trace_stream(trace.trace_id), good, meta, event_id)


class GoodTraceHandlers:
    def __init__(self, store: EventStore) -> None:
        self.store = store

    async def on_trace_ingested(self, recorded: RecordedEvent) -> HandlerResult:
        trace = recorded.event
        assert isinstance(trace, TraceIngested)
        if trace.outcome != "success" or not trace.trajectory.steps:
            return HandlerResult()
        meta = caused_by(recorded, PRODUCER)
        return HandlerResult([good_trace_event(trace, trace.trajectory.reward, meta)])

    async def on_outcome_set(self, recorded: RecordedEvent) -> HandlerResult:
        outcome = recorded.event
        assert isinstance(outcome, TraceOutcomeSet)
        if outcome.outcome != "success":
            return HandlerResult()
        # the trace with the latest conversation the capture proxy recorded (api/proxy)
        trace = current_trace(
            [earlier.event for earlier in await self.store.read_stream(trace_stream(outcome.trace_id))]
        )
        if trace is not None:
            if not trace.trajectory.steps:
                return HandlerResult()
            meta = caused_by(recorded, PRODUCER)
            return HandlerResult([good_trace_event(trace, outcome.reward, meta)])
        raise LookupError(f"splice: no TraceIngested in {trace_stream(outcome.trace_id)}")
