"""Owns the capture proxy's HTTP side: an OpenAI-compatible endpoint that forwards and records.

``POST /v1/proxy/openai/v1/chat/completions`` forwards the agent's request body byte for byte to
``{AGENTR_PROXY_UPSTREAM_URL}/chat/completions`` with the upstream's credentials from
``AGENTR_PROXY_UPSTREAM_KEY`` (never the agent's key, never recorded), and answers the upstream's
status, content type and body unchanged: JSON, Server-Sent Events relayed chunk by chunk as they
arrive, and errors. ``GET /v1/proxy/openai/v1/models`` passes the upstream's model list through.
The agent authenticates with a project key holding the ``ingest`` scope (as ``api_key`` of an
OpenAI client: ``Authorization: Bearer agr_...``); a verified key is cached for
``AGENTR_PROXY_AUTH_CACHE_S`` seconds (no database read per call), so calls go on while the database
is briefly unreachable (a key revoked through another process stops working within that time; one
revoked through the API the proxy is mounted on, at once). Every call, cached key or not, spends the key's
request budget (``AGENTR_KEY_REQUESTS_PER_S``, api/ratelimit.py: 429 with ``Retry-After``) and is
logged with the key's project.

The proxy answers itself only before forwarding (401/403/429; 422 for a body holding a lone UTF-16
surrogate, which no upstream can read as text, a message the trace importer cannot read, named by
its path (an unknown role, content neither text nor typed parts, a malformed tool call: what an
OpenAI server refuses too; no trace id is handed out for a call no trace could hold), or an
``X-Agentr-*`` header out of bounds) and when
the upstream does not answer: a 502 naming neither the upstream's URL nor the error (its full detail,
the URL's credentials and query removed, goes to the server log under the request id).

Every answered call (status 200) is handed to the Recorder (api/proxy/recorder.py) as soon as the answer
is known (for a stream: when ``[DONE]`` is read, before it is relayed, so an agent closing the
connection at ``[DONE]`` loses nothing; a stream cut without it, when a choice has finished), grouped by
api/proxy/grouping.py; the response carries ``X-Agentr-Trace-Id: <trace id>`` so the agent can set the
outcome later with ``PATCH /v1/traces/{trace_id}``. Optional request headers: ``X-Agentr-Trace-Id``
(your id for the trace), ``X-Agentr-Task`` (its task key) and ``X-Agentr-Environment`` with
``X-Agentr-Environment-Task`` (the LOCAL environment and task the agent plays, as ``environment`` on
``POST /v1/traces``: a failed trace that names them becomes data by itself through the replay critic; a
malformed or remote one is refused with 400 before anything is forwarded); all are stripped before
forwarding.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit, urlunsplit

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel, ConfigDict, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from api.deps import ApiServices, Principal, authenticate, bearer, services_of
from api.errors import ApiError, field_error
from api.proxy.grouping import Conversations, Placement
from api.proxy.recorder import CallRecord, Recorder, RecorderMetrics, StoreSink
from api.proxy.upstream import Answer, UpstreamClient, UpstreamUnreachable
from api.sanitize import MAX_DEPTH, JsonRefused, loads_bounded
from api.schemas.common import ErrorBody, ValidationErrorBody
from core.domain.ids import new_id
from core.formats.capture import StreamAssembler, answer_message, unreadable_message

log = logging.getLogger("agentr.proxy")

TRACE_HEADER = "x-agentr-trace-id"
TASK_HEADER = "x-agentr-task"
HEADER_TEXT = "^[!-~]([ -~]*[!-~])?$"
"""What the ``X-Agentr-*`` headers may hold: visible ASCII, inner spaces (HTTP strips the outer ones)."""
ENV_HEADER = "x-agentr-environment"
ENV_TASK_HEADER = "x-agentr-environment-task"


def environment_headers(request: Request) -> tuple[str, str] | None:
    """(env URI, task id) from ``X-Agentr-Environment`` / ``-Task``; ApiError 400 naming the header
    when only one is sent, or the URI is not a local environment (api.schemas.traces)."""
    import re

    from api.schemas.traces import LOCAL_ENVIRONMENTS

    uri, task = request.headers.get(ENV_HEADER), request.headers.get(ENV_TASK_HEADER)
    if uri is None and task is None:
        return None
    if not uri or not task or len(task) > 200:
        raise ApiError(
            400, "X-Agentr-Environment and X-Agentr-Environment-Task go together (a URI and a task id)"
        )
    if len(uri) > 500 or re.fullmatch(LOCAL_ENVIRONMENTS, uri.strip()) is None:
        raise ApiError(
            400,
            f"X-Agentr-Environment: {uri[:80]!r} is not a local environment (textcraft, sciworld, "
            "tau2:retail|airline|mock, with URI options)",
        )
    return uri.strip(), task.strip()


class ProxySettings(BaseSettings):
    """The capture proxy's configuration (``AGENTR_PROXY_*``); the upstream's key lives only here."""

    model_config = SettingsConfigDict(env_prefix="AGENTR_PROXY_", env_file=None, extra="ignore")

    upstream_url: str | None = Field(
        None, description="OpenAI-compatible base URL calls are forwarded to (ending in /v1)."
    )
    upstream_key: SecretStr | None = Field(None, description="Bearer key for the upstream (never recorded).")
    spool_dir: Path | None = Field(
        None, description="Where calls wait while the store is down (default: AGENTR_HOME/proxy-spool)."
    )
    timeout_s: float = Field(600.0, gt=0, description="Upstream timeout per call.")
    auth_cache_s: float = Field(60.0, ge=0, description="How long a verified agent key is trusted.")
    max_queue: int = Field(10_000, ge=1, description="Calls held in memory before spooling to disk.")
    store_timeout_s: float = Field(10.0, gt=0, description="A store write slower than this is retried.")
    record_linger_s: float = Field(
        0.05,
        ge=0,
        le=5,
        description="How long recorded calls gather before one transaction stores them (0: at once).",
    )


def load_proxy_settings(**overrides: object) -> ProxySettings:
    """``AGENTR_PROXY_*`` from the environment, with ``overrides`` on top."""
    return ProxySettings(**overrides)  # type: ignore[arg-type]


@dataclass
class ProxyRuntime:
    """What the proxy routes use, built once per process (``start_proxy``)."""

    settings: ProxySettings
    client: UpstreamClient | None
    recorder: Recorder
    conversations: Conversations = field(default_factory=Conversations)

    async def close(self) -> None:
        await self.recorder.close()
        if self.client is not None:
            await self.client.aclose()


def start_proxy(settings: ProxySettings, svc: ApiServices, sink: Any | None = None) -> ProxyRuntime:
    """The proxy runtime over ``svc.store`` (or ``sink``); its recorder is started."""
    client = None
    if settings.upstream_url:
        key = settings.upstream_key.get_secret_value() if settings.upstream_key is not None else None
        client = UpstreamClient(settings.upstream_url, key, settings.timeout_s)
    spool = settings.spool_dir or svc.settings.home / "proxy-spool"
    recorder = Recorder(
        sink or StoreSink(svc.store, settings.store_timeout_s),
        spool,
        max_queue=settings.max_queue,
        linger_s=settings.record_linger_s,
        metrics=RecorderMetrics.on(svc.metrics.registry),
    )
    recorder.start()
    return ProxyRuntime(settings=settings, client=client, recorder=recorder)


class UpstreamBody(BaseModel):
    """The upstream's own JSON answer, passed through unchanged (OpenAI's errors: ``{"error": {...}}``)."""

    model_config = ConfigDict(extra="allow")


_OURS_OR_UPSTREAM = ErrorBody | UpstreamBody
PROXY_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": _OURS_OR_UPSTREAM, "description": "Missing or invalid agentr key (or the upstream's 401)"},
    403: {
        "model": _OURS_OR_UPSTREAM,
        "description": "The key lacks the ingest scope, or is the bootstrap admin's (or the upstream's 403)",
    },
    413: {"model": _OURS_OR_UPSTREAM, "description": "Request body too large (or the upstream's 413)"},
    422: {
        "model": ValidationErrorBody | UpstreamBody,
        "description": "A body holding a lone UTF-16 surrogate or NUL, a message the trace importer "
        "cannot read (an unknown role, content neither text nor typed parts, a malformed tool call), or "
        "an X-Agentr-* header out of bounds, named by field (or the upstream's 422)",
    },
    429: {
        "model": _OURS_OR_UPSTREAM,
        "description": "Rate limited: see the Retry-After header (this key's requests per second, as on "
        "the API; or the upstream's 429)",
    },
    502: {
        "model": _OURS_OR_UPSTREAM,
        "description": "The upstream did not answer (our body names only the request id; the detail is in "
        "the server log), or the upstream's 502",
    },
    "4XX": {"model": UpstreamBody, "description": "The upstream's error, passed through with its status"},
    "5XX": {"model": UpstreamBody, "description": "The upstream's error, passed through with its status"},
}
CHAT_BODY: dict[str, Any] = {
    "required": True,
    "description": "An OpenAI chat-completions request, forwarded to the upstream byte for byte (the "
    "upstream validates it; fields beyond these are passed on).",
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["messages"],
                "properties": {
                    "model": {"type": "string"},
                    "messages": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["role"],
                            "properties": {
                                "role": {
                                    "type": "string",
                                    "enum": ["system", "developer", "user", "assistant", "tool", "function"],
                                }
                            },
                            "additionalProperties": True,
                        },
                    },
                    "stream": {"type": "boolean"},
                },
                "additionalProperties": True,
            }
        }
    },
}
SSE_EVENT: dict[str, Any] = {
    "description": "One Server-Sent Event of the stream (before OpenAPI 3.2 the schema of a stream "
    "describes each event): `data` is a chat.completion.chunk as JSON, `[DONE]` last.",
    "type": "object",
    "required": ["data"],
    "properties": {
        "data": {"type": "string"},
        "event": {"type": "string"},
        "id": {"type": "string"},
        "retry": {"type": "integer"},
    },
}
TRACE_ID_HEADER = {
    "description": "The agent's returned trace id, present when the call was recorded",
    "schema": {"type": "string"},
}

router = APIRouter(prefix="/v1/proxy/openai/v1", tags=["proxy"], responses=PROXY_RESPONSES)


async def runtime(request: Request) -> ProxyRuntime:
    proxy: ProxyRuntime | None = getattr(request.app.state, "proxy", None)
    if proxy is None or proxy.client is None:
        raise ApiError(
            503,
            "the capture proxy has no upstream: set AGENTR_PROXY_UPSTREAM_URL (an OpenAI-compatible base "
            "URL such as http://vllm:8000/v1) or run `agentr proxy --upstream URL`",
            code="unavailable",
        )
    return proxy


async def agent(
    request: Request,
    credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
) -> Principal:
    """The calling agent's project key (``ingest`` scope), verified once per ``auth_cache_s``; checked
    BEFORE the upstream, so a caller without a valid key learns nothing about the proxy's setup."""
    proxy: ProxyRuntime | None = getattr(request.app.state, "proxy", None)
    svc = services_of(request)
    presented = credentials.credentials if credentials is not None else request.headers.get("x-api-key")
    digest = svc.verified.digest(presented or "")
    principal = svc.verified.get(digest)
    if principal is not None:
        request.state.project_id = principal.project_id  # the access log names the project
        request.state.key_prefix = principal.prefix
        if principal.prefix is not None:
            svc.limits.check_key(principal.prefix)  # the same per-key limit as the API
        return principal
    principal = await authenticate(request, credentials, svc)
    if not principal.allows("ingest"):
        raise ApiError(403, "this key lacks the 'ingest' scope (the capture proxy records into a project)")
    principal.project()  # the bootstrap admin has no project: 403
    if proxy is not None:
        svc.verified.put(digest, principal.key_id, principal, proxy.settings.auth_cache_s)
    return principal


