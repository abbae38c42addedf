"""Owns the reads of the ``projects`` and ``api_keys`` read models: a project, the projects a
caller sees, a project's keys, the keys under a prefix (authentication) and whether a key still
holds (the event stream re-checks it with every page)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypedDict, cast

from sqlalchemy import RowMapping, select

from core.store.queries._db import Db, connection
from core.store.tables import api_keys, projects


class ProjectRow(TypedDict):
    project_id: str
    name: str
    created_at: datetime


class KeyRow(TypedDict):
    """An API key's row: ``salt`` and ``key_hash`` verify a presented secret (never sent out)."""

    key_id: str
    project_id: str
    prefix: str
    salt: str
    key_hash: str
    scopes: list[str]
    label: str
    revoked: bool
    created_at: datetime


def _project(row: RowMapping) -> ProjectRow:
    return cast(ProjectRow, dict(row))


def _key(row: RowMapping) -> KeyRow:
    return cast(KeyRow, dict(row))


async def _one(db: Db, query: Any) -> RowMapping | None:
    async with connection(db) as conn:
        return (await conn.execute(query)).mappings().first()


async def project(db: Db, project_id: str) -> ProjectRow | None:
    row = await _one(db, select(projects).where(projects.c.project_id == project_id))
    return _project(row) if row is not None else None


async def list_projects(db: Db, only: str | None = None) -> list[ProjectRow]:
    """Every project (or only ``only``), oldest first."""
    query = select(projects).order_by(projects.c.created_at, projects.c.project_id)
    if only is not None:
        query = query.where(projects.c.project_id == only)
    async with connection(db) as conn:
        return [_project(row) for row in (await conn.execute(query)).mappings().all()]


async def key(db: Db, key_id: str, project_id: str | None = None) -> KeyRow | None:
    """The key ``key_id`` (only inside ``project_id`` when given)."""
    query = select(api_keys).where(api_keys.c.key_id == key_id)
    if project_id is not None:
        query = query.where(api_keys.c.project_id == project_id)
    row = await _one(db, query)
    return _key(row) if row is not None else None


async def project_keys(db: Db, project_id: str) -> list[KeyRow]:
    """The project's keys, oldest first (revoked ones included)."""
    query = (
        select(api_keys)
        .where(api_keys.c.project_id == project_id)
        .order_by(api_keys.c.created_at, api_keys.c.key_id)
    )
    async with connection(db) as conn:
        return [_key(row) for row in (await conn.execute(query)).mappings().all()]


async def keys_with_prefix(db: Db, prefix: str) -> list[KeyRow]:
    """Every key issued under ``prefix`` (revoked ones included)."""
    async with connection(db) as conn:
        rows = (await conn.execute(select(api_keys).where(api_keys.c.prefix == prefix))).mappings().all()
    return [_key(row) for row in rows]
