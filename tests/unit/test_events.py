"""The event catalog: every registered event type survives a JSON round trip; unknown types are refused."""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from datetime import UTC, datetime
from typing import Any, Literal

import pytest

from core.domain import events as ev
from core.domain.events import UnknownEventType, all_event_types, decode

CATALOG = {
    name: cls for name, cls in all_event_types().items() if cls.__module__.startswith(ev.__name__ + ".")
}


def sample_value(tp: Any, depth: int = 0) -> Any:
    """A non-default example value of type ``tp`` (built from the type hints, recursively)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return sample_value(next(a for a in args if a is not type(None)), depth)
    if origin is Literal:
        return args[-1]
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(sample_value(args[0], depth + 1) for _ in range(2))
        return tuple(sample_value(a, depth + 1) for a in args)
    if origin is list:
        return [sample_value(args[0], depth + 1)]
    if origin is dict or tp is dict:
        return {"alpha": 0.5, "nested": {"k": [1, 2]}, "name": "x"}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        return tp(**{f.name: sample_value(hints[f.name], depth + 1) for f in dataclasses.fields(tp)})
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return list(tp)[-1]
    if tp is bool:
        return True
    if tp is int:
        return 7 + depth
    if tp is float:
        return 0.25
    if tp is str:
        return f"text-{depth}"
    if tp is Any:
        return {"any": 1}
    raise AssertionError(f"no sample for type {tp!r}")


def test_catalog_is_complete() -> None:
    assert len(CATALOG) >= 25
    for name, cls in CATALOG.items():
        assert cls.event_type == name
        assert cls.event_version >= 1
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_round_trip_through_json(name: str) -> None:
    cls = CATALOG[name]
    event = sample_value(cls)
    stored = json.loads(json.dumps(event.to_data()))  # what the database keeps
    back = decode(name, cls.event_version, stored)
    assert back == event
    assert type(back) is cls


def test_unknown_type_is_refused_by_name() -> None:
    with pytest.raises(UnknownEventType, match="NoSuchThingHappened"):
        decode("NoSuchThingHappened", 1, {})


def test_newer_version_than_the_code_is_refused() -> None:
    with pytest.raises(UnknownEventType, match="newer"):
        decode("RunCancelled", ev.RunCancelled.event_version + 1, {"run_id": "r"})


def test_missing_upcaster_is_refused() -> None:
    @ev.register
    @dataclasses.dataclass(frozen=True)
    class UnitTestBumped(ev.DomainEvent):
        event_version = 3
        thing: str

    with pytest.raises(UnknownEventType, match="no upcaster for UnitTestBumped v2"):
        decode("UnitTestBumped", 2, {"thing": "x"})


def test_unknown_field_is_named() -> None:
    with pytest.raises(ValueError, match="surprise"):
        decode("RunCancelled", 1, {"run_id": "r", "surprise": 1})


def test_envelope_decodes_its_event() -> None:
    event = sample_value(ev.PairFound)
    recorded = ev.RecordedEvent(
        event_id="e",
        stream_id="pair-1",
        stream_version=0,
        event_type="PairFound",
        event_version=1,
        data=json.loads(json.dumps(event.to_data())),
        metadata=ev.Metadata(),
        recorded_at=datetime.now(UTC),
        position=1,
    )
    assert recorded.event == event
