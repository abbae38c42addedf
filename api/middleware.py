"""Owns the API's ASGI middleware: request ids, access logs, Prometheus metrics, the body limit and
the JSON sanitiser (every JSON body passes api/sanitize.py before a handler sees it).

Pure ASGI (no BaseHTTPMiddleware) so streamed responses stay streamed. The access log is one
structured line per request (method, route template, status, duration, project and key prefix —
never the key itself, the query string or the body). Metrics are labelled by route template, not by
raw path, so ids do not explode the label space.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from typing import Any
from urllib.parse import parse_qsl

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.sanitize import (
    MAX_DEPTH,
    InflateError,
    JsonProblem,
    JsonRefused,
    TooDeep,
    inflate,
    json_problem,
    loads_bounded,
    replace_nul,
    text_problem,
)

access_log = logging.getLogger("agentr.api.access")


class ApiMetrics:
    """The API's Prometheus collectors, on a registry of their own (one per app instance)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "agentr_api_requests_total",
            "HTTP requests handled, by method, route and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "agentr_api_request_seconds",
            "Time to the end of the response, by method and route.",
            ["method", "route"],
            registry=self.registry,
        )
        self.events_appended = Counter(
            "agentr_api_events_appended_total",
            "Events the API appended, by event type.",
            ["event_type"],
            registry=self.registry,
        )
        self.export_rows = Counter(
            "agentr_api_export_rows_total",
            "Dataset rows streamed by export format.",
            ["format"],
            registry=self.registry,
        )


def _json_error(
    status: int, code: str, detail: str, request_id: str, fields: list[dict[str, str]] | None = None
) -> tuple[dict[str, Any], bytes]:
    body = json.dumps(
        {"error": code, "detail": detail, "fields": fields or [], "request_id": request_id}
    ).encode()
    start = {
        "type": "http.response.start",
        "status": status,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"x-request-id", request_id.encode()),
        ],
    }
    return start, body


