"""Owns the report files of a finished ``agentr run``: the run's history and revision lengths folded
into the report (``train_service.report``), plus per-iteration dataset counts read from the store
(trees, pairs, revision samples, verified share, good trajectories) and the critic's measured
quality (``train_service.critic_metrics``: exact match with the oracle, fallback share).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.store.sql import SqlEventStore


async def write_run_report(store: SqlEventStore, home: Path, run_id: str) -> dict[str, str]:
    from core.domain.ids import run_stream
    from train_service.evaluation import revision_lengths
    from train_service.report import collect_report, write_report

    history = [r.event for r in await store.read_stream(run_stream(run_id))]
    report = collect_report(run_id, history, await revision_lengths(store, run_id))
    report["datasets"] = await _dataset_counts(store, run_id)
    from train_service.critic_metrics import load_critic_metrics

    critic = await load_critic_metrics(store, run_id)  # t' vs the oracle, fallback share
    report["critic"] = {str(iteration): row for iteration, row in critic.items()}
    return write_report(report, home / "runs" / run_id)


async def _dataset_counts(store: SqlEventStore, run_id: str) -> dict[str, Any]:
    """Per iteration: trees searched, pairs found, revision samples (their mean revision length, and
    ``verified_share``: verified revision samples / pairs), good trajectories and ``rejected``: the
    pairs that became no sample, counted by kind of reason (``core.domain.splice.rejection_kind``:
    a splice whose replay ended early or fell short of the good reward, a critic refusal, ...)."""
    from sqlalchemy import Integer, func, select

    from core.domain.splice import rejection_kind
    from core.store.tables import iterations, pairs, samples

    async with store.engine.connect() as conn:
        rows = (
            await conn.execute(
                select(
                    samples.c.iteration,
                    samples.c.kind,
                    func.count(),
                    func.sum(func.coalesce(samples.c.verified, False).cast(Integer())),
                    func.avg(samples.c.revision_length),
                )
                .where(samples.c.run_id == run_id)
                .group_by(samples.c.iteration, samples.c.kind)
            )
        ).all()
        pair_rows = (
            await conn.execute(
                select(pairs.c.iteration, func.count())
                .where(pairs.c.run_id == run_id)
                .group_by(pairs.c.iteration)
            )
        ).all()
        rejected_rows = (
            await conn.execute(
                select(pairs.c.iteration, pairs.c.reason).where(
                    pairs.c.run_id == run_id, pairs.c.status == "rejected"
                )
            )
        ).all()
        tree_rows = (
            await conn.execute(
                select(iterations.c.iteration, iterations.c.trees_done).where(iterations.c.run_id == run_id)
            )
        ).all()
    out: dict[str, Any] = {}
    for iteration, trees in tree_rows:
        out.setdefault(str(iteration), {})["trees"] = int(trees)
    for iteration, count in pair_rows:
        out.setdefault(str(iteration), {})["pairs"] = int(count)
    for iteration, kind, count, verified, length in rows:
        entry = out.setdefault(str(iteration), {})
        entry[kind] = int(count)
        if kind == "revision":
            entry["verified"] = int(verified or 0)
            entry["revision_length_mean"] = None if length is None else float(length)
    for iteration, reason in rejected_rows:
        kinds = out.setdefault(str(iteration), {}).setdefault("rejected", {})
        kind = rejection_kind(reason or "")
        kinds[kind] = kinds.get(kind, 0) + 1
    for entry in out.values():
        # the share of the iteration's pairs that became a revision sample passing the replay check
        entry["verified_share"] = entry.get("verified", 0) / entry["pairs"] if entry.get("pairs") else None
    return out
