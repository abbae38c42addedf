"""Owns the API's input-sanitising rules for JSON: text every column can store, bounded nesting.

Every JSON request body (``SanitizeMiddleware`` in api/middleware.py) and every decoded cursor
(api/pagination.py) passes ``json_problem`` before any handler or query sees it. A value is refused
(422 naming its location) when

* a string or object key holds a lone UTF-16 surrogate (``"\\ud800"`` is legal JSON but no UTF-8
  text: PostgreSQL's driver fails to encode it) or a NUL character (PostgreSQL text cannot hold it);
* a number is NaN or Infinity (Python's parser accepts them; JSON and PostgreSQL's jsonb do not);
* an integer has more than ``MAX_INT_DIGITS`` digits (``loads_bounded``);
* nesting is deeper than ``MAX_DEPTH`` levels. JSON carried INSIDE a string (OpenAI
  ``tool_calls[].function.arguments``, OTel ``gen_ai.input.messages``, ...) counts too: a string
  that starts with ``{`` or ``[`` and parses as JSON is walked as if it were inline, so an importer
  that parses it later never meets a depth it cannot handle.

Production traces are the exception for NUL: a NUL in an ingested trace (``POST /v1/traces``, the
OTLP receiver) is replaced by U+FFFD and the replacement recorded (``replace_nul``), because a log that
holds one is exactly what was produced, not a client mistake to refuse.

The walk is iterative (an explicit stack), so a hostile document cannot exhaust the interpreter's
recursion limit here either; ``json.loads`` itself raises RecursionError on absurd depths, which
``loads_bounded`` turns into the same refusal.
"""

from __future__ import annotations

import json
import math
import re
import zlib
from dataclasses import dataclass
from typing import Any

MAX_DEPTH = 64
"""Deepest nesting accepted in a request (objects and arrays, JSON-in-strings included)."""


@dataclass(frozen=True)
class JsonProblem:
    """Why a JSON value is refused, and where (dotted path, e.g. ``traces[0].messages[2].content``)."""

    path: str
    message: str

    def field(self, root: str = "body") -> str:
        if not self.path:
            return root
        return f"{root}{self.path}" if self.path.startswith("[") else f"{root}.{self.path}"


MAX_INT_DIGITS = 1000
"""Longest JSON integer accepted (digits). Python refuses to read more than 4,300 (its int-string
limit, a ValueError deep in a parser); nothing the API stores needs a thousand."""


class JsonRefused(ValueError):
    """``loads_bounded`` met JSON the API refuses before looking at it (its message says why)."""


class TooDeep(JsonRefused):
    """``loads_bounded`` met JSON nested deeper than the limit."""


class TooLong(JsonRefused):
    """``loads_bounded`` met an integer with more than ``MAX_INT_DIGITS`` digits."""


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise TooLong(f"holds an integer of more than {MAX_INT_DIGITS} digits")
    return int(text)


_DECODER = json.JSONDecoder(parse_int=_bounded_int)
"""One decoder for every ``loads_bounded`` (``json.loads`` with an argument builds one per call)."""

