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

General chat data is not included: it is the user's own file, mixed in at training time (the
iteration's manifest records which of its lines were used).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from itertools import chain
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy.ext.asyncio import AsyncEngine

from core.domain.good_samples import trajectory_to_sample
from core.domain.serde import from_dict
from core.domain.trajectory import Message, Step, TrainingSample, Trajectory
from core.formats.export import dumps_line, loads, loads_many, parquet_batch, parquet_schema, record_fn
from core.formats.parquet import plain_columns_batch
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


def item_line(item: Any, fmt: str) -> str:
    """One item (a TrainingSample or a plain stored sample dict) as its JSONL line in ``fmt``."""
    if type(item) is dict:
        return dumps_line(PLAIN_RECORD[fmt](item)).decode()
    return dumps_line(record_fn(fmt)(item)).decode()


async def rendered_jsonl(
    batches: AsyncGenerator[Sequence[Any], None], line_of: Callable[[Any], str | None], counter: Any
) -> AsyncIterator[bytes]:
    """JSONL from rows whose first column is their line as the database rendered it
    (core.store.export_lines), a chunk per batch; a row without one is ``line_of(row)`` (its line,
    or None when it is left out). ``counter`` counts the lines (the export_rows metric)."""
    async with contextlib.aclosing(batches):
        async for rows in batches:
            lines = [row[0] for row in rows]
            if None in lines:
                lines = [row[0] if row[0] is not None else line_of(row) for row in rows]
                lines = [line for line in lines if line is not None]
            if lines:
                counter.inc(len(lines))
                yield "".join(lines).encode()


def rendered_body(
    batches: AsyncGenerator[Sequence[Any], None], item_of: Callable[[Any], Any], fmt: str, counter: Any
) -> AsyncIterator[bytes]:
    """A download in ``fmt`` from the database's rendering (core.store.export_lines): its lines
    for JSONL, its columns for Parquet; a row left to Python becomes ``item_of(row)`` (an item as
    ``dataset_batches`` makes them, or None when it is left out)."""
    if fmt == export_lines.PARQUET:
        return rendered_parquet(batches, item_of, counter)

    def line_of(row: Any) -> str | None:
        item = item_of(row)
        return None if item is None else item_line(item, fmt)

    return rendered_jsonl(batches, line_of, counter)


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

    def item_of(row: Any) -> Any:
        return _item(row[1], row[2], loads(row[3]), alpha, True)

    rows = export_lines.iteration_lines(engine, project_id, run_id, iteration, fmt, batch)
    return rendered_body(rows, item_of, fmt, counter)


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


def _pieces(rows: Sequence[Any], item_of: Callable[[Any], Any], schema: Any) -> list[Any]:
    """The record batches of ``rows`` in order: runs of rendered rows from their columns
    (core.formats.parquet ``plain_columns_batch``), runs of the others from their items."""
    pieces: list[Any] = []
    run: list[Any] = []
    items: list[Any] = []
    for row in rows:
        if row[0] is not None:
            if items:
                pieces.append(parquet_batch(items, schema))
                items = []
            run.append(row)
            continue
        if run:
            pieces.append(_columns(run, schema))
            run = []
        item = item_of(row)
        if item is not None:
            items.append(item)
    if items:
        pieces.append(parquet_batch(items, schema))
    if run:
        pieces.append(_columns(run, schema))
    return pieces


def _columns(run: Sequence[Any], schema: Any) -> Any:
    """The record batch of rendered rows (core.store.export_lines' Parquet columns)."""
    return plain_columns_batch(
        schema,
        [row[4] for row in run],
        [row[5] for row in run],
        [row[6] for row in run],
        [row[7] for row in run],
        [row[8] for row in run],
        (
            "".join([row[9] for row in run]),
            "".join([row[10] for row in run]),
            ",".join([row[11] for row in run if row[11]]),
            "".join([row[12] for row in run]),
            list(chain.from_iterable([row[13] for row in run])),
            list(chain.from_iterable([row[14] for row in run])),
            list(chain.from_iterable([row[15] for row in run])),
        ),
    )


async def rendered_parquet(
    batches: AsyncGenerator[Sequence[Any], None],
    item_of: Callable[[Any], Any],
    counter: Any,
    row_group_size: int = DEFAULT_PAGE_SIZE,
) -> AsyncIterator[bytes]:
    """``parquet_bytes`` of the database's rendered columns (core.store.export_lines): the same
    file, one row group of ``row_group_size`` samples at a time, sent as groups are written."""
    schema = parquet_schema()
    sink = _DrainSink()
    writer = pq.ParquetWriter(pa.PythonFile(sink, mode="w"), schema)
    table: Any = None
    try:
        async with contextlib.aclosing(batches):
            async for rows in batches:
                pieces = _pieces(rows, item_of, schema)
                count = sum(piece.num_rows for piece in pieces)
                if not count:
                    continue
                counter.inc(count)
                new = pa.Table.from_batches(pieces, schema)
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
