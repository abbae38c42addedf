"""Owns the iteration's dataset signal: once every tree of ``IterationStarted.tree_ids`` is completed
or failed and every pair is revised or rejected, ``IterationDatasetReady`` (deterministic dataset
id) or ``IterationDatasetEmpty`` for the run's stream, built from committed projections only
(``built_from.last_position`` is the highest store position among the dataset's samples), so
concurrent checks build identical contents under one derived event id. The splice worker runs it
after each relevant event has been committed (``splice_service.splicer``'s docstring says why).
"""

from __future__ import annotations

import logging

from core.domain.events import IterationDatasetEmpty, IterationDatasetReady, Metadata, NewEvent
from core.domain.ids import derived_id, run_stream
from core.store.ports import EventStore
from core.store.queries.iterations import iteration_progress
from core.store.run_reads import run_context

log = logging.getLogger(__name__)


async def iteration_dataset_events(
    store: EventStore, run_id: str, iteration: int, meta: Metadata, *, service: str
) -> list[NewEvent]:
    """The iteration's dataset event when it is complete, from committed projections only (its id
    derived from ``service``, the splice worker's name, so every check appends the same one)."""
    progress = await iteration_progress(store, run_id, iteration)
    if progress is None:
        return []
    row, sample_rows = progress
    rejected = row.rejected
    trees_finished = row.trees_done + row.trees_failed
    if trees_finished < row.trees_expected or row.revisions + rejected < row.pairs:
        return []
    revisions = row.revisions
    good_positions = [
        s.position for s in sample_rows if s.kind == "good" and (s.data.get("reward") or 0.0) >= row.alpha
    ]
    revision_positions = [s.position for s in sample_rows if s.kind == "revision"]
    goods = len(good_positions)
    run_config, _ = await run_context(store, run_id, iteration)
    stream = run_stream(run_id)
    if revisions + goods == 0:
        reason = (
            f"iteration {iteration}: {row.trees_done} tree(s) completed, {row.trees_failed} failed, "
            f"{row.pairs} pair(s) with {rejected} rejected, and no good trajectory "
            f"reached alpha {row.alpha}"
        )
        empty = IterationDatasetEmpty(run_id, iteration, reason)
        log.info("splice: run %s %s", run_id, reason)
        return [NewEvent(stream, empty, meta, derived_id(service, "dataset", run_id, iteration))]
    from core.domain.datasets import general_count

    general = general_count(revisions + goods, run_config.eta) if run_config.general_data else 0
    ready = IterationDatasetReady(
        run_id=run_id,
        iteration=iteration,
        dataset_id=derived_id("dataset", run_id, iteration),
        revision_samples=revisions,
        good_samples=goods,
        general_samples=general,
        built_from={
            "alpha": row.alpha,
            "eta": run_config.eta,
            "general_data": run_config.general_data,
            "trees_done": row.trees_done,
            "trees_failed": row.trees_failed,
            "pairs": row.pairs,
            "rejected": rejected,
            "last_position": max(good_positions + revision_positions, default=0),
        },
    )
    log.info(
        "splice: run %s iteration %d dataset ready: %d revisions, %d good",
        run_id,
        iteration,
        revisions,
        goods,
    )
    return [NewEvent(stream, ready, meta, derived_id(service, "dataset", run_id, iteration))]
