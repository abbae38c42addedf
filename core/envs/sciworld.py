"""Owns the ScienceWorld adapter: the ``scienceworld==1.2.3`` simulator (a Java server driven through
py4j) behind the Env port, using the fast step path.

``ScienceWorldEnv.step()`` lists every valid action of the new state on each call (4-9 steps/s);
this adapter calls the Java server's ``step``, ``getScore``, ``getCompleted`` and ``getNumMoves``
directly, which is all an agent needs (50-180 steps/s).

Task ids are AgentGym's game indices ``"0"`` ... ``"4638"``: the simulator's task list in the order of
its ``tasks.json`` (task ids ``1-1``, ``1-2``, ...), leaving out AgentGym's excluded tasks 5-1, 5-2,
9-1, 9-2, 9-3, 10-1 and 10-2, and for each task its variations 0 .. max-1 in order. Splits ``train``,
``dev`` and ``test`` are ScienceWorld's own variation splits, asked from the simulator per task.

Reward is the normalised score so far: ``score / 100``; a score of -100 (a failed task) gives
reward 0 and ends the episode. ``clone()`` returns None: the search replays actions instead.
Every call runs in an environment thread under the step timeout (core.envs.offload).
"""

from __future__ import annotations

import contextlib
import shutil
from typing import Any

from core.envs.base import MAX_VALID_ACTIONS, EnvError, StepResult, UnknownTask
from core.envs.offload import call_env, step_timeout

AGENTGYM_EXCLUDED_TASKS = ("5-1", "5-2", "9-1", "9-2", "9-3", "10-1", "10-2")
NO_SUCH_ACTION = "No known action matches that input."
AMBIGUOUS = "Ambiguous request"

INSTRUCTION = (
    "You are an agent in ScienceWorld, a text-based science lab and house. Reply with one action per "
    "turn, e.g.: look around | open door to kitchen | go to kitchen | pick up thermometer | "
    "move OBJ to OBJ | use OBJ on OBJ | activate OBJ | focus on OBJ | wait1. "
    "When asked to choose between ambiguous actions, answer with the number."
)


def require_java() -> str:
    """The path of ``java``; EnvError naming the missing Java otherwise."""
    java = shutil.which("java")
    if java is None:
        raise EnvError(
            "sciworld: no `java` executable on PATH — ScienceWorld needs Java 17 (e.g. apt-get install "
            "openjdk-17-jre-headless)"
        )
    return java