NUL_FREE_PATTERN = "^[^\\u0000]*$"
"""The NUL rule of ``text_problem`` as a JSON Schema (ECMA-262) ``pattern``: api/openapi.py states it on
every request string the server refuses a NUL in (tests/api/test_api_schema_rules.py checks both agree)."""


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored as UTF-8 text, or None when it can."""
    if "\x00" in text:  # NUL_FREE_PATTERN, checked without a regex: every string of a body passes here
        return "text must not contain NUL (\\u0000) characters"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"text holds a lone UTF-16 surrogate at character {exc.start}: not valid Unicode text"
    return None


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _embedded_json(text: str) -> Any | None:
    """The value a string holds when it is itself a JSON object or array; None otherwise."""
    stripped = text.lstrip()
    if not stripped or stripped[0] not in "[{":
        return None
    try:
        return json.loads(stripped)
    except RecursionError:
        raise TooDeep from None
    except ValueError:
        return None


def json_problem(value: Any, max_depth: int = MAX_DEPTH) -> JsonProblem | None:
    """The first reason ``value`` (parsed JSON) is refused, or None when it is acceptable."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, dict | list):
            depth += 1
            if depth > max_depth:
                return JsonProblem(path, f"nested deeper than {max_depth} levels")
            if isinstance(item, dict):
                for key, child in item.items():
                    problem = text_problem(key) if isinstance(key, str) else None
                    if problem is not None:
                        return JsonProblem(path, f"object key: {problem}")
                    stack.append((child, _join(path, str(key)), depth))
            else:
                stack.extend((child, _join(path, index), depth) for index, child in enumerate(item))
        elif isinstance(item, float) and not math.isfinite(item):
            return JsonProblem(path, "NaN and Infinity are not JSON numbers")
        elif isinstance(item, str):
            problem = text_problem(item)
            if problem is not None:
                return JsonProblem(path, problem)
            try:
                inner = _embedded_json(item)
            except TooDeep:
                return JsonProblem(path, f"holds JSON nested deeper than {max_depth} levels")
            if inner is not None:
                stack.append((inner, path, depth))
    return None


def loads_bounded(raw: bytes | str) -> Any:
    """``json.loads`` that reports absurd nesting as ``TooDeep`` instead of RecursionError, and an
    integer past ``MAX_INT_DIGITS`` as ``TooLong`` (never Python's own int-string ValueError)."""
    if isinstance(raw, bytes | bytearray):
        raw = raw.decode(json.detect_encoding(raw), "surrogatepass")  # as json.loads does
    elif raw.startswith("\ufeff"):
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", raw, 0)
    try:
        return _DECODER.decode(raw)
    except RecursionError:
        raise TooDeep(f"nested deeper than {MAX_DEPTH} levels") from None


NUL_REPLACEMENT = "\ufffd"
_ESCAPED_NUL = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")  # \u0000 not preceded by an escaped backslash


def replace_nul(value: Any, path: str = "") -> tuple[Any, list[str]]:
    """``value`` with every NUL character in its strings (and object keys) replaced by U+FFFD, and the
    paths where that happened (``traces[0].messages[2].content``)."""
    found: list[str] = []

    def walk(item: Any, where: str) -> Any:
        if isinstance(item, str):
            if "\x00" in item:
                found.append(where)
                item = item.replace("\x00", NUL_REPLACEMENT)
            if "\\u0000" in item and item.lstrip()[:1] in ("{", "["):  # JSON text inside the string
                escaped, count = _ESCAPED_NUL.subn(r"\1\\ufffd", item)
                if count:
                    found.append(where)
                    item = escaped
            return item
        if isinstance(item, dict):
            out = {}
            for key, child in item.items():
                clean_key = walk(key, where) if isinstance(key, str) else key
                out[clean_key] = walk(child, _join(where, str(clean_key)))
            return out
        if isinstance(item, list):
            return [walk(child, _join(where, index)) for index, child in enumerate(item)]
        if isinstance(item, tuple):
            return tuple(walk(child, _join(where, index)) for index, child in enumerate(item))
        return item

    return walk(value, path), found


def nul_note(paths: list[str]) -> str:
    """The note recorded on a trace whose text held NUL characters."""
    shown = ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
    return f"NUL characters (which the database cannot store) replaced by U+FFFD at {shown}"


class InflateError(ValueError):
    """A compressed body that cannot be inflated (400) or inflates past the limit (413)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def inflate(body: bytes, encoding: str, limit: int) -> bytes:
    """A ``Content-Encoding: gzip`` / ``deflate`` body inflated, refusing more than ``limit`` bytes
    once inflated (a small body on the wire cannot become a large one in memory)."""
    window = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
    inflater = zlib.decompressobj(window)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise InflateError(400, f"body: not valid {encoding} ({exc})") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise InflateError(413, f"body: more than {limit} bytes once decompressed")
    return out
