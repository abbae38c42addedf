"""Owns the models a long-lived worker keeps open (search, critic and splice workers; in an embedded
run, where the three share one process, one cache shared by all three: one copy of each model).

A worker serves run after run and iteration after iteration, and every iteration names a new
checkpoint. ``PolicyCache`` opens a policy per model reference on first use (in a thread: loading
weights blocks) and keeps at most ``max_open`` of them, the least recently used going first;
without a bound every checkpoint a worker ever served stayed in its memory (weights, prefix cache
and decode threads of each). A policy is used under a lease (``async with cache.lease(ref) as
policy``); a policy evicted while leased is closed when its last lease ends, so a search in flight
keeps its model while the next iteration's opens. ``max_open`` comes from
``AGENTR_MAX_OPEN_MODELS`` (``Settings.max_open_models``, default 2: an iteration's model and the
one before it, as consecutive runs or iterations overlap in a shared worker). Prometheus:
``agentr_worker_models_open`` and ``agentr_worker_models_opened_total``, labelled by the cache's name.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from core.llm.ports import Policy
from core.runtime.metrics import MODELS_OPEN, MODELS_OPENED

log = logging.getLogger(__name__)

DEFAULT_MAX_OPEN = 2


@dataclass
class _Entry:
    opening: asyncio.Task[Policy]
    leases: int = 0
    evicted: bool = False


class PolicyCache:
    """At most ``max_open`` open policies by model reference (module docstring). ``opener`` turns a
    reference into a Policy (it may block: it runs in a thread)."""

    def __init__(
        self,
        opener: Callable[[str], Policy],
        *,
        max_open: int = DEFAULT_MAX_OPEN,
        name: str = "policy cache",
    ) -> None:
        if max_open < 1:
            raise ValueError(f"max_open must be >= 1 (models a worker keeps open), got {max_open}")
        self.opener = opener
        self.max_open = max_open
        self.name = name
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self.opened = 0  # policies opened so far (a reopened reference counts again)
        self.closed = 0  # policies closed so far

    def open_refs(self) -> list[str]:
        """The references kept open (or opening), least recently used first."""
        return list(self._entries)

    @asynccontextmanager
    async def lease(self, ref: str) -> AsyncIterator[Policy]:
        """The policy of ``ref``, opened on first use; kept open at least until this lease ends.
        Raises what the opener raises (PolicyError, OSError, ValueError...); a failed open is
        retried by the next lease."""
        entry = self._entries.get(ref)
        if entry is None or _failed(entry.opening):
            entry = _Entry(asyncio.ensure_future(self._open(ref)))
            self._entries[ref] = entry
        else:
            self._entries.move_to_end(ref)
        entry.leases += 1  # before anything can suspend: a concurrent eviction must see the lease
        try:
            await self._evict()
            yield await asyncio.shield(entry.opening)
        finally:
            entry.leases -= 1
            if entry.leases == 0:
                if entry.evicted:
                    await self._close(ref, entry)
                elif _failed(entry.opening) and self._entries.get(ref) is entry:
                    del self._entries[ref]  # a failed open holds no model: it takes no place

    async def _open(self, ref: str) -> Policy:
        log.info("%s: opening model %s", self.name, ref)
        policy = await asyncio.to_thread(self.opener, ref)
        self.opened += 1
        MODELS_OPENED.labels(self.name).inc()
        MODELS_OPEN.labels(self.name).set(self.opened - self.closed)
        return policy

    async def _evict(self) -> None:
        while len(self._entries) > self.max_open:
            ref, entry = self._entries.popitem(last=False)
            entry.evicted = True
            if entry.leases == 0:
                await self._close(ref, entry)
            else:
                log.info(
                    "%s: model %s evicted; closed when its %d lease(s) end", self.name, ref, entry.leases
                )

    async def _close(self, ref: str, entry: _Entry) -> None:
        if not entry.opening.done():
            entry.opening.cancel()
            return
        if _failed(entry.opening):
            return
        log.info("%s: closing model %s", self.name, ref)
        self.closed += 1
        MODELS_OPEN.labels(self.name).set(self.opened - self.closed)
        await entry.opening.result().close()

    async def close_idle(self) -> int:
        """Close every policy no lease holds (an embedded run before it trains in the same process:
        the models it searched with are not used again, and their weights and prefix caches would
        sit beside the trainer's); returns how many were closed or cancelled."""
        idle = [(ref, entry) for ref, entry in self._entries.items() if entry.leases == 0]
        for ref, entry in idle:
            del self._entries[ref]
            await self._close(ref, entry)
        return len(idle)

    async def close(self) -> None:
        """Close every open policy (the worker is stopping); leases still held keep theirs."""
        entries = list(self._entries.items())
        self._entries.clear()
        for ref, entry in entries:
            entry.evicted = True
            if entry.leases == 0:
                await self._close(ref, entry)


def service_cache(
    shared: PolicyCache | None, opener: Callable[[str], Policy], max_open: int, name: str
) -> tuple[PolicyCache, Callable[[], Awaitable[None]] | None]:
    """A worker's model cache and what closes it with the service: the cache the process shares
    (an embedded run's; its owner closes it, so nothing) or a cache of the worker's own."""
    if shared is not None:
        return shared, None
    own = PolicyCache(opener, max_open=max_open, name=name)
    return own, own.close


def _failed(task: asyncio.Task[Policy]) -> bool:
    return task.done() and (task.cancelled() or task.exception() is not None)