class SciWorldEnv:
    """One ScienceWorld simulator (one JVM); episodes are loaded by AgentGym game index."""

    name = "sciworld"
    instruction = INSTRUCTION

    def __init__(self, max_steps: int = 100, simplifications: str = "") -> None:
        require_java()
        try:
            from scienceworld import ScienceWorldEnv
        except ImportError as exc:
            raise EnvError("sciworld: the PyPI package scienceworld==1.2.3 is not installed") from exc
        try:
            self._env: Any = ScienceWorldEnv("", envStepLimit=max_steps)
        except Exception as exc:  # py4j / JVM start-up failures
            raise EnvError(f"sciworld: could not start the ScienceWorld Java server: {exc}") from exc
        self.max_steps = max_steps
        self.timeout = step_timeout()
        self.simplifications = simplifications
        from core.envs.sciworld_tasks import TASK_VARIATIONS

        # recorded, not asked: asking loads every task and changes this simulator's later episodes
        self.games: list[tuple[str, int]] = [
            (task_name, variation) for task_name, count in TASK_VARIATIONS for variation in range(count)
        ]
        self.task_id: str | None = None
        self.done = False
        self.score = 0
        self._closed = False

    @property
    def simulator(self) -> Any:
        """The ``scienceworld.ScienceWorldEnv`` behind this adapter (the server's hint endpoints)."""
        return self._env

    # ---- tasks -----------------------------------------------------------------------------------
    def game(self, task_id: str) -> tuple[str, int]:
        """(task name, variation) of an AgentGym game index; UnknownTask when out of range."""
        text = str(task_id).strip()
        if not text.isdigit() or int(text) >= len(self.games):
            raise UnknownTask(f"sciworld: unknown task id {task_id!r} (task ids are 0-{len(self.games) - 1})")
        return self.games[int(text)]

    def task_ids(self, split: str = "test") -> list[str]:
        if split == "all":
            return [str(i) for i in range(len(self.games))]
        if split not in ("train", "dev", "test"):
            raise EnvError(f"sciworld: unknown split {split!r} (known: train, dev, test, all)")
        from core.envs.sciworld_tasks import sciworld_task_ids

        return sciworld_task_ids(split)  # recorded (core.envs.sciworld_tasks): the simulator stays fresh

    def simulator_splits(self) -> dict[str, list[str]]:
        """The splits as this simulator states them (loads every task: tests check the recorded table)."""
        server = self._env.server
        index = {game: i for i, game in enumerate(self.games)}
        splits: dict[str, list[str]] = {"train": [], "dev": [], "test": []}
        for task_name in sorted({name for name, _ in self.games}):
            self._env.load(task_name, 0, "")
            for split, variations in (
                ("train", server.getVariationsTrain()),
                ("dev", server.getVariationsDev()),
                ("test", server.getVariationsTest()),
            ):
                splits[split].extend(str(index[(task_name, int(v))]) for v in variations)
        self.task_id = None
        return {name: sorted(ids, key=int) for name, ids in splits.items()}

    # ---- episode (synchronous; the async port runs these in a worker thread) ---------------------
    def reset_sync(self, task_id: str) -> str:
        task_name, variation = self.game(task_id)
        try:
            self._env.load(task_name, variation, self.simplifications)
            look = str(self._env.server.step("look around"))
            description = str(self._env.server.getTaskDescription())
            score = int(round(100 * float(self._env.server.getScore())))
        except Exception as exc:
            raise EnvError(
                f"sciworld: could not load task {task_id} ({task_name} #{variation}): {exc}"
            ) from exc
        self.task_id = str(int(task_id))
        self.done = False
        self.score = score  # the look-around's points (0 on every task we know)
        return f"{description}\n\n{look}"

    def step_sync(self, action: str) -> StepResult:
        if self.task_id is None:
            raise EnvError("sciworld: step() before reset()")
        if self.done:
            return StepResult(
                "The episode is over.", max(self.score, 0) / 100, True, valid=False, raw_score=self.score
            )
        server = self._env.server
        try:
            observation = str(server.step(action.strip()))
            score = int(round(100 * float(server.getScore())))
            completed = bool(server.getCompleted())
            moves = int(server.getNumMoves())
        except Exception as exc:
            raise EnvError(f"sciworld: the simulator failed on action {action!r}: {exc}") from exc
        info: dict[str, Any] = {"moves": moves}
        if moves > self.max_steps:
            completed = True
            info["truncated"] = True
        if score < 0:
            completed = True
            info["failed"] = True
        self.score = score
        self.done = completed
        valid = not observation.startswith(NO_SUCH_ACTION)
        if observation.startswith(AMBIGUOUS):
            info["ambiguous"] = True
        return StepResult(
            observation, max(score, 0) / 100, completed, valid=valid, raw_score=score, info=info
        )

    def gold_actions(self, task_id: str) -> list[str]:
        """The simulator's gold action sequence for ``task_id`` (loads the task; call reset after)."""
        task_name, variation = self.game(task_id)
        self._env.load(task_name, variation, self.simplifications, generateGoldPath=True)
        self.task_id = None
        return [str(a) for a in self._env.server.getGoldActionSequence()]

    def valid_actions_sync(self) -> list[str] | None:
        """The simulator's valid action-object combinations for this state (its
        ``getValidActionObjectCombinations``; None before reset or once done). The list is long
        (417 combinations in task 0's first state, most of them ``connect X to Y``); beyond
        ``MAX_VALID_ACTIONS`` the shortest commands (fewest words, then alphabetical) are kept, so
        one-object actions (look, go to, open, pick up, ...) outlast two-object combinations."""
        if self.task_id is None or self.done:
            return None
        try:
            combos = [str(a) for a in self._env.server.getValidActionObjectCombinations()]
        except Exception as exc:
            raise EnvError(f"sciworld: the simulator failed listing valid actions: {exc}") from exc
        distinct = sorted(set(combos), key=lambda a: (len(a.split()), a))
        return distinct[:MAX_VALID_ACTIONS]

    async def valid_actions(self) -> list[str] | None:
        return await call_env(self.name, "valid_actions()", self.valid_actions_sync, limit_s=self.timeout)

    # ---- Env port ----------------------------------------------------------------------------------
    async def reset(self, task_id: str) -> str:
        return await call_env(self.name, "reset()", self.reset_sync, task_id, limit_s=self.timeout)

    async def step(self, action: str) -> StepResult:
        return await call_env(self.name, "step()", self.step_sync, action, limit_s=self.timeout)

    async def clone(self) -> None:
        return None

    def close_sync(self) -> None:
        if not self._closed:
            self._closed = True
            with contextlib.suppress(Exception):  # the JVM may already be gone: nothing to release
                self._env.close()

    async def close(self) -> None:
        await call_env(self.name, "close()", self.close_sync, limit_s=self.timeout)
