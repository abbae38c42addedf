"""Owns the import error: ``TraceFormatError`` (the field's path + the problem and what to send) and
``require``, the field check every importer uses, and ``key_index``, the list index of a flattened
attribute key."""

from __future__ import annotations

import re
from typing import Any


class TraceFormatError(ValueError):
    """A malformed trace; ``path`` names the field (``traces[3].messages[5].role``)."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


_KIND_NAMES: dict[type, str] = {list: "a list", dict: "an object", str: "a string", int: "an integer"}


def require(obj: Any, key: str, path: str, kind: type | tuple[type, ...]) -> Any:
    if not isinstance(obj, dict):
        raise TraceFormatError(path, f"expected an object, got {type(obj).__name__}")
    if key not in obj:
        raise TraceFormatError(f"{path}.{key}", f"missing (send {_wanted(kind)})")
    value = obj[key]
    if not isinstance(value, kind):
        raise TraceFormatError(f"{path}.{key}", f"expected {_wanted(kind)}, got {type(value).__name__}")
    return value


def _wanted(kind: type | tuple[type, ...]) -> str:
    kinds = (kind,) if isinstance(kind, type) else kind
    return " or ".join(_KIND_NAMES.get(k, k.__name__) for k in kinds)


MAX_INDEX_DIGITS = 9
"""Longest list index read from a flattened attribute key (``gen_ai.prompt.<i>.content``)."""


def key_index(digits: str, key: str, path: str) -> int:
    """The list position ``digits`` that the flattened attribute ``key`` names
    (``gen_ai.prompt.3.content`` -> 3). More than ``MAX_INDEX_DIGITS`` digits is no list position (and
    past 4,300 more than Python reads): a ``TraceFormatError`` naming the key, its digits abbreviated."""
    if len(digits) > MAX_INDEX_DIGITS:
        shown = re.sub(r"\d{10,}", lambda m: f"{m.group()[:3]}...({len(m.group())} digits)", key)
        raise TraceFormatError(
            f"{path}.{shown}", f"a list index of more than {MAX_INDEX_DIGITS} digits in the attribute key"
        )
    return int(digits)


SHOWN_CHARACTERS = 80
"""Longest quotation of a client's value in an error message (the rest is counted, not shown)."""


def shown(value: Any, limit: int = SHOWN_CHARACTERS, *, quoted: bool = True) -> str:
    """``value`` quoted for an error message that may reach a log: repr-style (control characters
    such as a newline escaped, so a value cannot start a forged log line) and at most ``limit``
    characters, a longer one cut and its length given. ``quoted=False``: a string without the quote
    marks (a name shown as it reads)."""
    text = repr(value)
    if not quoted and isinstance(value, str):
        text = text[1:-1]
    if len(text) <= limit:
        return text
    size = f"{len(value)} characters" if isinstance(value, str) else f"{len(text)} characters as text"
    return f"{text[:limit]}... ({size})"
