"""Owns how the API writes: every change is an event appended to the store, nothing else.

``append`` stamps the metadata (project, producer ``api``, correlation id), maps a concurrency
conflict to 409, and counts appended events for /metrics. It returns only the events that were new,
so a caller can tell a first request from a retry whose derived event ids were already stored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from api.deps import ApiServices
from api.errors import ApiError
from core.domain.events import DomainEvent, Metadata, NewEvent, RecordedEvent
from core.store.ports import ConcurrencyConflict

PRODUCER = "api"


def new_event(
    stream_id: str,
    event: DomainEvent,
    *,
    project_id: str | None,
    event_id: str,
    correlation_id: str | None = None,
) -> NewEvent:
    return NewEvent(
        stream_id=stream_id,
        event=event,
        metadata=Metadata(correlation_id=correlation_id, producer=PRODUCER, project_id=project_id),
        event_id=event_id,
    )


async def append(
    svc: ApiServices,
    events: Sequence[NewEvent],
    expected_versions: Mapping[str, int] | None = None,
) -> list[RecordedEvent]:
    try:
        recorded = await svc.store.append(events, expected_versions=expected_versions)
    except ConcurrencyConflict as exc:
        raise ApiError(409, f"{exc.stream_id} changed concurrently; retry the request") from None
    for item in recorded:
        svc.metrics.events_appended.labels(item.event_type).inc()
    return recorded
