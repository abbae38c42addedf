"""Owns the bulk statements of the append hot path (events, search nodes, tree counters), per dialect.

PostgreSQL: ONE ``INSERT ... SELECT FROM unnest($1::text[], ...)`` statement per table, with each
column sent as a binary-encoded array. That is a single round trip with a single tiny statement
to parse (asyncpg caches it prepared), close to COPY speed, and unlike COPY it keeps
``ON CONFLICT DO NOTHING`` and ``RETURNING``. ``WITH ORDINALITY ... ORDER BY`` makes the identity
values follow the batch order. Look-ups by many keys likewise bind ONE array (``= ANY($1)``, or
``unnest`` joined to an index probe per key) so the plan and the statement text do not change with
the batch size. SQLite: portable SQLAlchemy Core (multi-row VALUES with RETURNING, IN lists).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import case, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from core.store.tables import events, nodes, trees

_PG_INSERT_EVENTS = """
INSERT INTO events (event_id, stream_id, stream_version, event_type, event_version, data, metadata,
                    recorded_at)
SELECT u.event_id, u.stream_id, u.stream_version, u.event_type, u.event_version, u.data::jsonb,
       u.metadata::jsonb, $8
FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::int[], $6::text[], $7::text[])
     WITH ORDINALITY AS u(event_id, stream_id, stream_version, event_type, event_version, data,
                          metadata, ord)
ORDER BY u.ord
RETURNING event_id, position
"""

_PG_INSERT_NODES = """
INSERT INTO nodes (tree_id, node_id, project_id, parent_id, depth, action, thought, observation,
                   reward, done, valid, visits, value_sum)
SELECT u.tree_id, u.node_id, u.project_id, u.parent_id, u.depth, u.action, u.thought,
       u.observation, u.reward, u.done, u.valid, 0, 0.0
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], $6::text[], $7::text[],
            $8::text[], $9::float8[], $10::bool[], $11::bool[])
     AS u(tree_id, node_id, project_id, parent_id, depth, action, thought, observation, reward,
          done, valid)
ON CONFLICT (tree_id, node_id) DO NOTHING
"""

_EVENT_COLUMNS = ("event_id", "stream_id", "stream_version", "event_type", "event_version")
_NODE_COLUMNS = (
    "tree_id",
    "node_id",
    "project_id",
    "parent_id",
    "depth",
    "action",
    "thought",
    "observation",
    "reward",
    "done",
    "valid",
)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


async def insert_events(conn: AsyncConnection, rows: Sequence[dict[str, Any]]) -> list[int]:
    """Insert event rows (all with the same ``recorded_at``); returns their positions in order."""
    if not rows:
        return []
    if conn.dialect.name == "postgresql":
        params = tuple([row[c] for row in rows] for c in _EVENT_COLUMNS) + (
            [_dumps(row["data"]) for row in rows],
            [_dumps(row["metadata"]) for row in rows],
            rows[0]["recorded_at"],
        )
        result = await conn.exec_driver_sql(_PG_INSERT_EVENTS, params)
        returned = cast(list[tuple[str, int]], result.all())
        by_id = {event_id: int(position) for event_id, position in returned}
        return [int(by_id[row["event_id"]]) for row in rows]
    result = await conn.execute(
        events.insert().returning(events.c.position, sort_by_parameter_order=True), rows
    )
    return [int(p) for p in result.scalars()]


async def insert_nodes(conn: AsyncConnection, rows: Sequence[dict[str, Any]]) -> None:
    """Insert node rows, skipping (tree_id, node_id) pairs that already exist."""
    if not rows:
        return
    if conn.dialect.name == "postgresql":
        params = tuple([row[c] for row in rows] for c in _NODE_COLUMNS)
        await conn.exec_driver_sql(_PG_INSERT_NODES, params)
        return
    from sqlalchemy.dialects.sqlite import insert

    full = [{**row, "visits": 0, "value_sum": 0.0} for row in rows]
    await conn.execute(insert(nodes).on_conflict_do_nothing(index_elements=["tree_id", "node_id"]), full)


_PG_STORED_IDS = "SELECT event_id FROM events WHERE event_id = ANY($1::text[])"

# One index probe (backwards on uq(stream_id, stream_version)) per stream.
_PG_STREAM_VERSIONS = """
SELECT u.stream_id,
       (SELECT max(e.stream_version) FROM events e WHERE e.stream_id = u.stream_id)
FROM unnest($1::text[]) AS u(stream_id)
"""

_PG_ADD_TREE_NODES = """
UPDATE trees SET nodes = trees.nodes + u.added
FROM unnest($1::text[], $2::int[]) AS u(tree_id, added)
WHERE trees.tree_id = u.tree_id
"""


async def stored_event_ids(conn: AsyncConnection, event_ids: Sequence[str]) -> set[str]:
    """Which of ``event_ids`` are already in the events table."""
    if not event_ids:
        return set()
    if conn.dialect.name == "postgresql":
        result = await conn.exec_driver_sql(_PG_STORED_IDS, (list(event_ids),))
        return set(result.scalars())
    stored: set[str] = set()
    for start in range(0, len(event_ids), 500):
        chunk = list(event_ids[start : start + 500])
        result = await conn.execute(select(events.c.event_id).where(events.c.event_id.in_(chunk)))
        stored.update(result.scalars())
    return stored


async def stream_versions(conn: AsyncConnection, stream_ids: Sequence[str]) -> dict[str, int]:
    """The last version of each stream (-1 for streams that do not exist)."""
    versions = {s: -1 for s in stream_ids}
    if not stream_ids:
        return versions
    if conn.dialect.name == "postgresql":
        result = await conn.exec_driver_sql(_PG_STREAM_VERSIONS, (list(stream_ids),))
    else:
        result = await conn.execute(
            select(events.c.stream_id, func.max(events.c.stream_version))
            .where(events.c.stream_id.in_(list(stream_ids)))
            .group_by(events.c.stream_id)
        )
    found = cast(list[tuple[str, int | None]], result.all())
    versions.update({stream: int(version) for stream, version in found if version is not None})
    return versions


async def add_tree_nodes(conn: AsyncConnection, added: dict[str, int]) -> None:
    """Increase ``trees.nodes`` by ``added[tree_id]`` for each tree, in one statement."""
    if not added:
        return
    tree_ids = sorted(added)
    if conn.dialect.name == "postgresql":
        await conn.exec_driver_sql(_PG_ADD_TREE_NODES, (tree_ids, [added[t] for t in tree_ids]))
        return
    increment = case(added, value=trees.c.tree_id, else_=0)
    await conn.execute(
        update(trees).where(trees.c.tree_id.in_(tree_ids)).values(nodes=trees.c.nodes + increment)
    )
