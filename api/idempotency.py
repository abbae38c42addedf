"""Owns the Idempotency-Key behaviour of POST routes.

A client may send ``Idempotency-Key: <1-200 printable characters>`` with any POST. Then:

* the ids the request creates (run id, trace ids, event ids, ...) are DERIVED from (caller's
  project, key), so a retry appends events with the same ids and the event store skips them as
  duplicates: the effect happens once even when two retries race, or when the process died between
  appending and recording the response;
* the first response is recorded (core.store.queries.idempotency) IN THE SAME TRANSACTION as the
  request's events (the key row is claimed with an insert-or-nothing, so of concurrent requests
  exactly one commits); a retry with the same method, path and body gets that response again (with
  ``Idempotent-Replayed: true``), and one with a different request gets 422 naming the header,
  whether it came after the first or raced it;
* key issuance is the one exception to "same response": its secret is never stored, so a replay
  answers 409 naming the key that was issued (revoke it and issue a new one if the secret was lost).

Keys are namespaced by project (the bootstrap admin has its own namespace).
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

from fastapi import Depends, Request
from fastapi.responses import JSONResponse
from sqlalchemy.ext.asyncio import AsyncConnection

from api.deps import ApiServices, Principal, authenticate, services
from api.errors import ApiError
from core.domain.ids import derived_id, new_id
from core.store.queries import idempotency as records

HEADER = "Idempotency-Key"
REPLAY_HEADER = "Idempotent-Replayed"


class IdempotentReplay(Exception):
    """Raised by the dependency when a stored response answers this request."""

    def __init__(self, status_code: int, body: Any) -> None:
        super().__init__("idempotent replay")
        self.status_code = status_code
        self.body = body


async def replay_handler(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, IdempotentReplay)
    return JSONResponse(exc.body, status_code=exc.status_code, headers={REPLAY_HEADER: "true"})


Answer = tuple[int, Any]
"""(status code, JSON body) recorded for an Idempotency-Key."""
AnswerSource = Answer | Callable[[AsyncConnection], Awaitable[Answer]]


class KeyTaken(Exception):
    """Raised inside a write transaction when another request claimed the key first: the
    transaction rolls back, so this request's effect is never kept."""


class Idempotency:
    """The idempotency context of one POST request (``key`` None when the header was not sent).

    The key row is CLAIMED (``INSERT ... ON CONFLICT DO NOTHING``) in the same transaction as the
    request's events (``claim_hook``, run by the store before commit). Exactly one request commits
    its claim; a concurrent one finds the key taken, its transaction (and so its effect) is rolled
    back, and it answers from the winner's row: the stored response for the same body, 422 for a
    different one. So no client is told its write was accepted when it was not.
    """

    def __init__(
        self, svc: ApiServices, principal: Principal, key: str | None, method: str, path: str, digest: str
    ) -> None:
        self._svc = svc
        self.scope = principal.scope_name
        self.key = key
        self.method = method
        self.path = path
        self.digest = digest

    def new_id(self, *parts: object) -> str:
        """A fresh id, or with an Idempotency-Key one derived from it (stable across retries)."""
        if self.key is None:
            return new_id()
        return derived_id("idempotency", self.scope, self.key, self.method, self.path, *parts)

    async def _claim(self, conn: AsyncConnection, status_code: int, body: Any) -> None:
        claimed = await records.claim(
            conn, self.scope, self.key or "", self.method, self.path, self.digest, status_code, body
        )
        if not claimed:
            raise KeyTaken(self.key)

    async def claim_in(self, conn: AsyncConnection, answer: AnswerSource) -> None:
        """Claim the key inside ``conn``'s transaction with ``answer``; KeyTaken when it is taken."""
        if self.key is None:
            return
        if isinstance(answer, tuple):
            await self._claim(conn, *answer)
            return
        # Claim first, then compute the answer (it may read rows only the winner's effect wrote)
        # and record it, all before the transaction commits.
        await self._claim(conn, 0, None)
        status_code, body = await answer(conn)
        await records.record_answer(conn, self.scope, self.key, status_code, body)

    def claim_hook(
        self, answer: AnswerSource | None
    ) -> Callable[[AsyncConnection, list[Any]], Awaitable[None]] | None:
        """The store's ``before_commit`` hook that claims the key (None without a key or answer)."""
        if self.key is None or answer is None:
            return None

        async def hook(conn: AsyncConnection, _recorded: list[Any]) -> None:
            await self.claim_in(conn, answer)

        return hook

    async def save(self, status_code: int, body: Any) -> None:
        """Claim the key with this answer when the request wrote no event (no-op without a key);
        answers from the stored row when another request claimed it first."""
        if self.key is None:
            return
        try:
            async with self._svc.store.write_transaction() as conn:
                await self.claim_in(conn, (status_code, body))
        except KeyTaken:
            await self.answer_taken()

    async def answer_taken(self) -> NoReturn:
        """Raise the answer for a key another request claimed: its response, or 422."""
        row = await records.stored(self._svc.store, self.scope, self.key or "")
        if row is None:  # cannot happen: the claim that beat us committed before we saw it
            raise ApiError(409, f"header {HEADER}: this key is being used concurrently; retry")
        _answer_from(row, self.digest)


def _answer_from(row: records.StoredAnswer, digest: str) -> NoReturn:
    if row.request_hash != digest:
        raise ApiError(
            422,
            f"header {HEADER}: this key was already used for a different request "
            f"({row.method} {row.path}); use a new key",
            fields=[{"field": f"header.{HEADER}", "message": "already used for a different request"}],
        )
    raise IdempotentReplay(row.status_code, row.response)


def _check_key(raw: str) -> str:
    key = raw.strip()
    if not 1 <= len(key) <= 200 or not key.isprintable():
        raise ApiError(
            422,
            f"header {HEADER}: must be 1-200 printable characters",
            fields=[{"field": f"header.{HEADER}", "message": "must be 1-200 printable characters"}],
        )
    return key


async def idempotency(
    request: Request,
    principal: Principal = Depends(authenticate),
    svc: ApiServices = Depends(services),
) -> Idempotency:
    """Dependency: looks the key up and short-circuits a retry with the recorded response."""
    raw = request.headers.get(HEADER)
    body = await request.body()
    path = request.url.path
    digest = hashlib.sha256(request.method.encode() + b" " + path.encode() + b"\n" + body).hexdigest()
    key = _check_key(raw) if raw is not None else None
    ctx = Idempotency(svc, principal, key, request.method, path, digest)
    if key is None:
        return ctx
    row = await records.stored(svc.store, ctx.scope, key)
    if row is None:
        return ctx
    _answer_from(row, digest)
