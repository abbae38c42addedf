"""Owns streaming an iteration's dataset out of the store: row batches in, export bytes out.

The rows come from the ``samples`` read model through ONE server-side cursor, a batch of rows at
a time in (event position, sample id) order (core.store.exports.iteration_sample_batches: the
next batch is read while this one is encoded), so neither the database nor this process ever holds
the whole dataset, and a file is one snapshot. Everything downstream works a batch at a time: the
JSON text of a batch is parsed with orjson (core.formats.export ``loads_many``), its rows become
items, the encoders turn a batch into bytes, and the route counts a batch at once. Rows become
TrainingSamples (good trajectories become samples with every assistant turn trained on; only those
with reward >= the iteration's alpha are part of the dataset, as in core.domain.datasets), except
that a plain stored sample (core.formats.records ``is_plain``: text messages, no tool calls, no
tools) is passed on as its dict when the caller asks (``plain``): ``jsonl_bytes`` turns it into
its record with the ``*_plain`` builders and ``parquet_bytes`` into its columns, the same bytes the
TrainingSample would give, without building one. Lines are encoded with ``dumps_line`` (orjson,
byte-identical to ``json.dumps``). Parquet uses core.formats.export's schema and columnar batch
builder (``parquet_schema`` / ``parquet_batch``): one writer for the response, one row group per
``DEFAULT_PAGE_SIZE`` samples, written into an in-memory sink that is drained as groups are
written. The app's lifespan calls ``warm_up`` so that pyarrow's one-time start (on its first
conversion it imports pandas, about half a second) happens at start-up, not inside the first
Parquet download.

On PostgreSQL the openai / sharegpt / samples JSONL and Parquet downloads take the database's
rendering instead (``rendered_body``; core.store.export_lines): a chunk's lines come as one block
of bytes and are sent as they are, and Parquet's NDJSON block is read by pyarrow
(core.formats.parquet ``rendered_batch``); only the rows the database leaves to Python are decoded
here.

General chat data is not included: it is the user's own file, mixed in at training time (the
iteration's manifest records which of its lines were used).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy.ext.asyncio import AsyncEngine

from core.domain.good_samples import trajectory_to_sample
from core.domain.serde import from_dict
from core.domain.trajectory import Message, Step, TrainingSample, Trajectory
from core.formats.export import dumps_line, loads, loads_many, parquet_batch, parquet_schema, record_fn
from core.formats.parquet import rendered_batch
from core.formats.records import PLAIN_RECORD, is_plain
from core.store import export_lines, exports

DEFAULT_PAGE_SIZE = 500  # samples per Parquet row group


_SAMPLE_KEYS = frozenset(f.name for f in dataclasses.fields(TrainingSample))
_TRAJECTORY_KEYS = frozenset(f.name for f in dataclasses.fields(Trajectory))
_PLAIN_MESSAGE_KEYS = frozenset(
    {"role", "content", "weight", "tool_call_id", "name", "reasoning", "tool_calls", "why"}
)
_PLAIN_STEP_KEYS = frozenset(f.name for f in dataclasses.fields(Step))


def _message(m: dict[str, Any]) -> Message:
    if m.get("tool_calls") or not m.keys() <= _PLAIN_MESSAGE_KEYS:
        return from_dict(Message, m)
    return Message(
        m["role"],
        m["content"],
        m.get("weight", 0),
        tool_call_id=m.get("tool_call_id"),
        name=m.get("name"),
        reasoning=m.get("reasoning", ""),
        why=m.get("why", ""),  # absent in samples stored before reasons existed
    )


def _step(s: dict[str, Any]) -> Step:
    if (
        s.get("tool_calls")
        or s.get("tool_results")
        or s.get("alternatives")
        or s.get("replies")
        or not s.keys() <= _PLAIN_STEP_KEYS
    ):
        return from_dict(Step, s)
    return Step(**s)


def training_sample(data: dict[str, Any]) -> TrainingSample:
    """Decode a stored TrainingSample. The generic ``from_dict`` costs most of an export's time, so
    rows of the known shape (messages without tool calls) take a direct path; anything else goes
    through ``from_dict``."""
    if data.keys() <= _SAMPLE_KEYS:
        try:
            return TrainingSample(
                sample_id=data["sample_id"],
                kind=data["kind"],
                messages=tuple(_message(m) for m in data["messages"]),
                reward=data.get("reward"),
                provenance=data.get("provenance") or {},
                tools=tuple(data.get("tools") or ()),
            )
        except (KeyError, TypeError):  # not the plain shape: let from_dict decode or explain it
            pass
    return from_dict(TrainingSample, data)


def trajectory(data: dict[str, Any]) -> Trajectory:
    if data.keys() <= _TRAJECTORY_KEYS:
        try:
            return Trajectory(
                task=data["task"],
                instruction=data["instruction"],
                steps=tuple(_step(s) for s in data["steps"]),
                reward=data.get("reward"),
                provenance=data.get("provenance") or {},
                tools=tuple(data.get("tools") or ()),
                task_name=data.get("task_name", ""),
            )
        except (KeyError, TypeError):
            pass
    return from_dict(Trajectory, data)


def row_to_sample(row: Any) -> TrainingSample:
    """A ``samples`` row as a TrainingSample (kind good rows hold a Trajectory)."""
    if row["kind"] == "good":
        return trajectory_to_sample(trajectory(row["data"]), row["sample_id"])
    return training_sample(row["data"])


async def flatten(batches: AsyncGenerator[Sequence[Any], None]) -> AsyncIterator[Any]:
    """The items of ``batches``, one at a time (for the callers that collect them anyway)."""
    async with contextlib.aclosing(batches):
        async for batch in batches:
            for item in batch:
                yield item


async def dataset_batches(
    engine: AsyncEngine,
    *,
    project_id: str,
    run_id: str,
    iteration: int,
    alpha: float,
    batch: int = exports.DEFAULT_BATCH,
    plain: bool = False,
) -> AsyncGenerator[list[Any], None]:
    """The iteration's agent samples in position order, a list per batch of ``batch`` rows read
    through one server-side cursor (core.store.exports.iteration_sample_batches: the next batch is
    read while this one is encoded). The data comes as JSON text, parsed with orjson a batch at a
    time. With ``plain``, a plain stored sample (core.formats.records.is_plain) is an item as its
    dict, for the encoders of ``jsonl_bytes`` / ``parquet_bytes``; every other row a TrainingSample.
    Good samples below ``alpha`` are left out (core.domain.datasets)."""
    rows_batches = exports.iteration_sample_batches(engine, project_id, run_id, iteration, batch)
    async with contextlib.aclosing(rows_batches):  # a client that leaves closes the cursor too
        async for rows in rows_batches:
            out: list[Any] = []
            for (sample_id, kind, _text), data in zip(rows, loads_many([r[2] for r in rows]), strict=True):
                item = _item(sample_id, kind, data, alpha, plain)
                if item is not None:
                    out.append(item)
            if out:
                yield out


def _item(sample_id: str, kind: str, data: Any, alpha: float, plain: bool) -> Any | None:
    """The item of one decoded ``samples`` row (``dataset_batches``), None when it is left out."""
    if plain and kind != "good" and is_plain(data):
        if data["kind"] == "good" and (data.get("reward") is None or data["reward"] < alpha):
            return None
        return data
    sample = row_to_sample({"sample_id": sample_id, "kind": kind, "data": data})
    if sample.kind == "good" and (sample.reward is None or sample.reward < alpha):
        return None
    return sample


def item_line(item: Any, fmt: str) -> bytes:
    """One item (a TrainingSample or a plain stored sample dict) as its JSONL line in ``fmt``."""
    if type(item) is dict:
        return dumps_line(PLAIN_RECORD[fmt](item))
    return dumps_line(record_fn(fmt)(item))


# an item of a row the database left to Python: (its 0-based place in the download, a, b, data text
# or None; core.store.export_lines.Chunk) -> the item, or None when it is left out
ItemOf = Callable[[int, Any, Any, "str | None"], Any]


async def rendered_jsonl(
    chunks: AsyncGenerator[export_lines.Chunk, None], line_of: Callable[..., bytes | None], counter: Any
) -> AsyncIterator[bytes]:
    """JSONL from the database's rendering (core.store.export_lines), a chunk's block at a time; a
    row left to Python is ``line_of(place, a, b, data)`` (its line, or None when it is left out).
    ``counter`` counts the lines (the export_rows metric)."""
    at = 0
    async with contextlib.aclosing(chunks):
        async for chunk in chunks:
            block, count = chunk.block, chunk.count
            if chunk.left:  # the chunk's lines, each row left to Python an empty one
                lines = [line + b"\n" for line in block.split(b"\n")[:-1]]
                for place, a, b, data in chunk.left:
                    lines[place] = line_of(at + place, a, b, data) or b""
                count = sum(1 for line in lines if line)
                block = b"".join(lines)
            at += chunk.count
            if count:
                counter.inc(count)
                yield block


def rendered_body(
    chunks: AsyncGenerator[export_lines.Chunk, None], item_of: ItemOf, fmt: str, counter: Any
) -> AsyncIterator[bytes]:
    """A download in ``fmt`` from the database's rendering (core.store.export_lines): its lines
    for JSONL, its NDJSON for Parquet; a row left to Python becomes ``item_of(place, a, b, data)``
    (an item as ``dataset_batches`` makes them, or None when it is left out)."""
    if fmt == export_lines.PARQUET:
        return rendered_parquet(chunks, item_of, counter)

    def line_of(place: int, a: Any, b: Any, data: str | None) -> bytes | None:
        item = item_of(place, a, b, data)
        return None if item is None else item_line(item, fmt)

    return rendered_jsonl(chunks, line_of, counter)


def iteration_body(
    engine: AsyncEngine,
    *,
    project_id: str,
    run_id: str,
    iteration: int,
    alpha: float,
    fmt: str,
    counter: Any,
    batch: int = exports.DEFAULT_BATCH,
) -> AsyncIterator[bytes]:
    """The iteration's dataset in ``fmt`` (openai, sharegpt, samples JSONL or Parquet) from the
    database's rendering (core.store.export_lines; PostgreSQL): the bytes ``jsonl_bytes`` /
    ``parquet_bytes`` give for ``dataset_batches(plain=True)``. A row the database leaves to
    Python is decoded and made an item here as ``dataset_batches`` would."""

    def item_of(_place: int, sample_id: Any, kind: Any, data: str | None) -> Any:
        return _item(sample_id, kind, loads(data) if data is not None else None, alpha, True)

    chunks = export_lines.iteration_lines(engine, project_id, run_id, iteration, fmt, batch)
    return rendered_body(chunks, item_of, fmt, counter)


def iter_dataset(
    engine: AsyncEngine,
    *,
    project_id: str,
    run_id: str,
    iteration: int,
    alpha: float,
    batch: int = exports.DEFAULT_BATCH,
    plain: bool = False,
) -> AsyncIterator[Any]:
    """``dataset_batches``, one sample at a time."""
    return flatten(
        dataset_batches(
            engine,
            project_id=project_id,
            run_id=run_id,
            iteration=iteration,
            alpha=alpha,
            batch=batch,
            plain=plain,
        )
    )


async def jsonl_bytes(batches: AsyncGenerator[Sequence[Any], None], fmt: str) -> AsyncIterator[bytes]:
    """OpenAI, ShareGPT or samples JSONL (one ``dumps_line`` per sample), sent in chunks of at least
    about 64 KiB (a batch at a time). Each item is a TrainingSample or a plain stored sample dict
    (same record)."""
    record = record_fn(fmt)
    plain_record = PLAIN_RECORD[fmt]
    buffer: list[bytes] = []
    size = 0
    async with contextlib.aclosing(batches):
        async for items in batches:
            lines = [dumps_line(plain_record(item) if type(item) is dict else record(item)) for item in items]
            buffer.extend(lines)
            size += sum(map(len, lines))
            if size >= 65536:
                yield b"".join(buffer)
                buffer, size = [], 0
    if buffer:
        yield b"".join(buffer)


async def chunked(lines: AsyncIterator[str]) -> AsyncIterator[bytes]:
    """Lines joined into chunks of about 64 KiB."""
    buffer: list[str] = []
    size = 0
    async for line in lines:
        buffer.append(line)
        size += len(line)
        if size >= 65536:
            yield "".join(buffer).encode()
            buffer, size = [], 0
    if buffer:
        yield "".join(buffer).encode()


class _DrainSink:
    """A write-only file object whose written bytes are taken out after each row group."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._position = 0
        self.closed = False

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self._parts.append(chunk)
        self._position += len(chunk)
        return len(chunk)

    def flush(self) -> None:
        return None

    def tell(self) -> int:
        return self._position

    def close(self) -> None:
        self.closed = True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def drain(self) -> bytes:
        out = b"".join(self._parts)
        self._parts = []
        return out


