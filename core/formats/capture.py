"""Owns the pure side of the capture proxy: what a chat-completions call means as trace data.

- ``conversation_keys(messages, scope)``: one key per message prefix (a SHA-256 chain over a canonical form
  of each message: role, text, tool calls with their ids, names and arguments, tool_call_id). A call
  whose messages start with another call's messages + answer has that call's key among its prefix
  keys: that is how the proxy joins calls into one trace by conversation continuity.
- ``StreamAssembler``: OpenAI ``chat.completion.chunk`` objects (the SSE ``data:`` payloads) folded
  back into the ``chat.completion`` body they stream (content and tool-call argument deltas
  concatenated, per-token logprobs collected, finish reasons, usage), so a streamed call is recorded
  exactly like a non-streamed one.
- ``answer_message(response)``: the first choice's assistant message as an OpenAI message.
- ``call_trajectory(...)``: the call's messages + answer -> a Trajectory (the ``openai`` importer;
  ``openai-legacy`` when the call uses the deprecated function-calling fields), with the task key and
  external id the agent sent.
- ``unreadable_message(body)``: the first message-level problem the importer finds in a request
  (unknown role, content that is neither text nor typed parts, malformed tool calls): what an OpenAI
  server refuses too, so the proxy refuses it before forwarding.
- ``partial_trajectory(...)``: what is kept of a conversation the importer cannot arrange as a
  trajectory (a system message mid-way, a tool answer to no call): its task, no steps, and a note
  naming the problem, so a trace whose id the proxy handed out always exists.

No I/O here.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from core.domain import json_input
from core.domain.ids import derived_id
from core.domain.trajectory import Trajectory
from core.formats import import_openai
from core.formats.import_openai import arguments_text, content_text
from core.formats.importing import (
    ImportedTrace,
    TraceFormatError,
    explicit_task_key,
    parse_traces,
    task_text_key,
)

SOURCE_FORMAT = "proxy"
# keys of a chat-completions request that are recorded with the call (never headers or credentials)
RECORDED_PARAMS = (
    "model",
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "n",
    "seed",
    "stop",
    "logprobs",
    "top_logprobs",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "stream",
)


def _text(content: Any) -> str:
    try:
        return content_text(content, "content")
    except TraceFormatError:  # non-text parts: keep them in the key as JSON
        return json.dumps(content, sort_keys=True, ensure_ascii=False)


def _arguments(raw: Any) -> str:
    try:
        return json.dumps(
            json_input.loads(arguments_text(raw, "arguments")), sort_keys=True, ensure_ascii=False
        )
    except (TraceFormatError, ValueError):
        return str(raw)


def canonical_message(message: Any) -> str:
    """A message's identity for continuity: what the model saw, not how the client spelled it
    (``content: null`` and ``""`` agree; arguments compare as JSON objects; extra keys are ignored)."""
    if not isinstance(message, dict):
        return json.dumps(message, sort_keys=True, default=str)
    calls = [
        [
            call.get("id", ""),
            (call.get("function") or {}).get("name", ""),
            _arguments((call.get("function") or {}).get("arguments")),
        ]
        for call in message.get("tool_calls") or ()
        if isinstance(call, dict)
    ]
    role = message.get("role")
    return json.dumps(
        [
            "system" if role == "developer" else role,
            _text(message.get("content")),
            calls,
            message.get("tool_call_id") or "",
        ],
        ensure_ascii=False,
    )


def extend_key(key: str, message: Any) -> str:
    """The key of a conversation ``key`` stands for, followed by ``message``."""
    return hashlib.sha256(f"{key}\x00{canonical_message(message)}".encode()).hexdigest()


def conversation_keys(messages: list[Any], scope: str) -> list[str]:
    """``keys[i]`` identifies ``messages[: i + 1]`` within ``scope`` (a project: another project's
    identical conversation has other keys)."""
    keys: list[str] = []
    key = hashlib.sha256(f"agentr-conversation\x00{scope}".encode()).hexdigest()
    for message in messages:
        key = extend_key(key, message)
        keys.append(key)
    return keys


def answer_message(response: dict[str, Any]) -> dict[str, Any] | None:
    """The first choice's message (the one an agent continues with), or None when there is none."""
    choices = response.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return None
    message = choices[0].get("message")
    if not isinstance(message, dict):
        return None
    out: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        out["tool_calls"] = message["tool_calls"]
    for key in ("reasoning_content", "reasoning"):
        if message.get(key):
            out[key] = message[key]
    return out


@dataclass
class _Choice:
    index: int
    role: str = "assistant"
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    logprobs: list[Any] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None


