"""Owns Gymnasium both ways: any agentr environment as a ``gymnasium.Env`` with Text spaces, and a
text Gymnasium environment behind the Env port (``gym:ID`` URIs). Needs ``gymnasium`` (extra ``gym``).

**agentr -> Gymnasium** (``core.envs.gym_export.AgentrGymEnv``; ``import agentr.gym`` registers the
ids; the class lives apart because it opens env URIs, and the registry imports this module):
``gymnasium.make("agentr/TextCraft-v0")`` (TextCraft, URI ``textcraft``) or
``gymnasium.make("agentr/Env-v0", uri="tau2:mock")`` (any env URI). Observations and actions are
strings (``TextSpace``: a Gymnasium ``Text`` space that holds any string up to its length).
``reset(seed=N, options={"task_id": ID, "split": S})`` plays ``ID`` when given, else a task drawn from
split ``S`` (default ``test``) with the generator ``seed`` seeds, so a seed names the same task every
time. ``step`` answers Gymnasium's 5-tuple: the reward is the change in the env's normalised score
(agentr rewards are the score so far, so the returns sum to it), ``terminated`` is an episode the
environment ended itself, ``truncated`` one cut by a step limit (the env's ``info["truncated"]``, or
the wrapper reaching the env's ``max_steps``), never both; ``info`` carries the env's info, ``valid``,
``score`` (the normalised score so far) and ``raw_score``. The async env runs on an event loop in a
thread of its own, so the wrapper works inside or outside a running loop.

**Gymnasium -> agentr** (``GymTextEnv``, URI ``gym:ID``; ``gym:package.module:ID`` imports the
module first, which must be a module of the current folder or of a package registering ``agentr.envs``
entry points, as for ``python:`` URIs; ``gym:agentr/...`` ids need no import). The environment's
observation space must be a ``Text`` space (its action space ``Text`` too, or anything that accepts
the action string). Task ids are seeds: ``reset(task_id)`` calls ``reset(seed=int(task_id))``; options
``tasks=START-END`` (split test / all, default 0-99), ``train_tasks=START-END``, ``max_steps``
(default the spec's ``max_episode_steps``, else 50), ``reward_min`` / ``reward_max`` (default 0 / 1):
the episode return so far scaled from that range to [0, 1] and clipped is the agentr reward,
``raw_score`` the return. ``done`` is ``terminated or truncated`` and ``info["terminated"]`` /
``info["truncated"]`` keep them apart; ``info["valid"] = False`` from the env marks an invalid action.
Calls run off the event loop under the step timeout (core.envs.offload).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from core.envs.base import Env, EnvError, StepResult, UnknownTask
from core.envs.offload import call_env, step_timeout
from core.envs.uri_options import UriOptions

INSTALL_HINT = 'pip install "agentr[gym]"'
MAX_TEXT = 1_000_000
"""Longest observation or action the Text spaces hold (characters)."""

REGISTERED = {"agentr/TextCraft-v0": "textcraft"}
"""Gymnasium ids ``register_envs`` adds, with the env URI each opens (plus ``agentr/Env-v0``)."""

try:
    import gymnasium
    from gymnasium import spaces
except ImportError as _missing:  # pragma: no cover - the extra is installed in every test venv
    raise ImportError(f"core.envs.gymnasium_bridge needs gymnasium: {INSTALL_HINT}") from _missing


class TextSpace(spaces.Text):
    """A Gymnasium ``Text`` space of any characters (samples draw from printable ASCII)."""

    def __init__(self, max_length: int = MAX_TEXT) -> None:
        import string

        super().__init__(max_length, min_length=0, charset=string.printable)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length


def register_envs() -> None:
    """Register ``agentr/TextCraft-v0`` and ``agentr/Env-v0`` (``uri=`` given to make) with Gymnasium."""
    entry = "core.envs.gym_export:AgentrGymEnv"  # imported by Gymnasium on make
    for env_id, uri in REGISTERED.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(env_id, entry_point=entry, kwargs={"uri": uri})
    if "agentr/Env-v0" not in gymnasium.registry:
        gymnasium.register("agentr/Env-v0", entry_point=entry)


class GymTextEnv:
    """A text Gymnasium environment behind the Env port (module docstring)."""

    instruction = "You are an agent in a text environment. Reply with one action per turn."

    def __init__(
        self,
        env_id: str,
        *,
        splits: dict[str, list[str]] | None = None,
        max_steps: int | None = None,
        reward_min: float = 0.0,
        reward_max: float = 1.0,
    ) -> None:
        if reward_max <= reward_min:
            raise EnvError(f"gym:{env_id}: reward_max ({reward_max}) must be above reward_min ({reward_min})")
        self.env_id = env_id
        self.name = f"gym:{env_id}"
        try:
            self.inner: Any = gymnasium.make(env_id, disable_env_checker=True)
        except gymnasium.error.Error as exc:
            raise EnvError(f"{self.name}: Gymnasium cannot make {env_id!r}: {exc}") from exc
        if not isinstance(self.inner.observation_space, spaces.Text):
            raise EnvError(
                f"{self.name}: the observation space is {self.inner.observation_space}, not a Text space "
                "(agentr environments are text environments)"
            )
        spec_steps = getattr(self.inner.spec, "max_episode_steps", None)
        self.max_steps = int(max_steps or spec_steps or 50)
        default = [str(i) for i in range(100)]
        self.splits = splits or {"test": default, "all": default}
        self.reward_min = reward_min
        self.reward_max = reward_max
        self.timeout = step_timeout()
        self.task_id: str | None = None
        self.total = 0.0
        self.done = True

    def task_ids(self, split: str = "test") -> list[str]:
        if split not in self.splits:
            raise EnvError(f"{self.name}: unknown split {split!r} (known: {', '.join(sorted(self.splits))})")
        return list(self.splits[split])

    def _scaled(self, total: float) -> float:
        return min(max((total - self.reward_min) / (self.reward_max - self.reward_min), 0.0), 1.0)

    async def reset(self, task_id: str) -> str:
        try:
            seed = int(task_id)
        except ValueError as exc:
            raise UnknownTask(f"{self.name}: task ids are integer seeds, got {task_id!r}") from exc
        observation, _info = await call_env(
            self.name, "reset()", self._reset_sync, seed, limit_s=self.timeout
        )
        if not isinstance(observation, str):
            raise EnvError(f"{self.name}: reset() returned {type(observation).__name__}, not a string")
        self.task_id = task_id
        self.total = 0.0
        self.done = False
        return observation

    def _reset_sync(self, seed: int) -> Any:
        return self.inner.reset(seed=seed)

    async def step(self, action: str) -> StepResult:
        if self.task_id is None:
            raise EnvError(f"{self.name}: step() before reset()")
        if self.done:
            return StepResult("The episode is over.", self._scaled(self.total), True, valid=False)
        answer = await call_env(self.name, "step()", self.inner.step, action, limit_s=self.timeout)
        if not isinstance(answer, tuple) or len(answer) != 5:
            raise EnvError(
                f"{self.name}: step() must answer Gymnasium's (observation, reward, terminated, truncated, "
                f"info), got {type(answer).__name__}"
            )
        observation, reward, terminated, truncated, info = answer
        try:
            self.total += float(reward)
        except (TypeError, ValueError) as exc:
            raise EnvError(f"{self.name}: step() returned a non-numeric reward {reward!r}") from exc
        info = dict(info) if isinstance(info, dict) else {}
        valid = bool(info.pop("valid", True))
        self.done = bool(terminated) or bool(truncated)
        info["terminated"] = bool(terminated)
        info["truncated"] = bool(truncated)
        return StepResult(
            str(observation),
            self._scaled(self.total),
            self.done,
            valid=valid,
            raw_score=self.total,
            info=info,
        )

    async def clone(self) -> Env | None:
        return None

    async def close(self) -> None:
        await call_env(self.name, "close()", self.inner.close, limit_s=self.timeout)


def open_gym(uri: str) -> GymTextEnv:
    """``gym:ID[?options]`` or ``gym:package.module:ID`` -> a GymTextEnv (module docstring)."""
    from core.envs.openenv import _id_range

    parts = urlsplit(uri)
    env_id = parts.path
    if not env_id:
        raise EnvError(f"malformed environment URI {uri!r}: expected gym:ID (a registered Gymnasium id)")
    if env_id.startswith("agentr/"):
        register_envs()
    elif ":" in env_id:
        from core.envs.plugin import require_env_module

        module = env_id.split(":", 1)[0]
        require_env_module(uri, module)
    options = UriOptions(uri, parts.query)
    splits: dict[str, list[str]] = {}
    tasks = options.take("tasks", "")
    train = options.take("train_tasks", "")
    if tasks:
        ids = _id_range(uri, "tasks", tasks)
        splits.update(test=ids, all=ids)
    if train:
        splits["train"] = _id_range(uri, "train_tasks", train)
    if splits and "test" not in splits:
        default = [str(i) for i in range(100)]
        splits.update(test=default, all=default)
    max_steps = options.take_number("max_steps", 0)
    reward_min = options.take_number("reward_min", 0.0, float)
    reward_max = options.take_number("reward_max", 1.0, float)
    options.finish(f"gym:{env_id}", "tasks, train_tasks, max_steps, reward_min, reward_max")
    if max_steps < 0:
        raise EnvError(f"environment URI {uri!r}: max_steps must be >= 1")
    return GymTextEnv(
        env_id,
        splits=splits or None,
        max_steps=int(max_steps) or None,
        reward_min=reward_min,
        reward_max=reward_max,
    )
