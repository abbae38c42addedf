"""Owns the OpenAI Responses API import: ``{"instructions"?, "input": [...items], "output"?: [...items],
"tools"?: [...]}`` -> a Conversation.

Items, as the Responses API defines them: messages (``{"role", "content"}``, content a string or
``input_text`` / ``output_text`` parts; ``type: "message"`` optional), ``function_call``
(``call_id``, ``name``, ``arguments`` JSON text), ``function_call_output`` (``call_id``, ``output``) and
``reasoning`` (``summary`` of ``summary_text`` parts, or ``content`` of ``reasoning_text`` parts). The
assistant's reasoning, calls and message that follow one another form ONE assistant turn (reasoning kept
on the step, not trained on unless asked). ``input`` may also be a plain string (the user message);
``output`` holds the response's own items (appended after ``input``). Tools use the Responses shape
``{"type": "function", "name", "parameters"}`` and are stored in the OpenAI chat shape. Items of other
types (web_search_call, file_search_call, ...) are refused naming the item.
"""

from __future__ import annotations

import json
from typing import Any

from core.formats import import_openai
from core.formats.errors import TraceFormatError, require, shown
from core.formats.turns import Conversation, check_tools

_SKIPPED = ("item_reference",)


def _reasoning_text(item: dict[str, Any]) -> str:
    texts = []
    for key in ("summary", "content"):
        for part in item.get(key) or []:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
    return "\n".join(texts)


def _messages(items: list[Any], path: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    pending: dict[str, Any] | None = None  # the assistant turn being gathered

    def flush() -> None:
        nonlocal pending
        if pending is not None:
            out.append(pending)
            pending = None

    def assistant() -> dict[str, Any]:
        nonlocal pending
        if pending is None:
            pending = {"role": "assistant", "content": None}
        return pending

    for index, item in enumerate(items):
        ipath = f"{path}[{index}]"
        if not isinstance(item, dict):
            raise TraceFormatError(ipath, f"expected an item object, got {type(item).__name__}")
        kind = item.get("type", "message")
        if kind == "message":
            role = require(item, "role", ipath, str)
            if role == "assistant":
                turn = assistant()
                if turn["content"] is not None or turn.get("tool_calls"):
                    flush()
                    turn = assistant()
                turn["content"] = item.get("content")
            else:
                flush()
                out.append({"role": role, "content": item.get("content")})
        elif kind == "reasoning":
            turn = assistant()
            text = _reasoning_text(item)
            turn["reasoning"] = f"{turn['reasoning']}\n{text}" if turn.get("reasoning") else text
        elif kind == "function_call":
            turn = assistant()
            turn.setdefault("tool_calls", []).append(
                {
                    "id": require(item, "call_id", ipath, str),
                    "type": "function",
                    "function": {
                        "name": require(item, "name", ipath, str),
                        "arguments": item.get("arguments"),
                    },
                }
            )
        elif kind == "function_call_output":
            flush()
            output = item.get("output")
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": require(item, "call_id", ipath, str),
                    "content": output if isinstance(output, str | list) else _json(output),
                }
            )
        elif kind in _SKIPPED:
            continue
        else:
            raise TraceFormatError(
                f"{ipath}.type",
                f"unsupported item type {shown(kind)} (send message, reasoning, function_call or "
                "function_call_output items)",
            )
    flush()
    return out


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def parse(item: dict[str, Any], path: str) -> Conversation:
    raw_input = require(item, "input", path, (str, list))
    inputs = [{"role": "user", "content": raw_input}] if isinstance(raw_input, str) else raw_input
    outputs = item.get("output") or []
    if not isinstance(outputs, list):
        raise TraceFormatError(f"{path}.output", "expected a list of output items")
    messages = _messages(inputs, f"{path}.input") + _messages(outputs, f"{path}.output")
    if isinstance(item.get("instructions"), str) and item["instructions"].strip():
        messages.insert(0, {"role": "system", "content": item["instructions"]})
    conversation = import_openai.parse({"messages": messages}, path)
    return Conversation(
        turns=conversation.turns, tools=check_tools(item.get("tools"), f"{path}.tools"), path=path
    )
