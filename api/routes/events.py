"""Owns GET /v1/events: the project's events as Server-Sent Events, for live following.

Each event is sent as ``id: <position>``, ``event: <type>``, ``data: <JSON envelope>``. A client
resumes with ``after=POSITION`` or the standard ``Last-Event-ID`` header. Events are read from the
store in pages filtered by the caller's project (the ``project_id`` in each event's metadata); when
caught up the stream waits for new commits (woken at once by appends in this process, otherwise by
polling every ``poll_interval``), sending a comment line as keep-alive. ``follow=false`` ends the
stream once caught up; ``limit`` ends it after that many events.

The page query (``core.store.queries.events``) is served by the ``ix_events_project_position``
index, so a poll of a small project reads its own events only, however many other projects have.
An open stream re-reads its key with every page (after the page,
so no event committed after a revocation is sent) and ends, with a ``: key revoked`` comment, once
the key is revoked or gone. A key holds at most ``AGENTR_MAX_FOLLOW_STREAMS_PER_KEY`` open
``follow=true`` streams in this API process (429 for the next; a slot is freed when its stream ends).
``GET /v1/events/position`` answers the position of the project's newest event, where a client that
has just read the data it shows starts following (so it does not replay the stream from 0).

What a key may read here is filtered by scope and by event kind. Key-management events
(``ApiKeyIssued``, ``ApiKeyRevoked``: ``ADMIN_ONLY``) reach only keys with the ``admin`` scope, the
same scope that lists keys; and key material never leaves the store at all: the fields in
``NEVER_SENT`` (an issued key's ``salt`` and ``key_hash``) are removed from every event before it is
sent, to every caller. The store keeps them because the ``api_keys`` read model is rebuilt from
the events.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field
from starlette.types import Receive, Scope, Send

from api.deps import ApiServices, Principal, require, services
from api.ratelimit import StreamSlot
from api.schemas import ERROR_RESPONSES, ErrorBody
from core.domain.events import RecordedEvent
from core.store.queries import events as project_events

router = APIRouter(prefix="/v1", tags=["events"], responses=ERROR_RESPONSES)

PAGE = 200
ADMIN_ONLY = frozenset({"ApiKeyIssued", "ApiKeyRevoked"})
"""Event types only keys with the ``admin`` scope receive."""
NEVER_SENT: dict[str, frozenset[str]] = {"ApiKeyIssued": frozenset({"salt", "key_hash"})}
"""Per event type, data fields removed before sending (key material)."""
POLL_INTERVAL_S = 0.5
KEEPALIVE_S = 15.0


SSE_PATTERN = r"^(?:(?::[^\n]*|id: [0-9]+\nevent: [A-Za-z0-9_]+\ndata: \{[^\n]*\})\n\n)*$"
"""The stream's grammar (what ``_sse`` and the keep-alive write), stated in the OpenAPI document."""


def _sse(position: int, event_type: str, payload: dict[str, Any]) -> bytes:
    data = json.dumps(payload, separators=(",", ":"), default=str)
    return f"id: {position}\nevent: {event_type}\ndata: {data}\n\n".encode()


def visible_data(event_type: str, data: dict[str, Any]) -> dict[str, Any]:
    """An event's data as the stream sends it: without the fields in ``NEVER_SENT``."""
    hidden = NEVER_SENT.get(event_type)
    return {k: v for k, v in data.items() if k not in hidden} if hidden else data


async def _page(
    svc: ApiServices, project_id: str, after: int, types: list[str] | None, admin: bool, key_id: str | None
) -> tuple[list[RecordedEvent], bool]:
    """The next page, and whether the key still holds (read after the page: an event committed
    after the key's revocation is never in a page that is sent)."""
    exclude = () if admin else ADMIN_ONLY
    return await project_events.project_page(svc.store, project_id, after, types, exclude, PAGE, key_id)


