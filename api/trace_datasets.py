"""Owns building and reading named trace datasets against the store (core.domain.trace_datasets).

Build (``create_dataset``): read the log position first, then walk the project's ``samples`` rows
at or below it (joined with their event's recording time) page by page in (position, sample id)
order, turn each into ``SampleFacts`` and let the pure planner choose; the manifest is appended as
``DatasetCreated`` on the dataset's own stream with expected version -1, so two concurrent builds
of the same name and version cannot both succeed (409). The version is one more than the highest
version of that name in the ``datasets`` read model.

Read (``iter_dataset_samples``): the manifest's entries, ``page_size`` at a time, are fetched from
the EVENT LOG by position (not from a read model) and decoded into TrainingSamples in manifest
order (with each assistant message's reasoning folded into its content when the stored query has
``include_reasoning``); events of the current version decode only their sample, plain samples
pass on as their dicts (api.datasets), and the manifest's entries are decoded directly
(``manifest_from_data``). A dataset's downloads are therefore byte-identical for the life of the
log, and survive a rebuild of every projection. ``rebuild_problems`` re-evaluates the stored
query the same way as the build and lists what would differ.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Sequence
from datetime import UTC
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from sqlalchemy import Text, cast, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from api.datasets import DEFAULT_PAGE_SIZE, prefetched, training_sample, trajectory
from core.domain.events import (
    DatasetCreated,
    GoodTraceSampled,
    GoodTrajectoryFound,
    RevisionMaterialized,
    SampleRespliced,
    decode,
)
from core.domain.good_samples import trajectory_to_sample
from core.domain.ids import dataset_stream
from core.domain.serde import from_dict
from core.domain.trace_datasets import (
    DatasetEntry,
    DatasetManifest,
    DatasetQuery,
    SampleFacts,
    check_name,
    facts_from_provenance,
    missing_tool_definitions,
    plan_dataset,
    rebuild_check,
)
from core.domain.trajectory import TrainingSample
from core.formats.export import loads
from core.formats.records import fold_reasoning, is_plain
from core.store.ports import EventStore
from core.store.tables import datasets, events, samples


class DatasetReadError(RuntimeError):
    """A manifest entry's event is missing or holds another sample (the log was tampered with)."""


def code_version() -> str:
    """The installed agentr version (what a manifest records as the code that built it)."""
    try:
        return f"agentr {version('agentr')}"
    except PackageNotFoundError:  # running from a source tree without an install
        return "agentr (source)"


