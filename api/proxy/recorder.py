"""Owns the capture proxy's recording: calls handed over without waiting, stored later, never lost.

``Recorder.submit(record)`` puts a ``CallRecord`` on a bounded in-memory queue and returns at once: the
agent's request never waits on the store (nor on the critic, which runs from the log later). One drainer
task stores the records in submission order through a ``Sink`` (``StoreSink``: the event store), all
those queued at once (up to ``max_batch``) in one transaction when the sink can (``store_many``), one by
one when that fails, so each record's own failure is judged alone. With ``linger_s`` the drainer lets a
batch gather that long after its first record (less when ``max_batch`` are queued): a transaction costs
the proxy about 3 ms of CPU whatever it holds, a record under 1 ms more, so calls arriving one at a time
would otherwise each pay a whole transaction on the CPU the next request needs. A trace id the proxy
minted for a call is not read back from the store before its first write. When the sink fails (database
down or slow past its timeout), the record and everything behind it go to the spool, a folder of one
JSON file per record named by submission order, and the drainer retries the oldest spooled record with a
growing pause (up to ``max_retry_s``) until the store takes it, then the rest in order. While anything
is spooled, new records are spooled behind it, so a trace's calls are stored in the order they were
made. A full queue spools the overflow record directly. On shutdown (``close``) the queue is stored
while the store takes it (up to ``drain_s``), then what is left is written to the spool; a process
started on the same spool folder stores what an earlier one left. (A hard kill loses only records still
in the in-memory queue, bounded by ``max_queue``.)

``StoreSink`` writes a call as events on the trace's stream: the trace's first call also writes
``TraceIngested`` (when the importer cannot arrange its conversation as a trajectory, what it can: the
task and a note naming the problem, core/formats/capture.py ``partial_trajectory``) (outcome unknown,
source format ``proxy``: it waits for ``PATCH /v1/traces/{id}``), and every call writes
``ModelCallRecorded``. Event ids derive from the call id, so a retry after an ambiguous failure stores
nothing twice. A trace stream that belongs to another project is never written (the record goes to
``rejected/`` in the spool).

No record can stop the queue. Before a call is handed over, ``storable`` cleans what PostgreSQL's
jsonb cannot hold, as uploads are cleaned (api/sanitize.py ``replace_nul``): NUL characters and lone
UTF-16 surrogates become U+FFFD, NaN and Infinity become null; the places are listed on the record
(``cleaned``) and noted on its trajectory. A record the store still refuses for what it holds, not
because the store is down (a data error such as SQLSTATE class 22 or 54, a value the importer or the
serialiser cannot take, a spool file that cannot be read, or ``max_strikes`` failures in a row while
the store answers a probe), is set aside in ``unstorable/`` in the spool (same file format: fix it and
move it back to retry), logged with its reason and counted (``agentr_proxy_calls_set_aside_total``);
the records behind it go on. Only a store that does not answer holds the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import re
import time
import weakref
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter
from sqlalchemy import text
from sqlalchemy.exc import DataError, DBAPIError

from api.sanitize import NUL_REPLACEMENT, replace_nul
from core.domain.events import Metadata, ModelCallRecorded, NewEvent, TraceIngested
from core.domain.ids import derived_id, trace_stream
from core.formats.capture import (
    SOURCE_FORMAT,
    answer_message,
    call_trajectory,
    partial_trajectory,
    recorded_request,
)
from core.formats.importing import ImportedTrace, TraceFormatError, with_note
from core.runtime.logging import redacted_traceback
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
    cleaned: list[str] = field(default_factory=list)  # where ``storable`` replaced what jsonb cannot hold
    environment: tuple[str, str] | None = None  # (local env URI, task id) the agent named, or None
    fresh: bool = False  # its trace id was minted for this call: the store holds nothing under it yet


class RecordRejected(Exception):
    """A record that must never be stored (another project's stream)."""


class RecordUnstorable(Exception):
    """A record the store will never take as it is: its data, not the store, is the problem."""


class Sink(Protocol):
    async def store(self, record: CallRecord) -> None: ...


_SURROGATE = re.compile("[\ud800-\udfff]")


def _clean_text(text: str) -> str:
    """``text`` as UTF-8 can hold it: surrogate pairs joined into their character, lone ones U+FFFD."""
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _clean_json(value: Any, where: str, found: list[str]) -> Any:
    """``value`` with lone surrogates replaced (strings and keys) and NaN / Infinity made null; the
    places listed in ``found``. Iterative over containers it rebuilds, so depth is no concern here."""
    root: list[Any] = [None]
    stack: list[tuple[Any, str, Any, Any]] = [(value, where, root, 0)]
    while stack:
        item, path, parent, slot = stack.pop()
        if isinstance(item, str):
            clean = _clean_text(item)
            if clean != item:
                found.append(path)
            parent[slot] = clean
        elif isinstance(item, float) and not math.isfinite(item):
            found.append(path)
            parent[slot] = None
        elif isinstance(item, dict):
            out: dict[Any, Any] = {}
            parent[slot] = out
            for key, child in item.items():
                if isinstance(key, str):
                    clean_key = _clean_text(key)
                    if clean_key != key:
                        found.append(path)
                    key = clean_key
                out[key] = None
                stack.append((child, f"{path}.{key}", out, key))
        elif isinstance(item, list):
            items: list[Any] = [None] * len(item)
            parent[slot] = items
            stack.extend((child, f"{path}[{index}]", items, index) for index, child in enumerate(item))
        else:
            parent[slot] = item
    return root[0]


def _clean_header(value: str | None, name: str, found: list[str]) -> str | None:
    if value is None:
        return None
    clean = _clean_text(value.replace("\x00", NUL_REPLACEMENT))
    if clean != value:
        found.append(name)
    return clean


_SUSPECT = re.compile(r"\\u0000|\\u[dD][89a-fA-F]|NaN|Infinity")
"""In ``json.dumps`` (ASCII) text: a NUL (also inside JSON inside a string), a surrogate (lone, or half
of a pair: an emoji too), NaN or Infinity; text without any has nothing ``storable`` would clean."""


def _may_need_cleaning(value: Any) -> bool:
    """False only when ``value`` surely holds nothing to clean (one C-speed dump, no walk)."""
    try:
        return _SUSPECT.search(json.dumps(value)) is not None
    except (TypeError, ValueError, RecursionError):
        return True


def storable(record: CallRecord) -> CallRecord:
    """``record`` with what PostgreSQL's jsonb cannot hold cleaned (the module docstring); the same
    record when there was nothing to clean."""
    found: list[str] = []
    parts: dict[str, Any] = {}
    for name, value in (("request", record.body), ("response", record.response)):
        if not _may_need_cleaning(value):  # the common case: no rebuilt copy of the call
            parts[name] = value
            continue
        value, nul_at = replace_nul(value, name)
        found.extend(nul_at)
        parts[name] = _clean_json(value, name, found)
    external_id = _clean_header(record.external_id, "external_id", found)
    task_key = _clean_header(record.task_key, "task_key", found)
    if not found:
        return record
    return replace(
        record,
        body=parts["request"],
        response=parts["response"],
        external_id=external_id,
        task_key=task_key,
        cleaned=sorted({*record.cleaned, *found}),
    )


def cleaned_note(paths: list[str]) -> str:
    """The note recorded on a trajectory built from a cleaned call."""
    shown = ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
    return (
        "text the database cannot store (NUL characters, lone surrogates) replaced by U+FFFD and "
        f"NaN / Infinity by null at {shown}"
    )


DATA_SQLSTATE_CLASSES = ("22", "54")
"""SQLSTATE classes that blame the data, not the database: data exception, program limit exceeded."""


def unstorable_reason(exc: BaseException) -> str | None:
    """Why a record that failed with ``exc`` will never be stored as it is; None when the store may
    take it later (it is down, slow, or the failure says nothing about the record)."""
    if isinstance(exc, RecordUnstorable):
        return str(exc)
    if isinstance(exc, DBAPIError):
        sqlstate = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
        if isinstance(exc, DataError) or (
            isinstance(sqlstate, str) and sqlstate[:2] in DATA_SQLSTATE_CLASSES
        ):
            return f"the database refused its data (SQLSTATE {sqlstate or '22'}, {type(exc.orig).__name__})"
        return None
    if isinstance(exc, ValueError | TypeError | UnicodeError | RecursionError):
        return f"it cannot be written as events ({type(exc).__name__})"
    return None


class RecorderMetrics:
    """The recorder's Prometheus collectors, on the process's registry (one set per registry)."""

    _by_registry: weakref.WeakKeyDictionary[CollectorRegistry, RecorderMetrics] = weakref.WeakKeyDictionary()

    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.set_aside = Counter(
            "agentr_proxy_calls_set_aside_total",
            "Recorded calls not stored: set aside in the spool's unstorable/ or rejected/ folder, by reason.",
            ["reason"],
            registry=registry,
        )
        self.cleaned = Counter(
            "agentr_proxy_calls_cleaned_total",
            "Recorded calls whose text the database cannot store was replaced before storing.",
            registry=registry,
        )

    @classmethod
    def on(cls, registry: CollectorRegistry) -> RecorderMetrics:
        """The collectors registered on ``registry`` (made on first use)."""
        found = cls._by_registry.get(registry)
        if found is None:
            found = cls._by_registry[registry] = cls(registry)
        return found


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
        self._reread: set[str] = set()  # traces a failed write may have touched: never assumed empty

    async def _state(self, record: CallRecord) -> _TraceState:
        known = self._traces.get(record.trace_id)
        if known is not None:
            return known
        if record.fresh and record.trace_id not in self._reread:  # minted for this call: nothing to read
            state = self._traces[record.trace_id] = _TraceState(version=-1, ingested=False, calls=0)
            return state
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

    async def reachable(self) -> bool:
        """Whether the store answers a trivial query now (tells a down store from a bad record)."""
        try:
            async with asyncio.timeout(self.timeout_s):
                async with self.events.engine.connect() as conn:
                    await conn.execute(text("SELECT 1"))
        except Exception:
            return False
        return True

    def _events(self, record: CallRecord, state: _TraceState) -> list[NewEvent]:
        try:
            return self._build(record, state)
        except Exception as exc:  # a value the importer or an event cannot take: never storable as is
            raise RecordUnstorable(f"its events cannot be built ({type(exc).__name__})") from exc

    def _build(self, record: CallRecord, state: _TraceState) -> list[NewEvent]:
        trajectory = None
        imported: ImportedTrace | None = None
        answer = answer_message(record.response)
        problem = TraceFormatError("response.choices[0].message", "the upstream's answer holds no message")
        if record.extends and answer is not None:
            try:
                imported = call_trajectory(
                    list(record.body.get("messages") or []),
                    record.body.get("tools"),
                    answer,
                    record.task_key,
                    record.external_id,
                )
                if record.cleaned:
                    imported = with_note(imported, cleaned_note(record.cleaned))
                trajectory = imported.trajectory
            except TraceFormatError as exc:
                log.warning(
                    "proxy: call %s kept without a trajectory: %s: %s", record.call_id, exc.path, exc.problem
                )
                problem = exc
        if imported is None and not state.ingested:  # the trace whose id the agent got must exist
            imported = partial_trajectory(
                list(record.body.get("messages") or []), record.task_key, record.external_id, problem
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
                self._forget([record.trace_id])
                continue
            except BaseException:
                self._forget([record.trace_id])  # unknown whether it committed: read it again
                raise
            state.version += len(stored)
            state.calls += 1
            state.ingested = state.ingested or any(isinstance(e.event, TraceIngested) for e in events)
            return
        raise ConcurrencyConflict(trace_stream(record.trace_id), -1, -1)

    async def store_many(self, records: list[CallRecord]) -> None:
        """Store ``records`` (in order) in one transaction: one lock, one version check and one insert
        for all of them. Raises what building or appending raises, and then nothing of them is kept
        (the recorder stores them one by one instead, where each record's own failure is judged)."""
        states: dict[str, _TraceState] = {}
        expected: dict[str, int] = {}
        events: list[NewEvent] = []
        try:
            for record in records:
                state = states.get(record.trace_id)
                if state is None:
                    known = await asyncio.wait_for(self._state(record), self.timeout_s)
                    state = states[record.trace_id] = replace(known)
                    expected[trace_stream(record.trace_id)] = state.version
                built = self._events(record, state)
                await asyncio.sleep(0)  # building is CPU: let the requests in between records
                events.extend(built)
                state.version += len(built)
                state.calls += 1
                state.ingested = state.ingested or any(isinstance(e.event, TraceIngested) for e in built)
            stored = await asyncio.wait_for(
                self.events.append(events, expected_versions=expected), self.timeout_s
            )
        except BaseException:
            self._forget(list(states))
            raise
        if len(stored) == len(events):
            self._traces.update(states)
        else:  # some were stored by an earlier, ambiguous attempt: read those traces again
            self._forget(list(states))

    def _forget(self, trace_ids: list[str]) -> None:
        for trace_id in trace_ids:
            self._traces.pop(trace_id, None)
            self._reread.add(trace_id)


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
        max_strikes: int = 5,
        max_batch: int = 64,
        linger_s: float = 0.0,
        metrics: RecorderMetrics | None = None,
    ) -> None:
        self.sink = sink
        self.spool_dir = spool_dir
        self.rejected_dir = spool_dir / "rejected"
        self.unstorable_dir = spool_dir / "unstorable"
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        self.queue: asyncio.Queue[tuple[int, CallRecord]] = asyncio.Queue(max_queue)
        self.retry_s = retry_s
        self.max_retry_s = max_retry_s
        self.max_strikes = max_strikes
        self.max_batch = max_batch
        self.linger_s = linger_s
        self._full = asyncio.Event()  # set when max_batch records are queued: a lingering batch goes now
        self.metrics = metrics or RecorderMetrics(None)
        self._epoch = time.time_ns()
        self._seq = 0
        self._spooled = len(self._spool_files())
        self._unstored = self._spooled  # handed over (or left by an earlier process), not stored yet
        self._strikes: dict[str, int] = {}  # spool file name -> failures while the store answered
        self._task: asyncio.Task[None] | None = None
        self._busy = False  # a batch is off the queue and not yet stored or spooled
        self._wake = asyncio.Event()
        self.stored = 0
        self.spool_writes = 0
        self.failures = 0
        self.set_aside = 0
        left = len(list(self.unstorable_dir.glob("*.json"))) if self.unstorable_dir.is_dir() else 0
        if left:
            log.warning(
                "proxy: %d call(s) set aside earlier wait in %s (never retried)", left, self.unstorable_dir
            )

    # ------------------------------------------------------------------ producer side (request path)
    def submit(self, record: CallRecord) -> CallRecord:
        """Hand a record over, cleaned (``storable``); never waits (a full queue spools it directly).
        Returns the record as it will be stored."""
        record = self._cleaned(record)
        self._seq += 1
        self._unstored += 1
        self._wake.set()
        try:
            self.queue.put_nowait((self._seq, record))
        except asyncio.QueueFull:
            self._write_spool(self._seq, record)
        if self.queue.qsize() >= self.max_batch:
            self._full.set()
        return record

    def lost(self, project_id: str, exc: BaseException) -> None:
        """Count and log a call that could not even be handed over (the proxy's answer went out)."""
        self.set_aside += 1
        self.metrics.set_aside.labels("unrecordable").inc()
        log.error(
            "proxy: a call of project %s answered but not recorded: %s\n%s",
            project_id,
            type(exc).__name__,
            redacted_traceback(exc),
        )

    def _cleaned(self, record: CallRecord) -> CallRecord:
        clean = storable(record)
        if clean is not record:
            self.metrics.cleaned.inc()
            log.warning(
                "proxy: call %s of project %s: text the database cannot store replaced at %d place(s): %s",
                record.call_id,
                record.project_id,
                len(clean.cleaned),
                ascii(clean.cleaned[:5]),  # client-chosen keys: escaped, one line
            )
        return clean

    # ------------------------------------------------------------------ drainer
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="agentr-proxy-recorder")

    async def close(self, drain_s: float = 5.0) -> None:
        """Store what is queued (up to ``drain_s``, while the store takes it), then stop draining;
        whatever is still queued goes to the spool (stored by the next start)."""
        if self._task is not None:
            deadline = time.monotonic() + drain_s
            while (
                (self.queue.qsize() or self._busy)
                and not self._spooled
                and not self._task.done()
                and time.monotonic() < deadline
            ):
                self._full.set()  # a lingering batch goes now
                await asyncio.sleep(0.01)
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
        """Wait until every record handed over so far is stored or set aside (TimeoutError after
        ``timeout_s``)."""
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
            if self.queue.empty():
                # an Event, not wait_for(queue.get()): under Python 3.11 that can swallow close()'s
                # cancellation and hang the shutdown; the timeout re-checks the spool now and then
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        await self._wake.wait()
                continue
            store_many = getattr(self.sink, "store_many", None)
            if store_many is not None and self.linger_s > 0:
                await self._linger()
            batch = [self.queue.get_nowait()]
            while store_many is not None and len(batch) < self.max_batch and not self.queue.empty():
                batch.append(self.queue.get_nowait())
            self._busy = True
            try:
                if store_many is not None and len(batch) > 1:
                    try:
                        await store_many([record for _seq, record in batch])
                    except Exception:  # one by one below: each record's own failure is judged there
                        pass
                    else:
                        for _ in batch:
                            self._stored_one()
                        batch = []
                while batch:
                    await self._store_one(*batch[0])
                    batch.pop(0)
                    if self._spooled:  # the store is down: the rest of the batch waits behind it, in order
                        for seq, record in batch:
                            self._write_spool(seq, record)
                        batch = []
            except asyncio.CancelledError:  # close(): what was taken off the queue goes to the spool
                for seq, record in batch:
                    self._write_spool(seq, record)
                raise
            finally:
                self._busy = False

    async def _linger(self) -> None:
        """Wait up to ``linger_s`` for a batch to gather (not at all once ``max_batch`` are queued)."""
        self._full.clear()
        if self.queue.qsize() >= self.max_batch:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.linger_s):
                await self._full.wait()

    async def _store_one(self, seq: int, record: CallRecord) -> None:
        try:
            await self.sink.store(record)
            self._stored_one()
        except RecordRejected as exc:
            self._write_spool(seq, record, self.rejected_dir)
            self._aside(record.call_id, "another_project", f"{exc}", self.rejected_dir)
        except Exception as exc:
            reason = unstorable_reason(exc)
            if reason is not None:  # the record, not the store: set it aside, go on with the rest
                self._write_spool(seq, record, self.unstorable_dir)
                self._aside(record.call_id, "unstorable", reason, self.unstorable_dir)
                return
            self.failures += 1  # the store is down or slow: keep it on disk and retry
            log.warning(
                "proxy: store failed (%s: %s); spooling to %s", type(exc).__name__, exc, self.spool_dir
            )
            self._write_spool(seq, record)

    async def _drain_spool(self) -> bool:
        for path in self._spool_files():
            try:
                record = self._cleaned(CallRecord(**json.loads(path.read_text(encoding="utf-8"))))
            except (OSError, ValueError, TypeError) as exc:  # not a record this version can read
                self._move(path, self.unstorable_dir)
                self._aside(
                    path.stem, "unreadable", f"the spool file cannot be read ({type(exc).__name__})", None
                )
                continue
            try:
                await self.sink.store(record)
            except RecordRejected as exc:
                self._move(path, self.rejected_dir)
                self._aside(record.call_id, "another_project", f"{exc}", self.rejected_dir)
                continue
            except Exception as exc:
                reason = unstorable_reason(exc)
                if reason is None and await self._store_answers():
                    strikes = self._strikes[path.name] = self._strikes.get(path.name, 0) + 1
                    if strikes >= self.max_strikes:
                        reason = f"failed {strikes} times while the store answered ({type(exc).__name__})"
                if reason is not None:
                    self._move(path, self.unstorable_dir)
                    self._aside(record.call_id, "unstorable", reason, self.unstorable_dir)
                    continue
                self.failures += 1
                log.info(
                    "proxy: store still failing (%s); %d call(s) spooled", type(exc).__name__, self._spooled
                )
                return False
            path.unlink()
            self._strikes.pop(path.name, None)
            self._stored_one()
            self._spooled -= 1
        self._spooled = len(self._spool_files())
        return True

    async def _store_answers(self) -> bool:
        probe = getattr(self.sink, "reachable", None)
        return bool(await probe()) if probe is not None else False

    def _aside(self, call_id: str, label: str, reason: str, folder: Path | None) -> None:
        """Count and log a record that will not be stored (it was moved or written to ``folder``)."""
        self._unstored -= 1
        self.set_aside += 1
        self.metrics.set_aside.labels(label).inc()
        log.error(
            "proxy: call %s not stored, set aside in %s: %s",
            call_id,
            folder or self.unstorable_dir,
            reason,
        )

    def _stored_one(self) -> None:
        self.stored += 1
        self._unstored -= 1

    # ------------------------------------------------------------------ spool
    def _spool_files(self) -> list[Path]:
        return sorted(self.spool_dir.glob("*.json"))

    def _move(self, path: Path, folder: Path) -> None:
        """A spool file moved into ``folder`` (out of the drainer's way)."""
        folder.mkdir(parents=True, exist_ok=True)
        path.rename(folder / path.name)
        self._strikes.pop(path.name, None)
        self._spooled -= 1

    def _spill_queue(self) -> None:
        while not self.queue.empty():
            seq, record = self.queue.get_nowait()
            self._write_spool(seq, record)

    def _write_spool(self, seq: int, record: CallRecord, folder: Path | None = None) -> None:
        target = folder or self.spool_dir
        target.mkdir(parents=True, exist_ok=True)
        name = f"{self._epoch:020d}-{seq:012d}-{record.call_id}.json"
        partial = target / f".{name}.part"
        # ASCII with escapes: any text (even a lone surrogate) can be written and read back
        partial.write_text(json.dumps(asdict(record)), encoding="utf-8")
        os.replace(partial, target / name)  # atomic: the drainer never reads half a record
        if folder is None:
            self._spooled += 1
            self.spool_writes += 1
