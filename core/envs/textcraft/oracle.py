"""Owns the TextCraft first-error oracle: which action of a failed path was its first mistake.

The rule (applied to the actions after the divergence, i.e. from index ``start``):

1. The path is replayed in a fresh :class:`TextCraftEnv` from the task's reset; the environment's own
   rules decide whether an action is valid (the recorded observations are checked against the replay).
2. *What is left to do* under a recipe choice is the expert solver's plan from the current inventory
   (``solver.plan_from``), measured as ``(actions, units)``: the number of actions in the plan and the
   number of raw items its ``get`` actions still fetch. The plans the solver accepts are one per recipe
   choice shown in the task (an item with several recipes may be made by any of them; at most
   ``MAX_CHOICES`` combinations, beyond that only the solver's default choice).
3. Step ``k`` is **progress** when the environment accepts it and, for at least one of those plans,
   what is left to do after it is strictly smaller (lexicographically) than before it — the step takes
   a step toward some plan the expert solver accepts — or when it crafts the goal.
4. The **first error** is the first step ``k >= start`` that is not progress: an action the environment
   rejects (``Could not find ...``), or a valid action that leaves no less to do — an unrelated item, a
   repeat of something already held, an inventory look-up (each wastes one of the episode's bounded
   steps), or a craft that consumes ingredients the plan needs for something it does not need.
5. When every judged step is progress (the path only ran out of steps) there is no first error:
   ``first_error`` returns ``None`` and the pair is left out of exact-match rates.

Getting MORE of a raw item than needed is progress (the plan's get disappears); getting part of what
is needed is progress too (fewer units left).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from core.envs.textcraft.env import TextCraftEnv
from core.envs.textcraft.recipes import Recipe, RecipeBook
from core.envs.textcraft.solver import plan_from

MAX_CHOICES = 64
"""Most recipe combinations tried for one measure (items with several recipes in the goal's tree)."""

_GET_PREFIX = "get "


def served_textcraft(env_uri: str) -> bool:
    """Whether ``env_uri`` names a TextCraft server (``agentgym+http(s)://HOST:PORT/.../textcraft``)."""
    if not env_uri.startswith(("agentgym+http://", "agentgym+https://")):
        return False
    return urlsplit(env_uri).path.rstrip("/").rsplit("/", 1)[-1] == "textcraft"


def has_first_error_oracle(env_uri: str) -> bool:
    """Whether paths of ``env_uri`` can be judged by this oracle: in-process TextCraft
    (``textcraft?...``) or a TextCraft server (judged in process by goal,
    ``critic_service.oracles``). No other environment has a first-error oracle."""
    return env_uri.split("?", 1)[0] == "textcraft" or served_textcraft(env_uri)


def oracle_strategy_problem(strategy: str, env_uri: str) -> str | None:
    """Why a run on ``env_uri`` cannot use critic ``strategy`` (only ``oracle``, the critic that IS
    this oracle, has a condition: an environment that has one), or None. Checked where a run's
    configuration is accepted (the API's ``RunConfigIn``, ``agentr run``) and by the strategy."""
    if strategy != "oracle" or has_first_error_oracle(env_uri):
        return None
    return (
        f"critic.strategy oracle needs an environment with a first-error oracle; {env_uri!r} has none "
        "(TextCraft has one: textcraft?... or agentgym+http://HOST:PORT/textcraft)"
    )


class OracleError(ValueError):
    """A path the oracle cannot judge: unknown task, or a recorded observation the replay contradicts."""


@dataclass(frozen=True)
class StepJudgement:
    """The oracle's view of one step: before/after measures and why it is (not) progress."""

    index: int
    progress: bool
    before: tuple[int, int]
    after: tuple[int, int]
    reason: str


@dataclass(frozen=True)
class OracleResult:
    first_error: int | None
    judgements: tuple[StepJudgement, ...]
    reason: str


def _units(plan: Sequence[str]) -> int:
    total = 0
    for action in plan:
        if action.startswith(_GET_PREFIX):
            count = action[len(_GET_PREFIX) :].split(" ", 1)[0]
            total += int(count) if count.isdigit() else 1
    return total


class TextCraftOracle:
    """Measures what is left to do and finds the first error of a path (see the module docstring)."""

    def __init__(self, env: TextCraftEnv | None = None) -> None:
        self.env = env or TextCraftEnv()
        self.book: RecipeBook = self.env.book
        self._choices: dict[str, list[dict[str, Recipe]]] = {}

    def choices(self, goal: str) -> list[dict[str, Recipe]]:
        """Recipe combinations for the items of ``goal``'s tree that have several recipes."""
        cached = self._choices.get(goal)
        if cached is not None:
            return cached
        multi = sorted(
            {
                recipe.output
                for recipe in self.book.tree(goal)
                if len(self.book.item_recipes.get(recipe.output, [])) > 1
            }
        )
        options = [self.book.item_recipes[item] for item in multi]
        combos: list[dict[str, Recipe]] = [{}]
        total = 1
        for recipes in options:
            total *= len(recipes)
        if multi and total <= MAX_CHOICES:
            combos = [dict(zip(multi, picked, strict=True)) for picked in itertools.product(*options)]
        self._choices[goal] = combos
        return combos

    def measures(self, goal: str, inventory: Mapping[str, int]) -> list[tuple[int, int] | None]:
        """``(actions, units)`` left under each recipe choice (None: that choice has no plan)."""
        if inventory.get(goal, 0) >= 1:
            return [(0, 0) for _ in self.choices(goal)]
        out: list[tuple[int, int] | None] = []
        for choice in self.choices(goal):
            try:
                plan = plan_from(goal, inventory, self.book, choice)
            except RuntimeError:
                out.append(None)  # this recipe combination cannot be gathered
                continue
            out.append((len(plan), _units(plan)))
        if all(m is None for m in out):
            raise OracleError(f"textcraft oracle: the solver finds no plan for {goal}")
        return out

    def left_to_do(self, goal: str, inventory: Mapping[str, int]) -> tuple[int, int]:
        """``(actions, units)`` of the shortest expert plan from ``inventory`` over the recipe choices."""
        return min(m for m in self.measures(goal, inventory) if m is not None)

    def judge(
        self,
        task_id: str,
        actions: Sequence[str],
        start: int = 0,
        observations: Sequence[str] | None = None,
    ) -> OracleResult:
        """Replay ``actions`` on ``task_id`` and judge every step from ``start`` (module docstring).

        ``observations`` (the recorded ones, same length as ``actions``) are checked against the
        replay: a mismatch raises OracleError, since the path was then not made in this environment.
        """
        if start < 0 or start > len(actions):
            raise OracleError(f"textcraft oracle: start {start} is outside the path's {len(actions)} steps")
        if observations is not None and len(observations) != len(actions):
            raise OracleError("textcraft oracle: actions and observations differ in length")
        env = self.env.clone_sync()
        try:
            env.reset_sync(task_id)
        except Exception as exc:  # UnknownTask and friends: name the task
            raise OracleError(f"textcraft oracle: cannot reset task {task_id!r}: {exc}") from exc
        goal = env.goal
        assert goal is not None
        judgements: list[StepJudgement] = []
        for index, action in enumerate(actions):
            before_all = self.measures(goal, env.inventory) if index >= start else []
            before = min((m for m in before_all if m is not None), default=(0, 0))
            result = env.step_sync(action)
            if observations is not None and result.observation.strip() != observations[index].strip():
                raise OracleError(
                    f"textcraft oracle: step {index} ({action!r}) replays to {result.observation!r}, "
                    f"but the path recorded {observations[index]!r}"
                )
            if index < start:
                continue
            if not result.valid:
                judgement = StepJudgement(index, False, before, before, f"rejected: {result.observation}")
            elif result.done and result.reward >= 1.0:
                judgement = StepJudgement(index, True, before, (0, 0), "crafted the goal")
            else:
                after_all = self.measures(goal, env.inventory)
                after = min(m for m in after_all if m is not None)
                closer = any(
                    b is not None and a is not None and a < b
                    for b, a in zip(before_all, after_all, strict=True)
                )
                if closer:
                    judgement = StepJudgement(index, True, before, after, "closer to the goal")
                else:
                    judgement = StepJudgement(
                        index,
                        False,
                        before,
                        after,
                        f"no progress toward any expert plan ({after[0]} action(s) / {after[1]} "
                        f"unit(s) left at best, {before[0]} / {before[1]} before)",
                    )
            judgements.append(judgement)
            if not judgement.progress:
                return OracleResult(index, tuple(judgements), judgement.reason)
            if result.done:
                break
        return OracleResult(None, tuple(judgements), "every judged step was progress")

    def first_error(
        self,
        task_id: str,
        actions: Sequence[str],
        start: int = 0,
        observations: Sequence[str] | None = None,
    ) -> int | None:
        """The index of the first error at or after ``start`` (None: every judged step was progress)."""
        return self.judge(task_id, actions, start, observations).first_error
