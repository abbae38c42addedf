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
silently. So are the spans of a trace agentr does not model or cannot read (an HTTP server trace with no
GenAI content sent by the same BatchSpanProcessor, a malformed message attribute): the message names the
trace, the field and why, and the other traces of the export are stored (OTLP/HTTP partial success:
the exporter does not retry, nothing it can fix is lost). A body that is not an OTLP export at all
(undecodable protobuf, JSON without ``resourceSpans``) answers 422 naming the field, and nothing is
stored; the whole request is parsed before anything is written.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from api.deps import ApiServices, Principal, require, services
from api.errors import ApiError
from api.errors import field_error as make_field_error
from api.reads import external_traces
from api.sanitize import (
    InflateError,
    JsonRefused,
    inflate,
    json_problem,
    loads_bounded,
    nul_note,
    replace_nul,
)
from api.schemas import ERROR_RESPONSES, ErrorBody
from api.writes import append, new_event
from core.domain.events import NewEvent, OtlpSpansBuffered, TraceIngested
from core.domain.ids import derived_id, otlp_stream, trace_stream
from core.formats.import_otel import check_span, conversation_from_spans
from core.formats.importing import TraceFormatError, imported, with_note
from core.formats.otlp import SpanRecord, group_by_trace, spans_from_otlp_json, spans_from_protobuf

router = APIRouter(prefix="/v1/otlp", tags=["traces"], responses=ERROR_RESPONSES)
PROTOBUF = "application/x-protobuf"
_LIST_OF_OBJECTS = {"type": "array", "items": {"type": "object"}}
OTLP_JSON_REQUEST: dict[str, object] = {
    "type": "object",
    "required": ["resourceSpans"],
    "properties": {
        "resourceSpans": {
            "type": "array",
            "description": "ResourceSpans blocks (core.formats.otlp.spans_from_otlp_json reads them).",
            "items": {
                "type": "object",
                "required": ["scopeSpans"],
                "properties": {
                    # `block.get("resource") or {}`: a falsy value is no resource
                    "resource": {"anyOf": [{"type": "object"}, {"enum": [None, False, 0, "", []]}]},
                    "scopeSpans": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["spans"],
                            "properties": {"spans": _LIST_OF_OBJECTS},
                        },
                    },
                },
            },
        }
    },
}
"""The OTLP/JSON ExportTraceServiceRequest as far as the document states it (``require`` in
core.formats.otlp): resourceSpans -> scopeSpans -> spans, each a list of objects. A span's own fields
(hex ids, AnyValue attributes) are the importer's rules (docs/security.md, "Not in the schema")."""


def otlp_trace_id(project_id: str, trace_hex: str) -> str:
    """The agentr trace id of an OTLP trace (stable across exporter retries)."""
    return derived_id("otlp-trace", project_id, trace_hex)


def _inflate(body: bytes, encoding: str, limit: int) -> bytes:
    """gzip / deflate -> bytes, refusing (413) more than ``limit`` bytes once inflated."""
    try:
        return inflate(body, encoding, limit)
    except InflateError as exc:
        raise ApiError(exc.status, str(exc)) from None


def _decode(
    body: bytes, content_type: str, encoding: str, limit: int, nul_paths: list[str]
) -> tuple[list[SpanRecord], bool]:
    if encoding in ("gzip", "deflate"):
        body = _inflate(body, encoding, limit)
    elif encoding not in ("", "identity"):
        raise ApiError(415, f"Content-Encoding {encoding!r} is not supported (send gzip or none)")
    if content_type == PROTOBUF:
        return _sanitized(spans_from_protobuf(body), nul_paths), True
    if content_type == "application/json":
        try:
            payload = loads_bounded(body)
        except JsonRefused as exc:  # too deep, or an integer past the input layer's bound
            raise make_field_error("body", str(exc)) from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ApiError(400, f"body: not valid JSON ({exc})") from None
        # a gzip body passed the JSON sanitiser as opaque bytes: apply its rules here
        payload, replaced = replace_nul(payload, "body")
        nul_paths.extend(replaced)
        problem = json_problem(payload)
        if problem is not None:
            raise make_field_error(problem.field(), problem.message)
        return spans_from_otlp_json(payload, "body"), False
    raise ApiError(
        415, f"Content-Type {content_type or 'missing'!r}: send {PROTOBUF} or application/json (OTLP/HTTP)"
    )


def _sanitized(spans: list[SpanRecord], nul_paths: list[str]) -> list[SpanRecord]:
    """The JSON sanitiser's rules (api/sanitize.py) on decoded protobuf text: NUL characters are
    replaced by U+FFFD (their paths added to ``nul_paths``, recorded on the trace); JSON nested too
    deep inside attribute strings (gen_ai.input.messages) answers 422."""
    out = []
    for index, span in enumerate(spans):
        where = span.path or f"spans[{index}]"
        fields = {
            "name": span.name,
            "status_message": span.status_message,
            "attributes": span.attributes,
            "events": list(span.events),
            "resource": span.resource,
        }
        cleaned, replaced = replace_nul(fields, where)
        if replaced:
            nul_paths.extend(replaced)
            span = dataclasses.replace(
                span,
                name=cleaned["name"],
                status_message=cleaned["status_message"],
                attributes=cleaned["attributes"],
                events=tuple(cleaned["events"]),
                resource=cleaned["resource"],
            )
        problem = json_problem(cleaned)
        if problem is not None:
            raise make_field_error(f"{where}.{problem.path}", problem.message)
        out.append(span)
    return out


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


