"""Owns the OpenTelemetry GenAI message attributes of one span -> neutral turns and tool definitions.

The GenAI semantic conventions: ``gen_ai.input.messages`` / ``gen_ai.output.messages`` (JSON text or
lists) of ``{"role", "parts"}`` with parts ``text`` (``content``), ``tool_call`` (``id``, ``name``,
``arguments``), ``tool_call_response`` (``id``, ``response``) and ``reasoning`` (``content``);
``gen_ai.system_instructions`` (also the spelling ``gen_ai.system.instructions``) as text parts or plain
text; ``gen_ai.tool.definitions`` as the tool list. Media parts (``blob``, ``file``, ``uri``, with their
``modality``) are kept as typed placeholders (``[image part: image/png]``); any other part type is
refused naming the part and what to send.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from core.domain import json_input
from core.domain.trajectory import ToolCall
from core.formats.errors import TraceFormatError, require, shown
from core.formats.import_openai import arguments_text
from core.formats.otlp import json_text
from core.formats.turns import Turn, check_tools, media_detail, placeholder

INPUT = "gen_ai.input.messages"
OUTPUT = "gen_ai.output.messages"
SYSTEM_KEYS = ("gen_ai.system_instructions", "gen_ai.system.instructions")
TOOL_DEFINITIONS = "gen_ai.tool.definitions"
_ROLES = {"system": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
_PART_HINT = "send text, tool_call, tool_call_response, reasoning, blob, file or uri parts"


def decoded(value: Any, path: str) -> list[Any]:
    if isinstance(value, str):
        try:
            value = json_input.loads(value)
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
            f"{path}.role", f"unknown role {shown(role)} (send system, user, assistant or tool)"
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
        elif kind in ("blob", "file", "uri", "image", "audio", "video"):
            # media parts (GenAI conventions: blob / file / uri with a modality) are typed placeholders
            modality = part.get("modality") if isinstance(part.get("modality"), str) else kind
            texts.append(placeholder(str(modality), media_detail(part)))
        else:
            raise TraceFormatError(f"{ppath}.type", f"unsupported part type {shown(kind)} ({_PART_HINT})")
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
                raise TraceFormatError(
                    f"{ppath}.type", f"unsupported system part {shown(kind)} (send text parts)"
                )
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
            raw = json_input.loads(raw)
        except json.JSONDecodeError as exc:
            raise TraceFormatError(kpath, f"not valid JSON ({exc.msg})") from None
    return check_tools(raw, kpath)


# --------------------------------------------------------------------------------------------
# Content on span events
# --------------------------------------------------------------------------------------------

DETAILS_EVENT = "gen_ai.client.inference.operation.details"
LEGACY_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
    "gen_ai.choice": "assistant",
}


def details_attributes(events: Any) -> dict[str, Any]:
    """The attributes of a span's ``gen_ai.client.inference.operation.details`` event (the GenAI
    conventions' opt-in event carrying the same ``gen_ai.input.messages`` / ``gen_ai.output.messages``
    / ``gen_ai.system_instructions`` as the inference span), or {}."""
    for event in events:
        if event.get("name") == DETAILS_EVENT and isinstance(event.get("attributes"), dict):
            return dict(event["attributes"])
    return {}


def _event_body(attributes: dict[str, Any]) -> dict[str, Any]:
    """A legacy event's body: its attributes, or a JSON object in ``body`` / ``gen_ai.event.content``."""
    for key in ("body", "gen_ai.event.content", "event.body"):
        raw = attributes.get(key)
        if isinstance(raw, str):
            try:
                raw = json_input.loads(raw)
            except json.JSONDecodeError:
                raw = {"content": raw}
        if isinstance(raw, dict):
            return raw
    return attributes


def legacy_event_messages(events: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(input, output) OpenAI-shaped messages from the per-message span events of the GenAI
    conventions up to v1.36 (``gen_ai.system.message``, ``gen_ai.user.message``,
    ``gen_ai.assistant.message``, ``gen_ai.tool.message`` in the input; ``gen_ai.choice`` the output,
    its ``message`` holding ``content`` / ``tool_calls``)."""
    inputs: list[dict[str, Any]] = []
    outputs: list[dict[str, Any]] = []
    for event in events:
        role = LEGACY_EVENTS.get(str(event.get("name")))
        if role is None:
            continue
        body = _event_body(event.get("attributes") or {})
        if event.get("name") == "gen_ai.choice":
            message = body.get("message")
            if isinstance(message, str):
                try:
                    message = json_input.loads(message)
                except json.JSONDecodeError:
                    message = {"content": message}
            if not isinstance(message, dict):
                message = body
            outputs.append({"role": "assistant", **_openai_fields(message)})
            continue
        message = {"role": role, **_openai_fields(body)}
        if role == "tool" and body.get("id") is not None:
            message["tool_call_id"] = str(body["id"])
        inputs.append(message)
    return inputs, outputs


def _openai_fields(body: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"content": body.get("content")}
    calls = body.get("tool_calls")
    if isinstance(calls, str):
        try:
            calls = json_input.loads(calls)
        except json.JSONDecodeError:
            calls = None
    if isinstance(calls, list) and calls:
        out["tool_calls"] = [
            {
                "id": str(c.get("id") or f"call-{n}"),
                "type": "function",
                "function": dict(
                    c.get("function") or {"name": c.get("name", ""), "arguments": c.get("arguments")}
                ),
            }
            for n, c in enumerate(calls)
            if isinstance(c, dict)
        ]
    return out
