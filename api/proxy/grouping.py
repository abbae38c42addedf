"""Owns how the capture proxy groups calls into traces, decided on the request path in memory.

1. ``X-Agentr-Trace-Id: <your id>``: the trace is ``derived_id(project, your id)`` (its external id
   is your id, so ``PATCH`` by it works too). Calls of one id always join one trace.
2. Otherwise conversation continuity: a call whose messages start with an earlier call's messages +
   answer (same project) joins that call's trace; the longest such prefix wins.
3. Otherwise a new trace.

Within a trace, a call ``extends`` the trace's conversation when its messages start with the
trace's latest conversation; its messages + answer become the trace's trajectory. A call that
does not (a retry or a branch from an earlier point, or another conversation under the same
header id) is recorded beside it and leaves the trajectory as it is.

The index is a bounded LRU in this process (``max_entries`` conversations): continuity across
several proxy processes needs a sticky load balancer or the header.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from core.domain.ids import derived_id, new_id
from core.formats.capture import conversation_keys, extend_key


@dataclass(frozen=True)
class Placement:
    trace_id: str
    external_id: str | None
    messages_from: int  # messages of the trace's conversation this call repeats
    extends: bool
    keys: tuple[str, ...]  # the call's prefix keys (last: all its messages)
    fresh: bool = False  # a trace id minted here for this call: nothing can be stored under it yet


@dataclass
class _Latest:
    length: int
    key: str


class Conversations:
    def __init__(self, max_entries: int = 100_000) -> None:
        self.max_entries = max_entries
        self._by_key: OrderedDict[str, str] = OrderedDict()  # conversation key -> trace id
        self._latest: OrderedDict[str, _Latest] = OrderedDict()  # trace id -> its latest conversation

    def place(self, project_id: str, messages: list[Any], header_id: str | None) -> Placement:
        keys = conversation_keys(messages, project_id)
        if header_id:
            trace_id = derived_id("proxy-trace", project_id, header_id)
        else:
            trace_id = ""
            minted = False
            for index in range(len(keys) - 1, -1, -1):
                found = self._by_key.get(keys[index])
                if found is not None:
                    trace_id = found
                    self._by_key.move_to_end(keys[index])
                    break
            if not trace_id:
                trace_id, minted = new_id(), True
        latest = self._latest.get(trace_id)
        if latest is None:
            return Placement(trace_id, header_id, 0, True, tuple(keys), fresh=not header_id and minted)
        extends = len(keys) >= latest.length and (latest.length == 0 or keys[latest.length - 1] == latest.key)
        return Placement(trace_id, header_id, latest.length if extends else 0, extends, tuple(keys))

    def answered(self, placement: Placement, answer: dict[str, Any] | None) -> None:
        """Remember the call's messages + answer as its trace's latest conversation (when it extends)."""
        if not placement.extends or answer is None or not placement.keys:
            return
        key = extend_key(placement.keys[-1], answer)
        self._latest[placement.trace_id] = _Latest(len(placement.keys) + 1, key)
        self._latest.move_to_end(placement.trace_id)
        self._by_key[key] = placement.trace_id
        for index in (self._by_key, self._latest):
            while len(index) > self.max_entries:
                index.popitem(last=False)  # type: ignore[attr-defined]
