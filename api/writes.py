"""Owns how the API writes: every change is an event appended to the store, nothing else.

``append`` stamps the metadata (project, producer ``api``, correlation id), maps a concurrency
conflict to 409, and counts appended events for /metrics. It returns only the events that were new,
so a caller can tell a first request from a retry whose derived event ids were already stored.
With an Idempotency context it also claims the request's key in the same transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from api.deps import ApiServices
from api.errors import ApiError
from api.idempotency import AnswerSource, Idempotency, KeyTaken
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
    *,
    idem: Idempotency | None = None,
    answer: AnswerSource | None = None,
) -> list[RecordedEvent]:
    """Append ``events``; with ``idem`` and ``answer`` (the response, or a coroutine computing it
    from the transaction's connection) the Idempotency-Key is claimed in the same transaction, and
    a request that lost the key to a concurrent one answers from the winner (replay or 422)."""
    hook = idem.claim_hook(answer) if idem is not None else None
    try:
        recorded = await svc.store.append(events, expected_versions=expected_versions, before_commit=hook)
    except ConcurrencyConflict as exc:
        raise ApiError(409, f"{exc.stream_id} changed concurrently; retry the request") from None
    except KeyTaken:
        assert idem is not None
        await idem.answer_taken()
    for item in recorded:
        svc.metrics.events_appended.labels(item.event_type).inc()
    return recorded
