"""Owns the capture proxy's recording: calls handed over without waiting, stored later, never lost.

``Recorder.submit(record)`` puts a ``CallRecord`` on a bounded in-memory queue and returns at once:
the agent's request never waits on the store (nor on the critic, which runs from the log later). One
drainer task stores the records in submission order through a ``Sink`` (``StoreSink``: the event
store). When the sink fails (database down or slow past its timeout), the record and everything
behind it go to the spool, a folder of one JSON file per record named by submission order, and the
drainer retries the oldest spooled record with a growing pause (up to ``max_retry_s``) until the
store takes it, then the rest in order. While anything is spooled, new records are spooled behind
it, so a trace's calls are stored in the order they were made. A full queue spools the overflow
record directly. On shutdown the queue is written to the spool; a process started on the same
spool folder stores what an earlier one left. (A hard kill loses only records still in the
in-memory queue, bounded by ``max_queue``.)

``StoreSink`` writes a call as events on the trace's stream: the first call that can be read as a
conversation also writes ``TraceIngested`` (outcome unknown, source format ``proxy``: it waits for
``PATCH /v1/traces/{id}``), and every call writes ``ModelCallRecorded``. Event ids derive from the
call id, so a retry after an ambiguous failure stores nothing twice. A trace stream that belongs
to another project is never written (the record goes to ``rejected/`` in the spool).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from core.domain.events import Metadata, ModelCallRecorded, NewEvent, TraceIngested
from core.domain.ids import derived_id, trace_stream
from core.formats.capture import SOURCE_FORMAT, answer_message, call_trajectory, recorded_request
from core.formats.importing import TraceFormatError
from core.store.ports import ConcurrencyConflict
from core.store.sql import SqlEventStore

log = logging.getLogger("agentr.proxy")
PRODUCER = "proxy"


@dataclass(frozen=True)
class CallRecord:
    """One answered call, as the proxy saw it (no headers, no credentials)."""

    project_id: str
    trace_id: str
    call_id: str
    external_id: str | None
    task_key: str | None
    body: dict[str, Any]  # the request as the agent sent it
    response: dict[str, Any]  # the upstream's answer (a stream assembled)
    stream: bool
    latency_ms: float
    messages_from: int  # messages the trace's conversation already held before this call
    extends: bool  # the call continues the trace's conversation (False: kept beside it)
    environment: tuple[str, str] | None = None  # (local env URI, task id) the agent named, or None


class RecordRejected(Exception):
    """A record that must never be stored (another project's stream)."""


class Sink(Protocol):
    async def store(self, record: CallRecord) -> None: ...


@dataclass
class _TraceState:
    version: int
    ingested: bool
    calls: int


class StoreSink:
    """Stores records as events in the event store (see the module docstring)."""

    def __init__(self, store: SqlEventStore, timeout_s: float = 10.0) -> None:
        self.events = store
        self.timeout_s = timeout_s
        self._traces: dict[str, _TraceState] = {}

    async def _state(self, record: CallRecord) -> _TraceState:
        known = self._traces.get(record.trace_id)
        if known is not None:
            return known
        stored = await self.events.read_stream(trace_stream(record.trace_id))
        for item in stored:
            if item.metadata.project_id not in (None, record.project_id):
                raise RecordRejected(f"trace {record.trace_id} belongs to another project")
        state = _TraceState(
            version=stored[-1].stream_version if stored else -1,
            ingested=any(item.event_type == TraceIngested.event_type for item in stored),
            calls=sum(item.event_type == ModelCallRecorded.event_type for item in stored),
        )
        self._traces[record.trace_id] = state
        return state

    def _events(self, record: CallRecord, state: _TraceState) -> list[NewEvent]:
        trajectory = None
        imported = None
        answer = answer_message(record.response)
        if record.extends and answer is not None:
            try:
                imported = call_trajectory(
                    list(record.body.get("messages") or []),
                    record.body.get("tools"),
                    answer,
                    record.task_key,
                    record.external_id,
                )
                trajectory = imported.trajectory
            except TraceFormatError as exc:
                log.warning(
                    "proxy: call %s kept without a trajectory: %s: %s", record.call_id, exc.path, exc.problem
                )
        meta = Metadata(correlation_id=record.trace_id, producer=PRODUCER, project_id=record.project_id)
        stream = trace_stream(record.trace_id)
        events = []
        if not state.ingested and imported is not None:
            ingested = TraceIngested(
                trace_id=record.trace_id,
                project_id=record.project_id,
                task_key=imported.task_key,
                trajectory=imported.trajectory,
                outcome="unknown",
                source_format=SOURCE_FORMAT,
                external_id=record.external_id,
                env_uri=record.environment[0] if record.environment else None,
                env_task_id=record.environment[1] if record.environment else None,
            )
            events.append(NewEvent(stream, ingested, meta, derived_id("proxy-ingested", record.trace_id)))
        call = ModelCallRecorded(
            trace_id=record.trace_id,
            call_id=record.call_id,
            call_index=state.calls,
            request=recorded_request(record.body, record.messages_from),
            response=record.response,
            stream=record.stream,
            latency_ms=record.latency_ms,
            trajectory=trajectory,
        )
        events.append(NewEvent(stream, call, meta, derived_id("proxy-call", record.call_id)))
        return events

    async def store(self, record: CallRecord) -> None:
        for _attempt in range(3):
            state = await asyncio.wait_for(self._state(record), self.timeout_s)
            events = self._events(record, state)
            try:
                stored = await asyncio.wait_for(
                    self.events.append(events, expected_versions={events[0].stream_id: state.version}),
                    self.timeout_s,
                )
            except ConcurrencyConflict:  # another proxy process wrote this trace: read it again
                self._traces.pop(record.trace_id, None)
                continue
            except BaseException:
                self._traces.pop(record.trace_id, None)  # unknown whether it committed: read it again
                raise
            state.version += len(stored)
            state.calls += 1
            state.ingested = state.ingested or any(isinstance(e.event, TraceIngested) for e in events)
            return
        raise ConcurrencyConflict(trace_stream(record.trace_id), -1, -1)


class Recorder:
    """The queue, the drainer and the spool (see the module docstring)."""

    def __init__(
        self,
        sink: Sink,
        spool_dir: Path,
        *,
        max_queue: int = 10_000,
        retry_s: float = 0.2,
        max_retry_s: float = 5.0,
    ) -> None:
        self.sink = sink
        self.spool_dir = spool_dir
        self.rejected_dir = spool_dir / "rejected"
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        self.queue: asyncio.Queue[tuple[int, CallRecord]] = asyncio.Queue(max_queue)
        self.retry_s = retry_s
        self.max_retry_s = max_retry_s
        self._epoch = time.time_ns()
        self._seq = 0
        self._spooled = len(self._spool_files())
        self._unstored = self._spooled  # handed over (or left by an earlier process), not stored yet
        self._task: asyncio.Task[None] | None = None
        self.stored = 0
        self.spool_writes = 0
        self.failures = 0

    # ------------------------------------------------------------------ producer side (request path)
    def submit(self, record: CallRecord) -> None:
        """Hand a record over; never waits (a full queue spools it directly)."""
        self._seq += 1
        self._unstored += 1
        try:
            self.queue.put_nowait((self._seq, record))
        except asyncio.QueueFull:
            self._write_spool(self._seq, record)

    # ------------------------------------------------------------------ drainer
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="agentr-proxy-recorder")

    async def close(self) -> None:
        """Stop draining; whatever is still queued goes to the spool (stored by the next start)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._spill_queue()

    @property
    def pending(self) -> int:
        """Records not stored yet (queued, being stored, or spooled)."""
        return self._unstored

    async def flush(self, timeout_s: float = 30.0) -> None:
        """Wait until every record handed over so far is stored (TimeoutError after ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        while self.pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.pending} recorded call(s) not stored after {timeout_s} s")
            await asyncio.sleep(0.02)

    async def _run(self) -> None:
        pause = self.retry_s
        while True:
            if self._spooled:
                self._spill_queue()
                if await self._drain_spool():
                    pause = self.retry_s
                else:
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, self.max_retry_s)
                continue
            try:
                seq, record = await asyncio.wait_for(self.queue.get(), timeout=1.0)
            except TimeoutError:
                continue
            try:
                await self.sink.store(record)
                self._stored_one()
            except RecordRejected as exc:
                log.error("proxy: call %s not stored: %s", record.call_id, exc)
                self._write_spool(seq, record, self.rejected_dir)
                self._unstored -= 1
            except Exception as exc:  # the store is down or slow: keep it on disk and retry
                self.failures += 1
                log.warning(
                    "proxy: store failed (%s: %s); spooling to %s", type(exc).__name__, exc, self.spool_dir
                )
                self._write_spool(seq, record)

    async def _drain_spool(self) -> bool:
        for path in self._spool_files():
            record = CallRecord(**json.loads(path.read_text()))
            try:
                await self.sink.store(record)
            except RecordRejected as exc:
                log.error("proxy: spooled call %s not stored: %s", record.call_id, exc)
                self.rejected_dir.mkdir(exist_ok=True)
                path.rename(self.rejected_dir / path.name)
                self._unstored -= 1
            except Exception as exc:
                self.failures += 1
                log.info(
                    "proxy: store still failing (%s); %d call(s) spooled", type(exc).__name__, self._spooled
                )
                return False
            else:
                path.unlink()
                self._stored_one()
            self._spooled -= 1
        self._spooled = len(self._spool_files())
        return True

    def _stored_one(self) -> None:
        self.stored += 1
        self._unstored -= 1

    # ------------------------------------------------------------------ spool
    def _spool_files(self) -> list[Path]:
        return sorted(self.spool_dir.glob("*.json"))

    def _spill_queue(self) -> None:
        while not self.queue.empty():
            seq, record = self.queue.get_nowait()
            self._write_spool(seq, record)

    def _write_spool(self, seq: int, record: CallRecord, folder: Path | None = None) -> None:
        target = folder or self.spool_dir
        target.mkdir(parents=True, exist_ok=True)
        name = f"{self._epoch:020d}-{seq:012d}-{record.call_id}.json"
        partial = target / f".{name}.part"
        partial.write_text(json.dumps(asdict(record), ensure_ascii=False))
        os.replace(partial, target / name)  # atomic: the drainer never reads half a record
        if folder is None:
            self._spooled += 1
            self.spool_writes += 1
