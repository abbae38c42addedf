"""Owns the reads of the ``trees`` and ``nodes`` read models: one search tree with its nodes and
the event-log position its snapshot includes, and a run's trees page by page.

For the workers: which search trees of a run's iteration completed."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TypedDict, cast

from sqlalchemy import RowMapping, func, select

from core.domain.ids import tree_stream
from core.store.ports import EventStore
from core.store.queries import engine_of
from core.store.queries._db import Db, connection, of_run, owned
from core.store.queries.paging import Page, PageRequest, keyset
from core.store.tables import events, nodes, trees

RUN_PAGE_KEY: tuple[type, ...] = (int, str)
"""The types of a run trees page's position: (iteration, tree_id)."""


class TreeRow(TypedDict):
    tree_id: str
    run_id: str | None
    project_id: str | None
    iteration: int
    env_uri: str
    task_id: str
    status: str
    root_id: str | None
    nodes: int
    rollouts: int
    best_reward: float | None
    reason: str | None
    updated_at: datetime


class NodeRow(TypedDict):
    tree_id: str
    node_id: str
    project_id: str | None
    parent_id: str | None
    depth: int
    action: str
    thought: str
    observation: str
    reward: float
    done: bool
    valid: bool
    visits: int
    value_sum: float


@dataclass(frozen=True)
class TreeSnapshot:
    """A tree, its nodes (by depth, then id) and the last position of its stream they include."""

    tree: TreeRow
    nodes: list[NodeRow]
    position: int


def _tree(row: RowMapping) -> TreeRow:
    return cast(TreeRow, dict(row))


async def tree(db: Db, project_id: str, tree_id: str) -> TreeSnapshot | None:
    """The tree with its nodes, None when missing or in another project. The stream's last position
    is read in the SAME statement as the nodes (one snapshot), so a client following the events
    after it neither misses nor double-counts one."""
    position = (
        select(func.coalesce(func.max(events.c.position), 0))
        .where(events.c.stream_id == tree_stream(tree_id))
        .scalar_subquery()
    )
    async with connection(db) as conn:
        row = await owned(conn, trees, "tree_id", tree_id, project_id)
        if row is None:
            return None
        node_rows = (
            (
                await conn.execute(
                    select(nodes, position.label("stream_position"))
                    .where(nodes.c.tree_id == tree_id)
                    .order_by(nodes.c.depth, nodes.c.node_id)
                )
            )
            .mappings()
            .all()
        )
        if node_rows:
            last = node_rows[0]["stream_position"]
        else:
            last = (await conn.execute(select(position))).scalar()
    return TreeSnapshot(
        _tree(row),
        [cast(NodeRow, {k: v for k, v in n.items() if k != "stream_position"}) for n in node_rows],
        int(last or 0),
    )


async def run_trees(
    db: Db, project_id: str, run_id: str, iteration: int | None, request: PageRequest
) -> Page[TreeRow]:
    """One page of a run's trees (one iteration's when given), by iteration and tree id."""
    query = of_run(trees, project_id, run_id, iteration)
    return await keyset(db, query, [trees.c.iteration, trees.c.tree_id], request, _tree)


async def completed_tree_ids(
    store: EventStore, run_id: str, iteration: int, project_id: str | None = None
) -> list[str]:
    """The ids of the iteration's completed trees (of ``project_id``'s run, when given), sorted."""
    query = select(trees.c.tree_id).where(
        trees.c.run_id == run_id, trees.c.iteration == iteration, trees.c.status == "completed"
    )
    if project_id is not None:
        query = query.where(trees.c.project_id == project_id)
    async with engine_of(store).connect() as conn:
        return list((await conn.execute(query.order_by(trees.c.tree_id))).scalars().all())
