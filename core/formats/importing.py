"""Owns production-log import: a batch of traces in any supported format -> ``ImportedTrace`` list.

Formats (DESIGN §6, docs/traces.md): ``openai`` (chat messages with ``tool_calls`` and ``tool`` role),
``openai-legacy`` (the same plus the deprecated ``function_call`` / role ``function``), ``otel``
(one trace per item: ``{"spans": [...]}`` or ``{"resourceSpans": [...]}`` with OpenTelemetry GenAI or
OpenInference attributes), ``otlp`` (OTLP/JSON export requests, split into traces by trace id),
``sharegpt`` (ShareGPT / AgentGym ``conversations``; LLaMA-Factory ``function_call`` / ``observation``),
``openai-responses`` (Responses API items) and ``langfuse`` (``{trace, observations}``).
``REGISTRY`` maps each format name to its parser (``FORMATS`` are its keys). Each parser turns a
trace into neutral ``Turn`` objects; ``turns_to_trajectory`` turns those into one
``Trajectory`` the same way for every format, so one conversation gives the same trajectory whatever
format it arrived in.

A batch is all-or-nothing: the first malformed field raises ``TraceFormatError`` whose message names
the path and what to send instead, e.g. ``traces[3].messages[5].role: unknown role 'robot' (send
system, user, assistant or tool)``; nothing is returned half-parsed.

Trace envelope (every format): ``task_key`` (optional, trimmed and case-folded; default: AgentGym's
``item_id``, the spans' ``gen_ai.conversation.id``, Langfuse's ``sessionId`` (ids, as they are),
else a hash of the task text in NFC with whitespace collapsed and trimmed, case-folded:
``task_text_key``), ``outcome`` (``"success" | "failure" | "unknown"``, a reward number in [0, 1]
(success only at 1), a boolean, or ``{"success": bool, "reward": number}``; default unknown),
``reward`` (optional, in [0, 1]), ``id`` (optional external id), ``metadata`` (optional object,
kept: ``provenance["metadata"]``).
"""

from __future__ import annotations

import dataclasses
import functools
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.domain.ids import derived_id
from core.domain.trajectory import Step, ToolCall, ToolResult, Trajectory, UserTurn, tool_action
from core.formats import import_langfuse, import_openai, import_otel, import_responses, import_sharegpt
from core.formats.errors import TraceFormatError, require, shown
from core.formats.outcome import OUTCOME_HINT, Outcome, parse_outcome
from core.formats.turns import Conversation, Turn, check_tools

__all__ = [
    "FORMATS",
    "OUTCOME_HINT",
    "REGISTRY",
    "Conversation",
    "ImportedTrace",
    "Outcome",
    "TraceFormatError",
    "Turn",
    "check_tools",
    "imported",
    "parse_outcome",
    "parse_traces",
    "require",
    "split_react",
    "turns_to_trajectory",
    "with_note",
]
ItemParser = Callable[[dict[str, Any], str], Conversation]
"""One trace object and its path in the batch (``traces[3]``) -> its conversation."""
BatchParser = Callable[[list[Any]], list[tuple[dict[str, Any], Conversation]]]
"""The whole batch -> (envelope, conversation) per trace (a format whose traces span items)."""


@dataclass(frozen=True)
class FormatParser:
    """How a format's batch is parsed: item by item (``item``) or as a whole (``batch``)."""

    item: ItemParser | None = None
    batch: BatchParser | None = None


REGISTRY: dict[str, FormatParser] = {
    "openai": FormatParser(item=import_openai.parse),
    "openai-legacy": FormatParser(item=functools.partial(import_openai.parse, legacy=True)),
    "openai-responses": FormatParser(item=import_responses.parse),
    "otel": FormatParser(item=import_otel.parse_item),
    "otlp": FormatParser(batch=import_otel.parse_otlp_exports),
    "sharegpt": FormatParser(item=import_sharegpt.parse),
    "langfuse": FormatParser(item=import_langfuse.parse),
}
"""``format`` name -> its parser: adding a format is a parser module and a line here."""
FORMATS = tuple(REGISTRY)


