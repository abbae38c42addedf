"""Owns the Env contract check behind ``agentr env check URI``: the properties the search, the
splicer and the evaluation rely on, run against any environment and reported one by one.

Checks (each passes, fails with a named reason, or is skipped with the reason):

- ``open``: the URI opens; ``name`` / ``instruction`` are non-empty strings, ``max_steps`` a positive
  int;
- ``task_ids``: ``task_ids()`` is a non-empty list of unique, non-empty strings;
- ``reset determinism``: resetting the same task twice, and on a second fresh instance, gives the
  same first observation (a non-empty string);
- ``step results``: every step answers a StepResult with a string observation, bool ``done`` and
  ``valid`` (actions: the env's ``gold_actions(task_id)`` when it has them, the TextCraft expert's
  plan for TextCraft, else the ``actions`` given — ``look``, ``inventory``, ``help`` by default);
- ``reward range``: every reward lies in [0, 1];
- ``replay determinism``: the same actions on a fresh instance give the same step results (the
  search replays histories when an env cannot clone);
- ``clone independence``: after one step, a clone continued with the rest of the actions gives the
  results the original then gives for them, and stepping the clone does not move the original
  (skipped, not failed, when ``clone()`` returns None: the search replays instead);
- ``unknown task``: ``reset`` of a task id the env does not have raises UnknownTask (not another
  exception, not an observation);
- ``close``: ``close()`` returns without raising.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from core.envs.base import Env, EnvError, StepResult, UnknownTask

DEFAULT_ACTIONS = ("look", "inventory", "help")
UNKNOWN_TASK_ID = "no-such-task-7f3a"


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # "pass" | "fail" | "skip"
    detail: str = ""


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _step_problem(result: object) -> str | None:
    if not isinstance(result, StepResult):
        return f"step() returned {type(result).__name__}, not a StepResult"
    if not isinstance(result.observation, str):
        return f"observation is {type(result.observation).__name__}, not str"
    if not isinstance(result.done, bool):
        return f"done is {type(result.done).__name__}, not bool"
    if not isinstance(result.valid, bool):
        return f"valid is {type(result.valid).__name__}, not bool"
    if not isinstance(result.reward, int | float) or not 0.0 <= float(result.reward) <= 1.0:
        return f"reward {result.reward!r} is outside [0, 1]"
    return None


def _key(result: StepResult) -> tuple[str, float, bool, bool]:
    return (result.observation, float(result.reward), result.done, result.valid)


async def _actions_for(env: Env, task_id: str, given: Sequence[str]) -> list[str]:
    gold = getattr(env, "gold_actions", None)
    if callable(gold):
        try:
            value = gold(task_id)
            actions = list(await value) if inspect.isawaitable(value) else list(value)
            if actions:
                return [str(a) for a in actions]
        except Exception:  # noqa: BLE001 - fall back to the given actions
            pass
    if env.name == "textcraft" and callable(getattr(env, "goal_of", None)):
        from core.envs.textcraft import solve

        return solve(env.goal_of(task_id))  # type: ignore[attr-defined]
    return list(given)


async def _play(env: Env, task_id: str, actions: Sequence[str]) -> tuple[str, list[StepResult]]:
    first = await env.reset(task_id)
    results: list[StepResult] = []
    for action in actions:
        result = await env.step(action)
        results.append(result)
        if getattr(result, "done", False):
            break
    return first, results


async def check_env(
    opener: Callable[[], Env | Awaitable[Env]],
    *,
    actions: Sequence[str] = DEFAULT_ACTIONS,
    max_actions: int = 12,
) -> list[Check]:
    """Run the contract on environments made by ``opener`` (called for each fresh instance)."""
    checks: list[Check] = []
    opened: list[Env] = []

    async def fresh() -> Env:
        made = opener()
        env = await made if inspect.isawaitable(made) else made
        opened.append(env)
        return env

    def add(name: str, problem: str | None, skip: str | None = None) -> None:
        if skip is not None:
            checks.append(Check(name, "skip", skip))
        else:
            checks.append(Check(name, "fail" if problem else "pass", problem or ""))

    try:
        try:
            env = await fresh()
        except Exception as exc:  # noqa: BLE001 - reported
            add("open", _describe(exc))
            return checks
        problems = []
        if not isinstance(getattr(env, "name", None), str) or not env.name:
            problems.append("name is not a non-empty string")
        if not isinstance(getattr(env, "instruction", None), str) or not env.instruction:
            problems.append("instruction is not a non-empty string")
        steps = getattr(env, "max_steps", None)
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            problems.append(f"max_steps {steps!r} is not a positive int")
        add("open", "; ".join(problems) or None)

        try:
            ids = env.task_ids()
            problem = None
            if not isinstance(ids, list) or not ids:
                problem = f"task_ids() returned {ids!r:.80}, not a non-empty list"
            elif not all(isinstance(t, str) and t.strip() for t in ids):
                problem = "task_ids() holds an id that is not a non-empty string"
            elif len(set(ids)) != len(ids):
                problem = "task_ids() holds duplicates"
        except Exception as exc:  # noqa: BLE001 - reported
            ids, problem = [], f"task_ids() raised {_describe(exc)}"
        add("task_ids", problem)
        if problem:
            return checks
        task_id = ids[0]

        try:
            first = await env.reset(task_id)
            again = await env.reset(task_id)
            other_env = await fresh()
            other = await other_env.reset(task_id)
            problem = None
            if not isinstance(first, str) or not first.strip():
                problem = f"reset({task_id!r}) returned {first!r:.80}, not a non-empty string"
            elif again != first:
                problem = f"reset({task_id!r}) twice gave different observations"
            elif other != first:
                problem = f"reset({task_id!r}) on a fresh instance gave a different observation"
        except Exception as exc:  # noqa: BLE001 - reported
            problem = f"reset({task_id!r}) raised {_describe(exc)}"
            other_env = None
        add("reset determinism", problem)

        plan = (await _actions_for(env, task_id, actions))[:max_actions]
        step_problem = range_problem = None
        results: list[StepResult] = []
        try:
            _, results = await _play(env, task_id, plan)
            for index, result in enumerate(results):
                problem = _step_problem(result)
                if problem is None:
                    continue
                where = f"step {index + 1} ({plan[index]!r}): {problem}"
                if "reward" in problem:
                    range_problem = range_problem or where
                else:
                    step_problem = step_problem or where
        except Exception as exc:  # noqa: BLE001 - reported
            step_problem = f"step raised {_describe(exc)}"
            if isinstance(exc, EnvError) and "outside [0, 1]" in str(exc):
                range_problem, step_problem = str(exc), None
        add("step results", step_problem, None if plan else "no actions to try")
        add("reward range", range_problem, None if plan else "no actions to try")

        if other_env is not None and results and not step_problem:
            try:
                _, replayed = await _play(other_env, task_id, plan)
                same = [_key(r) for r in replayed] == [_key(r) for r in results]
                add("replay determinism", None if same else "the same actions gave different results")
            except Exception as exc:  # noqa: BLE001 - reported
                add("replay determinism", f"replay raised {_describe(exc)}")
        else:
            add("replay determinism", None, "no step results to replay")

        if len(plan) >= 2 and results and not step_problem:
            try:
                await env.reset(task_id)
                head = await env.step(plan[0])
                twin = await env.clone()
                if twin is None:
                    add("clone independence", None, "clone() returns None (the search replays)")
                else:
                    opened.append(twin)
                    rest = plan[1:]
                    twin_results = []
                    for action in rest:
                        twin_results.append(_key(await twin.step(action)))
                    mine = []
                    for action in rest:
                        mine.append(_key(await env.step(action)))
                    problem = None
                    expected = [_key(r) for r in results[1 : 1 + len(rest)]]
                    if head.done:
                        problem = None
                    elif twin_results != mine:
                        problem = (
                            "stepping the clone changed the original (or the clone did not copy its state)"
                        )
                    elif mine[: len(expected)] != expected:
                        problem = "after clone(), the original's results differ from a straight run"
                    add("clone independence", problem)
            except Exception as exc:  # noqa: BLE001 - reported
                add("clone independence", f"clone raised {_describe(exc)}")
        else:
            add("clone independence", None, "needs two working steps")

        try:
            observation = await env.reset(UNKNOWN_TASK_ID)
            add(
                "unknown task",
                f"reset({UNKNOWN_TASK_ID!r}) answered an observation ({observation!r:.60}) instead of "
                "raising UnknownTask",
            )
        except UnknownTask:
            add("unknown task", None)
        except Exception as exc:  # noqa: BLE001 - reported
            add("unknown task", f"reset({UNKNOWN_TASK_ID!r}) raised {_describe(exc)}, not UnknownTask")
    finally:
        close_problem = None
        for env in opened:
            try:
                await env.close()
            except Exception as exc:  # noqa: BLE001 - reported
                close_problem = close_problem or f"close() raised {_describe(exc)}"
        if opened:
            add("close", close_problem)
    return checks
