"""Owns the OpenInference span attributes: flattened ``llm.*_messages`` / ``llm.tools`` -> turns, tools.

OpenInference (Arize) flattens lists with zero-based indices:
``llm.input_messages.<i>.message.role`` / ``.message.content`` / ``.message.contents.<j>.message_content.
{type,text}`` / ``.message.tool_calls.<k>.tool_call.{id,function.name,function.arguments}`` /
``.message.tool_call_id`` / ``.message.name``; ``llm.output_messages.<i>...`` likewise (several output
messages are n>1 choices); ``llm.tools.<i>.tool.json_schema`` holds a tool definition as JSON text.
Nested lists (Phoenix span JSON: ``"llm.input_messages": [{"message.role": ...}]``) are flattened
to those keys first (``flat``). ``openinference.span.kind`` is ``LLM`` for model calls and ``TOOL``
for tool executions (``tool.name``,
``input.value`` = the arguments, ``output.value`` = the result). Tool result messages usually carry no
``tool_call_id``: they are paired with the calls by order.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from core.domain import json_input
from core.domain.trajectory import ToolCall
from core.formats.errors import TraceFormatError, key_index, shown
from core.formats.import_openai import arguments_text
from core.formats.turns import Turn, check_tools, media_detail, placeholder

SPAN_KIND = "openinference.span.kind"
_MESSAGE_KEY = re.compile(r"^llm\.(input|output)_messages\.(\d+)\.message\.(.+)$")
_TOOL_KEY = re.compile(r"^llm\.tools\.(\d+)\.tool\.json_schema$")
_ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "ai": "assistant",
    "model": "assistant",
    "tool": "tool",
    "function": "tool",
}


def _call_id(name: str, arguments: str) -> str:
    """A deterministic id for a call sent without one: the same call replayed in a later span's input
    gets the same id, so the message de-duplicates."""
    digest = hashlib.sha1(f"{name}\n{arguments}".encode()).hexdigest()[:12]
    return f"call-{digest}"


def flat(attributes: dict[str, Any]) -> dict[str, Any]:
    """OpenInference attributes with nested lists and objects flattened to the dotted, zero-indexed
    keys of the spec: Phoenix's span JSON export writes ``llm.input_messages`` as a list of
    ``{"message.role", "message.content", "message.tool_calls": [...]}`` objects (or fully nested
    ``{"llm": {"input_messages": [{"message": {...}}]}}``); both become ``llm.input_messages.0.message.role``.
    Keys outside ``llm`` are left as they are (GenAI ``gen_ai.input.messages`` stays a list)."""
    if not any(
        key == "llm" or (key.startswith("llm.") and isinstance(value, list | dict))
        for key, value in attributes.items()
    ):
        return attributes
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and not (prefix.endswith(".json_schema") or prefix.endswith(".arguments")):
            for key, child in value.items():
                walk(f"{prefix}.{key}", child)
        elif isinstance(value, list) and not prefix.endswith(".json_schema"):
            for index, child in enumerate(value):
                walk(f"{prefix}.{index}", child)
        else:
            out[prefix] = value

    for key, value in attributes.items():
        if key == "llm" or key.startswith("llm."):
            walk(key, value)
        else:
            out[key] = value
    return out


def has_messages(attributes: dict[str, Any]) -> bool:
    return any(_MESSAGE_KEY.match(key) for key in flat(attributes))


def is_llm_span(attributes: dict[str, Any]) -> bool:
    return str(attributes.get(SPAN_KIND, "")).upper() == "LLM" or has_messages(attributes)


def is_tool_span(attributes: dict[str, Any]) -> bool:
    return str(attributes.get(SPAN_KIND, "")).upper() == "TOOL"


def _nested(attributes: dict[str, Any], direction: str, path: str) -> dict[int, dict[str, Any]]:
    messages: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        match = _MESSAGE_KEY.match(key)
        if match and match.group(1) == direction:
            messages.setdefault(key_index(match.group(2), key, path), {})[match.group(3)] = value
    return messages


def _indexed(fields: dict[str, Any], prefix: str, path: str) -> dict[int, dict[str, Any]]:
    """``{"tool_calls.0.tool_call.id": x}`` with prefix ``tool_calls`` -> ``{0: {"tool_call.id": x}}``."""
    out: dict[int, dict[str, Any]] = {}
    pattern = re.compile(rf"^{re.escape(prefix)}\.(\d+)\.(.+)$")
    for key, value in fields.items():
        match = pattern.match(key)
        if match:
            out.setdefault(key_index(match.group(1), key, path), {})[match.group(2)] = value
    return out


def messages(attributes: dict[str, Any], direction: str, path: str) -> list[Turn]:
    """The input or output messages of an LLM span as turns (``direction``: input | output)."""
    attributes = flat(attributes)
    turns = []
    for index, fields in sorted(_nested(attributes, direction, path).items()):
        mpath = f"{path}.llm.{direction}_messages.{index}.message"
        role_raw = fields.get("role")
        if not isinstance(role_raw, str) or role_raw.lower() not in _ROLES:
            raise TraceFormatError(
                f"{mpath}.role",
                f"missing or unknown role {shown(role_raw)} (send system, user, assistant or tool)",
            )
        role = _ROLES[role_raw.lower()]
        text = fields.get("content")
        if text is None:
            parts = []
            for _, part in sorted(_indexed(fields, "contents", mpath).items()):
                kind = part.get("message_content.type", "text")
                if kind == "text":
                    parts.append(str(part.get("message_content.text", "")))
                else:  # an image content (message_content.image.image.url): a typed placeholder
                    url = part.get("message_content.image.image.url")
                    parts.append(placeholder(str(kind), media_detail({"url": url})))
            text = "\n".join(parts)
        if not isinstance(text, str):
            text = json.dumps(text, sort_keys=True)
        calls = []
        for k, call in sorted(_indexed(fields, "tool_calls", mpath).items()):
            cpath = f"{mpath}.tool_calls.{k}.tool_call"
            name = call.get("tool_call.function.name")
            if not isinstance(name, str) or not name:
                raise TraceFormatError(f"{cpath}.function.name", "missing")
            arguments = arguments_text(
                call.get("tool_call.function.arguments"), f"{cpath}.function.arguments"
            )
            call_id = call.get("tool_call.id") or _call_id(name, arguments)
            calls.append(ToolCall(call_id=str(call_id), name=name, arguments=arguments))
        if role_raw.lower() == "assistant" and fields.get("function_call_name"):
            arguments = arguments_text(
                fields.get("function_call_arguments_json"), f"{mpath}.function_call_arguments_json"
            )
            fname = str(fields["function_call_name"])
            calls.append(ToolCall(_call_id(fname, arguments), fname, arguments))
        tool_call_id = fields.get("tool_call_id") if role == "tool" else None
        name = fields.get("name") if role == "tool" else ""
        turns.append(
            Turn(
                role,  # type: ignore[arg-type]
                text,
                mpath,
                tuple(calls),
                None if tool_call_id in (None, "") else str(tool_call_id),
                name=name if isinstance(name, str) else "",
            )
        )
    return turns


def tools(attributes: dict[str, Any], path: str) -> tuple[dict[str, Any], ...]:
    attributes = flat(attributes)
    found = []
    for key, value in sorted(attributes.items()):
        match = _TOOL_KEY.match(key)
        if not match:
            continue
        index, tpath = key_index(match.group(1), key, path), f"{path}.{key}"
        try:
            definition = json_input.loads(value) if isinstance(value, str) else value
        except json.JSONDecodeError as exc:
            raise TraceFormatError(tpath, f"not valid JSON ({exc.msg})") from None
        found.append((index, definition, tpath))
    out: list[dict[str, Any]] = []
    for _, definition, tpath in sorted(found, key=lambda x: x[0]):
        out.extend(check_tools([definition], tpath))
    return tuple(out)


def tool_execution(attributes: dict[str, Any]) -> tuple[str | None, str, str, str]:
    """A TOOL span -> (call id or None, tool name, arguments text, result text)."""
    call_id = attributes.get("tool_call.id") or attributes.get("tool.id")
    name = attributes.get("tool.name") or ""
    arguments = attributes.get("input.value") or ""
    result = attributes.get("output.value")
    return (
        None if call_id in (None, "") else str(call_id),
        str(name),
        arguments if isinstance(arguments, str) else json.dumps(arguments, sort_keys=True),
        "" if result is None else result if isinstance(result, str) else json.dumps(result, sort_keys=True),
    )
