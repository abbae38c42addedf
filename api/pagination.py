"""Owns cursor pagination: opaque cursors over keyset positions, and the page-size parameter.

A cursor is the url-safe base64 (unpadded) of a JSON list: the sort-key values of the last row of
the previous page. A cursor that does not decode to values the query can use (wrong shape, an
integer outside its column's range, text that is not valid Unicode, a timestamp outside what the
database can hold) answers 422 naming ``cursor`` and never reaches the database. The next page is
``WHERE (k1, k2) > (v1, v2)`` (or ``<`` for descending lists), so pages stay consistent while rows
are added and never cost an OFFSET scan (the SQL: ``core.store.queries.paging``). ``fetch_page``
runs one page of a list route's read-model query: cursor in, items and the next cursor out.
``known_query_only`` (a dependency of list routes) answers 422 naming any query parameter the route
does not define, instead of ignoring it and listing everything (``?external_id=`` on a route
without that filter).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from fastapi import Query, Request
from fastapi.dependencies.models import Dependant
from sqlalchemy import RowMapping, Select
from sqlalchemy.ext.asyncio import AsyncEngine

from api.errors import ApiError
from api.sanitize import text_problem
from core.store.queries.paging import Page, PageKeyError, PageRequest, keyset

T = TypeVar("T")

CURSOR_PATTERN = "^[A-Za-z0-9_-]{1,500}$"
CURSOR_DESCRIPTION = (
    "Opaque: the `next_cursor` of the previous page (url-safe base64 without padding); omit for "
    "the first page."
)

DEFAULT_LIMIT = 50
MAX_LIMIT = 500


async def limit_param(
    limit: int = Query(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description="Items per page (1-500)."),
) -> int:
    return limit


async def cursor_param(
    cursor: str | None = Query(
        None, min_length=1, max_length=500, pattern=CURSOR_PATTERN, description=CURSOR_DESCRIPTION
    ),
) -> str | None:
    return cursor


def encode_cursor(values: Sequence[Any]) -> str:
    raw = json.dumps(list(values), separators=(",", ":"), default=str).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _bad_cursor() -> ApiError:
    return ApiError(
        422,
        "cursor: not a cursor returned by this list",
        fields=[{"field": "query.cursor", "message": "not a cursor returned by this list"}],
    )


def decode_cursor(cursor: str | None, types: Sequence[type]) -> list[Any] | None:
    """The values of ``cursor`` checked against ``types``; 422 naming ``cursor`` when malformed."""
    if cursor is None:
        return None
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        values = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (binascii.Error, ValueError, UnicodeDecodeError, RecursionError):
        values = None
    if (
        not isinstance(values, list)
        or len(values) != len(types)
        or not all(_valid(v, t) for v, t in zip(values, types, strict=True))
    ):
        raise _bad_cursor()
    return values


def _valid(value: Any, kind: type) -> bool:
    if isinstance(value, bool) or not isinstance(value, kind):
        return False
    if isinstance(value, int):
        return -(2**63) <= value < 2**63
    return text_problem(value) is None if isinstance(value, str) else True


def _from_wire(value: Any, kind: type) -> Any:
    if kind is datetime:
        try:
            moment = datetime.fromisoformat(value)
            # Compare in UTC; a year-9999 time with an offset overflows here, not in the driver.
            return moment.astimezone(UTC) if moment.tzinfo is not None else moment
        except (ValueError, OverflowError):
            raise _bad_cursor() from None
    return value


def _to_wire(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def page_request(cursor: str | None, types: Sequence[type], limit: int) -> PageRequest:
    """The page ``cursor`` names, its values checked against the key's ``types`` (a datetime
    travels in the cursor as ISO text); 422 naming ``cursor`` when malformed."""
    position = decode_cursor(cursor, [str if kind is datetime else kind for kind in types])
    if position is None:
        return PageRequest(None, limit)
    return PageRequest(tuple(_from_wire(v, kind) for v, kind in zip(position, types, strict=True)), limit)


def next_cursor(page: Page[Any]) -> str | None:
    """The cursor of the page after ``page`` (None on the last page)."""
    return None if page.last_key is None else encode_cursor([_to_wire(v) for v in page.last_key])


async def fetch_page(
    types: Sequence[type],
    cursor: str | None,
    limit: int,
    fetch: Callable[[PageRequest], Awaitable[Page[T]]],
) -> tuple[list[T], str | None]:
    """One page of a read-model query (``core.store.queries``) from ``cursor``: its items and the
    next cursor; a position its key columns cannot hold is a 422 naming ``cursor`` as well."""
    request = page_request(cursor, types, limit)
    try:
        page = await fetch(request)
    except PageKeyError:
        raise _bad_cursor() from None
    return page.items, next_cursor(page)


async def keyset_page(
    engine: AsyncEngine,
    query: Select[Any],
    keys: Sequence[Any],
    types: Sequence[type],
    cursor: str | None,
    limit: int,
    *,
    descending: bool = False,
) -> tuple[Sequence[RowMapping], str | None]:
    """One page of ``query`` ordered by the columns ``keys`` (value types ``types``), starting
    after ``cursor``: the rows and the next cursor (None on the last page). For routes that still
    build their own SQL; the others page with ``fetch_page`` over a ``core.store.queries`` query."""

    async def fetch(request: PageRequest) -> Page[RowMapping]:
        return await keyset(engine, query, keys, request, lambda row: row, descending=descending)

    return await fetch_page(types, cursor, limit, fetch)


def _query_names(dependant: Dependant) -> set[str]:
    names = {param.alias for param in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


def _query_prefixes(dependant: Dependant) -> set[str]:
    """The name prefixes a route takes as a family (``metadata.`` of ``?metadata.team=``): the
    ``query_prefix`` of its ``prefixed_query`` dependencies."""
    prefixes = {getattr(dependant.call, "query_prefix", None)} - {None}
    for sub in dependant.dependencies:
        prefixes |= _query_prefixes(sub)
    return {str(p) for p in prefixes}


MAX_PREFIXED = 10
_PREFIXED_KEY = re.compile(r"[A-Za-z0-9_.:-]{1,100}")


def prefixed_query(prefix: str) -> Callable[[Request], Awaitable[dict[str, str]]]:
    """A dependency reading the query parameters named ``{prefix}KEY`` as ``{KEY: value}`` (at most
    ``MAX_PREFIXED``; a KEY of letters, digits and ``_.:-``, up to 100 characters; a value up to 500):
    a 422 names the parameter that breaks the rule. ``known_query_only`` lets such names through."""

    async def read(request: Request) -> dict[str, str]:
        out: dict[str, str] = {}
        for name, value in request.query_params.multi_items():
            if not name.startswith(prefix):
                continue
            key = name[len(prefix) :]
            if not _PREFIXED_KEY.fullmatch(key) or len(value) > 500:
                raise ApiError(
                    422,
                    f"query parameter {name!r}: send {prefix}KEY=VALUE with a KEY of letters, digits and "
                    "_.:- (up to 100 characters) and a value of up to 500 characters",
                    fields=[{"field": f"query.{name}", "message": "malformed filter"}],
                )
            if key in out:
                raise ApiError(
                    422,
                    f"query parameter {name!r} appears twice; send it once",
                    fields=[{"field": f"query.{name}", "message": "appears twice"}],
                )
            out[key] = value
        if len(out) > MAX_PREFIXED:
            raise ApiError(
                422,
                f"at most {MAX_PREFIXED} {prefix}KEY filters, got {len(out)}",
                fields=[{"field": f"query.{prefix}", "message": "too many filters"}],
            )
        return out

    read.query_prefix = prefix  # type: ignore[attr-defined]
    return read


async def known_query_only(request: Request) -> None:
    """422 naming the query parameters the matched route does not define."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    prefixes = tuple(_query_prefixes(dependant))
    unknown = sorted(
        name
        for name in set(request.query_params) - _query_names(dependant)
        if not (prefixes and name.startswith(prefixes))
    )
    if unknown:
        known = ", ".join(sorted(_query_names(dependant))) or "none"
        message = f"unknown query parameter (this list takes: {known})"
        raise ApiError(
            422,
            f"unknown query parameter(s) {', '.join(unknown)} (this list takes: {known})",
            fields=[{"field": f"query.{name}", "message": message} for name in unknown],
        )
