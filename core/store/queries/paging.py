"""Owns keyset pagination in SQL: one page of a query ordered by its key columns, starting after
the key of the previous page's last row (``WHERE (k1, k2) > (v1, v2)``, or ``<`` descending,
written portably for SQLite), one row past the limit fetched to know whether more follow.

The wire form of a position (the API's opaque cursor) is not this module's: callers hand in the
decoded values (``PageRequest.after``) and get the last row's key back (``Page.last_key``). A key
value its column cannot hold (an integer outside a 32-bit column) raises ``PageKeyError`` before
the database sees it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import BigInteger, ColumnElement, Integer, RowMapping, Select, SmallInteger, and_, or_

from core.store.queries._db import Db, connection

T = TypeVar("T")


class PageKeyError(ValueError):
    """A page position holds a value its key column cannot hold."""


@dataclass(frozen=True)
class PageRequest:
    """Which page: after the key ``after`` (None: the first page), at most ``limit`` rows."""

    after: tuple[Any, ...] | None
    limit: int


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of rows, and the key of its last row when more rows follow (else None)."""

    items: list[T]
    last_key: tuple[Any, ...] | None


def int_range(column: Any) -> tuple[int, int]:
    """The values an integer column holds (PostgreSQL integer is 32-bit, bigint 64-bit)."""
    column_type = getattr(column, "type", None)
    if isinstance(column_type, BigInteger):
        return -(2**63), 2**63 - 1
    if isinstance(column_type, SmallInteger):
        return -(2**15), 2**15 - 1
    if isinstance(column_type, Integer):
        return -(2**31), 2**31 - 1
    return -(2**63), 2**63 - 1


def after(columns: Sequence[Any], values: Sequence[Any], descending: bool = False) -> ColumnElement[bool]:
    """Row-value comparison ``columns > values`` (``<`` when descending), portable to SQLite."""
    clauses = []
    for i, column in enumerate(columns):
        equal_prefix = [columns[j] == values[j] for j in range(i)]
        step = column < values[i] if descending else column > values[i]
        clauses.append(and_(*equal_prefix, step))
    return or_(*clauses)


async def keyset(
    db: Db,
    query: Select[Any],
    keys: Sequence[Any],
    request: PageRequest,
    convert: Callable[[RowMapping], T],
    *,
    descending: bool = False,
) -> Page[T]:
    """One page of ``query`` ordered by the columns ``keys``, each row made by ``convert``."""
    if request.after is not None:
        if len(request.after) != len(keys):
            raise PageKeyError(f"a position of {len(keys)} values expected, got {len(request.after)}")
        for value, key in zip(request.after, keys, strict=True):
            if isinstance(value, int) and not isinstance(value, bool):
                low, high = int_range(key)
                if not low <= value <= high:
                    raise PageKeyError(f"{key.name} cannot hold {value}")
        query = query.where(after(keys, request.after, descending=descending))
    order = [key.desc() for key in keys] if descending else list(keys)
    query = query.order_by(*order).limit(request.limit + 1)
    async with connection(db) as conn:
        rows = (await conn.execute(query)).mappings().all()
    page = rows[: request.limit]
    last = tuple(page[-1][key.name] for key in keys) if len(rows) > request.limit else None
    return Page([convert(row) for row in page], last)
