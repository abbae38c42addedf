"""Owns streaming the DPO and PRM exports (core.formats.pair_records) of an iteration or a named
dataset out of the store, as JSONL bytes in chunks of about 64 KiB."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any

from api.datasets import chunked
from core.domain.trace_datasets import DatasetManifest
from core.formats.pair_records import dpo_records, pair_lines, prm_records
from core.store.pair_reads import dataset_pairs, iteration_records
from core.store.ports import EventStore


async def _chunks(records: Iterable[dict[str, Any]], counter: Any) -> AsyncIterator[bytes]:
    async def lines() -> AsyncIterator[str]:
        for line in pair_lines(records):
            counter.inc()
            yield line

    async for chunk in chunked(lines()):
        yield chunk


async def iteration_body(
    store: EventStore, project_id: str, run_id: str, iteration: int, fmt: str, counter: Any
) -> AsyncIterator[bytes]:
    async for chunk in _chunks(await iteration_records(store, project_id, run_id, iteration, fmt), counter):
        yield chunk


async def dataset_body(
    store: EventStore, manifest: DatasetManifest, fmt: str, counter: Any
) -> AsyncIterator[bytes]:
    sources = await dataset_pairs(store, manifest)
    async for chunk in _chunks(dpo_records(sources) if fmt == "dpo" else prm_records(sources), counter):
        yield chunk
