"""A text Gymnasium environment for the ``gym:`` URI tests (tests/unit/test_envs_gymnasium.py):
guess the secret word that the reset seed picks. Importing the module registers ``Guess-v0`` with a
3-step limit (Gymnasium's TimeLimit truncates); a right guess terminates with reward 1; a guess that
is not a word of the list answers ``info["valid"] = False``. ``Numbers-v0`` has a Box observation
space (not a text environment)."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

WORDS = ("apple", "birch", "cedar", "daisy", "ember", "fjord", "grove", "heron")


class GuessEnv(gymnasium.Env[str, str]):
    def __init__(self) -> None:
        self.observation_space = spaces.Text(200, min_length=0, charset="abcdefghijklmnopqrstuvwxyz ,.:")
        self.action_space = spaces.Text(20)
        self.secret = ""

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self.secret = WORDS[int(self.np_random.integers(len(WORDS)))]
        return f"guess the word, it starts with {self.secret[0]}.", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if action == self.secret:
            return "right.", 1.0, True, False, {}
        return "wrong.", 0.0, False, False, {"valid": action in WORDS}


class NumbersEnv(gymnasium.Env[np.ndarray, np.int64]):
    def __init__(self) -> None:
        self.observation_space = spaces.Box(0.0, 1.0, (2,))
        self.action_space = spaces.Discrete(2)


gymnasium.register("Guess-v0", entry_point=f"{__name__}:GuessEnv", max_episode_steps=3)
gymnasium.register("Numbers-v0", entry_point=f"{__name__}:NumbersEnv")
