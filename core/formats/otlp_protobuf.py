"""Owns OTLP/protobuf decoding: what ``opentelemetry-exporter-otlp-proto-http`` POSTs as
``application/x-protobuf`` (an ``ExportTraceServiceRequest``), decoded with the ``opentelemetry-proto``
package into the same ``SpanRecord`` list as OTLP/JSON (``core.formats.otlp``)."""

from __future__ import annotations

import base64
import math
from typing import Any

from core.formats.errors import TraceFormatError
from core.formats.spans import _STATUS_BY_NUMBER, SpanRecord, _remote_parent, check_trace_id


def _proto_any(value: Any, path: str) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    raw = getattr(value, kind)
    if kind == "array_value":
        return [_proto_any(v, f"{path}.arrayValue.values[{i}]") for i, v in enumerate(raw.values)]
    if kind == "kvlist_value":
        return {kv.key: _proto_any(kv.value, f"{path}.kvlistValue.{kv.key}") for kv in raw.values}
    if kind == "bytes_value":
        return base64.b64encode(raw).decode("ascii")  # JSON-ready, as OTLP/JSON encodes it
    if kind == "double_value" and not math.isfinite(raw):
        raise TraceFormatError(f"{path}.doubleValue", f"not a finite number: {raw!r}")
    return raw


def _proto_attributes(entries: Any, path: str) -> dict[str, Any]:
    return {kv.key: _proto_any(kv.value, f"{path}.{kv.key}") for kv in entries}


def spans_from_protobuf(body: bytes) -> list[SpanRecord]:
    """A protobuf-encoded ``ExportTraceServiceRequest`` -> every span in it."""
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    try:
        request = ExportTraceServiceRequest.FromString(body)
    except DecodeError as exc:
        raise TraceFormatError(
            "body", f"not a protobuf ExportTraceServiceRequest ({exc}); send OTLP/protobuf or OTLP/JSON"
        ) from None
    out: list[SpanRecord] = []
    for r_index, block in enumerate(request.resource_spans):
        resource = _proto_attributes(block.resource.attributes, f"body.resourceSpans[{r_index}].resource")
        for s_index, scope in enumerate(block.scope_spans):
            for index, span in enumerate(scope.spans):
                path = f"body.resourceSpans[{r_index}].scopeSpans[{s_index}].spans[{index}]"
                if not span.trace_id:
                    raise TraceFormatError(f"{path}.traceId", "missing")
                record = SpanRecord(
                    trace_id=check_trace_id(span.trace_id.hex(), f"{path}.traceId"),
                    span_id=span.span_id.hex(),
                    parent_span_id=span.parent_span_id.hex(),
                    name=span.name,
                    start_ns=span.start_time_unix_nano or None,
                    end_ns=span.end_time_unix_nano or None,
                    attributes=_proto_attributes(span.attributes, f"{path}.attributes"),
                    status_code=_STATUS_BY_NUMBER.get(span.status.code, "UNSET"),
                    status_message=span.status.message,
                    events=tuple(
                        {
                            "name": e.name,
                            "attributes": _proto_attributes(e.attributes, f"{path}.events[{n}]"),
                        }
                        for n, e in enumerate(span.events)
                    ),
                    resource=resource,
                    path=path,
                    parent_is_remote=bool(span.parent_span_id) and _remote_parent(span.flags),
                )
                out.append(record)  # NUL characters: replaced and noted by the receiver
    return out
