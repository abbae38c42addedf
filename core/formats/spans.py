"""Owns the decoded span: ``SpanRecord`` (one OTLP span, whatever encoding it came in), grouping by
trace and ``json_text`` (NUL characters are replaced and noted by the receiver, not refused here).
The decoders: ``core.formats.otlp`` (OTLP/JSON) and ``core.formats.otlp_protobuf`` (OTLP/protobuf)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from core.formats.errors import TraceFormatError

StatusCode = Literal["UNSET", "OK", "ERROR"]
_STATUS_BY_NUMBER: dict[int, StatusCode] = {0: "UNSET", 1: "OK", 2: "ERROR"}
HAS_IS_REMOTE, IS_REMOTE = 0x100, 0x200  # OTLP SpanFlags: the is-remote bit is known / set


def _remote_parent(flags: Any) -> bool:
    try:
        value = int(flags or 0)
    except (TypeError, ValueError):
        return False
    return bool(value & HAS_IS_REMOTE and value & IS_REMOTE)


_STATUS_BY_NAME: dict[str, StatusCode] = {
    "STATUS_CODE_UNSET": "UNSET",
    "STATUS_CODE_OK": "OK",
    "STATUS_CODE_ERROR": "ERROR",
    "UNSET": "UNSET",
    "OK": "OK",
    "ERROR": "ERROR",
}


@dataclass(frozen=True)
class SpanRecord:
    """One span, decoded; ``path`` says where it came from (for error messages)."""

    trace_id: str
    span_id: str
    parent_span_id: str  # "" for a root span
    name: str
    start_ns: int | None
    end_ns: int | None
    attributes: dict[str, Any]
    status_code: StatusCode = "UNSET"
    status_message: str = ""
    events: tuple[dict[str, Any], ...] = ()  # {"name", "attributes"} (e.g. "exception" events)
    resource: dict[str, Any] = field(default_factory=dict)
    path: str = ""
    parent_is_remote: bool = False  # OTLP flags: the parent lives in another service (a local root)

    @property
    def is_local_root(self) -> bool:
        """No parent, or a parent in another process (OTLP ``flags`` is-remote bits), or marked
        complete by the application (attribute ``agentr.trace.complete`` = true)."""
        return (
            not self.parent_span_id
            or self.parent_is_remote
            or self.attributes.get("agentr.trace.complete") is True
        )

    def to_data(self) -> dict[str, Any]:
        """JSON-ready fields (a shallow copy: the decoded values already are plain JSON values)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["events"] = list(self.events)
        return data

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> SpanRecord:
        return cls(**{**data, "events": tuple(data.get("events", ()))})


def group_by_trace(spans: Sequence[SpanRecord]) -> dict[str, list[SpanRecord]]:
    """Spans grouped by trace id, in first-seen order of the trace ids."""
    groups: dict[str, list[SpanRecord]] = {}
    for span in spans:
        groups.setdefault(span.trace_id, []).append(span)
    return groups


def json_text(value: Any) -> str:
    """A value as compact JSON text (strings stay as they are)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def check_trace_id(trace_id: str, path: str) -> str:
    """An OTLP trace id (hex): 16 bytes, not all zero (the OTLP spec's invalid id); else a
    TraceFormatError naming ``path`` and why."""
    if len(trace_id) != 32:
        raise TraceFormatError(
            path,
            f"an OTLP trace id is 16 bytes (32 hex digits), got {len(trace_id) / 2:g} bytes ({trace_id!r})",
        )
    if not trace_id.strip("0"):
        raise TraceFormatError(
            path, "the all-zero trace id is invalid in OTLP (send the span's real trace id)"
        )
    return trace_id