def warm_up() -> None:
    """Run pyarrow's lazy one-time initialisation now (an empty Parquet batch converts nothing)."""
    parquet_batch([])


async def parquet_bytes(
    batches: AsyncGenerator[Sequence[Any], None], row_group_size: int = DEFAULT_PAGE_SIZE
) -> AsyncIterator[bytes]:
    """A Parquet file, sent one row group of ``row_group_size`` samples at a time (then the footer).
    Each item is a TrainingSample or a plain stored sample dict (``parquet_batch`` takes both)."""
    schema = parquet_schema()
    sink = _DrainSink()
    writer = pq.ParquetWriter(pa.PythonFile(sink, mode="w"), schema)
    chunk: list[Any] = []
    try:
        async with contextlib.aclosing(batches):
            async for items in batches:
                chunk.extend(items)
                if len(chunk) < row_group_size:
                    continue
                for start in range(0, len(chunk) - row_group_size + 1, row_group_size):
                    group = chunk[start : start + row_group_size]
                    writer.write_batch(parquet_batch(group, schema), row_group_size=row_group_size)
                chunk = chunk[len(chunk) - len(chunk) % row_group_size :]
                yield sink.drain()
        if chunk:
            writer.write_batch(parquet_batch(chunk, schema), row_group_size=row_group_size)
    finally:
        writer.close()
    yield sink.drain()


