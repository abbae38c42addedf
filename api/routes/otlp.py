"""Owns the OTLP/HTTP trace receiver: ``POST /v1/otlp/v1/traces`` (an OpenTelemetry exporter's endpoint).

Point an exporter at it (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://HOST:PORT/v1/otlp/v1/traces``,
``OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20agr_...``). Bodies: ``application/x-protobuf``
(``ExportTraceServiceRequest``, decoded with ``opentelemetry-proto``) or ``application/json`` (OTLP/JSON),
optionally ``Content-Encoding: gzip``. The answer is an ``ExportTraceServiceResponse`` in the request's
encoding.

Spans are grouped by trace id. A trace is ingested (``TraceIngested``, one per trace id, id derived from
project + trace id so an exporter's retry adds nothing) once its local ROOT span has arrived (no parent,
a parent in another service per the OTLP ``flags``, or ``agentr.trace.complete = true``);
spans that arrive before it are kept as ``OtlpSpansBuffered`` and joined then. Spans of a trace that was
already ingested are refused in ``partialSuccess`` (``rejectedSpans`` + the reason), never dropped
silently. The whole request is parsed before anything is written; a malformed span answers 422 naming
the field and nothing is stored.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from api.deps import ApiServices, Principal, require, services
from api.errors import ApiError
from api.errors import field_error as make_field_error
from api.sanitize import JsonRefused, json_problem, loads_bounded
from api.schemas import ERROR_RESPONSES, ErrorBody
from api.writes import append, new_event
from core.domain.events import NewEvent, OtlpSpansBuffered, TraceIngested
from core.domain.ids import derived_id, otlp_stream, trace_stream
from core.formats.import_otel import check_span, conversation_from_spans
from core.formats.importing import TraceFormatError, imported
from core.formats.otlp import SpanRecord, group_by_trace, spans_from_otlp_json, spans_from_protobuf

router = APIRouter(prefix="/v1/otlp", tags=["traces"], responses=ERROR_RESPONSES)
PROTOBUF = "application/x-protobuf"


def otlp_trace_id(project_id: str, trace_hex: str) -> str:
    """The agentr trace id of an OTLP trace (stable across exporter retries)."""
    return derived_id("otlp-trace", project_id, trace_hex)


def _inflate(body: bytes, encoding: str, limit: int) -> bytes:
    """gzip / deflate -> bytes, refusing (413) more than ``limit`` bytes once inflated."""
    window = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
    inflater = zlib.decompressobj(window)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise ApiError(400, f"body: not valid {encoding} ({exc})") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise ApiError(413, f"body: more than {limit} bytes once decompressed")
    return out


def _decode(body: bytes, content_type: str, encoding: str, limit: int) -> tuple[list[SpanRecord], bool]:
    if encoding in ("gzip", "deflate"):
        body = _inflate(body, encoding, limit)
    elif encoding not in ("", "identity"):
        raise ApiError(415, f"Content-Encoding {encoding!r} is not supported (send gzip or none)")
    if content_type == PROTOBUF:
        return _sanitized(spans_from_protobuf(body)), True
    if content_type == "application/json":
        try:
            payload = loads_bounded(body)
        except JsonRefused as exc:  # too deep, or an integer past the input layer's bound
            raise make_field_error("body", str(exc)) from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ApiError(400, f"body: not valid JSON ({exc})") from None
        # a gzip body passed the JSON sanitiser as opaque bytes: apply its rules here
        problem = json_problem(payload)
        if problem is not None:
            raise make_field_error(problem.field(), problem.message)
        return spans_from_otlp_json(payload, "body"), False
    raise ApiError(
        415, f"Content-Type {content_type or 'missing'!r}: send {PROTOBUF} or application/json (OTLP/HTTP)"
    )


def _sanitized(spans: list[SpanRecord]) -> list[SpanRecord]:
    """The JSON sanitiser's rules (api/sanitize.py) on decoded protobuf text: NUL characters and
    JSON nested too deep inside attribute strings (gen_ai.input.messages) answer 422."""
    for index, span in enumerate(spans):
        texts = {"name": span.name, "status_message": span.status_message}
        problem = json_problem({**texts, "attributes": span.attributes, "events": list(span.events)})
        if problem is not None:
            raise make_field_error(f"{span.path or f'spans[{index}]'}.{problem.path}", problem.message)
    return spans


def _answer(protobuf: bool, rejected: int, message: str) -> Response:
    """ExportTraceServiceResponse; a message with 0 rejected spans is a warning (OTLP partial success)."""
    if protobuf:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        reply = ExportTraceServiceResponse()
        if rejected or message:
            reply.partial_success.rejected_spans = rejected
            reply.partial_success.error_message = message
        return Response(reply.SerializeToString(), media_type=PROTOBUF)
    body: dict[str, Any] = {}
    if rejected or message:
        body["partialSuccess"] = {"rejectedSpans": str(rejected), "errorMessage": message}
    return Response(json.dumps(body), media_type="application/json")


_EXPORT_RESPONSE = {
    "type": "object",
    "properties": {
        "partialSuccess": {
            "type": "object",
            "properties": {"rejectedSpans": {"type": "string"}, "errorMessage": {"type": "string"}},
        }
    },
}


@router.post(
    "/v1/traces",
    summary="OTLP/HTTP trace receiver (protobuf or JSON), as an OpenTelemetry exporter sends",
    response_class=Response,
    responses={
        200: {
            "description": "ExportTraceServiceResponse, in the request's encoding (partialSuccess names "
            "spans of traces already ingested)",
            "content": {
                "application/json": {"schema": _EXPORT_RESPONSE},
                PROTOBUF: {"schema": {"type": "string", "format": "binary"}},
            },
        },
        415: {
            "model": ErrorBody,
            "description": "Not OTLP protobuf/JSON, or an unsupported Content-Encoding",
        },
        503: {
            "model": ErrorBody,
            "description": "Another request for the same trace was stored first: retry",
        },
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                PROTOBUF: {"schema": {"type": "string", "format": "binary"}},
                "application/json": {"schema": {"type": "object", "required": ["resourceSpans"]}},
            },
        }
    },
)
async def receive_traces(
    request: Request,
    principal: Principal = Depends(require("ingest")),
    svc: ApiServices = Depends(services),
) -> Response:
    project_id = principal.project()
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    encoding = request.headers.get("content-encoding", "").strip().lower()
    body = await request.body()
    limit = svc.settings.max_body_bytes
    try:
        spans, protobuf = _decode(body, content_type, encoding, limit)
        new_events: list[NewEvent] = []
        expected: dict[str, int] = {}
        rejected, reasons = 0, []
        for trace_hex, group in group_by_trace(spans).items():
            trace_id = otlp_trace_id(project_id, trace_hex)
            if await svc.store.stream_version(trace_stream(trace_id)) >= 0:
                rejected += len(group)
                reasons.append(f"trace {trace_hex} was already ingested as {trace_id}")
                continue
            buffer_id = derived_id("otlp-buffer", project_id, trace_hex)
            buffer = otlp_stream(buffer_id)
            history = await svc.store.read_stream(buffer)
            # a concurrent request for the same trace makes one of the two conflict (503, retried)
            expected[buffer] = len(history) - 1
            expected[trace_stream(trace_id)] = -1
            if not any(s.is_local_root for s in group):
                for span in group:
                    check_span(span)  # refuse a malformed span now, not when its root arrives
                data = tuple(s.to_data() for s in group)
                digest = derived_id("otlp-spans", *(f"{s.span_id}@{s.end_ns}" for s in group))
                event = OtlpSpansBuffered(buffer_id, project_id, trace_hex, data)
                new_events.append(
                    new_event(
                        buffer,
                        event,
                        project_id=project_id,
                        event_id=derived_id("otlp-buffered", buffer_id, digest),
                    )
                )
                continue
            buffered = [
                SpanRecord.from_data(span)
                for recorded in history
                if isinstance(recorded.event, OtlpSpansBuffered)
                for span in recorded.event.spans
            ]
            known = {(s.span_id, s.start_ns) for s in group}
            whole = [s for s in buffered if (s.span_id, s.start_ns) not in known] + list(group)
            item = imported({}, conversation_from_spans(whole, f"trace {trace_hex}", trace_hex), "otlp")
            ingested = TraceIngested(
                trace_id=trace_id,
                project_id=project_id,
                task_key=item.task_key,
                trajectory=item.trajectory,
                outcome=item.outcome,
                source_format="otlp",
                external_id=item.external_id,
            )
            if item.outcome == "unknown":
                reasons.append(
                    f"trace {trace_hex} stored as {trace_id} without an outcome: it waits for PATCH "
                    f"/v1/traces/{trace_id} (or an agentr.outcome attribute / root span status)"
                )
            new_events.append(
                new_event(
                    trace_stream(trace_id),
                    ingested,
                    project_id=project_id,
                    event_id=derived_id("otlp-ingested", trace_id),
                    correlation_id=trace_id,
                )
            )
    except TraceFormatError as exc:
        raise make_field_error(
            exc.path if exc.path.startswith("body") else f"body.{exc.path}", exc.problem
        ) from None
    if new_events:
        try:
            await append(svc, new_events, expected)
        except ApiError as exc:
            if exc.status_code != 409:
                raise
            # OTLP exporters retry 503 (with Retry-After); 409 would make them drop the batch
            raise ApiError(
                503,
                f"{exc}: another request for the same trace was stored first",
                headers={"Retry-After": "1"},
            ) from None
    return _answer(protobuf, rejected, "; ".join(reasons))