async def _trace_events(
    svc: ApiServices,
    project_id: str,
    trace_hex: str,
    trace_id: str,
    group: list[SpanRecord],
    nul_paths: list[str],
) -> tuple[list[NewEvent], dict[str, int], str]:
    """The events for the spans of one OTLP trace (buffered, or the whole trace once its root arrived),
    the stream versions they expect, and a warning; raises TraceFormatError for a trace it cannot read."""
    buffer_id = derived_id("otlp-buffer", project_id, trace_hex)
    buffer = otlp_stream(buffer_id)
    history = await svc.store.read_stream(buffer)
    # a concurrent request for the same trace makes one of the two conflict (503, retried)
    expected = {buffer: len(history) - 1, trace_stream(trace_id): -1}
    if not any(s.is_local_root for s in group):
        for span in group:
            check_span(span)  # refuse a malformed span now, not when its root arrives
        data = tuple(s.to_data() for s in group)
        digest = derived_id("otlp-spans", *(f"{s.span_id}@{s.end_ns}" for s in group))
        event = OtlpSpansBuffered(buffer_id, project_id, trace_hex, data)
        buffered_event = new_event(
            buffer, event, project_id=project_id, event_id=derived_id("otlp-buffered", buffer_id, digest)
        )
        return [buffered_event], expected, ""
    buffered = [
        SpanRecord.from_data(span)
        for recorded in history
        if isinstance(recorded.event, OtlpSpansBuffered)
        for span in recorded.event.spans
    ]
    known = {(s.span_id, s.start_ns) for s in group}
    whole = [s for s in buffered if (s.span_id, s.start_ns) not in known] + list(group)
    item = imported({}, conversation_from_spans(whole, f"trace {trace_hex}", trace_hex), "otlp")
    if nul_paths:
        item = with_note(item, nul_note(nul_paths))
    ingested = TraceIngested(
        trace_id=trace_id,
        project_id=project_id,
        task_key=item.task_key,
        trajectory=item.trajectory,
        outcome=item.outcome,
        source_format="otlp",
        external_id=item.external_id,
    )
    note = ""
    if item.outcome == "unknown":
        note = (
            f"trace {trace_hex} stored as {trace_id} without an outcome: it waits for PATCH "
            f"/v1/traces/{trace_id} (or an agentr.outcome attribute / root span status)"
        )
    event_id = derived_id("otlp-ingested", trace_id)
    stored = new_event(
        trace_stream(trace_id), ingested, project_id=project_id, event_id=event_id, correlation_id=trace_id
    )
    return [stored], expected, note


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
                "application/json": {"schema": OTLP_JSON_REQUEST},
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
    nul_paths = [f"body.{p}" for p in getattr(request.state, "nul_replaced", None) or []]
    try:  # what is not an OTLP export at all is refused whole (422 naming the field)
        spans, protobuf = _decode(body, content_type, encoding, limit, nul_paths)
    except TraceFormatError as exc:
        raise make_field_error(
            exc.path if exc.path.startswith("body") else f"body.{exc.path}", exc.problem
        ) from None
    new_events: list[NewEvent] = []
    expected: dict[str, int] = {}
    rejected, reasons = 0, []
    groups = group_by_trace(spans)
    async with svc.store.engine.connect() as conn:  # sent through POST /v1/traces before?
        known = await external_traces(conn, project_id, list(groups))
    for trace_hex, group in groups.items():
        trace_id = known.get(trace_hex) or otlp_trace_id(project_id, trace_hex)
        if await svc.store.stream_version(trace_stream(trace_id)) >= 0:
            rejected += len(group)
            reasons.append(f"trace {trace_hex} was already ingested as {trace_id}")
            continue
        try:
            nuls = [p for p in nul_paths if any(p.startswith(f"{span.path}.") for span in group)]
            events, versions, note = await _trace_events(svc, project_id, trace_hex, trace_id, group, nuls)
        except TraceFormatError as exc:
            # a trace agentr does not model (an HTTP server span, no GenAI content) or cannot read is
            # reported, never the reason to refuse the other traces of the export (OTLP partial success)
            rejected += len(group)
            where = exc.path if exc.path.startswith("body") else f"body.{exc.path}"
            reasons.append(f"trace {trace_hex}: {len(group)} span(s) not stored: {where}: {exc.problem}")
            continue
        new_events.extend(events)
        expected.update(versions)
        if note:
            reasons.append(note)
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
