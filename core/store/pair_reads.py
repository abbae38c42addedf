"""Owns reading what the DPO and PRM exports need out of an event store: pairs with their first
errors, and finished search trees.

* ``iteration_pairs``: the pairs a run's iteration found (``pairs`` read model: which ids), each
  read from its own stream.
* ``dataset_pairs``: the pairs behind a named dataset's revision samples, found from the events
  the manifest points at (``RevisionMaterialized`` / ``SampleRespliced``) and read only up to the
  manifest's log position, so a download stays the same after later critiques or corrections.
* ``iteration_trees``: the iteration's completed search trees rebuilt from their streams.
* ``pair_source``: one pair (``core.store.pair_repository.PairRepository.source``).
* ``iteration_records``: an iteration's DPO / PRM records (core.formats.pair_records) from those.

A pair's first error is the critic's ``FirstErrorMarked``, moved by the latest reviewer correction
(``FirstErrorCorrected``: its step, no longer a fallback); the environment oracle's index, when the
critic recorded one, is kept beside it (core.formats.pair_records decides which labels); a replayed
pair's ``ReplayProbed`` events come with it (the PRM records' Monte Carlo ``values``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from core.domain.events import RevisionMaterialized, SampleRespliced, TreeStarted
from core.domain.ids import tree_stream
from core.domain.mcts import SearchTree
from core.domain.trace_datasets import DatasetManifest
from core.domain.transitions import TreeSource
from core.formats.pair_records import PairSource, dpo_records, prm_records, tree_value_records
from core.store.pair_repository import PairRepository
from core.store.ports import EventStore
from core.store.queries.pairs import pair_ids
from core.store.queries.trees import completed_tree_ids


async def pair_source(store: EventStore, pair_id: str, up_to: int | None = None) -> PairSource | None:
    return await PairRepository(store).source(pair_id, up_to)


async def iteration_pairs(
    store: EventStore, project_id: str | None, run_id: str, iteration: int
) -> list[PairSource]:
    ids = await pair_ids(store, run_id, iteration, project_id)
    return await PairRepository(store).sources(ids)


async def dataset_pairs(store: EventStore, manifest: DatasetManifest) -> list[PairSource]:
    ids: list[str] = []
    for entry in manifest.entries:
        recorded = await store.get(entry.position)
        event = recorded.event if recorded is not None else None
        if isinstance(event, RevisionMaterialized | SampleRespliced) and event.pair_id not in ids:
            ids.append(event.pair_id)
    return await PairRepository(store).sources(ids, manifest.log_position)


async def iteration_trees(
    store: EventStore, project_id: str | None, run_id: str, iteration: int
) -> list[TreeSource]:
    """The iteration's completed trees (of ``project_id``'s run, when given), each rebuilt from its
    stream, in tree-id order."""
    out = []
    for tree_id in await completed_tree_ids(store, run_id, iteration, project_id):
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
    store: EventStore, project_id: str | None, run_id: str, iteration: int, fmt: str
) -> Iterable[dict[str, Any]]:
    """The iteration's ``dpo`` / ``prm`` records (its pairs) or ``prm-values`` (its trees)."""
    if fmt == "prm-values":
        records: list[dict[str, Any]] = []
        for source in await iteration_trees(store, project_id, run_id, iteration):
            records.extend(tree_value_records(source.tree, source.task, source.instruction))
        return records
    sources = await iteration_pairs(store, project_id, run_id, iteration)
    return dpo_records(sources) if fmt == "dpo" else prm_records(sources)
