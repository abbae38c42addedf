"""An example environment package for agentr: the Counter game.

The counter starts at 0; the goal is to make it EXACTLY the target with the actions ``add 1``,
``add 3`` and ``double``. Going past the target loses (episode over, reward 0); reaching it wins
(reward 1). Any other action is invalid and changes nothing. Task ids are ``t<TARGET>``: split
``train`` holds the even targets 4-30, ``test`` the odd ones, ``all`` both.

It implements agentr's Env port with plain methods (agentr accepts sync or async ones):
``task_ids(split)``, ``reset(task_id) -> str``, ``step(action) -> (observation, reward, done,
info)``, ``clone()``, ``close()``, plus ``gold_actions(task_id)`` (a shortest solution), which
``agentr env check`` uses to probe the game. Registered as ``counter`` in the ``agentr.envs``
entry-point group (see pyproject.toml), so ``agentr run --env counter`` and
``agentr env serve counter`` find it; ``counter?max_target=12`` passes ``max_target="12"`` to
:func:`make_env`.
"""

from __future__ import annotations

from collections import deque

from core.envs.base import EnvError, UnknownTask  # agentr's Env port errors

ACTIONS = ("add 1", "add 3", "double")
INSTRUCTION = (
    "You control a counter that starts at 0. Make it exactly the target. Reply with one action per "
    "turn: add 1 | add 3 | double. Going past the target loses."
)


def _apply(value: int, action: str) -> int | None:
    if action == "add 1":
        return value + 1
    if action == "add 3":
        return value + 3
    if action == "double":
        return value * 2
    return None


def shortest_solution(target: int) -> list[str]:
    """A shortest action sequence from 0 to ``target`` (breadth-first, ties by ACTIONS order)."""
    previous: dict[int, tuple[int, str] | None] = {0: None}
    queue = deque([0])
    while queue:
        value = queue.popleft()
        if value == target:
            break
        for action in ACTIONS:
            nxt = _apply(value, action)
            if nxt is not None and nxt <= target and nxt not in previous and nxt != value:
                previous[nxt] = (value, action)
                queue.append(nxt)
    path: list[str] = []
    node = target
    while previous[node] is not None:
        value, action = previous[node]  # type: ignore[misc]
        path.append(action)
        node = value
    return path[::-1]


class CounterEnv:
    name = "counter"
    instruction = INSTRUCTION

    def __init__(self, max_target: int = 30, max_steps: int = 12) -> None:
        if max_target < 4:
            raise EnvError(f"counter: max_target must be >= 4, got {max_target}")
        self.max_target = max_target
        self.max_steps = max_steps
        self.target: int | None = None
        self.value = 0
        self.steps = 0
        self.done = False

    def task_ids(self, split: str = "test") -> list[str]:
        targets = range(4, self.max_target + 1)
        if split == "train":
            return [f"t{t}" for t in targets if t % 2 == 0]
        if split == "test":
            return [f"t{t}" for t in targets if t % 2 == 1]
        if split == "all":
            return [f"t{t}" for t in targets]
        raise EnvError(f"counter: unknown split {split!r} (known: train, test, all)")

    def _target(self, task_id: str) -> int:
        text = str(task_id)
        if not (text.startswith("t") and text[1:].isdigit() and 4 <= int(text[1:]) <= self.max_target):
            raise UnknownTask(f"counter: unknown task id {task_id!r} (t4 ... t{self.max_target})")
        return int(text[1:])

    def reset(self, task_id: str) -> str:
        self.target = self._target(task_id)
        self.value = 0
        self.steps = 0
        self.done = False
        return f"The counter is at 0. Target: {self.target}."

    def step(self, action: str) -> tuple[str, float, bool, dict[str, object]]:
        if self.target is None:
            raise EnvError("counter: step() before reset()")
        if self.done:
            return "The episode is over.", 1.0 if self.value == self.target else 0.0, True, {"valid": False}
        self.steps += 1
        nxt = _apply(self.value, action.strip().lower())
        if nxt is None:
            observation = f"Unknown action {action.strip()!r}. The counter is at {self.value}."
            self.done = self.steps >= self.max_steps
            return observation, 0.0, self.done, {"valid": False}
        self.value = nxt
        if self.value == self.target:
            self.done = True
            return f"The counter is at {self.value}. Target reached!", 1.0, True, {}
        if self.value > self.target:
            self.done = True
            return f"The counter is at {self.value}: past the target {self.target}. You lose.", 0.0, True, {}
        self.done = self.steps >= self.max_steps
        return f"The counter is at {self.value}. Target: {self.target}.", 0.0, self.done, {}

    def gold_actions(self, task_id: str) -> list[str]:
        return shortest_solution(self._target(task_id))

    def clone(self) -> CounterEnv:
        twin = CounterEnv(self.max_target, self.max_steps)
        twin.target, twin.value, twin.steps, twin.done = self.target, self.value, self.steps, self.done
        return twin

    def close(self) -> None:
        self.target = None


def make_env(max_target: str = "30", max_steps: str = "12") -> CounterEnv:
    """The entry point: URI options arrive as strings."""
    return CounterEnv(int(max_target), int(max_steps))
