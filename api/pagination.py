"""Owns cursor pagination: opaque cursors over keyset positions, and the page-size parameter.

A cursor is the url-safe base64 of a JSON list: the sort-key values of the last row of the previous
page. The next page is ``WHERE (k1, k2) > (v1, v2)`` (or ``<`` for descending lists), so pages stay
consistent while rows are added and never cost an OFFSET scan.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from typing import Any

from fastapi import Query
from sqlalchemy import ColumnElement, and_, or_

from api.errors import ApiError

DEFAULT_LIMIT = 50
MAX_LIMIT = 500


def limit_param(
    limit: int = Query(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description="Items per page (1-500)."),
) -> int:
    return limit


def encode_cursor(values: Sequence[Any]) -> str:
    raw = json.dumps(list(values), separators=(",", ":"), default=str).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str | None, types: Sequence[type]) -> list[Any] | None:
    """The values of ``cursor`` checked against ``types``; 422 naming ``cursor`` when malformed."""
    if cursor is None:
        return None
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        values = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        values = None
    if (
        not isinstance(values, list)
        or len(values) != len(types)
        or not all(_valid(v, t) for v, t in zip(values, types, strict=True))
    ):
        raise ApiError(
            422,
            "cursor: not a cursor returned by this list",
            fields=[{"field": "query.cursor", "message": "not a cursor returned by this list"}],
        )
    return values


def _valid(value: Any, kind: type) -> bool:
    if isinstance(value, bool) or not isinstance(value, kind):
        return False
    if isinstance(value, int):
        return -(2**63) <= value < 2**63
    return "\x00" not in value if isinstance(value, str) else True


def after(columns: Sequence[Any], values: Sequence[Any], descending: bool = False) -> ColumnElement[bool]:
    """Row-value comparison ``columns > values`` (``<`` when descending), portable to SQLite."""
    clauses = []
    for i, column in enumerate(columns):
        equal_prefix = [columns[j] == values[j] for j in range(i)]
        step = column < values[i] if descending else column > values[i]
        clauses.append(and_(*equal_prefix, step))
    return or_(*clauses)
