"""Owns the OpenAI chat-messages import: ``{"messages": [...]}`` -> neutral turns.

Accepts roles system / developer (as system), user, assistant (text ``content`` and/or
``tool_calls`` with ``function.arguments`` as a JSON string or object) and tool (``tool_call_id``).
``content`` may be a string, null, or a list of ``{"type": "text", "text": ...}`` parts.
"""

from __future__ import annotations

import json
from typing import Any

from core.formats.importing import ToolCall, TraceFormatError, Turn, require

_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}


def content_text(content: Any, path: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for index, part in enumerate(content):
            part_path = f"{path}[{index}]"
            kind = require(part, "type", part_path, str)
            if kind != "text":
                raise TraceFormatError(f"{part_path}.type", f"only text parts are supported, got {kind!r}")
            texts.append(require(part, "text", part_path, str))
        return "\n".join(texts)
    raise TraceFormatError(path, f"expected a string or a list of text parts, got {type(content).__name__}")


def _tool_call(call: Any, path: str) -> ToolCall:
    call_id = require(call, "id", path, str)
    function = require(call, "function", path, dict)
    name = require(function, "name", f"{path}.function", str)
    raw = function.get("arguments", "")
    if isinstance(raw, str):
        try:
            arguments = json.loads(raw) if raw.strip() else None
        except json.JSONDecodeError as exc:
            raise TraceFormatError(f"{path}.function.arguments", f"not valid JSON ({exc.msg})") from None
    elif isinstance(raw, dict) or raw is None:
        arguments = raw
    else:
        raise TraceFormatError(f"{path}.function.arguments", "must be a JSON string or an object")
    return ToolCall(call_id=call_id, name=name, arguments=arguments)


def parse_turns(item: dict[str, Any], path: str) -> list[Turn]:
    messages = require(item, "messages", path, list)
    turns: list[Turn] = []
    for index, message in enumerate(messages):
        mpath = f"{path}.messages[{index}]"
        role = require(message, "role", mpath, str)
        if role not in _ROLES:
            raise TraceFormatError(f"{mpath}.role", f"unknown role {role!r}")
        text = content_text(message.get("content"), f"{mpath}.content")
        calls: tuple[ToolCall, ...] = ()
        if message.get("tool_calls"):
            if role != "assistant":
                raise TraceFormatError(
                    f"{mpath}.tool_calls", f"only assistant messages carry tool calls, not {role}"
                )
            raw_calls = require(message, "tool_calls", mpath, list)
            calls = tuple(_tool_call(c, f"{mpath}.tool_calls[{i}]") for i, c in enumerate(raw_calls))
        tool_call_id = None
        if role == "tool":
            tool_call_id = require(message, "tool_call_id", mpath, str)
        turns.append(Turn(_ROLES[role], text, mpath, calls, tool_call_id))  # type: ignore[arg-type]
    return turns
