"""Owns the OpenTelemetry GenAI spans import: ``{"spans": [...]}`` -> neutral turns.

Follows the GenAI semantic conventions: a span's attributes ``gen_ai.input.messages`` and
``gen_ai.output.messages`` (JSON strings or already-decoded lists) hold messages
``{"role", "parts": [...]}`` with parts ``{"type": "text", "content"}``, ``{"type": "tool_call",
"id", "name", "arguments"}`` and ``{"type": "tool_call_response", "id", "response"}``;
``gen_ai.system_instructions`` (optional) holds system text parts. Attributes may be a plain object
or the OTLP/JSON list ``[{"key", "value": {"stringValue": ...}}]``.

Each model call is one span whose input repeats the history, so the conversation is the LAST span's
input messages followed by its output messages (spans ordered by ``start_time_unix_nano`` when given).
"""

from __future__ import annotations

import json
from typing import Any

from core.formats.importing import ToolCall, TraceFormatError, Turn, require

INPUT = "gen_ai.input.messages"
OUTPUT = "gen_ai.output.messages"
SYSTEM = "gen_ai.system_instructions"
_ROLES = {"system": "system", "user": "user", "assistant": "assistant", "tool": "tool"}


def _attributes(span: dict[str, Any], path: str) -> dict[str, Any]:
    raw = span.get("attributes")
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, list):  # OTLP/JSON key-value list
        out: dict[str, Any] = {}
        for index, entry in enumerate(raw):
            epath = f"{path}.attributes[{index}]"
            key = require(entry, "key", epath, str)
            value = require(entry, "value", epath, dict)
            if "stringValue" in value:
                out[key] = value["stringValue"]
            else:
                out[key] = next(iter(value.values()), None)
        return out
    raise TraceFormatError(f"{path}.attributes", "missing or not an object / OTLP key-value list")


def _decoded(value: Any, path: str) -> list[Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise TraceFormatError(path, f"not valid JSON ({exc.msg})") from None
    if not isinstance(value, list):
        raise TraceFormatError(path, f"expected a list of messages, got {type(value).__name__}")
    return value


def _message_turns(message: Any, path: str) -> list[Turn]:
    role = require(message, "role", path, str)
    if role not in _ROLES:
        raise TraceFormatError(f"{path}.role", f"unknown role {role!r}")
    parts = require(message, "parts", path, list)
    texts: list[str] = []
    calls: list[ToolCall] = []
    responses: list[Turn] = []
    for index, part in enumerate(parts):
        ppath = f"{path}.parts[{index}]"
        kind = require(part, "type", ppath, str)
        if kind == "text":
            texts.append(require(part, "content", ppath, str))
        elif kind == "tool_call":
            if role != "assistant":
                raise TraceFormatError(f"{ppath}.type", f"a tool_call part in a {role} message")
            calls.append(
                ToolCall(
                    call_id=require(part, "id", ppath, str),
                    name=require(part, "name", ppath, str),
                    arguments=part.get("arguments"),
                )
            )
        elif kind == "tool_call_response":
            response = part.get("response", part.get("result"))
            if response is None:
                raise TraceFormatError(f"{ppath}.response", "missing")
            text = response if isinstance(response, str) else json.dumps(response, sort_keys=True)
            responses.append(Turn("tool", text, ppath, tool_call_id=require(part, "id", ppath, str)))
        else:
            raise TraceFormatError(f"{ppath}.type", f"unsupported part type {kind!r}")
    if responses:
        if texts or calls:
            raise TraceFormatError(path, "a message mixes tool_call_response parts with other parts")
        return responses
    return [Turn(_ROLES[role], "\n".join(texts), path, tuple(calls))]  # type: ignore[arg-type]


def parse_turns(item: dict[str, Any], path: str) -> list[Turn]:
    spans = require(item, "spans", path, list)
    if not spans:
        raise TraceFormatError(f"{path}.spans", "no spans")
    indexed = []
    for index, span in enumerate(spans):
        if not isinstance(span, dict):
            raise TraceFormatError(f"{path}.spans[{index}]", "expected an object")
        start: Any = span.get("start_time_unix_nano", span.get("startTimeUnixNano", 0))
        try:
            start_key = int(start)
        except (TypeError, ValueError):
            raise TraceFormatError(f"{path}.spans[{index}].start_time_unix_nano", "not an integer") from None
        indexed.append((start_key, index, span))
    _, last_index, last = max(indexed)
    spath = f"{path}.spans[{last_index}]"
    attributes = _attributes(last, spath)
    if INPUT not in attributes:
        raise TraceFormatError(f"{spath}.attributes.{INPUT}", "missing")
    turns: list[Turn] = []
    if SYSTEM in attributes:
        system_parts = _decoded(attributes[SYSTEM], f"{spath}.attributes.{SYSTEM}")
        texts = [
            require(part, "content", f"{spath}.attributes.{SYSTEM}[{i}]", str)
            for i, part in enumerate(system_parts)
        ]
        turns.append(Turn("system", "\n".join(texts), f"{spath}.attributes.{SYSTEM}"))
    for key in (INPUT, OUTPUT):
        if key not in attributes:
            continue
        messages = _decoded(attributes[key], f"{spath}.attributes.{key}")
        for index, message in enumerate(messages):
            turns.extend(_message_turns(message, f"{spath}.attributes.{key}[{index}]"))
    return turns
