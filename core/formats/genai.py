"""Owns the OpenTelemetry GenAI message attributes of one span -> neutral turns and tool definitions.

The GenAI semantic conventions: ``gen_ai.input.messages`` / ``gen_ai.output.messages`` (JSON text or
lists) of ``{"role", "parts"}`` with parts ``text`` (``content``), ``tool_call`` (``id``, ``name``,
``arguments``), ``tool_call_response`` (``id``, ``response``) and ``reasoning`` (``content``);
``gen_ai.system_instructions`` (also the spelling ``gen_ai.system.instructions``) as text parts or plain
text; ``gen_ai.tool.definitions`` as the tool list. Any other part type (blob, file, uri) is refused
naming the part and what to send.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from core.domain.trajectory import ToolCall
from core.formats.errors import TraceFormatError, require
from core.formats.import_openai import arguments_text
from core.formats.otlp import json_text
from core.formats.turns import Turn, check_tools

INPUT = "gen_ai.input.messages"
OUTPUT = "gen_ai.output.messages"
SYSTEM_KEYS = ("gen_ai.system_instructions", "gen_ai.system.instructions")
TOOL_DEFINITIONS = "gen_ai.tool.definitions"
_ROLES = {"system": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
_PART_HINT = "send text, tool_call, tool_call_response or reasoning parts"


def decoded(value: Any, path: str) -> list[Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise TraceFormatError(path, f"not valid JSON ({exc.msg})") from None
    if not isinstance(value, list):
        raise TraceFormatError(path, f"expected a list of messages, got {type(value).__name__}")
    return value


def synthetic_call_id(part: dict[str, Any]) -> str:
    """A deterministic id for a tool_call part sent without one (the same call replayed in a later
    span's input gets the same id, so it de-duplicates)."""
    digest = hashlib.sha1(json_text(part).encode("utf-8")).hexdigest()[:12]
    return f"call-{digest}"


def message_turns(message: Any, path: str) -> list[Turn]:
    role = require(message, "role", path, str)
    if role not in _ROLES:
        raise TraceFormatError(
            f"{path}.role", f"unknown role {role!r} (send system, user, assistant or tool)"
        )
    parts = require(message, "parts", path, list)
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[ToolCall] = []
    responses: list[Turn] = []
    for index, part in enumerate(parts):
        ppath = f"{path}.parts[{index}]"
        kind = require(part, "type", ppath, str)
        if kind == "text":
            texts.append(require(part, "content", ppath, str))
        elif kind == "reasoning":
            reasoning.append(require(part, "content", ppath, str))
        elif kind == "tool_call":
            if role != "assistant":
                raise TraceFormatError(f"{ppath}.type", f"a tool_call part in a {role} message")
            call_id = part.get("id") or synthetic_call_id(part)
            calls.append(
                ToolCall(
                    call_id=str(call_id),
                    name=require(part, "name", ppath, str),
                    arguments=arguments_text(part.get("arguments"), f"{ppath}.arguments"),
                )
            )
        elif kind == "tool_call_response":
            if "response" not in part and "result" not in part:
                raise TraceFormatError(f"{ppath}.response", "missing")
            response = part.get("response", part.get("result"))
            call_id = part.get("id")
            responses.append(
                Turn(
                    "tool",
                    json_text(response),
                    ppath,
                    tool_call_id=None if call_id in (None, "") else str(call_id),
                )
            )
        else:
            raise TraceFormatError(f"{ppath}.type", f"unsupported part type {kind!r} ({_PART_HINT})")
    if responses:
        if texts or calls:
            raise TraceFormatError(
                path,
                "a message mixes tool_call_response parts with other parts "
                "(send results in their own message)",
            )
        return responses
    return [
        Turn(
            _ROLES[role],  # type: ignore[arg-type]
            "\n".join(texts),
            path,
            tuple(calls),
            reasoning="\n".join(reasoning),
        )
    ]


def messages(attributes: dict[str, Any], key: str, path: str) -> list[Turn]:
    if key not in attributes:
        return []
    out: list[Turn] = []
    for index, message in enumerate(decoded(attributes[key], f"{path}.{key}")):
        out.extend(message_turns(message, f"{path}.{key}[{index}]"))
    return out


def system_turns(attributes: dict[str, Any], path: str) -> list[Turn]:
    for key in SYSTEM_KEYS:
        if key not in attributes:
            continue
        raw = attributes[key]
        kpath = f"{path}.{key}"
        if isinstance(raw, str) and not raw.lstrip().startswith("["):
            return [Turn("system", raw, kpath)]  # plain text instructions
        parts = decoded(raw, kpath)
        texts = []
        for index, part in enumerate(parts):
            ppath = f"{kpath}[{index}]"
            kind = part.get("type", "text") if isinstance(part, dict) else None
            if kind != "text":
                raise TraceFormatError(f"{ppath}.type", f"unsupported system part {kind!r} (send text parts)")
            texts.append(require(part, "content", ppath, str))
        return [Turn("system", "\n".join(texts), kpath)]
    return []


def tools(attributes: dict[str, Any], path: str) -> tuple[dict[str, Any], ...]:
    if TOOL_DEFINITIONS not in attributes:
        return ()
    kpath = f"{path}.{TOOL_DEFINITIONS}"
    raw = attributes[TOOL_DEFINITIONS]
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise TraceFormatError(kpath, f"not valid JSON ({exc.msg})") from None
    return check_tools(raw, kpath)