def _chunk_batch(chunk: export_lines.Chunk, at: int, item_of: ItemOf, schema: Any) -> Any | None:
    """The record batch of one chunk's rows in order (None when all are left out): the rendered
    ones from their NDJSON (core.formats.parquet ``rendered_batch``; a block it refuses is decoded
    and its samples made TrainingSamples here), the others from their items."""
    rendered = None
    if chunk.block:
        try:
            rendered = rendered_batch(chunk.block, schema)
        except ValueError:  # not of the plain shape after all: Python decodes these samples
            stored = [loads(line) for line in chunk.block.split(b"\n")]
            samples = [training_sample({**d["s"], "provenance": loads(d["p"]), "tools": []}) for d in stored]
            rendered = parquet_batch(samples, schema)
    if not chunk.left:
        return rendered
    items = {place: item_of(at + place, a, b, data) for place, a, b, data in chunk.left}
    kept = [item for item in items.values() if item is not None]
    if not kept:
        return rendered
    if rendered is None or not rendered.num_rows:
        return parquet_batch(kept, schema)
    order: list[int] = []  # each row's place in [rendered..., kept...]
    done, extra = 0, rendered.num_rows
    for place in range(chunk.count):
        if place not in items:
            order.append(done)
            done += 1
        elif items[place] is not None:
            order.append(extra)
            extra += 1
    both = pa.Table.from_batches([rendered, parquet_batch(kept, schema)], schema)
    return both.take(order).combine_chunks().to_batches()[0]


