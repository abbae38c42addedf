"""Owns the projects, api_keys, runs and iterations read models.

Run status: requested -> running -> completed | cancelled | failed. Iteration status:
searching -> dataset_ready | dataset_empty -> trained | training_failed -> evaluated.
Timestamps are the events' recorded times, so a rebuild reproduces them exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, cast

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncConnection

from core.domain import events as ev
from core.store.projectors._sql import Item, Projector, project_of, update_iteration, upsert
from core.store.tables import api_keys, iterations, projects, runs


async def _project_created(conn: AsyncConnection, items: Sequence[Item]) -> None:
    for recorded, event in items:
        assert isinstance(event, ev.ProjectCreated)
        values = {"project_id": event.project_id, "name": event.name, "created_at": recorded.recorded_at}
        await upsert(conn, projects, values, update=["name"])


async def _key_issued(conn: AsyncConnection, items: Sequence[Item]) -> None:
    for recorded, event in items:
        assert isinstance(event, ev.ApiKeyIssued)
        values = {
            "key_id": event.key_id,
            "project_id": event.project_id,
            "prefix": event.prefix,
            "salt": event.salt,
            "key_hash": event.key_hash,
            "scopes": list(event.scopes),
            "label": event.label,
            "revoked": False,
            "created_at": recorded.recorded_at,
        }
        await upsert(conn, api_keys, values, update=[])


async def _key_revoked(conn: AsyncConnection, items: Sequence[Item]) -> None:
    for _recorded, event in items:
        assert isinstance(event, ev.ApiKeyRevoked)
        await conn.execute(update(api_keys).where(api_keys.c.key_id == event.key_id).values(revoked=True))


async def _run_requested(conn: AsyncConnection, items: Sequence[Item]) -> None:
    for recorded, event in items:
        assert isinstance(event, ev.RunRequested)
        values = {
            "run_id": event.run_id,
            "project_id": event.project_id,
            "status": "requested",
            "config": event.config,
            "current_iteration": 0,
            "created_at": recorded.recorded_at,
            "updated_at": recorded.recorded_at,
        }
        await upsert(conn, runs, values, update=[])


async def _set_run(conn: AsyncConnection, run_id: str, recorded: ev.RecordedEvent, **values: Any) -> None:
    await conn.execute(
        update(runs).where(runs.c.run_id == run_id).values(updated_at=recorded.recorded_at, **values)
    )


async def _set_iteration(
    conn: AsyncConnection, run_id: str, iteration: int, recorded: ev.RecordedEvent, **values: Any
) -> None:
    await conn.execute(update_iteration(run_id, iteration).values(updated_at=recorded.recorded_at, **values))


class _RunEvent(Protocol):
    @property
    def run_id(self) -> str: ...


class _IterationEvent(_RunEvent, Protocol):
    @property
    def iteration(self) -> int: ...


def _run_status(kind: type[ev.DomainEvent], status: str, *copied: str) -> Projector:
    """A projector moving the event's run to ``status`` and copying the event's ``copied`` fields
    into the run's same-named columns."""

    async def project(conn: AsyncConnection, items: Sequence[Item]) -> None:
        for recorded, event in items:
            assert isinstance(event, kind)
            values = {name: getattr(event, name) for name in copied}
            await _set_run(conn, cast(_RunEvent, event).run_id, recorded, status=status, **values)

    return project


def _iteration_status(kind: type[ev.DomainEvent], status: str, *copied: str) -> Projector:
    """A projector moving the event's iteration to ``status`` and copying the event's ``copied``
    fields into the iteration's same-named columns."""

    async def project(conn: AsyncConnection, items: Sequence[Item]) -> None:
        for recorded, event in items:
            assert isinstance(event, kind)
            at = cast(_IterationEvent, event)
            values = {name: getattr(event, name) for name in copied}
            await _set_iteration(conn, at.run_id, at.iteration, recorded, status=status, **values)

    return project


async def _iteration_started(conn: AsyncConnection, items: Sequence[Item]) -> None:
    for recorded, event in items:
        assert isinstance(event, ev.IterationStarted)
        values = {
            "run_id": event.run_id,
            "iteration": event.iteration,
            "project_id": project_of(recorded, run_id=event.run_id),
            "status": "searching",
            "model_ref": event.model_ref,
            "alpha": event.alpha,
            "trees_expected": len(event.tree_ids),
            "trees_done": 0,
            "trees_failed": 0,
            "pairs": 0,
            "revisions": 0,
            "goods": 0,
            "metrics": {},
            "updated_at": recorded.recorded_at,
        }
        await upsert(conn, iterations, values, update=[])
        await _set_run(conn, event.run_id, recorded, status="running", current_iteration=event.iteration)


async def _model_trained(conn: AsyncConnection, items: Sequence[Item]) -> None:
    for recorded, event in items:
        assert isinstance(event, ev.ModelTrained)
        await _merge_metrics(conn, event.run_id, event.iteration, {"train": event.metrics})
        await _set_iteration(
            conn, event.run_id, event.iteration, recorded, status="trained", checkpoint=event.checkpoint
        )


async def _evaluated(conn: AsyncConnection, items: Sequence[Item]) -> None:
    for recorded, event in items:
        assert isinstance(event, ev.IterationEvaluated)
        await _merge_metrics(
            conn, event.run_id, event.iteration, {"eval": event.metrics, "eval_model_ref": event.model_ref}
        )
        await _set_iteration(conn, event.run_id, event.iteration, recorded, status="evaluated")


async def _merge_metrics(conn: AsyncConnection, run_id: str, iteration: int, extra: dict[str, Any]) -> None:
    current = await conn.scalar(
        iterations.select()
        .with_only_columns(iterations.c.metrics)
        .where(iterations.c.run_id == run_id, iterations.c.iteration == iteration)
    )
    if current is None:
        return
    await conn.execute(update_iteration(run_id, iteration).values(metrics={**current, **extra}))


PROJECTORS: dict[str, Projector] = {
    "ProjectCreated": _project_created,
    "ApiKeyIssued": _key_issued,
    "ApiKeyRevoked": _key_revoked,
    "RunRequested": _run_requested,
    "IterationStarted": _iteration_started,
    "IterationDatasetReady": _iteration_status(ev.IterationDatasetReady, "dataset_ready", "dataset_id"),
    "IterationDatasetEmpty": _iteration_status(ev.IterationDatasetEmpty, "dataset_empty", "reason"),
    "ModelTrained": _model_trained,
    "TrainingFailed": _iteration_status(ev.TrainingFailed, "training_failed", "reason"),
    "IterationEvaluated": _evaluated,
    "RunCompleted": _run_status(ev.RunCompleted, "completed", "final_model_ref", "summary"),
    "RunCancelled": _run_status(ev.RunCancelled, "cancelled", "reason"),
    "RunFailed": _run_status(ev.RunFailed, "failed", "reason"),
}
