"""Owns bring-your-own environments: ``python:package.module:factory`` URIs, the ``agentr.envs``
entry-point group, and the adapter that puts a user's object behind the Env port.

- ``python:package.module:factory?key=value&...`` imports ``package.module`` and calls
  ``factory(key="value", ...)`` (option values are strings; the factory converts them). The factory
  may be a class. The current directory is importable (as for ``uvicorn module:app``), so a module in
  the project folder works without installing it. Because run configurations arrive over the API,
  the module must be a module of the current folder or belong to a package that registers
  ``agentr.envs`` entry points; standard-library modules, agentr's own packages (use the built-in
  URIs) and private names (``_x``) are refused: the URI names an environment, it does not call
  arbitrary installed functions.
- An installed distribution can declare ``[project.entry-points."agentr.envs"] NAME =
  "package.module:factory"``; then ``NAME?key=value`` opens it the same way, everywhere a built-in
  name works (run, search worker, eval, ``agentr env serve``, ``agentr env check``).

The object returned must have ``reset(task_id)`` and ``step(action)`` (sync or async) and
``task_ids(split)``; ``clone()``, ``close()``, ``name``, ``instruction`` and ``max_steps`` are
optional (defaults: no cloning, nothing to close, the entry-point or module name, a generic
instruction, 50 steps). ``step`` returns a :class:`~core.envs.base.StepResult` or a tuple
``(observation, reward, done)`` / ``(observation, reward, done, info)``; rewards must lie in [0, 1]
(EnvError names a reward outside it). An ``info["valid"] = False`` marks an invalid action.

Synchronous methods run in a worker thread (core.envs.offload), so concurrent episodes of a slow
environment overlap instead of taking turns on the event loop; every reset, step, clone and close gets
the step timeout (``AGENTR_ENV_STEP_TIMEOUT``, default 300 s) and fails with EnvTimeout past it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from core.envs.base import Env, EnvError, StepResult, UnknownTask
from core.envs.offload import call_env, step_timeout

GROUP = "agentr.envs"
AGENTR_PACKAGES = (
    "agentr",
    "core",
    "api",
    "search_service",
    "critic_service",
    "splice_service",
    "train_service",
)
DEFAULT_INSTRUCTION = "You are an agent in a text environment. Reply with one action per turn."


def _to_step_result(where: str, value: Any) -> StepResult:
    if isinstance(value, StepResult):
        result = value
    elif isinstance(value, tuple) and len(value) in (3, 4):
        info = dict(value[3]) if len(value) == 4 and isinstance(value[3], dict) else {}
        valid = bool(info.pop("valid", True))
        try:
            reward = float(value[1])
        except (TypeError, ValueError) as exc:
            raise EnvError(f"{where}: step() returned a non-numeric reward {value[1]!r}") from exc
        result = StepResult(str(value[0]), reward, bool(value[2]), valid=valid, raw_score=reward, info=info)
    else:
        raise EnvError(
            f"{where}: step() must return a StepResult or (observation, reward, done[, info]), got "
            f"{type(value).__name__}"
        )
    if not 0.0 <= result.reward <= 1.0:
        raise EnvError(f"{where}: step() returned reward {result.reward!r}, outside [0, 1]")
    return result


class PluginEnv:
    """A user's environment object behind the Env port (see the module docstring)."""

    def __init__(self, inner: Any, label: str, timeout: float | None = None) -> None:
        for method in ("reset", "step", "task_ids"):
            if not callable(getattr(inner, method, None)):
                raise EnvError(f"{label}: the environment object has no {method}() method")
        self.inner = inner
        self.label = label
        self.name = str(getattr(inner, "name", "") or label)
        self.instruction = str(getattr(inner, "instruction", "") or DEFAULT_INSTRUCTION)
        max_steps = getattr(inner, "max_steps", 50)
        if not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps < 1:
            raise EnvError(f"{label}: max_steps must be a positive int, got {max_steps!r}")
        self.max_steps = max_steps
        self.timeout = step_timeout() if timeout is None else timeout

    async def _call(self, method: str, *args: Any) -> Any:
        return await call_env(
            self.label, f"{method}()", getattr(self.inner, method), *args, limit_s=self.timeout
        )

    def task_ids(self, split: str = "test") -> list[str]:
        try:
            ids = self.inner.task_ids(split)
        except EnvError:
            raise
        except (ValueError, KeyError, TypeError) as exc:
            raise EnvError(f"{self.label}: task_ids({split!r}) failed: {exc}") from exc
        return [str(task_id) for task_id in ids]

    async def reset(self, task_id: str) -> str:
        observation = await self._call("reset", task_id)
        if not isinstance(observation, str):
            raise EnvError(f"{self.label}: reset() returned {type(observation).__name__}, not a string")
        return observation

    async def step(self, action: str) -> StepResult:
        return _to_step_result(self.label, await self._call("step", action))

    async def clone(self) -> Env | None:
        clone = getattr(self.inner, "clone", None)
        if not callable(clone):
            return None
        twin = await self._call("clone")
        return None if twin is None else PluginEnv(twin, self.label, self.timeout)

    async def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if callable(close):
            await self._call("close")

    def __getattr__(self, item: str) -> Any:  # gold_actions, goal_of, ... of the user's env
        if item.startswith("_") or item == "inner":
            raise AttributeError(item)
        return getattr(self.inner, item)


