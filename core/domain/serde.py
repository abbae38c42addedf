"""Owns the conversion of domain dataclasses to and from JSON-ready dicts.

Pure stdlib: handles nested frozen dataclasses, lists, tuples, dicts, optionals and enums by
reading the dataclass type hints, so events and value objects need no hand-written (de)serializers.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from functools import cache
from typing import Any, TypeVar

T = TypeVar("T")


_PLAIN = frozenset({str, int, float, bool, type(None)})


_FIELD_NAMES: dict[type, tuple[str, ...] | None] = {}


def _field_names(cls: type) -> tuple[str, ...] | None:
    """The field names of dataclass ``cls`` (None for any other type), looked up once per class."""
    try:
        return _FIELD_NAMES[cls]
    except KeyError:
        names = tuple(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else None
        _FIELD_NAMES[cls] = names
        return names


def to_dict(obj: Any) -> Any:
    """Turn a dataclass (recursively) into plain JSON-ready values; tuples become lists."""
    kind = type(obj)
    if kind in _PLAIN:  # the bulk of any event: answered before any other check
        return obj
    names = _field_names(kind)
    if names is not None:
        return {name: to_dict(getattr(obj, name)) for name in names}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, list | tuple):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    return obj


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _convert(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        return _convert(members[0], value) if len(members) == 1 else value
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], v) for v in value)
        return tuple(_convert(a, v) for a, v in zip(args, value, strict=False))
    if origin is list:
        (arg,) = typing.get_args(tp) or (Any,)
        return [_convert(arg, v) for v in value]
    if origin is dict:
        return dict(value)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return from_dict(tp, value)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(value)
    if tp is float and isinstance(value, int):
        return float(value)
    return value


def from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """Build dataclass ``cls`` from ``data``; unknown keys are an error that names them."""
    hints = _hints(cls)  # type: ignore[arg-type]
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = set(data) - names
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown field(s) {sorted(unknown)}")
    kwargs = {k: _convert(hints[k], v) for k, v in data.items()}
    return cls(**kwargs)