def _passthrough(upstream: Answer, trace_id: str | None) -> Response:
    headers = {TRACE_HEADER: trace_id} if trace_id else {}
    return Response(
        content=upstream.body, status_code=upstream.status, media_type=upstream.content_type, headers=headers
    )


def redacted_url(url: str | None) -> str:
    """``url`` without what may be a secret: user, password and query string (``***`` instead)."""
    if not url:
        return "<none>"
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = host + (f":{parts.port}" if parts.port is not None else "")
    except ValueError:
        return "<unparseable URL>"
    if parts.username is not None or parts.password is not None:
        netloc = f"***@{netloc}"
    return urlunsplit((parts.scheme, netloc, parts.path, "***" if parts.query else "", ""))


def _scrubbed(detail: str, url: str) -> str:
    """``detail`` with ``url`` redacted (``redacted_url``), and its user, password and query string
    wherever else they appear (an error may name the URL of the request, path added)."""
    if not url:
        return detail
    detail = detail.replace(url, redacted_url(url)).replace(url.rstrip("/"), redacted_url(url.rstrip("/")))
    try:
        parts = urlsplit(url)
        secrets = [parts.query, parts.password, parts.username]
    except ValueError:
        return detail
    for secret in secrets:
        if secret:
            detail = detail.replace(secret, "***")
    return detail


