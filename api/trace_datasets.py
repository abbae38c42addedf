"""Owns building and reading named trace datasets against the store (core.domain.trace_datasets).

Build (``create_dataset``): read the log position first, then walk the project's ``samples`` rows
at or below it (joined with their event's recording time) through one server-side cursor in
(position, sample id) order (core.store.exports.fact_batches), turn each into ``SampleFacts``
and let the pure planner choose; the manifest is appended as
``DatasetCreated`` on the dataset's own stream with expected version -1, so two concurrent builds
of the same name and version cannot both succeed (409). The version is one more than the highest
version of that name in the ``datasets`` read model.

Read (``dataset_sample_batches``): the manifest's entries' events are read from the EVENT LOG by
position (not from a read model), one statement through a server-side cursor, a batch at a time
(core.store.exports.event_batches), and decoded into TrainingSamples in manifest
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
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from datetime import UTC
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from api.datasets import flatten, rendered_body, training_sample, trajectory
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
from core.formats.export import loads, loads_many
from core.formats.records import fold_reasoning, is_plain
from core.store import export_lines, exports
from core.store.ports import EventStore


class DatasetReadError(RuntimeError):
    """A manifest entry's event is missing or holds another sample (the log was tampered with)."""


def code_version() -> str:
    """The installed agentr version (what a manifest records as the code that built it)."""
    try:
        return f"agentr {version('agentr')}"
    except PackageNotFoundError:  # running from a source tree without an install
        return "agentr (source)"


async def log_position(engine: AsyncEngine) -> int:
    return await exports.log_position(engine)


async def iter_facts(
    engine: AsyncEngine, project_id: str, up_to: int, batch: int = exports.DEFAULT_BATCH
) -> AsyncIterator[SampleFacts]:
    """Facts of the project's samples made by events at or below ``up_to``, in position order."""
    rows_batches = exports.fact_batches(engine, project_id, up_to, batch)
    async with contextlib.aclosing(rows_batches):
        async for rows in rows_batches:
            for (sample_id, kind, position, run_id, template_id, _text, recorded_at), data in zip(
                rows, loads_many([r[5] for r in rows]), strict=True
            ):
                provenance = (data or {}).get("provenance") or {}
                if recorded_at.tzinfo is None:  # SQLite returns naive UTC
                    recorded_at = recorded_at.replace(tzinfo=UTC)
                yield facts_from_provenance(
                    sample_id, kind, position, recorded_at, run_id, provenance, template_id
                )


async def _collect(it: AsyncIterator[SampleFacts]) -> list[SampleFacts]:
    return [facts async for facts in it]


async def next_version(engine: AsyncEngine, project_id: str, name: str) -> int:
    return await exports.next_dataset_version(engine, project_id, name)


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


async def dataset_sample_batches(
    engine: AsyncEngine, manifest: DatasetManifest, batch: int = exports.DEFAULT_BATCH, plain: bool = False
) -> AsyncGenerator[list[Any], None]:
    """The manifest's samples in order, a list per batch of ``batch`` entries, read from the event
    log through one server-side cursor over the entries' positions (core.store.exports.event_batches:
    the next batch is read while this one is encoded). With ``plain``, a plain stored sample
    (core.formats.records.is_plain) of a revision event is an item as its dict (the encoders of
    api.datasets take both); every other sample a TrainingSample."""
    entries = manifest.entries
    done = 0
    rows_batches = exports.event_batches(engine, [e.position for e in entries], batch)
    async with contextlib.aclosing(rows_batches):
        async for rows in rows_batches:
            page = entries[done : done + len(rows)]
            done += len(rows)
            texts = [row[3] for row in rows]
            decoded = loads_many([t for t in texts if t is not None])
            out: list[Any] = []
            at = 0
            for entry, row in zip(page, rows, strict=True):
                data = None
                if row[3] is not None:
                    data = decoded[at]
                    at += 1
                out.append(_entry_item(manifest, entry, row[1], row[2], data, plain))
            yield out