async def _stream(
    request: Request,
    svc: ApiServices,
    project_id: str,
    after: int,
    types: list[str] | None,
    follow: bool,
    limit: int | None,
    admin: bool,
    key_id: str | None,
) -> AsyncIterator[bytes]:
    wake = asyncio.Event()

    def on_commit(_position: int) -> None:
        wake.set()

    svc.store.add_commit_listener(on_commit)
    sent = 0
    idle = 0.0
    try:
        yield b": connected\n\n"
        while True:
            wake.clear()
            page, key_holds = await _page(svc, project_id, after, types, admin, key_id)
            if not key_holds:
                yield b": key revoked\n\n"
                return
            for recorded in page:
                payload = {
                    "position": recorded.position,
                    "event_id": recorded.event_id,
                    "stream_id": recorded.stream_id,
                    "event_type": recorded.event_type,
                    "event_version": recorded.event_version,
                    "recorded_at": recorded.recorded_at.isoformat(),
                    "data": visible_data(recorded.event_type, recorded.data),
                }
                yield _sse(recorded.position, recorded.event_type, payload)
                after = recorded.position
                sent += 1
                if limit is not None and sent >= limit:
                    return
            if len(page) == PAGE:
                continue
            if not follow or await request.is_disconnected():
                return
            try:
                await asyncio.wait_for(wake.wait(), timeout=POLL_INTERVAL_S)
                idle = 0.0
            except TimeoutError:
                idle += POLL_INTERVAL_S
                if idle >= KEEPALIVE_S:
                    idle = 0.0
                    yield b": keep-alive\n\n"
    finally:
        svc.store.remove_commit_listener(on_commit)


class EventPositionOut(BaseModel):
    position: int = Field(
        ge=0,
        description="The position of the project's newest event (0 when none): read it before reading "
        "the data a page shows, then follow `GET /v1/events?after=position` for what came later, "
        "instead of replaying the stream from 0.",
    )


@router.get(
    "/events/position",
    response_model=EventPositionOut,
    summary="The position of the project's newest event (where to start following)",
)
async def event_position(
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> Any:
    position = await project_events.last_project_position(svc.store, principal.project())
    return EventPositionOut(position=position)


class _FollowStream(StreamingResponse):
    """The stream's response, holding its key's follow-stream slot until it ends, however it ends
    (all sent, the client gone, the task cancelled)."""

    def __init__(self, content: AsyncIterator[bytes], slot: StreamSlot | None, **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self.slot = slot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            if self.slot is not None:
                self.slot.release()


@router.get(
    "/events",
    response_class=StreamingResponse,
    summary="The project's events as Server-Sent Events",
    responses={
        200: {
            "description": "Server-Sent Events (text/event-stream): one frame per event, `id: POSITION`, "
            "`event: TYPE`, `data: JSON` (the event's data), each frame ended by a blank line; comment "
            "frames (`: keep-alive`) while idle.",
            "content": {"text/event-stream": {"schema": {"type": "string", "pattern": SSE_PATTERN}}},
        },
        429: {
            "model": ErrorBody,
            "description": "Too many requests with this key, or it already holds "
            "AGENTR_MAX_FOLLOW_STREAMS_PER_KEY open follow streams (close one first).",
        },
    },
)
async def stream_events(
    request: Request,
    after: int | None = Query(None, ge=0, le=2**62, description="Send events with a position above this."),
    types: str | None = Query(
        None, pattern="^[A-Za-z0-9_, ]{0,2000}$", description="Comma-separated event types to send."
    ),
    follow: bool = Query(True, description="Keep the stream open for new events."),
    limit: int | None = Query(None, ge=1, le=1_000_000, description="Close after this many events."),
    last_event_id: str | None = Header(
        None, alias="Last-Event-ID", pattern="^[0-9]{1,18}$", description="Resume after this position."
    ),
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> Any:
    project_id = principal.project()
    start = after
    if start is None and last_event_id:
        start = int(last_event_id)
    type_list = [t.strip() for t in types.split(",") if t.strip()] if types else None
    slot = svc.limits.open_stream(principal.key_id or "admin") if follow else None
    admin = principal.allows("admin")
    return _FollowStream(
        _stream(request, svc, project_id, start or 0, type_list, follow, limit, admin, principal.key_id),
        slot,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