def _unreachable(request: Request, proxy: ProxyRuntime, exc: UpstreamUnreachable) -> ApiError:
    """A 502 naming only the request id; the detail goes to the log, the URL's secrets removed."""
    request_id = getattr(request.state, "request_id", "?")
    url = proxy.settings.upstream_url or ""
    cause = exc.__cause__ or exc
    log.warning(
        "proxy: upstream %s did not answer (request %s): %s: %s",
        redacted_url(url),
        request_id,
        type(cause).__name__,
        ascii(_scrubbed(str(cause), url)),
    )
    return ApiError(
        502,
        "the upstream model server did not answer; the server log has the detail under request id "
        f"{request_id}",
        code="bad_gateway",
    )


@router.get(
    "/models",
    summary="The upstream's model list, passed through",
    response_class=Response,
    responses={200: {"model": UpstreamBody, "description": "The upstream's answer, unchanged"}},
)
async def models(
    request: Request, principal: Principal = Depends(agent), proxy: ProxyRuntime = Depends(runtime)
) -> Response:
    assert proxy.client is not None
    try:
        upstream = await proxy.client.get("/models")
    except UpstreamUnreachable as exc:
        raise _unreachable(request, proxy, exc) from None
    return _passthrough(upstream, None)


NOT_TEXT = "not valid Unicode text"


