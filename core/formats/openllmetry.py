"""Owns the OpenLLMetry (Traceloop) span attributes: ``gen_ai.prompt.N.*`` / ``gen_ai.completion.N.*``
-> neutral turns.

OpenLLMetry's instrumentations flatten the chat into indexed attributes (its "GenAI Semantic
Conventions" page; the OpenTelemetry GenAI conventions before v1.37 had the same deprecated
``gen_ai.prompt`` / ``gen_ai.completion`` names): ``gen_ai.prompt.<i>.role`` / ``.content`` (content
may be JSON text of OpenAI content parts), ``gen_ai.prompt.<i>.tool_call_id`` for a tool result,
``gen_ai.prompt.<i>.tool_calls.<k>.{id,name,arguments}`` for an assistant's earlier calls, and
``gen_ai.completion.<i>.role`` / ``.content`` / ``.tool_calls.<k>.{id,name,arguments}`` (several
completions are n>1 choices); ``llm.request.functions.<i>.{name,description,parameters}`` are the tool
definitions. The messages are rebuilt in the OpenAI chat shape and read by the OpenAI importer, so the
two formats give the same turns.
"""

from __future__ import annotations

import re
from contextlib import suppress
from dataclasses import replace
from json import JSONDecodeError
from typing import Any

from core.domain import json_input
from core.formats import import_openai
from core.formats.errors import key_index
from core.formats.turns import Turn, check_tools

_KEY = re.compile(r"^gen_ai\.(prompt|completion)\.(\d+)\.(.+)$")
_FUNCTION = re.compile(r"^llm\.request\.functions\.(\d+)\.(name|description|parameters)$")
_CALL = re.compile(r"^tool_calls\.(\d+)\.(id|name|arguments)$")


def has_messages(attributes: dict[str, Any]) -> bool:
    return any(_KEY.match(key) for key in attributes)


def _messages(attributes: dict[str, Any], direction: str, path: str) -> list[tuple[int, dict[str, Any]]]:
    grouped: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        match = _KEY.match(key)
        if match and match.group(1) == direction:
            grouped.setdefault(key_index(match.group(2), key, path), {})[match.group(3)] = value
    out = []
    for index, fields in sorted(grouped.items()):
        message: dict[str, Any] = {
            "role": fields.get("role", "assistant" if direction == "completion" else "user")
        }
        content = fields.get("content")
        if isinstance(content, str) and content.lstrip().startswith("[{"):
            with suppress(JSONDecodeError):
                content = json_input.loads(content)  # OpenAI content parts as JSON text
        message["content"] = content
        if fields.get("tool_call_id"):
            message["tool_call_id"] = str(fields["tool_call_id"])
        calls: dict[int, dict[str, Any]] = {}
        for key, value in fields.items():
            call = _CALL.match(key)
            if call:
                where = f"{path}.gen_ai.{direction}.{index}"
                calls.setdefault(key_index(call.group(1), key, where), {})[call.group(2)] = value
        if calls:
            message["tool_calls"] = [
                {
                    "id": str(c.get("id") or f"call-{index}-{k}"),
                    "type": "function",
                    "function": {"name": str(c.get("name", "")), "arguments": c.get("arguments") or ""},
                }
                for k, c in sorted(calls.items())
            ]
        out.append((index, message))
    return out


def messages(attributes: dict[str, Any], direction: str, path: str) -> list[Turn]:
    """The prompt (``direction`` prompt) or completion messages of a span as turns."""
    rebuilt = _messages(attributes, direction, path)
    if not rebuilt:
        return []
    conversation = import_openai.parse({"messages": [m for _, m in rebuilt]}, f"{path}.gen_ai.{direction}")
    return [
        replace(t, path=f"{path}.gen_ai.{direction}.{rebuilt[n][0]}")
        for n, t in enumerate(conversation.turns)
    ]


def tools(attributes: dict[str, Any], path: str) -> tuple[dict[str, Any], ...]:
    grouped: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        match = _FUNCTION.match(key)
        if match:
            grouped.setdefault(key_index(match.group(1), key, path), {})[match.group(2)] = value
    out: list[dict[str, Any]] = []
    for index, fields in sorted(grouped.items()):
        function = dict(fields)
        if isinstance(function.get("parameters"), str):
            with suppress(JSONDecodeError):
                function["parameters"] = json_input.loads(function["parameters"])
        out.extend(check_tools([function], f"{path}.llm.request.functions.{index}"))
    return tuple(out)
