"""Owns the contract between the worker runtime and the services it runs.

A service (search, critic, splice, train) is a set of handlers, one per event type it reacts to.
A handler gets the recorded event that rang the doorbell and returns the events to append; the
runtime appends them TOGETHER with the tracking row ``(consumer, position)`` in one transaction,
then acks the message. So a handler never commits anything itself, except long-running handlers
(search) that append progress events as they go: those use deterministic event ids
(``core.domain.ids.derived_id``) so a redelivered message re-appends nothing twice.

Each service package exposes ``build_service(settings, store) -> Service`` in its ``service.py``
module: that function is the service's composition root (it builds policies, environments, ...).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from core.domain.events import NewEvent, RecordedEvent


@dataclass
class HandlerResult:
    events: Sequence[NewEvent] = ()
    expected_versions: Mapping[str, int] = field(default_factory=dict)


Handler = Callable[[RecordedEvent], Awaitable[HandlerResult]]


@dataclass
class Service:
    """What ``agentr worker NAME`` runs: a consumer name and its handlers by event type."""

    name: str  # also the consumer group name and the tracking table's consumer id
    handlers: Mapping[str, Handler]
    concurrency: int = 1  # messages handled at once (search uses >1 so policy calls batch)
    on_close: Callable[[], Awaitable[None]] | None = None
    # on stop, cancel in-flight handlers instead of letting them finish (their messages stay pending
    # and are handled again later): for handlers that mostly WAIT on work done elsewhere (train)
    cancel_on_stop: bool = False