def _call_factory(factory: Any, options: dict[str, str], label: str) -> Env:
    if not callable(factory):
        raise EnvError(f"{label}: {factory!r} is not callable")
    try:
        made = factory(**options)
    except TypeError as exc:
        raise EnvError(f"{label}: the factory rejected options {sorted(options)}: {exc}") from exc
    except (EnvError, UnknownTask):
        raise
    except Exception as exc:
        raise EnvError(f"{label}: the factory failed: {type(exc).__name__}: {exc}") from exc
    if isinstance(made, PluginEnv):
        return made
    return PluginEnv(made, label)


def open_python(uri: str, target: str, options: dict[str, str]) -> Env:
    """``python:package.module:factory`` (``target`` is the part after ``python:``)."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise EnvError(f"malformed environment URI {uri!r}: expected python:package.module:factory")
    require_env_module(uri, module_name)
    if any(part.startswith("_") for part in attr.split(".")):
        raise EnvError(f"environment URI {uri!r}: private names are not environment factories")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise EnvError(f"environment URI {uri!r}: cannot import {module_name}: {exc}") from exc
    factory: Any = module
    for part in attr.split("."):
        if not hasattr(factory, part):
            raise EnvError(f"environment URI {uri!r}: {module_name} has no attribute {attr!r}")
        factory = getattr(factory, part)
    return _call_factory(factory, options, module_name.rsplit(".", 1)[-1])


def require_env_module(uri: str, module_name: str) -> None:
    """Refuse a module that a URI may not import (module docstring); make the current folder importable."""
    top = module_name.split(".", 1)[0]
    if top in sys.stdlib_module_names or top == "builtins":
        raise EnvError(f"environment URI {uri!r}: {module_name} is a standard-library module, not an env")
    if top in AGENTR_PACKAGES:
        raise EnvError(f"environment URI {uri!r}: {top} is agentr itself; use the built-in environment URIs")
    if any(part.startswith("_") for part in module_name.split(".")):
        raise EnvError(f"environment URI {uri!r}: private names are not environment factories")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.append(cwd)  # after installed packages: the current folder never shadows them
    _require_env_module(uri, top, Path(cwd))


def _require_env_module(uri: str, top: str, cwd: Path) -> None:
    """Refuse a module that is neither in the current folder nor in a package registering envs."""
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError) as exc:
        raise EnvError(f"environment URI {uri!r}: cannot import {top}: {exc}") from exc
    if spec is None:
        raise EnvError(f"environment URI {uri!r}: cannot import {top}: no module named {top!r}")
    registered = {ep.value.split(":", 1)[0].split(".", 1)[0] for ep in entry_points(group=GROUP)}
    if top in registered:
        return
    locations = [spec.origin] if spec.origin else list(spec.submodule_search_locations or [])
    for location in locations:
        path = Path(location).resolve()
        if path.is_relative_to(cwd.resolve()) and "site-packages" not in path.parts:
            return
    raise EnvError(
        f"environment URI {uri!r}: {top} is an installed package that registers no {GROUP} entry "
        f"point; register its factory as an entry point (see examples/agentr-example-lock) or run "
        f"from the folder that holds the module"
    )


def entry_point_names() -> list[str]:
    """Names registered in the ``agentr.envs`` entry-point group (sorted)."""
    return sorted({ep.name for ep in entry_points(group=GROUP)})


def open_entry_point(name: str, options: dict[str, str]) -> Env | None:
    """The env registered as NAME in ``agentr.envs``, or None when no distribution registers it."""
    found = [ep for ep in entry_points(group=GROUP) if ep.name == name]
    if not found:
        return None
    values = sorted({ep.value for ep in found})
    if len(values) > 1:
        raise EnvError(f"environment {name!r} is registered twice in {GROUP}: {', '.join(values)}")
    try:
        factory = found[0].load()
    except Exception as exc:
        raise EnvError(f"environment {name!r} ({found[0].value}): cannot load: {exc}") from exc
    return _call_factory(factory, options, name)