class BodyLimitMiddleware:
    """Answers 413 when a request body exceeds ``max_bytes`` (declared or actually sent).

    The body is read here (bounded by the limit) and replayed to the app, so an over-long chunked
    upload is refused before any handler sees a byte of it.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        request_id = scope.setdefault("state", {}).get("request_id", "")
        declared = dict(scope.get("headers", [])).get(b"content-length")
        # a declared length of more than 18 digits is past any limit (and past 4,300 more than int() reads)
        if (
            declared is not None
            and declared.isdigit()
            and (len(declared) > 18 or int(declared) > self.max_bytes)
        ):
            await self._refuse(send, request_id)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(send, request_id)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send, request_id: str) -> None:
        start, body = _json_error(
            413, "payload_too_large", f"request body exceeds the limit of {self.max_bytes} bytes", request_id
        )
        await send(start)
        await send({"type": "http.response.body", "body": body})


def _is_json(content_type: bytes | None) -> bool:
    """Whether FastAPI would parse a body with this content type as JSON (none given counts)."""
    if not content_type:
        return True
    kind = content_type.split(b";", 1)[0].strip().lower()
    return kind == b"application/json" or (kind.startswith(b"application/") and kind.endswith(b"+json"))


def _url_problem(scope: Scope) -> tuple[str, str] | None:
    """(field, why) when the decoded path or a query parameter holds text no column can store
    (NUL, lone surrogates): such a value would otherwise reach a query and fail there."""
    path = scope.get("path", "")
    if isinstance(path, str):
        why = text_problem(path)
        if why is not None:
            return "path", why
    raw = scope.get("query_string", b"")
    if raw:
        for name, value in parse_qsl(raw.decode("latin-1"), keep_blank_values=True, errors="surrogateescape"):
            for part, text in (("name", name), ("value", value)):
                why = text_problem(text)
                if why is not None:
                    field = f"query.{name}" if part == "value" and text_problem(name) is None else "query"
                    return field, why
    return None


async def _refuse(scope: Scope, send: Send, field: str, message: str) -> None:
    request_id = scope.get("state", {}).get("request_id", "")
    start, payload = _json_error(
        422, "validation_error", f"{field}: {message}", request_id, [{"field": field, "message": message}]
    )
    await send(start)
    await send({"type": "http.response.body", "body": payload})


TRACE_INGEST_PATHS = ("/v1/traces", "/v1/otlp/v1/traces")


class JsonSanitizeMiddleware:
    """Refuses, with 422 naming the field, a JSON body holding lone surrogates, NUL characters or
    nesting past ``api.sanitize.MAX_DEPTH`` (JSON inside strings included), before any handler runs.
    Trace ingestion (``TRACE_INGEST_PATHS``) keeps NUL characters as U+FFFD instead, and lists where
    in ``request.state.nul_replaced`` for the route to record on the trace; a ``Content-Encoding: gzip``
    (or deflate) upload to ``POST /v1/traces`` is inflated here, bounded by ``max_inflated`` (413 past
    it, 400 when it is not valid gzip).

    Runs inside ``BodyLimitMiddleware``, so the body it buffers is already bounded. Bodies that are
    not JSON at all are passed on unchanged (the route's own parser answers those).
    """

    def __init__(self, app: ASGIApp, max_inflated: int = 10_000_000) -> None:
        self.app = app
        self.max_inflated = max_inflated

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        url_problem = _url_problem(scope)
        if url_problem is not None:
            await _refuse(scope, send, *url_problem)
            return
        if scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        if not _is_json(dict(scope.get("headers", [])).get(b"content-type")):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        headers = dict(scope.get("headers", []))
        encoding = headers.get(b"content-encoding", b"").decode("latin-1").strip().lower()
        if scope.get("path") == "/v1/traces" and encoding not in ("", "identity", "gzip", "deflate"):
            start, payload = _json_error(
                415,
                "unsupported_media_type",
                f"Content-Encoding {encoding!r} is not supported here: send gzip, deflate or an "
                "uncompressed body",
                scope.get("state", {}).get("request_id", ""),
                None,
            )
            await send(start)
            await send({"type": "http.response.body", "body": payload})
            return
        if scope.get("path") == "/v1/traces" and encoding in ("gzip", "deflate"):
            try:  # a gzip upload is inflated here (bounded), so the route sees plain JSON
                body = inflate(body, encoding, self.max_inflated)
            except InflateError as exc:
                start, payload = _json_error(
                    exc.status,
                    "payload_too_large" if exc.status == 413 else "bad_request",
                    str(exc),
                    scope.get("state", {}).get("request_id", ""),
                    None,
                )
                await send(start)
                await send({"type": "http.response.body", "body": payload})
                return
            scope["headers"] = [(k, v) for k, v in scope.get("headers", []) if k != b"content-encoding"]
        problem: JsonProblem | None = None
        if body.strip():
            try:
                parsed = loads_bounded(body)
                if scope["method"] == "POST" and scope.get("path") in TRACE_INGEST_PATHS:
                    # a trace keeps its NUL characters as U+FFFD, recorded on it by the route
                    parsed, replaced = replace_nul(parsed)
                    if replaced:
                        body = json.dumps(parsed, ensure_ascii=False).encode("utf-8")
                        scope.setdefault("state", {})["nul_replaced"] = replaced
                problem = json_problem(parsed)
            except TooDeep:
                problem = JsonProblem("", f"nested deeper than {MAX_DEPTH} levels")
            except JsonRefused as exc:
                problem = JsonProblem("", str(exc))
            except ValueError:
                problem = None  # not JSON: FastAPI answers 422 json_invalid
        if problem is not None:
            await _refuse(scope, send, problem.field(), problem.message)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")
"""An X-Request-ID the API keeps (a safe token); any other is replaced by a generated one, so the
header cannot put spaces, quotes or control characters into the access log."""


class AccessLogMiddleware:
    """Gives every request an id (X-Request-ID: the client's when it is a safe token, ``REQUEST_ID``;
    otherwise a generated one), then logs and counts it when the response ends."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        incoming = headers.get(b"x-request-id", b"").decode("latin-1")
        request_id = incoming if REQUEST_ID.fullmatch(incoming) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", request_id.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - started
            route = scope.get("route")
            template = getattr(route, "path", None) or "<unmatched>"
            method = scope["method"]
            self.metrics.requests.labels(method, template, str(status)).inc()
            self.metrics.latency.labels(method, template).observe(elapsed)
            state = scope.get("state", {})
            access_log.info(
                "%s %s -> %d in %.1f ms",
                method,
                template,
                status,
                elapsed * 1000,
                extra={
                    "request_id": request_id,
                    "method": method,
                    "route": template,
                    "status": status,
                    "duration_ms": round(elapsed * 1000, 2),
                    "project_id": state.get("project_id"),
                    "key_prefix": state.get("key_prefix"),
                },
            )
