"""Owns reading an ``events`` row back into its envelope (``RecordedEvent``): the one mapping the
event store, the projection rebuild and the API's event queries share."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Row

from core.domain.events import Metadata, RecordedEvent
from core.domain.serde import from_dict


def _aware(ts: datetime) -> datetime:
    # SQLite hands back naive datetimes; everything is written in UTC.
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def row_to_event(row: Row[Any]) -> RecordedEvent:
    """Build the envelope of one ``events`` row."""
    m = row._mapping
    return RecordedEvent(
        event_id=m["event_id"],
        stream_id=m["stream_id"],
        stream_version=m["stream_version"],
        event_type=m["event_type"],
        event_version=m["event_version"],
        data=m["data"],
        metadata=from_dict(Metadata, m["metadata"] or {}),
        recorded_at=_aware(m["recorded_at"]),
        position=m["position"],
    )
