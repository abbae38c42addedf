"""Owns what every domain event is: the ``DomainEvent`` base class, the serialization registry
(``register``, ``decode``), upcasting of old versions (``upcaster``) and the envelopes
(``NewEvent`` a producer appends, ``RecordedEvent`` readers get back, ``Metadata``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, TypeVar

from core.domain.ids import new_id
from core.domain.serde import from_dict, to_dict


class UnknownEventType(LookupError):
    """A stored event's type/version is not in the registry (and no upcaster reaches one that is)."""


@dataclass(frozen=True)
class DomainEvent:
    """Base class of every event. Subclasses are registered with ``@register``."""

    event_type: ClassVar[str] = ""
    event_version: ClassVar[int] = 1

    def to_data(self) -> dict[str, Any]:
        return to_dict(self)  # type: ignore[no-any-return]


E = TypeVar("E", bound=type[DomainEvent])

_REGISTRY: dict[str, type[DomainEvent]] = {}
_UPCASTERS: dict[tuple[str, int], Callable[[dict[str, Any]], dict[str, Any]]] = {}


def register(cls: E) -> E:
    """Class decorator: add an event type to the registry under its class name."""
    name = cls.__name__
    if name in _REGISTRY and _REGISTRY[name] is not cls:
        raise ValueError(f"event type {name!r} registered twice")
    cls.event_type = name
    _REGISTRY[name] = cls
    return cls


def upcaster(event_type: str, from_version: int) -> Callable[[Callable[..., dict[str, Any]]], Any]:
    """Decorator: register a function lifting ``event_type`` data from ``from_version`` to +1."""

    def deco(fn: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[dict[str, Any]], dict[str, Any]]:
        _UPCASTERS[(event_type, from_version)] = fn
        return fn

    return deco


def event_class(event_type: str) -> type[DomainEvent]:
    try:
        return _REGISTRY[event_type]
    except KeyError:
        raise UnknownEventType(f"unknown event type {event_type!r}") from None


def decode(event_type: str, version: int, data: dict[str, Any]) -> DomainEvent:
    """Decode stored data into its event, upcasting old versions step by step."""
    cls = event_class(event_type)
    while version < cls.event_version:
        step = _UPCASTERS.get((event_type, version))
        if step is None:
            raise UnknownEventType(f"no upcaster for {event_type} v{version} -> v{version + 1}")
        data = step(dict(data))
        version += 1
    if version > cls.event_version:
        raise UnknownEventType(f"{event_type} v{version} is newer than this code (v{cls.event_version})")
    return from_dict(cls, data)


@dataclass(frozen=True)
class Metadata:
    correlation_id: str | None = None
    causation_id: str | None = None
    producer: str | None = None
    project_id: str | None = None


@dataclass(frozen=True)
class NewEvent:
    """An event about to be appended to ``stream_id``."""

    stream_id: str
    event: DomainEvent
    metadata: Metadata = field(default_factory=Metadata)
    event_id: str = field(default_factory=new_id)


@dataclass(frozen=True)
class RecordedEvent:
    """A stored event: the envelope readers see."""

    event_id: str
    stream_id: str
    stream_version: int  # 0-based index within the stream
    event_type: str
    event_version: int
    data: dict[str, Any]
    metadata: Metadata
    recorded_at: datetime
    position: int  # global, gap-free-not-guaranteed, monotonic in commit order

    @property
    def event(self) -> DomainEvent:
        return decode(self.event_type, self.event_version, self.data)


def caused_by(parent: RecordedEvent, producer: str) -> Metadata:
    """Metadata for an event produced in reaction to ``parent`` (keeps the correlation chain)."""
    return Metadata(
        correlation_id=parent.metadata.correlation_id or parent.event_id,
        causation_id=parent.event_id,
        producer=producer,
        project_id=parent.metadata.project_id,
    )


def all_event_types() -> dict[str, type[DomainEvent]]:
    return dict(_REGISTRY)


def replace(event: DomainEvent, **changes: Any) -> DomainEvent:
    return dataclasses.replace(event, **changes)
