"""Owns reading what the DPO and PRM exports need out of an event store: pairs with their first
errors, and finished search trees.

* ``iteration_pairs``: the pairs a run's iteration found (``pairs`` read model: which ids), each
  read from its own stream.
* ``dataset_pairs``: the pairs behind a named dataset's revision samples, found from the events
  the manifest points at (``RevisionMaterialized`` / ``SampleRespliced``) and read only up to the
  manifest's log position, so a download stays the same after later critiques or corrections.
* ``iteration_trees``: the iteration's completed search trees rebuilt from their streams.
* ``iteration_records``: an iteration's DPO / PRM records (core.formats.pair_records) from those.

A pair's first error is the critic's ``FirstErrorMarked``, moved by the latest reviewer correction
(``FirstErrorCorrected``: its step, no longer a fallback); the environment oracle's index, when the
critic recorded one, is kept beside it (core.formats.pair_records decides which labels); a replayed
pair's ``ReplayProbed`` events come with it (the PRM records' Monte Carlo ``values``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import select

from core.domain.events import (
    FirstErrorCorrected,
    FirstErrorMarked,
    PairFound,
    ReplayProbed,
    RevisionMaterialized,
    SampleRespliced,
    TreeStarted,
)
from core.domain.ids import pair_stream, tree_stream
from core.domain.mcts import SearchTree
from core.domain.trace_datasets import DatasetManifest
from core.domain.transitions import TreeSource
from core.formats.pair_records import PairSource, dpo_records, prm_records, tree_value_records
from core.store.queries.pairs import iteration_pair_ids
from core.store.tables import trees


async def pair_source(store: Any, pair_id: str, up_to: int | None = None) -> PairSource | None:
    found: PairFound | None = None
    marked: FirstErrorMarked | None = None
    position = 0
    probes: list[tuple[int, int, int]] = []
    for recorded in await store.read_stream(pair_stream(pair_id)):
        if up_to is not None and recorded.position > up_to:
            break
        event = recorded.event
        if isinstance(event, PairFound):
            found, position = event, recorded.position
        elif isinstance(event, ReplayProbed):  # the replay critic's evidence: the PRM export's values
            probes.append((event.prefix_steps, event.successes, event.m))
        elif isinstance(event, FirstErrorMarked):
            marked = event
        elif isinstance(event, FirstErrorCorrected) and marked is not None:
            marked = dataclasses.replace(marked, transition_index=event.new_transition_index, fallback=False)
    return PairSource(found, marked, position, tuple(probes)) if found is not None else None


async def _sources(store: Any, pair_ids: Sequence[str], up_to: int | None = None) -> list[PairSource]:
    out = []
    for pair_id in pair_ids:
        source = await pair_source(store, pair_id, up_to)
        if source is not None:
            out.append(source)
    return sorted(out, key=lambda s: (s.position, s.pair.pair_id))


async def iteration_pairs(
    store: Any, project_id: str | None, run_id: str, iteration: int
) -> list[PairSource]:
    return await _sources(store, await iteration_pair_ids(store, project_id, run_id, iteration))


async def dataset_pairs(store: Any, manifest: DatasetManifest) -> list[PairSource]:
    ids: list[str] = []
    for entry in manifest.entries:
        recorded = await store.get(entry.position)
        event = recorded.event if recorded is not None else None
        if isinstance(event, RevisionMaterialized | SampleRespliced) and event.pair_id not in ids:
            ids.append(event.pair_id)
    return await _sources(store, ids, manifest.log_position)


async def iteration_trees(
    store: Any, project_id: str | None, run_id: str, iteration: int
) -> list[TreeSource]:
    query = select(trees.c.tree_id).where(
        trees.c.run_id == run_id, trees.c.iteration == iteration, trees.c.status == "completed"
    )
    if project_id is not None:
        query = query.where(trees.c.project_id == project_id)
    async with store.engine.connect() as conn:
        ids = [row[0] for row in await conn.execute(query.order_by(trees.c.tree_id))]
    out = []
    for tree_id in ids:
        recorded = await store.read_stream(tree_stream(tree_id))
        events = [r.event for r in recorded]
        started = next((e for e in events if isinstance(e, TreeStarted)), None)
        if started is not None:
            out.append(
                TreeSource(
                    SearchTree.from_events(events), started.task, started.instruction, recorded[-1].position
                )
            )
    return out


async def iteration_records(
    store: Any, project_id: str | None, run_id: str, iteration: int, fmt: str
) -> Iterable[dict[str, Any]]:
    """The iteration's ``dpo`` / ``prm`` records (its pairs) or ``prm-values`` (its trees)."""
    if fmt == "prm-values":
        records: list[dict[str, Any]] = []
        for source in await iteration_trees(store, project_id, run_id, iteration):
            records.extend(tree_value_records(source.tree, source.task, source.instruction))
        return records
    sources = await iteration_pairs(store, project_id, run_id, iteration)
    return dpo_records(sources) if fmt == "dpo" else prm_records(sources)