def _entry_item(
    manifest: DatasetManifest,
    entry: Any,
    event_type: str | None,
    event_version: int | None,
    data: Any,
    plain: bool,
) -> Any:
    """The item of one manifest entry's decoded event row (``dataset_sample_batches``); ``data``
    None: no event at the entry's position."""
    fold = manifest.query.include_reasoning
    sample = None
    if data is not None:
        assert event_type is not None and event_version is not None  # an event row
        stored = _plain_stored(event_type, event_version, data, fold) if plain else None
        if stored is not None and stored["sample_id"] == entry.sample_id:
            return stored
        sample = stored_sample(event_type, event_version, data)
    if sample is None or sample.sample_id != entry.sample_id:
        raise DatasetReadError(
            f"dataset {manifest.dataset_id}: event {entry.position} does not hold sample {entry.sample_id}"
        )
    return fold_reasoning(sample) if fold else sample


@dataclasses.dataclass(frozen=True)
class RenderedDataset:
    """What a database-rendered download of a dataset reads (``rendered_dataset``): its manifest
    (its entries left out when they were read as the two lists) and its entries' event positions
    and sample ids, in manifest order."""

    manifest: DatasetManifest
    positions: Sequence[int]
    sample_ids: Sequence[str]


async def rendered_dataset(
    store: EventStore, engine: AsyncEngine, dataset_id: str, position: int
) -> RenderedDataset:
    """The dataset whose DatasetCreated event is at ``position``, for ``dataset_body``: when the
    event is of the current version, its manifest's entries are read by the database as two lists
    (core.store.export_lines ``manifest_entries``: a 100,000-entry manifest is not decoded into
    entries); otherwise, or when an entry is of another shape, the manifest is decoded as for
    every other read (``read_manifest``)."""
    read = await export_lines.manifest_entries(
        engine, position, DatasetCreated.__name__, DatasetCreated.event_version
    )
    if read is not None:
        head, positions, sample_ids = read
        if head.get("dataset_id") == dataset_id:
            return RenderedDataset(manifest_from_data({**head, "entries": []}), positions, sample_ids)
    manifest = await read_manifest(store, dataset_id)
    return RenderedDataset(
        manifest, [e.position for e in manifest.entries], [e.sample_id for e in manifest.entries]
    )


def dataset_body(
    engine: AsyncEngine, dataset: RenderedDataset, fmt: str, counter: Any
) -> AsyncIterator[bytes]:
    """The dataset's samples in ``fmt`` (openai, sharegpt, samples JSONL or Parquet) from the
    database's rendering (core.store.export_lines; PostgreSQL): the bytes ``jsonl_bytes`` /
    ``parquet_bytes`` give for ``dataset_sample_batches(plain=True)``. An entry the database
    leaves to Python is decoded and made an item here as ``dataset_sample_batches`` would (a
    missing or mismatched event raises DatasetReadError as there)."""
    manifest = dataset.manifest

    def item_of(place: int, event_type: Any, event_version: Any, data: str | None) -> Any:
        entry = DatasetEntry(dataset.sample_ids[place], "", dataset.positions[place])
        return _entry_item(
            manifest, entry, event_type, event_version, None if data is None else loads(data), True
        )

    chunks = export_lines.event_lines(
        engine, dataset.positions, dataset.sample_ids, fmt, _SAMPLE_EVENTS, manifest.query.include_reasoning
    )
    return rendered_body(chunks, item_of, fmt, counter)


def iter_dataset_samples(
    engine: AsyncEngine, manifest: DatasetManifest, batch: int = exports.DEFAULT_BATCH, plain: bool = False
) -> AsyncIterator[Any]:
    """``dataset_sample_batches``, one sample at a time."""
    return flatten(dataset_sample_batches(engine, manifest, batch, plain))


async def rebuild_problems(engine: AsyncEngine, project_id: str, manifest: DatasetManifest) -> Sequence[str]:
    """What a rebuild of ``manifest``'s query (bounded by its log position) would change."""
    candidates = await _collect(iter_facts(engine, project_id, manifest.log_position))
    return rebuild_check(manifest, candidates)