@dataclass(frozen=True)
class ImportedTrace:
    task_key: str
    trajectory: Trajectory
    outcome: Outcome
    source_format: str
    external_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    environment: tuple[str, str] | None = None  # (env URI, task id) the trace names: replayable there


# --------------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------------


def split_react(text: str) -> tuple[str, str]:
    """``Thought: t\nAction: a`` -> (t, a); text without an ``Action:`` line is all action.

    The parts are cut out of the text, never rewritten: line breaks inside the thought and the action
    stay (only the ``Thought:`` / ``Action:`` labels and the whitespace around each part go)."""
    lines = text.strip().splitlines()
    for index, line in enumerate(lines):
        stripped = line.strip()
        if stripped.lower().startswith("action:"):
            action = "\n".join([stripped[len("action:") :].strip(), *lines[index + 1 :]]).strip()
            before = "\n".join(lines[:index]).strip()
            if before.lower().startswith("thought:"):
                before = before[len("thought:") :].strip()
            return before, action
    return "", text.strip()


_ACTION_LINE = re.compile(r"^\s*action\s*:", re.IGNORECASE | re.MULTILINE)


def turns_to_trajectory(
    turns: Sequence[Turn], path: str, tools: tuple[dict[str, Any], ...] = ()
) -> Trajectory:
    """Neutral turns -> Trajectory: system -> instruction, first user -> task, assistant -> steps,
    tool results -> the results of the calls they answer (by id, else by order), later user messages
    -> the observation of the step they answer."""
    instruction_parts: list[str] = []
    task_parts: list[str] = []
    task_name = ""
    steps: list[dict[str, Any]] = []
    pending: list[tuple[str, int]] = []  # (call id, step index) waiting for a result, in call order
    for turn in turns:
        if turn.role == "system":
            if steps or task_parts:
                raise TraceFormatError(
                    turn.path, "a system message after the conversation started (send system messages first)"
                )
            instruction_parts.append(turn.text)
        elif turn.role == "assistant":
            if not task_parts:
                raise TraceFormatError(
                    turn.path,
                    "an assistant message before any user message (send the task as a user message)",
                )
            step: dict[str, Any] = {
                "observation": None,
                "reasoning": turn.reasoning,
                "alternatives": turn.alternatives,
                "results": {},
                "calls": turn.tool_calls,
                "name": turn.name,
                "replies": [],
            }
            if turn.tool_calls:
                # the text beside the calls, as sent (the canonical calls are the action)
                step.update(kind="tool", thought=turn.text, action=tool_action(turn.tool_calls))
                pending.extend((call.call_id, len(steps)) for call in turn.tool_calls)
            elif _ACTION_LINE.search(turn.text):
                thought, action = split_react(turn.text)  # a ReAct text action
                step.update(kind="action", thought=thought, action=action)
            else:
                # an answer (or an empty turn, kept as an empty step): its text byte for byte
                step.update(kind="answer", thought="", action=turn.text)
            steps.append(step)
        elif turn.role == "tool":
            if turn.tool_call_id is not None:
                match = [i for i, (call_id, _) in enumerate(pending) if call_id == turn.tool_call_id]
                if not match:
                    raise TraceFormatError(
                        turn.path,
                        f"tool response to unknown or already answered call {shown(turn.tool_call_id)} "
                        "(send tool_call_id of a call the assistant made)",
                    )
                call_id, target = pending.pop(match[0])
            elif pending:
                call_id, target = pending.pop(0)  # no id: the oldest call still waiting
            elif steps and steps[-1]["kind"] != "tool":
                _add_observation(steps[-1], turn.text)  # a text action's environment answer
                steps[-1]["replies"].append(UserTurn(turn.text, turn.name))
                continue
            else:
                raise TraceFormatError(
                    turn.path,
                    "a tool response with no tool call waiting for it (send the assistant's call first)",
                )
            result = ToolResult(call_id=call_id, content=turn.text, is_error=turn.is_error, name=turn.name)
            steps[target]["results"][call_id] = result
        else:  # user
            if not steps:
                task_parts.append(turn.text)
                task_name = task_name or turn.name
            else:
                _add_observation(steps[-1], turn.text)
                steps[-1]["replies"].append(UserTurn(turn.text, turn.name))
    if not task_parts:
        raise TraceFormatError(path, "no user message holding the task")
    built = []
    for s in steps:
        calls: tuple[ToolCall, ...] = s["calls"]
        results = tuple(s["results"][c.call_id] for c in calls if c.call_id in s["results"])
        observation = s["observation"]
        if s["kind"] == "tool":
            texts = [r.content for r in results]
            if observation is not None:
                texts.append(observation)
            observation = "\n".join(texts)
        built.append(
            Step(
                thought=s["thought"],
                action=s["action"],
                observation=observation or "",
                tool_calls=calls,
                tool_results=results,
                reasoning=s["reasoning"],
                alternatives=s["alternatives"],
                kind=s["kind"],
                name=s["name"],
                replies=tuple(s["replies"]),
            )
        )
    return Trajectory(
        task="\n".join(task_parts),
        instruction="\n".join(instruction_parts),
        steps=tuple(built),
        tools=tools,
        task_name=task_name,
    )


