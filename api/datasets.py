"""Owns streaming an iteration's dataset out of the store: keyset pages in, export bytes out.

The rows come from the ``samples`` read model in pages of ``page_size`` ordered by (event
position, sample id), each page its own short query (a range scan of the samples (run_id,
iteration, position, sample_id) index), so neither the database nor this process ever holds the
whole dataset; the next page is fetched while this one is encoded (``prefetched``, also used by
api.trace_datasets). The data is read as JSON text and parsed with orjson (core.formats.export
``loads``). Rows become TrainingSamples (good trajectories become samples with every assistant
turn trained on; only those with reward >= the iteration's alpha are part of the dataset, as in
core.domain.datasets), except that a plain stored sample (core.formats.records ``is_plain``: text
messages, no tool calls, no tools) is passed on as its dict when the caller asks (``plain``):
``jsonl_bytes`` turns it into its record with the ``*_plain`` builders and ``parquet_bytes`` into
its columns, the same bytes the TrainingSample would give, without building one. Lines are
encoded with ``dumps_line`` (orjson, byte-identical to ``json.dumps``). Parquet uses
core.formats.export's schema and columnar batch builder (``parquet_schema`` / ``parquet_batch``):
one writer for the response, one row group per page, written into an in-memory sink that is
drained after every group. The app's lifespan calls ``warm_up`` so that pyarrow's one-time start
(on its first conversion it imports pandas, about half a second) happens at start-up, not inside
the first Parquet download.

General chat data is not included: it is the user's own file, mixed in at training time (the
iteration's manifest records which of its lines were used).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import Text, cast, select, tuple_
from sqlalchemy.ext.asyncio import AsyncEngine

from core.domain.good_samples import trajectory_to_sample
from core.domain.serde import from_dict
from core.domain.trajectory import Message, Step, TrainingSample, Trajectory
from core.formats.export import dumps_line, loads, parquet_batch, parquet_schema, record_fn
from core.formats.records import PLAIN_RECORD, is_plain
from core.store.tables import samples

DEFAULT_PAGE_SIZE = 500


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


async def prefetched(
    fetch: Callable[[Any], Awaitable[Sequence[Any]]], next_key: Callable[[Sequence[Any]], Any], page_size: int
) -> AsyncGenerator[Sequence[Any], None]:
    """Pages of rows, each asked for while the caller still encodes the one before it.

    ``fetch(key)`` reads one page after ``key`` (``None``: the first); ``next_key(rows)`` is the
    key after a full page. The database works on page n+1 while this process turns page n into
    bytes, so a download pays the slower of the two, not their sum. A page shorter than
    ``page_size`` is the last."""
    pending: asyncio.Task[Sequence[Any]] | None = asyncio.ensure_future(fetch(None))
    try:
        while pending is not None:
            rows = await pending
            pending = None
            if len(rows) >= page_size:
                pending = asyncio.ensure_future(fetch(next_key(rows)))
            yield rows
    finally:
        if pending is not None:  # the client went away: do not leave the query behind
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending


async def iter_dataset(
    engine: AsyncEngine,
    *,
    project_id: str,
    run_id: str,
    iteration: int,
    alpha: float,
    page_size: int = DEFAULT_PAGE_SIZE,
    plain: bool = False,
) -> AsyncIterator[Any]:
    """The iteration's agent samples in position order, fetched ``page_size`` rows at a time: each
    page one short query (a range scan of the samples (run_id, iteration, position, sample_id)
    index), the next read while this one is encoded (``prefetched``). The data comes as JSON text
    and is parsed with orjson. With ``plain``, a plain stored sample (core.formats.records.is_plain)
    is yielded as its dict, for the encoders of ``jsonl_bytes`` / ``parquet_bytes``; every other
    row as a TrainingSample."""

    async def fetch(last: tuple[int, str] | None) -> Sequence[Any]:
        query = select(
            samples.c.sample_id, samples.c.kind, samples.c.position, cast(samples.c.data, Text)
        ).where(
            samples.c.project_id == project_id,
            samples.c.run_id == run_id,
            samples.c.iteration == iteration,
        )
        if last is not None:
            query = query.where(tuple_(samples.c.position, samples.c.sample_id) > tuple_(*last))
        query = query.order_by(samples.c.position, samples.c.sample_id).limit(page_size)
        async with engine.connect() as conn:
            return (await conn.execute(query)).all()

    # aclosing: a download the client leaves closes the page reader too (no query left running)
    async with contextlib.aclosing(
        prefetched(fetch, lambda rows: (rows[-1][2], rows[-1][0]), page_size)
    ) as pages:
        async for rows in pages:
            for sample_id, kind, _position, text in rows:
                data = loads(text)
                if plain and kind != "good" and is_plain(data):
                    if data["kind"] == "good" and (data.get("reward") is None or data["reward"] < alpha):
                        continue
                    yield data
                    continue
                sample = row_to_sample({"sample_id": sample_id, "kind": kind, "data": data})
                if sample.kind == "good" and (sample.reward is None or sample.reward < alpha):
                    continue
                yield sample


async def jsonl_bytes(samples_iter: AsyncIterator[Any], fmt: str) -> AsyncIterator[bytes]:
    """OpenAI, ShareGPT or samples JSONL (one ``dumps_line`` per sample), batched into chunks of
    about 64 KiB. Each item is a TrainingSample or a plain stored sample dict (same record)."""
    record = record_fn(fmt)
    plain_record = PLAIN_RECORD[fmt]
    buffer: list[bytes] = []
    size = 0
    async for sample in samples_iter:
        line = dumps_line(plain_record(sample) if isinstance(sample, dict) else record(sample))
        buffer.append(line)
        size += len(line)
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
    samples_iter: AsyncIterator[Any], row_group_size: int = DEFAULT_PAGE_SIZE
) -> AsyncIterator[bytes]:
    """A Parquet file, sent one row group at a time (then the footer). Each item is a
    TrainingSample or a plain stored sample dict (``parquet_batch`` takes both)."""
    schema = parquet_schema()
    sink = _DrainSink()
    writer = pq.ParquetWriter(pa.PythonFile(sink, mode="w"), schema)
    chunk: list[Any] = []
    try:
        async for sample in samples_iter:
            chunk.append(sample)
            if len(chunk) >= row_group_size:
                writer.write_batch(parquet_batch(chunk, schema), row_group_size=row_group_size)
                chunk = []
                yield sink.drain()
        if chunk:
            writer.write_batch(parquet_batch(chunk, schema), row_group_size=row_group_size)
    finally:
        writer.close()
    yield sink.drain()
