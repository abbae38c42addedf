"""Owns the trees and nodes read models (and the tree counters of their iteration).

Tree status: requested -> running -> completed | failed. Node statistics are DERIVED: every
RolloutFinished (the leaf a descent ended at) and every LeafRecorded (a terminal child recorded when
it was stepped) adds one visit and its reward to the leaf and to each of its ancestors, so
``value_sum / visits`` is the node's mean rollout value (the Q/N of UCT), exactly as
``core.domain.mcts.SearchTree`` replays it. Only RolloutFinished counts a rollout (a descent).
Consecutive NodesExpanded events are projected with one multi-row INSERT.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from sqlalchemy import case, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from core.domain import events as ev
from core.store import bulk
from core.store.projectors._sql import Item, Projector, bump_iteration, project_of, upsert
from core.store.tables import nodes, trees


def _new_tree(
    recorded: ev.RecordedEvent, event: ev.SearchRequested | ev.TreeStarted, status: str
) -> dict[str, Any]:
    """A fresh trees row (no nodes, no rollouts yet) for the tree that ``event`` names."""
    return {
        "tree_id": event.tree_id,
        "run_id": event.run_id,
        "project_id": project_of(recorded, run_id=event.run_id),
        "iteration": event.iteration,
        "env_uri": event.env_uri,
        "task_id": event.task_id,
        "status": status,
        "nodes": 0,
        "rollouts": 0,
        "updated_at": recorded.recorded_at,
    }


async def _search_requested(conn: AsyncConnection, items: Sequence[Item]) -> None:
    for recorded, event in items:
        assert isinstance(event, ev.SearchRequested)
        await upsert(conn, trees, _new_tree(recorded, event, "requested"), update=[])


async def _tree_started(conn: AsyncConnection, items: Sequence[Item]) -> None:
    for recorded, event in items:
        assert isinstance(event, ev.TreeStarted)
        values = {**_new_tree(recorded, event, "running"), "root_id": event.root_id}
        await upsert(conn, trees, values, update=["status", "root_id", "updated_at"])


async def _nodes_expanded(conn: AsyncConnection, items: Sequence[Item]) -> None:
    rows: list[dict[str, Any]] = []
    per_tree: Counter[str] = Counter()
    expanded: list[tuple[ev.RecordedEvent, ev.NodesExpanded]] = []
    for recorded, event in items:
        assert isinstance(event, ev.NodesExpanded)
        expanded.append((recorded, event))
    unknown_project = {event.tree_id for recorded, event in expanded if not recorded.metadata.project_id}
    tree_projects: dict[str, str | None] = {}
    if unknown_project:
        found = await conn.execute(
            select(trees.c.tree_id, trees.c.project_id).where(trees.c.tree_id.in_(sorted(unknown_project)))
        )
        tree_projects = {tree_id: project_id for tree_id, project_id in found.tuples()}
    for recorded, event in expanded:
        per_tree[event.tree_id] += len(event.nodes)
        project_id = recorded.metadata.project_id or tree_projects.get(event.tree_id)
        rows.extend(
            {
                "tree_id": event.tree_id,
                "node_id": n.node_id,
                "project_id": project_id,
                "parent_id": n.parent_id,
                "depth": n.depth,
                "action": n.action,
                "thought": n.thought,
                "observation": n.observation,
                "reward": n.reward,
                "done": n.done,
                "valid": n.valid,
            }
            for n in event.nodes
        )
    await bulk.insert_nodes(conn, rows)
    await bulk.add_tree_nodes(conn, dict(per_tree))


async def _rollout_finished(conn: AsyncConnection, items: Sequence[Item]) -> None:
    await _back_up(conn, items, count_rollout=True)


async def _leaf_recorded(conn: AsyncConnection, items: Sequence[Item]) -> None:
    await _back_up(conn, items, count_rollout=False)


async def _back_up(conn: AsyncConnection, items: Sequence[Item], *, count_rollout: bool) -> None:
    """One visit and the reward to the leaf and its ancestors; the tree's best reward (and rollouts)."""
    for recorded, event in items:
        assert isinstance(event, ev.RolloutFinished | ev.LeafRecorded)
        ancestry = (
            select(nodes.c.node_id, nodes.c.parent_id)
            .where(nodes.c.tree_id == event.tree_id, nodes.c.node_id == event.leaf_id)
            .cte("ancestry", recursive=True)
        )
        parent = nodes.alias("parent")
        ancestry = ancestry.union_all(
            select(parent.c.node_id, parent.c.parent_id).where(
                parent.c.tree_id == event.tree_id, parent.c.node_id == ancestry.c.parent_id
            )
        )
        await conn.execute(
            update(nodes)
            .where(nodes.c.tree_id == event.tree_id, nodes.c.node_id.in_(select(ancestry.c.node_id)))
            .values(visits=nodes.c.visits + 1, value_sum=nodes.c.value_sum + event.reward)
        )
        best = case(
            (trees.c.best_reward.is_(None), event.reward),
            else_=func.max(trees.c.best_reward, event.reward)
            if conn.dialect.name == "sqlite"
            else func.greatest(trees.c.best_reward, event.reward),
        )
        await conn.execute(
            update(trees)
            .where(trees.c.tree_id == event.tree_id)
            .values(
                rollouts=trees.c.rollouts + (1 if count_rollout else 0),
                best_reward=best,
                updated_at=recorded.recorded_at,
            )
        )


async def _finish_tree(
    conn: AsyncConnection,
    recorded: ev.RecordedEvent,
    event: ev.TreeCompleted | ev.SearchFailed,
    counter: str,
    **values: Any,
) -> None:
    """The tree's row takes its final ``values`` (status included); its iteration counts it in ``counter``."""
    await conn.execute(
        update(trees)
        .where(trees.c.tree_id == event.tree_id)
        .values(updated_at=recorded.recorded_at, **values)
    )
    await bump_iteration(conn, event.run_id, event.iteration, counter)


async def _tree_completed(conn: AsyncConnection, items: Sequence[Item]) -> None:
    for recorded, event in items:
        assert isinstance(event, ev.TreeCompleted)
        await _finish_tree(
            conn,
            recorded,
            event,
            "trees_done",
            status="completed",
            nodes=event.nodes,
            rollouts=event.rollouts,
            best_reward=event.best_reward,
        )


async def _search_failed(conn: AsyncConnection, items: Sequence[Item]) -> None:
    for recorded, event in items:
        assert isinstance(event, ev.SearchFailed)
        await _finish_tree(conn, recorded, event, "trees_failed", status="failed", reason=event.reason)


PROJECTORS: dict[str, Projector] = {
    "SearchRequested": _search_requested,
    "TreeStarted": _tree_started,
    "NodesExpanded": _nodes_expanded,
    "RolloutFinished": _rollout_finished,
    "LeafRecorded": _leaf_recorded,
    "TreeCompleted": _tree_completed,
    "SearchFailed": _search_failed,
}
