"""Owns OTLP trace decoding: OTLP/JSON and OTLP/protobuf export requests -> ``SpanRecord`` lists.

OTLP/JSON (the OTLP specification's JSON encoding of ``ExportTraceServiceRequest``): ``{"resourceSpans":
[{"resource": {"attributes": [...]}, "scopeSpans": [{"scope": {...}, "spans": [...]}]}]}``. Ids are hex
strings (``traceId`` 32 hex digits, ``spanId`` 16), 64-bit integers may be strings
(``"startTimeUnixNano": "1700000000000000000"``, ``{"intValue": "3"}``), attributes are ``KeyValue``
lists whose values are ``AnyValue`` objects (``stringValue``, ``boolValue``, ``intValue``,
``doubleValue``, ``arrayValue.values``, ``kvlistValue.values``, ``bytesValue`` base64), ``status.code``
is the enum number (0 unset, 1 ok, 2 error; the names ``STATUS_CODE_ERROR`` are accepted too).

OTLP/protobuf (what ``opentelemetry-exporter-otlp-proto-http`` POSTs as ``application/x-protobuf``) is
decoded with the ``opentelemetry-proto`` package into the same records (``core.formats.otlp_protobuf``;
the record itself, ``SpanRecord``, and its checks are ``core.formats.spans``'; all re-exported here).

Loose span objects (the older ``{"spans": [...]}`` upload) use the same field names in camelCase or
snake_case, with ``attributes`` either a ``KeyValue`` list or a plain object. The OpenTelemetry SDK's
own span JSON (Python ``ReadableSpan.to_json()``: ``context.trace_id`` / ``context.span_id`` as
``0x``-prefixed hex, ``parent_id``, ISO 8601 ``start_time`` / ``end_time``, ``status.status_code``
UNSET | OK | ERROR with ``description``, ``resource.attributes``; Phoenix's alike, with a UUID trace id
and a flat ``status_code``) is read as the same span; a field of it that cannot be read is refused
naming it.
"""

from __future__ import annotations

import base64
import math
import uuid
from datetime import UTC, datetime
from typing import Any

from core.formats.errors import TraceFormatError, require, shown
from core.formats.otlp_protobuf import spans_from_protobuf
from core.formats.spans import (
    _STATUS_BY_NAME,
    _STATUS_BY_NUMBER,
    SpanRecord,
    StatusCode,
    _remote_parent,
    check_trace_id,
    group_by_trace,
    json_text,
)

__all__ = [
    "SpanRecord",
    "StatusCode",
    "any_value",
    "group_by_trace",
    "json_text",
    "key_values",
    "span_from_json",
    "spans_from_otlp_json",
    "spans_from_protobuf",
]


def any_value(value: Any, path: str) -> Any:
    """An OTLP/JSON ``AnyValue`` object -> a Python value."""
    if not isinstance(value, dict):
        raise TraceFormatError(path, f"expected an OTLP AnyValue object, got {type(value).__name__}")
    if not value:
        return None
    if len(value) != 1:
        raise TraceFormatError(path, f"an AnyValue holds exactly one of its fields, got {sorted(value)}")
    kind, raw = next(iter(value.items()))
    if kind == "stringValue":
        if not isinstance(raw, str):
            raise TraceFormatError(f"{path}.stringValue", "expected a string")
        return raw
    if kind == "boolValue":
        if not isinstance(raw, bool):
            raise TraceFormatError(f"{path}.boolValue", "expected true or false")
        return raw
    if kind == "intValue":
        try:
            return int(raw)
        except (TypeError, ValueError):
            raise TraceFormatError(f"{path}.intValue", f"not an integer: {shown(raw)}") from None
    if kind == "doubleValue":
        if isinstance(raw, bool) or not isinstance(raw, int | float | str):
            raise TraceFormatError(f"{path}.doubleValue", f"not a number: {shown(raw)}")
        try:
            number = float(raw)
        except ValueError:
            raise TraceFormatError(f"{path}.doubleValue", f"not a number: {shown(raw)}") from None
        if not math.isfinite(number):
            raise TraceFormatError(f"{path}.doubleValue", f"not a finite number: {shown(raw)}")
        return number
    if kind == "arrayValue":
        values = require(raw, "values", f"{path}.arrayValue", list) if raw else []
        return [any_value(v, f"{path}.arrayValue.values[{i}]") for i, v in enumerate(values)]
    if kind == "kvlistValue":
        values = require(raw, "values", f"{path}.kvlistValue", list) if raw else []
        return key_values(values, f"{path}.kvlistValue.values")
    if kind == "bytesValue":  # kept as its base64 text (JSON-ready)
        try:
            base64.b64decode(raw, validate=True)
        except (TypeError, ValueError):
            raise TraceFormatError(f"{path}.bytesValue", "not base64") from None
        return str(raw)
    raise TraceFormatError(
        f"{path}.{kind}",
        "unknown AnyValue field (send one of stringValue, boolValue, intValue, doubleValue, "
        "arrayValue, kvlistValue, bytesValue)",
    )


