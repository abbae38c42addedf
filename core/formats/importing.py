"""Owns production-log import: a batch of traces in any supported format -> ``ImportedTrace`` list.

Formats (DESIGN §6): ``openai`` (chat messages with ``tool_calls`` and ``tool`` role), ``otel``
(OpenTelemetry GenAI spans: ``gen_ai.input.messages`` / ``gen_ai.output.messages`` with parts of type
text, tool_call, tool_call_response) and ``sharegpt`` (ShareGPT / AgentGym ``conversations`` of
``{from, value}``). Each parser turns a trace into neutral ``Turn`` objects; ``turns_to_trajectory``
turns those into one ``Trajectory`` the same way for every format, so the same conversation gives the
same trajectory whatever format it arrived in.

A batch is all-or-nothing: the first malformed field raises ``TraceFormatError`` whose message names
the path, e.g. ``traces[3].messages[5].role: unknown role 'robot'``; nothing is returned half-parsed.

Trace envelope (every format): ``task_key`` (optional; default = a hash of the task text),
``outcome`` ("success" | "failure" | "unknown", default "unknown"), ``reward`` (optional, in [0, 1];
default 1.0 for success, 0.0 for failure, None when unknown), ``id`` (optional external id).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from core.domain.ids import derived_id
from core.domain.trajectory import Step, Trajectory

Outcome = Literal["success", "failure", "unknown"]
FORMATS = ("openai", "otel", "sharegpt")


class TraceFormatError(ValueError):
    """A malformed trace; ``path`` names the field (``traces[3].messages[5].role``)."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


@dataclass(frozen=True)
class ToolCall:
    call_id: str
    name: str
    arguments: Any


@dataclass(frozen=True)
class Turn:
    """One message in a format-neutral shape."""

    role: Literal["system", "user", "assistant", "tool"]
    text: str
    path: str  # where it came from, for error messages
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


@dataclass(frozen=True)
class ImportedTrace:
    task_key: str
    trajectory: Trajectory
    outcome: Outcome
    source_format: str
    external_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------------


def require(obj: Any, key: str, path: str, kind: type | tuple[type, ...]) -> Any:
    if not isinstance(obj, dict):
        raise TraceFormatError(path, f"expected an object, got {type(obj).__name__}")
    if key not in obj:
        raise TraceFormatError(f"{path}.{key}", "missing")
    value = obj[key]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise TraceFormatError(f"{path}.{key}", f"expected {names}, got {type(value).__name__}")
    return value


def canonical_action(name: str, arguments: Any) -> str:
    """A tool call as an action string: ``name({"arg": value})`` with sorted keys (``name()`` if none)."""
    if arguments in (None, "", {}):
        return f"{name}()"
    return f"{name}({json.dumps(arguments, sort_keys=True, ensure_ascii=False)})"


def split_react(text: str) -> tuple[str, str]:
    """``Thought: t\\nAction: a`` -> (t, a); text without an ``Action:`` line is all action."""
    lines = text.strip().splitlines()
    for index, line in enumerate(lines):
        stripped = line.strip()
        if stripped.lower().startswith("action:"):
            action = " ".join(
                [stripped[len("action:") :].strip(), *[x.strip() for x in lines[index + 1 :]]]
            ).strip()
            before = "\n".join(lines[:index]).strip()
            if before.lower().startswith("thought:"):
                before = before[len("thought:") :].strip()
            return " ".join(before.split()), action
    return "", " ".join(text.split())