class StreamAssembler:
    """Folds streamed ``chat.completion.chunk`` objects into the ``chat.completion`` they stand for."""

    def __init__(self) -> None:
        self.head: dict[str, Any] = {}
        self.choices: dict[int, _Choice] = {}
        self.usage: dict[str, Any] | None = None
        self.extra: dict[str, Any] = {}

    def feed(self, chunk: dict[str, Any]) -> None:
        for key in ("id", "created", "model", "system_fingerprint"):
            if key in chunk and key not in self.head:
                self.head[key] = chunk[key]
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        if "prompt_token_ids" in chunk and chunk["prompt_token_ids"]:
            self.extra["prompt_token_ids"] = chunk["prompt_token_ids"]
        for raw in chunk.get("choices") or ():
            if not isinstance(raw, dict):
                continue
            index = int(raw.get("index", 0))
            choice = self.choices.setdefault(index, _Choice(index))
            delta = raw.get("delta") or {}
            if delta.get("role"):
                choice.role = delta["role"]
            if delta.get("content"):
                choice.content.append(delta["content"])
            for key in ("reasoning_content", "reasoning"):
                if delta.get(key):
                    choice.reasoning.append(delta[key])
            for call in delta.get("tool_calls") or ():
                slot = choice.calls.setdefault(
                    int(call.get("index", len(choice.calls))),
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                if call.get("id"):
                    slot["id"] = call["id"]
                function = call.get("function") or {}
                if function.get("name"):
                    slot["function"]["name"] += function["name"]
                if function.get("arguments"):
                    slot["function"]["arguments"] += function["arguments"]
            logprobs = raw.get("logprobs")
            if isinstance(logprobs, dict) and logprobs.get("content"):
                choice.logprobs.extend(logprobs["content"])
            if raw.get("token_ids"):
                choice.token_ids.extend(raw["token_ids"])
            if raw.get("finish_reason"):
                choice.finish_reason = raw["finish_reason"]

    def response(self) -> dict[str, Any]:
        choices = []
        for index in sorted(self.choices):
            choice = self.choices[index]
            message: dict[str, Any] = {"role": choice.role, "content": "".join(choice.content) or None}
            if choice.reasoning:
                message["reasoning_content"] = "".join(choice.reasoning)
            if choice.calls:
                message["tool_calls"] = [choice.calls[i] for i in sorted(choice.calls)]
            out: dict[str, Any] = {
                "index": index,
                "message": message,
                "finish_reason": choice.finish_reason,
                "logprobs": {"content": choice.logprobs} if choice.logprobs else None,
            }
            if choice.token_ids:
                out["token_ids"] = choice.token_ids
            choices.append(out)
        body = {**self.head, "object": "chat.completion", "choices": choices, **self.extra}
        if self.usage is not None:
            body["usage"] = self.usage
        return body


def call_trajectory(
    messages: list[Any], tools: Any, answer: dict[str, Any], task_key: str | None, external_id: str | None
) -> ImportedTrace:
    """The conversation of one call (its messages + the answer) as an imported trace; raises
    TraceFormatError naming the message the importer cannot read."""
    item: dict[str, Any] = {"messages": [*messages, answer]}
    if tools:
        item["tools"] = tools
    if task_key:
        item["task_key"] = task_key
    if external_id:
        item["id"] = external_id
    return parse_traces([item], "openai-legacy" if _legacy(messages) else "openai")[0]


def _legacy(messages: list[Any]) -> bool:
    return any(
        isinstance(m, dict) and (m.get("role") == "function" or m.get("function_call") is not None)
        for m in messages
    )


def unreadable_message(body: dict[str, Any]) -> TraceFormatError | None:
    """The importer's objection to the request's messages or tools taken one by one (paths start at
    ``body``: ``body.messages[2].role``), or None. The conversation's order is not judged here: an
    upstream answers a system message mid-way, so that call is forwarded (``partial_trajectory``)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None  # not a chat call the proxy records: forwarded, the upstream answers it
    item: dict[str, Any] = {"messages": messages}
    if body.get("tools") is not None:
        item["tools"] = body["tools"]
    if body.get("functions") is not None:
        item["functions"] = body["functions"]
    try:
        import_openai.parse(item, "body", legacy=True)
    except TraceFormatError as exc:
        return exc
    return None


def partial_trajectory(
    messages: list[Any], task_key: str | None, external_id: str | None, problem: TraceFormatError
) -> ImportedTrace:
    """A conversation the importer cannot arrange as a trajectory, kept as far as it can be: the first
    user message's text as the task (when readable), no steps, and a note naming ``problem``. The
    call itself is stored beside it whole (``ModelCallRecorded``)."""
    task = ""
    for message in messages:
        if isinstance(message, dict) and message.get("role") == "user":
            with contextlib.suppress(TraceFormatError):
                task = content_text(message.get("content"), "content")
            break
    note = (
        f"the conversation could not be read as a trajectory ({problem.path}: {problem.problem}); "
        "the model calls are kept as recorded"
    )
    key = explicit_task_key(task_key) if task_key else derived_id("task", task_text_key(task))
    provenance = {"source_format": "openai", "external_id": external_id, "task_key": key, "notes": [note]}
    trajectory = Trajectory(task=task, instruction="", steps=(), provenance=provenance)
    return ImportedTrace(key, trajectory, "unknown", "openai", external_id)


def recorded_request(body: dict[str, Any], messages_from: int) -> dict[str, Any]:
    """What is kept of a request: its parameters, tools and the messages new since ``messages_from``."""
    kept = {key: body[key] for key in RECORDED_PARAMS if key in body}
    if body.get("tools"):
        kept["tools"] = body["tools"]
    kept["messages_from"] = messages_from
    kept["messages"] = list(body.get("messages") or [])[messages_from:]
    return kept
