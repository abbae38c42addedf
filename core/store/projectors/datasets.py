"""Owns the ``datasets`` read model (one row per built dataset) and the good samples of traces.

``DatasetCreated`` -> a ``datasets`` row (name, version, counts, query, digests; the manifest's
entries stay in the event, which downloads read). ``GoodTraceSampled`` -> a ``good`` row in
``samples`` holding the successful trace's trajectory (no run, no tree), like a search's good leaf,
and its id on the trace's row.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncConnection

from core.domain import events as ev
from core.domain.serde import to_dict
from core.store.projectors._sql import Item, Projector, upsert
from core.store.tables import datasets, samples, traces


async def _dataset_created(conn: AsyncConnection, items: Sequence[Item]) -> None:
    for recorded, event in items:
        assert isinstance(event, ev.DatasetCreated)
        manifest = event.manifest
        counts = manifest.counts
        values = {
            "dataset_id": event.dataset_id,
            "project_id": event.project_id,
            "name": manifest.name,
            "version": manifest.version,
            "position": recorded.position,
            "log_position": manifest.log_position,
            "samples": len(manifest.entries),
            "revisions": counts.get("revision", 0),
            "goods": counts.get("good", 0),
            "query": to_dict(manifest.query),
            "entries_sha256": manifest.entries_sha256,
            "template_ids": list(manifest.template_ids),
            "code_version": manifest.code_version,
            "export_version": manifest.export_version,
            "created_at": recorded.recorded_at,
        }
        await upsert(conn, datasets, values, update=[])


async def _good_trace(conn: AsyncConnection, items: Sequence[Item]) -> None:
    for recorded, event in items:
        assert isinstance(event, ev.GoodTraceSampled)
        values = {
            "sample_id": event.sample_id,
            "run_id": None,
            "project_id": event.project_id,
            "iteration": 0,
            "kind": "good",
            "pair_id": None,
            "tree_id": None,
            "position": recorded.position,
            "data": to_dict(event.trajectory),
        }
        await upsert(conn, samples, values, update=[])
        # the trace view shows its good sample (a successful trace is never revised)
        await conn.execute(
            update(traces)
            .where(traces.c.trace_id == event.trace_id, traces.c.sample_id.is_(None))
            .values(sample_id=event.sample_id)
        )


PROJECTORS: dict[str, Projector] = {
    "DatasetCreated": _dataset_created,
    "GoodTraceSampled": _good_trace,
}