def turns_to_trajectory(turns: Sequence[Turn], path: str) -> Trajectory:
    """Neutral turns -> Trajectory: system -> instruction, first user -> task, assistant -> steps,
    tool / later user messages -> the observation of the step they answer."""
    instruction_parts: list[str] = []
    task_parts: list[str] = []
    steps: list[dict[str, Any]] = []
    pending_calls: dict[str, int] = {}  # tool call id -> step index still waiting for its response
    for turn in turns:
        if turn.role == "system":
            if steps or task_parts:
                raise TraceFormatError(turn.path, "a system message after the conversation started")
            instruction_parts.append(turn.text)
        elif turn.role == "assistant":
            if not task_parts:
                raise TraceFormatError(turn.path, "an assistant message before any user message (the task)")
            if turn.tool_calls:
                thought = " ".join(turn.text.split())
                for position, call in enumerate(turn.tool_calls):
                    pending_calls[call.call_id] = len(steps)
                    steps.append(
                        {
                            "thought": thought if position == 0 else "",
                            "action": canonical_action(call.name, call.arguments),
                            "observation": None,
                        }
                    )
            else:
                thought, action = split_react(turn.text)
                if not action:
                    raise TraceFormatError(turn.path, "an assistant message with neither text nor tool calls")
                steps.append({"thought": thought, "action": action, "observation": None})
        elif turn.role == "tool":
            if turn.tool_call_id is not None:
                if turn.tool_call_id not in pending_calls:
                    raise TraceFormatError(
                        turn.path, f"tool response to unknown or already answered call {turn.tool_call_id!r}"
                    )
                target = pending_calls.pop(turn.tool_call_id)
            else:
                if not steps:
                    raise TraceFormatError(turn.path, "a tool response before any assistant action")
                target = len(steps) - 1
            _add_observation(steps[target], turn.text)
        else:  # user
            if not steps:
                task_parts.append(turn.text)
            else:
                _add_observation(steps[-1], turn.text)
    if not task_parts:
        raise TraceFormatError(path, "no user message holding the task")
    return Trajectory(
        task="\n".join(task_parts),
        instruction="\n".join(instruction_parts),
        steps=tuple(
            Step(thought=s["thought"], action=s["action"], observation=s["observation"] or "") for s in steps
        ),
    )


def _add_observation(step: dict[str, Any], text: str) -> None:
    step["observation"] = text if step["observation"] is None else f"{step['observation']}\n{text}"


def _envelope(
    item: dict[str, Any], path: str, trajectory: Trajectory
) -> tuple[str, Outcome, float | None, str | None]:
    outcome = item.get("outcome", "unknown")
    if outcome not in ("success", "failure", "unknown"):
        raise TraceFormatError(f"{path}.outcome", f"must be success, failure or unknown, got {outcome!r}")
    reward = item.get("reward")
    if reward is not None:
        if isinstance(reward, bool) or not isinstance(reward, int | float) or not 0.0 <= reward <= 1.0:
            raise TraceFormatError(f"{path}.reward", f"must be a number in [0, 1], got {reward!r}")
        reward = float(reward)
    elif outcome == "success":
        reward = 1.0
    elif outcome == "failure":
        reward = 0.0
    task_key = item.get("task_key")
    if task_key is None:
        task_key = derived_id("task", trajectory.task)
    elif not isinstance(task_key, str) or not task_key.strip():
        raise TraceFormatError(f"{path}.task_key", "must be a non-empty string")
    external_id = item.get("id")
    if external_id is not None and not isinstance(external_id, str | int):
        raise TraceFormatError(f"{path}.id", "must be a string")
    return task_key, outcome, reward, None if external_id is None else str(external_id)


# --------------------------------------------------------------------------------------------
# Batch entry point
# --------------------------------------------------------------------------------------------


def parse_traces(payload: Any, fmt: str) -> list[ImportedTrace]:
    """Parse a batch: ``{"traces": [...]}`` or a bare list of traces, all in format ``fmt``."""
    from core.formats import import_openai, import_otel, import_sharegpt

    parsers = {
        "openai": import_openai.parse_turns,
        "otel": import_otel.parse_turns,
        "sharegpt": import_sharegpt.parse_turns,
    }
    if fmt not in parsers:
        raise TraceFormatError("format", f"unknown format {fmt!r} (expected one of {', '.join(FORMATS)})")
    if isinstance(payload, dict):
        items = require(payload, "traces", "body", list)
    elif isinstance(payload, list):
        items = payload
    else:
        raise TraceFormatError("traces", f"expected a list of traces, got {type(payload).__name__}")
    if not items:
        raise TraceFormatError("traces", "the batch is empty")
    out: list[ImportedTrace] = []
    for index, item in enumerate(items):
        path = f"traces[{index}]"
        if not isinstance(item, dict):
            raise TraceFormatError(path, f"expected an object, got {type(item).__name__}")
        turns = parsers[fmt](item, path)
        trajectory = turns_to_trajectory(turns, path)
        task_key, outcome, reward, external_id = _envelope(item, path, trajectory)
        metadata = item.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise TraceFormatError(f"{path}.metadata", "must be an object")
        trajectory = Trajectory(
            task=trajectory.task,
            instruction=trajectory.instruction,
            steps=trajectory.steps,
            reward=reward,
            provenance={"source_format": fmt, "external_id": external_id, "task_key": task_key},
        )
        out.append(ImportedTrace(task_key, trajectory, outcome, fmt, external_id, dict(metadata)))
    return out
