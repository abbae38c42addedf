"""The fast paths of ``core.domain.serde.to_dict`` (per-class field names, plain values first) and of
``api.sanitize.loads_bounded`` (one shared decoder) answer exactly what the plain versions answered."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field

import pytest

from api.sanitize import MAX_INT_DIGITS, JsonRefused, loads_bounded
from core.domain.serde import to_dict


class Colour(enum.StrEnum):
    RED = "red"


class Tag(str):
    """A str subclass that is no enum: kept as it is."""


@dataclass(frozen=True)
class Inner:
    flag: bool
    colour: Colour


@dataclass(frozen=True)
class Outer:
    name: str
    count: int
    ratio: float
    inner: Inner
    items: tuple[Inner, ...]
    extra: dict[int, list[Colour]] = field(default_factory=dict)
    nothing: None = None


def test_to_dict_turns_nested_dataclasses_enums_tuples_and_keys_into_json_values() -> None:
    value = Outer("n", 3, 0.5, Inner(True, Colour.RED), (Inner(False, Colour.RED),), {1: [Colour.RED]})
    out = to_dict(value)
    assert out == {
        "name": "n",
        "count": 3,
        "ratio": 0.5,
        "inner": {"flag": True, "colour": "red"},
        "items": [{"flag": False, "colour": "red"}],
        "extra": {"1": ["red"]},
        "nothing": None,
    }
    assert type(out["inner"]["colour"]) is str and out["inner"]["flag"] is True
    assert to_dict(value) == out  # the field names cached for the class answer the same
    assert to_dict(Outer) is Outer  # a dataclass type is a value, not an instance to expand
    tagged = to_dict([Tag("t")])
    assert tagged == ["t"] and type(tagged[0]) is Tag


@pytest.mark.parametrize("raw", [b'{"a": [1, 2.5, "\\u00e9"]}', '{"a": [1, 2.5, "\\u00e9"]}'])
def test_loads_bounded_reads_bytes_and_text_as_json_loads_does(raw: bytes | str) -> None:
    assert loads_bounded(raw) == json.loads(raw)
    assert loads_bounded('{"x": 1}'.encode("utf-16")) == {"x": 1}  # encoding detected, as json.loads


def test_loads_bounded_still_refuses_what_it_refused() -> None:
    with pytest.raises(JsonRefused):
        loads_bounded("1" * (MAX_INT_DIGITS + 1))
    with pytest.raises(ValueError, match="BOM"):
        loads_bounded('\ufeff{"x": 1}')
    with pytest.raises(ValueError):
        loads_bounded(b"not json")
