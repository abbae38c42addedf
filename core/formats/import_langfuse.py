"""Owns the Langfuse import: a trace as its public API returns it, ``{"trace": {...}, "observations":
[...]}`` -> a Conversation.

Langfuse (``GET /api/public/traces/{id}`` plus ``GET /api/public/observations?traceId=``): the trace has
``id``, ``name``, ``sessionId``, ``input``, ``output``, ``metadata``; each observation has ``id``,
``type`` (``GENERATION`` for a model call; ``SPAN``, ``EVENT``, ``TOOL``, ``AGENT``, ... otherwise),
``startTime``, ``input``, ``output``, ``level`` (``ERROR`` on failure) and ``statusMessage``. A
generation's ``input`` is the chat it sent (OpenAI messages, or ``{"messages": [...]}``) and its
``output`` the assistant message (an object with ``content`` / ``tool_calls``, or plain text). Like
chat spans, every generation replays the history: the generations, ordered by ``startTime``, are
de-duplicated into one conversation exactly as OpenTelemetry chat spans are
(core.formats.import_otel). ``TOOL`` observations are matched to the calls of their name in order:
one answers its call when no later generation replayed the result, and its ``level`` ERROR marks the
result ``is_error`` either way (a replayed result keeps the replayed text). The trace ``id`` is the
external id; ``metadata.task_key`` (else the ``sessionId``) the task key; the trace's ``metadata``,
``userId``, ``sessionId``, ``tags``, ``name``, ``release``, ``version`` and ``environment`` are kept as the
trace's metadata. The body of ``GET /api/public/traces/{id}`` (the trace with its ``observations``
embedded) is read as well as ``{"trace", "observations"}``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from core.formats import import_openai
from core.formats.errors import TraceFormatError, require
from core.formats.import_otel import _assemble, _pair_ids
from core.formats.turns import Conversation, Turn


def _chat(value: Any) -> list[Any] | None:
    if isinstance(value, dict) and isinstance(value.get("messages"), list):
        return list(value["messages"])
    if isinstance(value, list):
        return value
    return None


def _output_message(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        return {"role": "assistant", "content": value}
    if isinstance(value, dict):
        if isinstance(value.get("choices"), list) and value["choices"]:  # a raw chat.completion
            value = value["choices"][0].get("message", {})
        if "role" in value or "content" in value or "tool_calls" in value:
            return {"role": "assistant", **{k: v for k, v in value.items() if k != "role"}}
    raise TraceFormatError("output", "expected the assistant message (an object or text)")


def parse(item: dict[str, Any], path: str) -> Conversation:
    if "trace" not in item and isinstance(item.get("observations"), list):
        trace = item  # the body of GET /api/public/traces/{id}: the trace with its observations embedded
    else:
        trace = require(item, "trace", path, dict)
    observations = require(item, "observations", path, list)
    generations = []
    tools = []
    for index, obs in enumerate(observations):
        opath = f"{path}.observations[{index}]"
        if not isinstance(obs, dict):
            raise TraceFormatError(opath, f"expected an object, got {type(obs).__name__}")
        kind = str(obs.get("type", "")).upper()
        if kind == "GENERATION":
            generations.append((str(obs.get("startTime") or ""), index, obs, opath))
        elif kind == "TOOL":
            tools.append((str(obs.get("startTime") or ""), index, obs, opath))
    if not generations:
        raise TraceFormatError(
            f"{path}.observations", "no GENERATION observation: nothing holds the model's messages"
        )
    chat: list[tuple[Any, list[Turn], list[Turn]]] = []
    for _, _, obs, opath in sorted(generations):
        messages = _chat(obs.get("input"))
        if messages is None:
            raise TraceFormatError(
                f"{opath}.input", "expected the chat messages sent (a list, or {messages})"
            )
        try:
            output = _output_message(obs.get("output"))
        except TraceFormatError:
            raise TraceFormatError(
                f"{opath}.output", "expected the assistant message (an object or text)"
            ) from None
        inputs = import_openai.parse({"messages": messages}, f"{opath}.input").turns
        outputs = import_openai.parse({"messages": [output]}, f"{opath}.output").turns
        chat.append((obs, inputs, outputs))
    conversation = _pair_ids(_assemble(chat))
    joined: set[str] = set()  # calls a TOOL observation was matched to
    for _, _, obs, opath in sorted(tools):
        call = next(
            (
                (i, c)
                for i, t in enumerate(conversation)
                if t.role == "assistant"
                for c in t.tool_calls
                if c.name == obs.get("name") and c.call_id not in joined
            ),
            None,
        )
        if call is None:
            continue
        where, found = call
        joined.add(found.call_id)
        result = obs.get("output")
        text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, sort_keys=True)
        failed = str(obs.get("level", "")).upper() == "ERROR"
        if failed and result is None:
            text = str(obs.get("statusMessage") or "tool error")
        replayed = next(
            (k for k, t in enumerate(conversation) if t.role == "tool" and t.tool_call_id == found.call_id),
            None,
        )
        if replayed is not None:  # a later generation replayed the result: keep its text, add the error
            turn = conversation[replayed]
            conversation[replayed] = replace(
                turn, is_error=turn.is_error or failed, text=turn.text if turn.text.strip() else text
            )
            continue
        conversation.insert(
            where + 1, Turn("tool", text, opath, tool_call_id=found.call_id, name=found.name, is_error=failed)
        )
    envelope: dict[str, Any] = {}
    if trace.get("id") is not None:
        envelope["id"] = str(trace["id"])
    raw_metadata = trace.get("metadata")
    metadata: dict[str, Any] = raw_metadata if isinstance(raw_metadata, dict) else {}
    if isinstance(metadata.get("task_key"), str) and metadata["task_key"].strip():
        envelope["task_key"] = metadata["task_key"]
    elif isinstance(trace.get("sessionId"), str) and trace["sessionId"].strip():
        envelope["default_task_key"] = trace["sessionId"]  # an id: used as it is
    kept = dict(metadata)
    for key in ("userId", "sessionId", "tags", "name", "release", "version", "environment"):
        if trace.get(key) not in (None, "", []):
            kept.setdefault(key, trace[key])
    if kept:
        envelope["metadata"] = kept
    return Conversation(turns=conversation, envelope=envelope, path=path)
