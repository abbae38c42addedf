"""Owns the trajectory value objects: messages with loss weights, tool calls, steps, trajectories.

A trajectory is what the dataset is made of: a system instruction, the task observation, then the
agent's steps. A step is one of three kinds (``Step.kind``):

* ``"action"``: a text action (text environments, ReAct ``Thought: ...\\nAction: ...``); the
  environment's answer is ``observation``.
* ``"tool"``: one or more native tool calls (``tool_calls``: call id, name, JSON arguments) made in
  one assistant turn, with their results (``tool_results``, matched by ``call_id``). ``thought`` is
  the assistant's text content of that turn, ``action`` is the canonical text form of the calls
  (``name({"arg": 1})``, calls joined by ``"; "``) used to compare paths, ``observation`` is the
  results' contents joined by newlines (what text-only consumers see).
* ``"answer"``: the final assistant answer to the user with no tool call; ``action`` is the answer
  text itself, ``thought`` is empty unless the answer carried one, ``observation`` is whatever the
  user said next ("" when the conversation ended).

``kind`` is derived when left empty: ``"tool"`` when ``tool_calls`` is non-empty, else ``"action"``;
``"answer"`` is always stated by whoever builds the step (an importer knows the conversation uses
tools). ``reasoning`` keeps a model's reasoning text (not trained on unless asked) and
``alternatives`` the n>1 choices the agent did not continue with. ``name`` is the assistant speaker's
name (OpenAI ``name``; a multi-agent group chat's agent) and ``replies`` the user messages that answered
the step, each as sent with its speaker (``UserTurn``): ``None`` when not recorded (the observation is
one user message, as in search paths), ``()`` when no user message answered it (the next message is
another assistant's: no empty user turn is invented for it). ``Trajectory.task_name`` is the speaker
of the task message.

Each message carries a loss weight (0 = context only, 1 = trained on). Messages follow the OpenAI
chat shape: an assistant message may carry ``tool_calls``; a ``tool`` message answers one call by
``tool_call_id``. Trajectories and samples keep the tool definitions (``tools``: OpenAI function
definitions ``{"type": "function", "function": {"name", "description", "parameters"}}``).
A message also says why it has its weight (``why``: a reason of core.domain.weight_reasons' closed
vocabulary, set by the code that builds the sample; ``""`` when not recorded, as in samples stored
before reasons existed, which load unchanged).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from core.domain import json_input

Role = Literal["system", "user", "assistant", "tool"]
StepKind = Literal["action", "answer", "tool"]
STEP_KINDS: tuple[str, ...] = ("action", "answer", "tool")


@dataclass(frozen=True)
class ToolCall:
    """One native tool call: its id, the function name and the arguments as JSON text."""

    call_id: str
    name: str
    arguments: str  # JSON text (an object) as the model produced it or canonicalised; kept verbatim if not

    @property
    def malformed(self) -> bool:
        """The arguments are not a JSON object: kept verbatim as the model produced them (an error
        signal for the rules critic), never repaired."""
        text = self.arguments.strip()
        if not text:
            return False
        try:
            return not isinstance(json_input.loads(text), dict)
        except json.JSONDecodeError:
            return True

    def canonical(self) -> str:
        """``name({"k": v})`` with sorted keys (``name()`` without arguments); for path comparison."""
        text = self.arguments.strip()
        if not text:
            return f"{self.name}()"
        try:
            value = json_input.loads(text)
        except json.JSONDecodeError:
            return f"{self.name}({' '.join(text.split())})"
        if value in (None, {}, ""):
            return f"{self.name}()"
        return f"{self.name}({json.dumps(value, sort_keys=True, ensure_ascii=False)})"


@dataclass(frozen=True)
class ToolResult:
    """What a tool returned for the call ``call_id`` (``is_error``: the tool reported a failure)."""

    call_id: str
    content: str
    is_error: bool = False
    name: str = ""


def tool_action(calls: tuple[ToolCall, ...]) -> str:
    """The canonical text form of a tool step's calls (what ``Step.action`` holds for ``tool`` steps)."""
    return "; ".join(call.canonical() for call in calls)


@dataclass(frozen=True)
class Message:
    role: Role
    content: str
    weight: int = 0  # 1 = this assistant message contributes to the loss
    tool_calls: tuple[ToolCall, ...] = ()  # assistant messages only
    tool_call_id: str | None = None  # tool messages only: the call this message answers
    name: str | None = None  # tool messages: the function's name; user / assistant: the speaker's
    reasoning: str = ""  # assistant reasoning text (kept, not trained on unless asked)
    why: str = ""  # why it has its weight (core.domain.weight_reasons; "" = not recorded)


@dataclass(frozen=True)
class UserTurn:
    """One user message that answered a step, as sent: its text and its speaker's ``name`` ("" when none)."""

    content: str
    name: str = ""


@dataclass(frozen=True)
class Step:
    """One agent turn: what it thought, the action it took, and what the environment answered.

    See the module docstring for the three kinds and what ``action``/``observation`` hold in each.
    """

    thought: str
    action: str
    observation: str
    reward: float = 0.0
    done: bool = False
    valid: bool = True
    tool_calls: tuple[ToolCall, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()
    reasoning: str = ""
    alternatives: tuple[str, ...] = ()  # n>1 choices the agent did not continue with
    kind: Literal["", "action", "answer", "tool"] = (
        ""  # derived when empty: "tool" with tool calls, else "action"
    )
    name: str = ""  # the assistant speaker's name ("" when the format gave none)
    replies: tuple[UserTurn, ...] | None = None  # the user messages that answered it (None: not recorded)

    def __post_init__(self) -> None:
        kind = self.kind or ("tool" if self.tool_calls else "action")
        if kind not in STEP_KINDS:
            raise ValueError(f"Step.kind must be one of {', '.join(STEP_KINDS)}, got {kind!r}")
        if kind == "tool" and not self.tool_calls:
            raise ValueError("a 'tool' step needs at least one tool call")
        if kind != "tool" and (self.tool_calls or self.tool_results):
            raise ValueError(f"an {kind!r} step cannot carry tool calls or results (use kind 'tool')")
        known = {call.call_id for call in self.tool_calls}
        stray = [r.call_id for r in self.tool_results if r.call_id not in known]
        if stray:
            raise ValueError(f"tool result(s) for call id(s) {stray} that this step did not make")
        object.__setattr__(self, "kind", kind)

    @property
    def is_tool(self) -> bool:
        return self.kind == "tool"


@dataclass(frozen=True)
class Trajectory:
    """A task and the steps taken on it, with the final reward in [0, 1] (None when unknown)."""

    task: str  # the task observation (first user message)
    instruction: str  # the system instruction describing the action format
    steps: tuple[Step, ...]
    reward: float | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
    tools: tuple[dict[str, Any], ...] = ()  # OpenAI function definitions the agent could call
    task_name: str = ""  # the speaker's name on the task message ("" when none)

    @property
    def uses_tools(self) -> bool:
        return bool(self.tools) or any(step.is_tool for step in self.steps)


@dataclass(frozen=True)
class TrainingSample:
    """A ready-to-train conversation: messages with per-message loss weights and provenance."""

    sample_id: str
    kind: Literal["revision", "good", "general"]
    messages: tuple[Message, ...]
    reward: float | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
    tools: tuple[dict[str, Any], ...] = ()  # OpenAI function definitions (exported natively)