def _add_observation(step: dict[str, Any], text: str) -> None:
    step["observation"] = text if step["observation"] is None else f"{step['observation']}\n{text}"


def task_text_key(task: str) -> str:
    """What the default task key hashes: the task text in Unicode NFC, whitespace runs collapsed to
    one space, trimmed and case-folded, so "Refund order 7" and "refund  order 7\n" pair."""
    return " ".join(unicodedata.normalize("NFC", task).split()).casefold()


def explicit_task_key(key: str) -> str:
    """A sent task key (the envelope's ``task_key``, ``agentr.task_key``, Langfuse
    ``metadata.task_key``) trimmed and case-folded ("refund-order " and "Refund-Order" are one task);
    inner text is kept (NFC-normalised). Ids a format carries (AgentGym ``item_id``, the GenAI
    conversation id, Langfuse ``sessionId``) are used as they are: ids are case-sensitive."""
    return unicodedata.normalize("NFC", key).strip().casefold()


MAX_EXTERNAL_ID = 200
"""Longest caller-given trace id, as text (an integer id counts its digits): its varchar(200) column."""


def _envelope(
    item: dict[str, Any], hints: dict[str, Any], path: str, trajectory: Trajectory
) -> tuple[str, Outcome, float | None, str | None]:
    if "outcome" in item or "reward" in item:
        outcome, reward = parse_outcome(item.get("outcome"), item.get("reward"), path)
    else:
        outcome, reward = parse_outcome(hints.get("outcome"), hints.get("reward"), hints.get("path", path))
    task_key = item.get("task_key", hints.get("task_key"))
    if task_key is not None:
        if not isinstance(task_key, str) or not task_key.strip():
            raise TraceFormatError(f"{path}.task_key", "must be a non-empty string")
        task_key = explicit_task_key(task_key)
    elif isinstance(item.get("item_id"), str | int) and not isinstance(item["item_id"], bool):
        task_key = str(item["item_id"])  # AgentGym's AgentTraj records name their task item_id
    elif hints.get("default_task_key") is not None:
        task_key = str(hints["default_task_key"])  # the spans' conversation id, Langfuse's sessionId
    else:
        task_key = derived_id("task", task_text_key(trajectory.task))
    external_id = item.get("id", hints.get("id"))
    if external_id is not None and (isinstance(external_id, bool) or not isinstance(external_id, str | int)):
        raise TraceFormatError(f"{path}.id", "must be a string")
    text_id = None if external_id is None else str(external_id)
    if text_id is not None and not 0 < len(text_id) <= MAX_EXTERNAL_ID:
        raise TraceFormatError(
            f"{path}.id", f"must be 1 to {MAX_EXTERNAL_ID} characters (digits for an integer)"
        )
    return task_key, outcome, reward, text_id


# --------------------------------------------------------------------------------------------
# Batch entry point
# --------------------------------------------------------------------------------------------