def key_values(entries: Any, path: str) -> dict[str, Any]:
    """An OTLP/JSON ``KeyValue`` list -> a dict (a plain object is accepted as already decoded)."""
    if isinstance(entries, dict):
        return dict(entries)
    if not isinstance(entries, list):
        raise TraceFormatError(path, "expected an OTLP KeyValue list [{key, value}] or an object")
    out: dict[str, Any] = {}
    for index, entry in enumerate(entries):
        epath = f"{path}[{index}]"
        key = require(entry, "key", epath, str)
        out[key] = any_value(entry.get("value", {}), f"{epath}.value")
    return out


def _pick(obj: dict[str, Any], *names: str) -> Any:
    for name in names:
        if name in obj:
            return obj[name]
    return None


def _int_or_none(raw: Any, path: str) -> int | None:
    if raw in (None, "", 0, "0"):
        return None
    if isinstance(raw, bool):
        raise TraceFormatError(path, "expected an integer (nanoseconds since the epoch)")
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise TraceFormatError(
            path, f"expected an integer (nanoseconds since the epoch), got {shown(raw)}"
        ) from None


def _hex_id(raw: Any, path: str, *, optional: bool = False) -> str:
    if raw in (None, ""):
        if optional:
            return ""
        raise TraceFormatError(path, "missing (OTLP/JSON ids are hex strings)")
    if not isinstance(raw, str):
        raise TraceFormatError(path, f"expected a hex string, got {type(raw).__name__}")
    text = raw.strip().lower()
    if text.startswith("0x"):
        text = text[2:]
    if not text or any(c not in "0123456789abcdef" for c in text):
        raise TraceFormatError(
            path, f"expected a hex string (OTLP/JSON encodes ids as hex), got {shown(raw)}"
        )
    return text


def _status(raw: Any, path: str) -> tuple[StatusCode, str]:
    if raw in (None, {}):
        return "UNSET", ""
    if not isinstance(raw, dict):
        raise TraceFormatError(path, "expected an object {code, message}")
    code = raw.get("code", 0)
    message = raw.get("message") or ""
    if isinstance(code, bool):
        raise TraceFormatError(f"{path}.code", "expected 0 (unset), 1 (ok) or 2 (error)")
    if isinstance(code, int) and code in _STATUS_BY_NUMBER:
        return _STATUS_BY_NUMBER[code], str(message)
    if isinstance(code, str) and code.upper() in _STATUS_BY_NAME:
        return _STATUS_BY_NAME[code.upper()], str(message)
    raise TraceFormatError(f"{path}.code", f"expected 0 (unset), 1 (ok) or 2 (error), got {shown(code)}")


def span_from_json(
    span: Any, path: str, *, resource: dict[str, Any] | None = None, trace_id_default: str = ""
) -> SpanRecord:
    """One OTLP/JSON span (camelCase), loose span object (snake_case) or OTel SDK span JSON (a
    ``context`` object) -> SpanRecord."""
    if not isinstance(span, dict):
        raise TraceFormatError(path, f"expected a span object, got {type(span).__name__}")
    if "context" in span:
        span = _from_sdk_json(span, path)
        if resource is None:
            resource = span.pop("resource_attributes")
    raw_trace = _pick(span, "traceId", "trace_id")
    trace_id = trace_id_default
    if raw_trace not in (None, ""):
        trace_id = check_trace_id(_hex_id(raw_trace, f"{path}.traceId"), f"{path}.traceId")
    raw_span = _pick(span, "spanId", "span_id")
    span_id = _hex_id(raw_span, f"{path}.spanId", optional=True)
    parent = _hex_id(_pick(span, "parentSpanId", "parent_span_id"), f"{path}.parentSpanId", optional=True)
    name = span.get("name") or ""
    if not isinstance(name, str):
        raise TraceFormatError(f"{path}.name", "expected a string")
    attributes_raw = span.get("attributes", [])
    attributes = key_values(attributes_raw, f"{path}.attributes")
    status_code, status_message = _status(span.get("status"), f"{path}.status")
    events = []
    raw_events = span.get("events") or []
    if not isinstance(raw_events, list):
        raise TraceFormatError(f"{path}.events", "expected a list")
    for index, event in enumerate(raw_events):
        epath = f"{path}.events[{index}]"
        if not isinstance(event, dict):
            raise TraceFormatError(epath, "expected an object {name, attributes}")
        events.append(
            {
                "name": str(event.get("name") or ""),
                "attributes": key_values(event.get("attributes", []), f"{epath}.attributes"),
            }
        )
    return SpanRecord(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent,
        name=name,
        start_ns=_int_or_none(
            _pick(span, "startTimeUnixNano", "start_time_unix_nano"), f"{path}.startTimeUnixNano"
        ),
        end_ns=_int_or_none(_pick(span, "endTimeUnixNano", "end_time_unix_nano"), f"{path}.endTimeUnixNano"),
        attributes=attributes,
        status_code=status_code,
        status_message=status_message,
        events=tuple(events),
        resource=dict(resource or {}),
        path=path,
        parent_is_remote=bool(parent) and _remote_parent(span.get("flags")),
    )