def _request_problem(value: Any) -> tuple[str, str] | None:
    """(field, why) for a parsed request body the proxy refuses before forwarding: a string or key
    holding a lone UTF-16 surrogate (``"\\ud800"`` is valid JSON but no text any upstream can read),
    or nesting past ``MAX_DEPTH`` levels, JSON inside strings (tool-call arguments) counted as on the
    API (api/sanitize.py). Iterative, so no body can exhaust the recursion limit here. NUL characters
    and NaN are forwarded: the recorded copy is cleaned (api/proxy/recorder.py ``storable``)."""
    stack: list[tuple[Any, str, int]] = [(value, "body", 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                return path, f"text holds a lone UTF-16 surrogate at character {exc.start}: {NOT_TEXT}"
            stripped = item.lstrip()
            if stripped[:1] in ("{", "["):
                try:
                    stack.append((json.loads(stripped), path, depth))
                except RecursionError:
                    return path, f"holds JSON nested deeper than {MAX_DEPTH} levels"
                except ValueError:
                    pass
        elif isinstance(item, dict | list):
            depth += 1
            if depth > MAX_DEPTH:
                return path, f"nested deeper than {MAX_DEPTH} levels"
            if isinstance(item, dict):
                for key, child in item.items():
                    try:
                        key.encode("utf-8")
                    except UnicodeEncodeError:
                        return path, f"object key: text holds a lone UTF-16 surrogate: {NOT_TEXT}"
                    stack.append((child, f"{path}.{key}", depth))
            else:
                stack.extend((child, f"{path}[{index}]", depth) for index, child in enumerate(item))
    return None


@router.post(
    "/chat/completions",
    summary="Forward a chat completion to the upstream and record it into a trace",
    response_class=Response,
    responses={
        200: {
            "description": "The upstream's answer, unchanged: a chat.completion, or with stream true its "
            "Server-Sent Events relayed as they arrive",
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/UpstreamBody"}},
                "text/event-stream": {"schema": SSE_EVENT},
            },
            "headers": {"X-Agentr-Trace-Id": TRACE_ID_HEADER},
        }
    },
    openapi_extra={"requestBody": CHAT_BODY},
)
async def chat_completions(
    request: Request,
    principal: Principal = Depends(agent),
    proxy: ProxyRuntime = Depends(runtime),
    trace_header: Annotated[
        str | None,
        Header(
            alias="X-Agentr-Trace-Id",
            min_length=1,
            max_length=200,
            pattern=HEADER_TEXT,
            description="Your id for the trace this call joins (its external id; visible ASCII).",
        ),
    ] = None,
    task_header: Annotated[
        str | None,
        Header(
            alias="X-Agentr-Task",
            min_length=1,
            max_length=1000,
            pattern=HEADER_TEXT,
            description="The trace's task key (default: derived from the first user message).",
        ),
    ] = None,
) -> Response:
    assert proxy.client is not None
    raw = await request.body()
    try:
        body = loads_bounded(raw)
    except JsonRefused as exc:  # nested past the limit, or an integer past MAX_INT_DIGITS: as on the API
        raise field_error("body", str(exc)) from None
    except ValueError:  # not JSON: forwarded (the upstream answers it), not recorded
        body = None
    problem = _request_problem(body)
    if problem is not None:
        raise field_error(*problem)
    unreadable = unreadable_message(body) if isinstance(body, dict) else None
    if unreadable is not None:  # an unknown role, content that is not text: no trace could hold it
        raise field_error(unreadable.path, unreadable.problem)
    started = time.perf_counter()
    placement: Placement | None = None
    project_id = principal.project()
    if isinstance(body, dict) and isinstance(body.get("messages"), list):
        placement = proxy.conversations.place(project_id, body["messages"], trace_header)
    task_key = task_header
    environment = environment_headers(request)
    trace_id = placement.trace_id if placement is not None else None

    def record(response: dict[str, Any], stream: bool) -> None:
        if placement is None or not isinstance(body, dict):
            return
        try:
            remember(response, stream)
        except Exception as exc:  # the agent's answer never depends on recording it
            proxy.recorder.lost(project_id, exc)

    def remember(response: dict[str, Any], stream: bool) -> None:
        assert placement is not None and isinstance(body, dict)
        stored = proxy.recorder.submit(
            CallRecord(
                project_id=project_id,
                trace_id=placement.trace_id,
                call_id=new_id(),
                external_id=placement.external_id,
                task_key=task_key,
                body=body,
                response=response,
                stream=stream,
                latency_ms=round((time.perf_counter() - started) * 1000, 3),
                messages_from=placement.messages_from,
                extends=placement.extends,
                environment=environment,
                fresh=placement.fresh,
            )
        )
        proxy.conversations.answered(placement, answer_message(stored.response))

    try:
        if not (isinstance(body, dict) and body.get("stream")):
            upstream = await proxy.client.post("/chat/completions", raw)
            if upstream.status == 200:
                try:
                    answer = loads_bounded(upstream.body)
                except ValueError:  # not JSON this process can read: passed on, not recorded
                    answer = None
                if isinstance(answer, dict):
                    record(answer, stream=False)
            return _passthrough(upstream, trace_id)
        sent = await proxy.client.stream("/chat/completions", raw)
        if sent.status != 200:
            try:
                whole = Answer(sent.status, sent.content_type, await sent.read())
            finally:
                sent.close()
            return _passthrough(whole, trace_id)
    except UpstreamUnreachable as exc:
        raise _unreachable(request, proxy, exc) from None

    async def relay() -> Any:
        """Relay the upstream's events; record the assembled answer as soon as ``[DONE]`` is read,
        BEFORE it is passed on: an agent that closes the connection at ``[DONE]`` (the official openai
        client does) cancels this generator, and nothing after its last ``yield`` would run. A stream
        that ends (or is cut) without ``[DONE]`` is recorded when a choice finished."""
        assembler = StreamAssembler()
        pending = b""
        recorded = False

        def finish() -> None:
            nonlocal recorded
            if not recorded:
                recorded = True
                record(assembler.response(), stream=True)  # synchronous: nothing here can be cancelled

        try:
            async for chunk in sent.chunks():
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    line = line.strip()
                    if not line.startswith(b"data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        finish()
                        continue
                    try:
                        parsed = loads_bounded(payload)
                    except ValueError:
                        continue
                    if isinstance(parsed, dict):
                        assembler.feed(parsed)
                yield chunk
        finally:
            if not recorded and any(c.finish_reason for c in assembler.choices.values()):
                finish()
            sent.close()

    out_headers = {TRACE_HEADER: trace_id} if trace_id else {}
    return StreamingResponse(
        relay(),
        status_code=200,
        media_type=sent.content_type or "text/event-stream",
        headers=out_headers,
    )
