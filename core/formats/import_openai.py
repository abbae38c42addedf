"""Owns the OpenAI chat-messages import: ``{"messages": [...], "tools"?: [...]}`` -> a Conversation.

Accepts roles system / developer (as system), user, assistant (text ``content`` and/or ``tool_calls``
with ``function.arguments`` as a JSON string or object; reasoning text in ``reasoning_content`` or
``reasoning``; the speaker's ``name`` on user and assistant messages, as in multi-agent group chats)
and tool (``tool_call_id``; without one it answers the oldest call still waiting).
``content`` may be a string, null, or a list of parts: ``text`` parts are the text; any other part
(``image_url``, ``input_audio``, ``file``) is kept as a typed placeholder (``[image part: image/png]``).
Tool-call ``arguments`` that are not a JSON object are kept verbatim (``ToolCall.malformed``).

``legacy=True`` (format ``openai-legacy``) also accepts the deprecated function-calling shape: an
assistant ``function_call: {name, arguments}`` and role ``function`` results (``name``, no id), plus
``functions`` as the tool list; calls get ids ``legacy-<message index>``. Under format ``openai`` those
fields are refused with a message saying what to send instead.
"""

from __future__ import annotations

import json
from typing import Any

from core.domain.trajectory import ToolCall
from core.formats.errors import TraceFormatError, require, shown
from core.formats.turns import Conversation, Turn, check_tools, media_detail, placeholder

_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
LEGACY_HINT = "send tool_calls (and role tool with tool_call_id), or set format=openai-legacy"


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
            if kind in ("text", "input_text", "output_text"):
                texts.append(require(part, "text", part_path, str))
            elif kind == "refusal" and isinstance(part.get("refusal"), str):
                texts.append(part["refusal"])
            else:  # image_url, input_image, input_audio, file, ...: a typed placeholder, not a refusal
                texts.append(
                    placeholder(kind.removeprefix("input_").removesuffix("_url"), media_detail(part))
                )
        return "\n".join(texts)
    raise TraceFormatError(path, f"expected a string or a list of text parts, got {type(content).__name__}")


def arguments_text(raw: Any, path: str) -> str:
    """Tool-call arguments as text: a string exactly as sent (malformed JSON is the model's own error,
    kept and flagged by ``ToolCall.malformed``, which the rules critic reads as an error signal), an
    object dumped as JSON."""
    if raw is None:
        return "{}"  # no arguments sent at all
    if isinstance(raw, str):
        return raw  # verbatim (also "" and text that is not a JSON object: ToolCall.malformed flags it)
    if isinstance(raw, dict):
        return json.dumps(raw, ensure_ascii=False)
    raise TraceFormatError(path, "must be a JSON string or an object")


def _tool_call(call: Any, path: str) -> ToolCall:
    call_id = require(call, "id", path, str)
    function = require(call, "function", path, dict)
    name = require(function, "name", f"{path}.function", str)
    arguments = arguments_text(function.get("arguments"), f"{path}.function.arguments")
    return ToolCall(call_id=call_id, name=name, arguments=arguments)


def _reasoning(message: dict[str, Any], path: str) -> str:
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise TraceFormatError(f"{path}.{key}", "expected a string")
        return value
    return ""


def parse(item: dict[str, Any], path: str, *, legacy: bool = False) -> Conversation:
    messages = require(item, "messages", path, list)
    if "functions" in item and not legacy:
        raise TraceFormatError(
            f"{path}.functions", "legacy function definitions: send tools, or set format=openai-legacy"
        )
    tools = check_tools(item.get("tools"), f"{path}.tools")
    if legacy and item.get("functions") is not None:
        tools = tools + check_tools(item["functions"], f"{path}.functions")
    turns: list[Turn] = []
    for index, message in enumerate(messages):
        mpath = f"{path}.messages[{index}]"
        role = require(message, "role", mpath, str)
        if role == "function":
            if not legacy:
                raise TraceFormatError(f"{mpath}.role", f"legacy role 'function': {LEGACY_HINT}")
            text = content_text(message.get("content"), f"{mpath}.content")
            name = message.get("name") or ""
            turns.append(Turn("tool", text, mpath, name=name if isinstance(name, str) else ""))
            continue
        if role not in _ROLES:
            raise TraceFormatError(
                f"{mpath}.role", f"unknown role {shown(role)} (send system, user, assistant or tool)"
            )
        text = content_text(message.get("content"), f"{mpath}.content")
        refusal = message.get("refusal")
        if role == "assistant" and isinstance(refusal, str) and refusal and not text:
            text = refusal  # the model refused: its refusal is what it said (content is null then)
        calls: tuple[ToolCall, ...] = ()
        if message.get("function_call") is not None:
            if not legacy:
                raise TraceFormatError(f"{mpath}.function_call", f"legacy function_call: {LEGACY_HINT}")
            if role != "assistant":
                raise TraceFormatError(
                    f"{mpath}.function_call", f"only assistant messages carry calls, not {role}"
                )
            fcall = require(message, "function_call", mpath, dict)
            name = require(fcall, "name", f"{mpath}.function_call", str)
            arguments = arguments_text(fcall.get("arguments"), f"{mpath}.function_call.arguments")
            calls = (ToolCall(call_id=f"legacy-{index}", name=name, arguments=arguments),)
        if message.get("tool_calls"):
            if role != "assistant":
                raise TraceFormatError(
                    f"{mpath}.tool_calls", f"only assistant messages carry tool calls, not {role}"
                )
            raw_calls = require(message, "tool_calls", mpath, list)
            calls = calls + tuple(_tool_call(c, f"{mpath}.tool_calls[{i}]") for i, c in enumerate(raw_calls))
        tool_call_id = None
        if role == "tool" and message.get("tool_call_id") is not None:
            tool_call_id = require(message, "tool_call_id", mpath, str)
        name = message.get("name")  # tool: the function; user / assistant: the speaker (group chats)
        if name is not None and not isinstance(name, str):
            raise TraceFormatError(f"{mpath}.name", f"must be a string, got {type(name).__name__}")
        turns.append(
            Turn(
                _ROLES[role],  # type: ignore[arg-type]
                text,
                mpath,
                calls,
                tool_call_id,
                name=name or "",
                reasoning=_reasoning(message, mpath) if role == "assistant" else "",
            )
        )
    return Conversation(turns=turns, tools=tools, path=path)
