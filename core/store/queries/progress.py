"""Owns the read behind a run's training progress: each iteration's evaluation metrics, in order."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from core.store.tables import iterations


async def iteration_evaluations(engine: AsyncEngine, run_id: str) -> list[tuple[int, dict[str, Any]]]:
    """(iteration, its ``IterationEvaluated`` metrics or {}) for every iteration of the run."""
    query = (
        select(iterations.c.iteration, iterations.c.metrics)
        .where(iterations.c.run_id == run_id)
        .order_by(iterations.c.iteration)
    )
    async with engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    out = []
    for iteration, metrics in rows:
        evaluated = (metrics or {}).get("eval")
        out.append((int(iteration), dict(evaluated) if isinstance(evaluated, dict) else {}))
    return out