def _conversations(items: list[Any], fmt: str) -> list[tuple[dict[str, Any], Conversation]]:
    parser = REGISTRY[fmt]
    if parser.batch is not None:
        return parser.batch(items)
    assert parser.item is not None  # a FormatParser names one of the two
    out: list[tuple[dict[str, Any], Conversation]] = []
    for index, item in enumerate(items):
        path = f"traces[{index}]"
        if not isinstance(item, dict):
            raise TraceFormatError(path, f"expected an object, got {type(item).__name__}")
        out.append((item, parser.item(item, path)))
    return out


def parse_traces(payload: Any, fmt: str) -> list[ImportedTrace]:
    """Parse a batch: ``{"traces": [...]}`` or a bare list of traces, all in format ``fmt``.

    For ``otlp`` the list holds OTLP/JSON export requests; their spans are grouped by trace id and each
    trace id becomes one trace (a single export object is accepted as the payload too).
    """
    if fmt not in FORMATS:
        raise TraceFormatError("format", f"unknown format {shown(fmt)} (send one of {', '.join(FORMATS)})")
    if fmt == "otlp" and isinstance(payload, dict) and "resourceSpans" in payload:
        payload = [payload]
    if isinstance(payload, dict):
        items = require(payload, "traces", "body", list)
    elif isinstance(payload, list):
        items = payload
    else:
        raise TraceFormatError("traces", f"expected a list of traces, got {type(payload).__name__}")
    if not items:
        raise TraceFormatError("traces", "the batch is empty")
    return [imported(item, conversation, fmt) for item, conversation in _conversations(items, fmt)]


def imported(item: dict[str, Any], conversation: Conversation, fmt: str) -> ImportedTrace:
    """One parsed conversation + its envelope fields (``item``; ``{}`` for OTLP) -> ImportedTrace."""
    path = conversation.path
    trajectory = turns_to_trajectory(conversation.turns, path, conversation.tools)
    task_key, outcome, reward, external_id = _envelope(item, conversation.envelope, path, trajectory)
    metadata = trace_metadata(item, conversation.envelope.get("metadata"), path)
    provenance: dict[str, Any] = {"source_format": fmt, "external_id": external_id, "task_key": task_key}
    if metadata:
        provenance["metadata"] = metadata
    trajectory = dataclasses.replace(trajectory, reward=reward, provenance=provenance)
    environment = _environment(item.get("environment"), path)
    return ImportedTrace(task_key, trajectory, outcome, fmt, external_id, metadata, environment)


def trace_metadata(item: dict[str, Any], found: Any, path: str) -> dict[str, Any]:
    """The trace's metadata: what the format itself carried (``found``: Langfuse ``metadata`` /
    ``userId`` / ``tags``, span and resource attributes), overlaid by the envelope's own ``metadata``
    object (the caller's word wins on a shared key)."""
    metadata = item.get("metadata")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise TraceFormatError(f"{path}.metadata", "must be an object")
    return {**(found if isinstance(found, dict) else {}), **metadata}


def _environment(value: Any, path: str) -> tuple[str, str] | None:
    """The envelope's ``environment``: ``{"uri": ..., "task_id": ...}`` (where the trace can be
    replayed: the replay critic's input), or None."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TraceFormatError(f"{path}.environment", 'must be an object {"uri": ..., "task_id": ...}')
    uri, task_id = value.get("uri"), value.get("task_id")
    if not isinstance(uri, str) or not uri.strip():
        raise TraceFormatError(f"{path}.environment.uri", "must be an environment URI such as tau2:retail")
    if isinstance(task_id, int) and not isinstance(task_id, bool):
        task_id = str(task_id)
    if not isinstance(task_id, str) or not task_id.strip():
        raise TraceFormatError(f"{path}.environment.task_id", "must be the task's id in that environment")
    return uri.strip(), task_id.strip()


def with_note(item: ImportedTrace, note: str) -> ImportedTrace:
    """``item`` with ``note`` added to its trajectory's ``provenance["notes"]`` (what was changed on the
    way in, e.g. characters the database cannot hold)."""
    provenance = dict(item.trajectory.provenance)
    provenance["notes"] = [*provenance.get("notes", []), note]
    return dataclasses.replace(item, trajectory=dataclasses.replace(item.trajectory, provenance=provenance))