def _sdk_time(raw: Any, path: str) -> int | None:
    """An SDK span's ISO 8601 time (``2024-05-01T10:00:00.123456Z``) -> nanoseconds since the epoch."""
    if raw in (None, ""):
        return None
    if not isinstance(raw, str):
        raise TraceFormatError(path, f"expected an ISO 8601 time, got {shown(raw)}")
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise TraceFormatError(path, f"expected an ISO 8601 time, got {shown(raw)}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # the SDK writes UTC
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


def _uuid_hex(raw: Any) -> Any:
    """A trace id written as a UUID (Phoenix's span JSON: ``409df945-e058-...``) as its 32 hex digits;
    anything else as it is."""
    if isinstance(raw, str) and len(raw) == 36 and raw.count("-") == 4:
        try:
            return uuid.UUID(raw).hex
        except ValueError:
            return raw
    return raw


def _from_sdk_json(span: dict[str, Any], path: str) -> dict[str, Any]:
    """The OpenTelemetry SDK's span JSON (``ReadableSpan.to_json()``; Phoenix's, with a UUID trace id and
    a flat ``status_code``, alike) as a loose span object."""
    context = span["context"]
    if not isinstance(context, dict):
        raise TraceFormatError(f"{path}.context", "expected an object {trace_id, span_id}")
    status = span.get("status") or {}
    if not status and isinstance(span.get("status_code"), str):  # Phoenix's span JSON: flat
        status = {"status_code": span["status_code"], "description": span.get("status_message")}
    if not isinstance(status, dict):
        raise TraceFormatError(f"{path}.status", "expected an object {status_code, description}")
    code = status.get("status_code", "UNSET")
    if not isinstance(code, str) or code.upper() not in ("UNSET", "OK", "ERROR"):
        raise TraceFormatError(
            f"{path}.status.status_code", f"expected UNSET, OK or ERROR, got {shown(code)}"
        )
    resource = span.get("resource") or {}
    if not isinstance(resource, dict):
        raise TraceFormatError(f"{path}.resource", "expected an object {attributes}")
    events = span.get("events") or []
    if not isinstance(events, list):
        raise TraceFormatError(f"{path}.events", "expected a list")
    return {
        "trace_id": _hex_id(_uuid_hex(context.get("trace_id")), f"{path}.context.trace_id"),
        "span_id": _hex_id(context.get("span_id"), f"{path}.context.span_id", optional=True),
        "parent_span_id": _hex_id(span.get("parent_id"), f"{path}.parent_id", optional=True),
        "name": span.get("name") or "",
        "start_time_unix_nano": _sdk_time(span.get("start_time"), f"{path}.start_time"),
        "end_time_unix_nano": _sdk_time(span.get("end_time"), f"{path}.end_time"),
        "attributes": span.get("attributes") or {},
        "status": {"code": code.upper(), "message": status.get("description") or ""},
        "events": events,  # {name, timestamp, attributes}: the timestamp is not needed
        "resource_attributes": key_values(resource.get("attributes") or {}, f"{path}.resource.attributes"),
    }


def spans_from_otlp_json(payload: Any, path: str = "body") -> list[SpanRecord]:
    """An OTLP/JSON ``ExportTraceServiceRequest`` -> every span in it (with its resource attributes)."""
    if not isinstance(payload, dict):
        raise TraceFormatError(path, f"expected an object with resourceSpans, got {type(payload).__name__}")
    resource_spans = require(payload, "resourceSpans", path, list)
    out: list[SpanRecord] = []
    for r_index, block in enumerate(resource_spans):
        rpath = f"{path}.resourceSpans[{r_index}]"
        if not isinstance(block, dict):
            raise TraceFormatError(rpath, "expected an object {resource, scopeSpans}")
        if "instrumentationLibrarySpans" in block and "scopeSpans" not in block:
            raise TraceFormatError(
                f"{rpath}.instrumentationLibrarySpans",
                "the pre-1.0 OTLP field is not supported: send scopeSpans (OTLP >= 0.19)",
            )
        resource_obj = block.get("resource") or {}
        if not isinstance(resource_obj, dict):
            raise TraceFormatError(f"{rpath}.resource", "expected an object {attributes}")
        resource = key_values(resource_obj.get("attributes", []), f"{rpath}.resource.attributes")
        scope_spans = require(block, "scopeSpans", rpath, list)
        for s_index, scope in enumerate(scope_spans):
            spath = f"{rpath}.scopeSpans[{s_index}]"
            spans = require(scope, "spans", spath, list)
            for index, span in enumerate(spans):
                record = span_from_json(span, f"{spath}.spans[{index}]", resource=resource)
                if not record.trace_id:
                    raise TraceFormatError(f"{spath}.spans[{index}].traceId", "missing")
                out.append(record)
    return out