async def log_position(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int(await conn.scalar(select(func.coalesce(func.max(events.c.position), 0))) or 0)


async def iter_facts(
    engine: AsyncEngine, project_id: str, up_to: int, page_size: int = DEFAULT_PAGE_SIZE
) -> AsyncIterator[SampleFacts]:
    """Facts of the project's samples made by events at or below ``up_to``, in position order."""
    last: tuple[int, str] | None = None
    while True:
        query = (
            select(
                samples.c.sample_id,
                samples.c.kind,
                samples.c.position,
                samples.c.run_id,
                samples.c.template_id,
                samples.c.data,
                events.c.recorded_at,
            )
            .join(events, events.c.position == samples.c.position)
            .where(samples.c.project_id == project_id, samples.c.position <= up_to)
        )
        if last is not None:
            query = query.where(
                (samples.c.position > last[0])
                | ((samples.c.position == last[0]) & (samples.c.sample_id > last[1]))
            )
        query = query.order_by(samples.c.position, samples.c.sample_id).limit(page_size)
        async with engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        for row in rows:
            provenance = (row["data"] or {}).get("provenance") or {}
            recorded_at = row["recorded_at"]
            if recorded_at.tzinfo is None:  # SQLite returns naive UTC
                recorded_at = recorded_at.replace(tzinfo=UTC)
            yield facts_from_provenance(
                row["sample_id"],
                row["kind"],
                row["position"],
                recorded_at,
                row["run_id"],
                provenance,
                row["template_id"],
            )
        if len(rows) < page_size:
            return
        last = (rows[-1]["position"], rows[-1]["sample_id"])


async def _collect(it: AsyncIterator[SampleFacts]) -> list[SampleFacts]:
    return [facts async for facts in it]


async def next_version(engine: AsyncEngine, project_id: str, name: str) -> int:
    async with engine.connect() as conn:
        highest = await conn.scalar(
            select(func.max(datasets.c.version)).where(
                datasets.c.project_id == project_id, datasets.c.name == name
            )
        )
    return int(highest or 0) + 1


async def plan(
    engine: AsyncEngine, project_id: str, name: str, query: DatasetQuery, allow_empty: bool = False
) -> DatasetManifest:
    """The manifest a build would store now (raises ``DatasetQueryError`` for a bad or empty query)."""
    check_name(name)
    query = query.validated()
    position = await log_position(engine)
    candidates = await _collect(iter_facts(engine, project_id, position))
    manifest = plan_dataset(
        project_id=project_id,
        name=name,
        version=await next_version(engine, project_id, name),
        query=query,
        log_position=position,
        candidates=candidates,
        code_version=code_version(),
        allow_empty=allow_empty,
    )
    warning = missing_tool_definitions([s async for s in iter_dataset_samples(engine, manifest)])
    return dataclasses.replace(manifest, warnings=(warning,)) if warning else manifest


_ENTRY_KEYS = frozenset(f.name for f in dataclasses.fields(DatasetEntry))


def manifest_from_data(data: dict[str, Any]) -> DatasetManifest:
    """A stored manifest decoded. Its entries (up to 100,000) are built directly, since the generic
    ``from_dict`` would cost more than the download they list; the rest goes through ``from_dict``
    (as does everything when an entry is not of the known shape)."""
    entries: list[DatasetEntry] = []
    try:
        for e in data["entries"]:
            if not e.keys() <= _ENTRY_KEYS:
                break
            entries.append(DatasetEntry(e["sample_id"], e["kind"], e["position"], e.get("template_id")))
        else:
            head: DatasetManifest = from_dict(DatasetManifest, {**data, "entries": []})
            return dataclasses.replace(head, entries=tuple(entries))
    except (KeyError, TypeError, AttributeError):
        pass
    manifest: DatasetManifest = from_dict(DatasetManifest, data)
    return manifest


def created_event(project_id: str, manifest: DatasetManifest) -> tuple[DatasetCreated, str]:
    return DatasetCreated(manifest.dataset_id, project_id, manifest), dataset_stream(manifest.dataset_id)


async def read_manifest(store: EventStore, dataset_id: str) -> DatasetManifest:
    for recorded in await store.read_stream(dataset_stream(dataset_id)):
        if recorded.event_type != DatasetCreated.__name__:
            continue
        if recorded.event_version == DatasetCreated.event_version:
            return manifest_from_data(recorded.data["manifest"])
        manifest: DatasetManifest = recorded.event.manifest  # type: ignore[attr-defined]  # an older version: upcast
        return manifest
    raise DatasetReadError(f"dataset {dataset_id}: no DatasetCreated event in {dataset_stream(dataset_id)}")


def _sample_of(event: Any) -> TrainingSample | None:
    if isinstance(event, RevisionMaterialized | SampleRespliced):
        return event.sample
    if isinstance(event, GoodTrajectoryFound | GoodTraceSampled):
        return trajectory_to_sample(event.trajectory, event.sample_id)
    return None


_SAMPLE_EVENTS = {cls.__name__: cls.event_version for cls in (RevisionMaterialized, SampleRespliced)}
_TRAJECTORY_EVENTS = {cls.__name__: cls.event_version for cls in (GoodTrajectoryFound, GoodTraceSampled)}


def stored_sample(event_type: str, event_version: int, data: dict[str, Any]) -> TrainingSample | None:
    """The sample an event row holds, or None. Events of the current version decode only their
    sample (or trajectory) with the direct decoders of api.datasets; anything else (older versions
    to upcast, other events) goes through the full event decoding."""
    try:
        if _SAMPLE_EVENTS.get(event_type) == event_version:
            return training_sample(data["sample"])
        if _TRAJECTORY_EVENTS.get(event_type) == event_version:
            return trajectory_to_sample(trajectory(data["trajectory"]), data["sample_id"])
    except (KeyError, TypeError):  # not the shape of this version: let the full decoding explain it
        pass
    return _sample_of(decode(event_type, event_version, data))


def _plain_stored(event_type: str, event_version: int, data: Any, fold: bool) -> dict[str, Any] | None:
    """The plain sample dict a current-version revision event holds (None if it holds none, or if
    ``fold`` would change it: an assistant message with reasoning)."""
    if _SAMPLE_EVENTS.get(event_type) != event_version or not isinstance(data, dict):
        return None
    stored: dict[str, Any] = data.get("sample")  # type: ignore[assignment]  # is_plain: a dict
    if not is_plain(stored):
        return None
    if fold and any(m.get("reasoning") for m in stored["messages"] if m["role"] == "assistant"):
        return None
    return stored


async def iter_dataset_samples(
    engine: AsyncEngine, manifest: DatasetManifest, page_size: int = DEFAULT_PAGE_SIZE, plain: bool = False
) -> AsyncIterator[Any]:
    """The manifest's samples in order, read from the event log ``page_size`` events at a time
    (the next page is read while this one is encoded: api.datasets.prefetched). With ``plain``, a
    plain stored sample (core.formats.records.is_plain) of a revision event is yielded as its dict
    (the encoders of api.datasets take both); every other sample as a TrainingSample."""
    entries = manifest.entries
    fold = manifest.query.include_reasoning

    async def fetch(start: int | None) -> Sequence[Any]:
        # one page of entries and its event rows (as one item: ``prefetched`` stops at an empty list)
        first = start or 0
        page = entries[first : first + page_size]
        if not page:
            return []
        positions = sorted({e.position for e in page})
        query = select(
            events.c.position, events.c.event_type, events.c.event_version, cast(events.c.data, Text)
        ).where(events.c.position.in_(positions))
        async with engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [(first, page, rows)]

    async with contextlib.aclosing(prefetched(fetch, lambda pages: pages[0][0] + page_size, 1)) as reader:
        async for pages in reader:
            for _start, page, rows in pages:
                by_position = {row[0]: row for row in rows}
                for entry in page:
                    row = by_position.get(entry.position)
                    sample = None
                    if row is not None:
                        data = loads(row[3])
                        stored = _plain_stored(row[1], row[2], data, fold) if plain else None
                        if stored is not None and stored["sample_id"] == entry.sample_id:
                            yield stored
                            continue
                        sample = stored_sample(row[1], row[2], data)
                    if sample is None or sample.sample_id != entry.sample_id:
                        raise DatasetReadError(
                            f"dataset {manifest.dataset_id}: event {entry.position} does not hold "
                            f"sample {entry.sample_id}"
                        )
                    yield fold_reasoning(sample) if fold else sample


async def rebuild_problems(engine: AsyncEngine, project_id: str, manifest: DatasetManifest) -> Sequence[str]:
    """What a rebuild of ``manifest``'s query (bounded by its log position) would change."""
    candidates = await _collect(iter_facts(engine, project_id, manifest.log_position))
    return rebuild_check(manifest, candidates)