async def rendered_parquet(
    chunks: AsyncGenerator[export_lines.Chunk, None],
    item_of: ItemOf,
    counter: Any,
    row_group_size: int = DEFAULT_PAGE_SIZE,
) -> AsyncIterator[bytes]:
    """``parquet_bytes`` of the database's rendering (core.store.export_lines): the same file, one
    row group of ``row_group_size`` samples at a time, sent as groups are written."""
    schema = parquet_schema()
    sink = _DrainSink()
    writer = pq.ParquetWriter(pa.PythonFile(sink, mode="w"), schema)
    table: Any = None
    at = 0
    try:
        async with contextlib.aclosing(chunks):
            async for chunk in chunks:
                batch = _chunk_batch(chunk, at, item_of, schema)
                at += chunk.count
                if batch is None or not batch.num_rows:
                    continue
                counter.inc(batch.num_rows)
                new = pa.Table.from_batches([batch], schema)
                table = new if table is None else pa.concat_tables([table, new])
                if table.num_rows < row_group_size:
                    continue
                while table.num_rows >= row_group_size:
                    group = table.slice(0, row_group_size).combine_chunks()
                    writer.write_table(group, row_group_size=row_group_size)
                    table = table.slice(row_group_size)
                yield sink.drain()
        if table is not None and table.num_rows:
            writer.write_table(table.combine_chunks(), row_group_size=row_group_size)
    finally:
        writer.close()
    yield sink.drain()
