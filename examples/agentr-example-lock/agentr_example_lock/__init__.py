"""An example environment package for agentr: the Lock game.

A combination lock has ``length`` buttons to press in the right order, out of ``buttons`` (default
3 of 4: ``press 0`` ... ``press 3``). A right press sets the next position; a wrong one is refused
and changes nothing (like an invalid craft in TextCraft, so a failed attempt can be revised: the
right presses still work after it). Opening the lock gives reward 1; the episode also ends after
``max_steps`` presses (reward 0). Task ids are ``c0`` ... ``c63``: the code of ``cN`` is N written in
base ``buttons`` with ``length`` digits (``c6`` -> 0, 1, 2). Split ``train``: even N, ``test``: odd N,
``all``: both.

It implements agentr's Env port with plain (sync) methods, which agentr accepts: ``task_ids(split)``,
``reset(task_id) -> str``, ``step(action) -> (observation, reward, done, info)``, ``clone()``,
``close()``, plus ``gold_actions(task_id)`` (the code), which ``agentr env check`` uses to probe the
game. Registered as ``lock`` in the ``agentr.envs`` entry-point group (pyproject.toml), so
``agentr run --env lock`` and ``agentr env serve lock`` find it; ``lock?max_steps=8`` passes
``max_steps="8"`` to :func:`make_env`.
"""

from __future__ import annotations

from core.envs.base import EnvError, UnknownTask  # agentr's Env port errors

INSTRUCTION = (
    "You open a combination lock by pressing its buttons in the right order. Reply with one action "
    "per turn: press N (N is a button number). A wrong button is refused."
)


class LockEnv:
    name = "lock"
    instruction = INSTRUCTION

    def __init__(self, buttons: int = 4, length: int = 3, max_steps: int = 12) -> None:
        if buttons < 2 or length < 1 or max_steps < 1:
            raise EnvError(
                f"lock: need buttons >= 2, length >= 1, max_steps >= 1 (got {buttons}, {length}, {max_steps})"
            )
        self.buttons = buttons
        self.length = length
        self.max_steps = max_steps
        self.code: list[int] | None = None
        self.position = 0
        self.steps = 0
        self.done = False

    def task_ids(self, split: str = "test") -> list[str]:
        count = self.buttons**self.length
        if split == "train":
            return [f"c{n}" for n in range(0, count, 2)]
        if split == "test":
            return [f"c{n}" for n in range(1, count, 2)]
        if split == "all":
            return [f"c{n}" for n in range(count)]
        raise EnvError(f"lock: unknown split {split!r} (known: train, test, all)")

    def _code(self, task_id: str) -> list[int]:
        text = str(task_id)
        count = self.buttons**self.length
        if not (text.startswith("c") and text[1:].isdigit() and int(text[1:]) < count):
            raise UnknownTask(f"lock: unknown task id {task_id!r} (c0 ... c{count - 1})")
        number, digits = int(text[1:]), []
        for _ in range(self.length):
            number, digit = divmod(number, self.buttons)
            digits.append(digit)
        return digits[::-1]

    def reset(self, task_id: str) -> str:
        self.code = self._code(task_id)
        self.position = 0
        self.steps = 0
        self.done = False
        return f"A lock with buttons 0-{self.buttons - 1} and {self.length} positions. None is set."

    def step(self, action: str) -> tuple[str, float, bool, dict[str, object]]:
        if self.code is None:
            raise EnvError("lock: step() before reset()")
        if self.done:
            return (
                "The episode is over.",
                1.0 if self.position == self.length else 0.0,
                True,
                {"valid": False},
            )
        self.steps += 1
        words = action.strip().lower().split()
        pressed = int(words[1]) if len(words) == 2 and words[0] == "press" and words[1].isdigit() else None
        if pressed is None or pressed >= self.buttons:
            self.done = self.steps >= self.max_steps
            return (
                f"Unknown action {action.strip()!r}: press 0-{self.buttons - 1}.",
                0.0,
                self.done,
                {"valid": False},
            )
        if pressed != self.code[self.position]:
            self.done = self.steps >= self.max_steps
            return (
                f"Button {pressed} is refused. {self.position} of {self.length} set.",
                0.0,
                self.done,
                {"valid": False},
            )
        self.position += 1
        if self.position == self.length:
            self.done = True
            return "Click. The lock opens!", 1.0, True, {}
        self.done = self.steps >= self.max_steps
        return f"Click. {self.position} of {self.length} set.", 0.0, self.done, {}

    def gold_actions(self, task_id: str) -> list[str]:
        return [f"press {digit}" for digit in self._code(task_id)]

    def clone(self) -> LockEnv:
        twin = LockEnv(self.buttons, self.length, self.max_steps)
        twin.code = None if self.code is None else list(self.code)
        twin.position, twin.steps, twin.done = self.position, self.steps, self.done
        return twin

    def close(self) -> None:
        self.code = None


def make_env(buttons: str = "4", length: str = "3", max_steps: str = "12") -> LockEnv:
    """The entry point: URI options arrive as strings."""
    return LockEnv(int(buttons), int(length), int(max_steps))
