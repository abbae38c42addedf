"""Owns the report files of a finished ``agentr run``: the run's history and revision lengths folded
into the report (``train_service.report``), plus per-iteration dataset counts read from the store
(trees, pairs, revision samples, verified share, good trajectories) and the critic's measured
quality (``train_service.critic_metrics``: exact match with the oracle, fallback share).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from core.domain.splice import rejection_kind
    from core.store.queries.runs import dataset_counts

    counts = await dataset_counts(store, run_id)
    out: dict[str, Any] = {}
    for iteration, trees in counts.trees.items():
        out.setdefault(str(iteration), {})["trees"] = trees
    for iteration, found in counts.pairs.items():
        out.setdefault(str(iteration), {})["pairs"] = found
    for row in counts.samples:
        entry = out.setdefault(str(row.iteration), {})
        entry[row.kind] = row.count
        if row.kind == "revision":
            entry["verified"] = row.verified
            entry["revision_length_mean"] = row.revision_length_mean
    for iteration, reason in counts.rejected:
        kinds = out.setdefault(str(iteration), {}).setdefault("rejected", {})
        kind = rejection_kind(reason or "")
        kinds[kind] = kinds.get(kind, 0) + 1
    for entry in out.values():
        # the share of the iteration's pairs that became a revision sample passing the replay check
        entry["verified_share"] = entry.get("verified", 0) / entry["pairs"] if entry.get("pairs") else None
    return out
