"""Owns returning an environment to a tree node's state and stepping a node's candidate actions.

Two ways, chosen by what the environment can do:

- **clone** (``env.clone()`` returns an Env): every unexpanded node keeps a snapshot (an env in that
  node's state). Expanding a node takes ONE restored state - its snapshot, or, when there is none
  (e.g. a search resumed after a crash), the nearest snapshotted ancestor cloned and the remaining
  actions replayed once - and clones it per candidate: ``n`` steps per expansion. A node's snapshot
  is dropped once it is expanded (its children carry their own), so only the frontier is held.
- **replay** (``clone()`` returns None): a state cannot be forked, so each candidate needs its own
  reset + replay of the node's actions + the candidate's step: ``n * (depth + 1)`` steps.

``steps`` counts every ``env.step`` taken here (replays included) so benches can compare the two.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from core.envs.base import Env, EnvError, StepResult, valid_actions_of

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Candidate:
    node_id: str  # the id the child node will get
    action: str  # the action to execute


class EnvStates:
    """Restores node states of one tree's environment and steps candidates from them."""

    def __init__(self, env: Env, task_id: str, *, use_clone: bool = True) -> None:
        self.env = env
        self.task_id = task_id
        self.use_clone = use_clone
        self.can_clone = False
        self.snapshots: dict[str, Env] = {}
        self.steps = 0  # env.step calls (candidates + replays)
        self.replay_steps = 0  # the part of ``steps`` spent returning to a state
        self.resets = 0

    async def start(self, root_id: str) -> str:
        """Reset to the task; returns the first observation. Decides clone vs replay."""
        observation = await self.env.reset(self.task_id)
        self.resets += 1
        if self.use_clone:
            twin = await self.env.clone()
            self.can_clone = twin is not None
            if twin is not None:
                self.snapshots[root_id] = twin
        return observation

    @property
    def mode(self) -> str:
        return "clone" if self.can_clone else "replay"

    async def expand(
        self, node_id: str, path: Sequence[tuple[str, str]], candidates: Sequence[Candidate]
    ) -> list[StepResult]:
        """Step each candidate from the state of ``node_id``.

        ``path`` is the (node id, action) list from the root's first child down to ``node_id``
        (empty for the root). A candidate whose step raises EnvError comes back as a failed,
        terminal result (done, not valid) whose observation names the error.
        """
        if self.can_clone:
            return await self._expand_by_clone(node_id, path, candidates)
        return await self._expand_by_replay(path, candidates)

    async def valid_actions(self, node_id: str, path: Sequence[tuple[str, str]]) -> list[str] | None:
        """The valid actions in the state of ``node_id`` (``core.envs.base.valid_actions_of``; None
        when the environment cannot list them). Clone mode asks the node's snapshot (restoring one
        and keeping it for the expansion); replay mode resets and replays ``path`` first."""
        if self.can_clone:
            snapshot = self.snapshots.get(node_id)
            if snapshot is None:
                snapshot = self.snapshots[node_id] = await self._restore(path)
            return await valid_actions_of(snapshot)
        if not callable(getattr(self.env, "valid_actions", None)):
            return None
        await self.env.reset(self.task_id)
        self.resets += 1
        for _, action in path:
            await self.env.step(action)
            self.steps += 1
            self.replay_steps += 1
        return await valid_actions_of(self.env)

    async def _expand_by_clone(
        self, node_id: str, path: Sequence[tuple[str, str]], candidates: Sequence[Candidate]
    ) -> list[StepResult]:
        base = self.snapshots.pop(node_id, None)
        if base is None:
            base = await self._restore(path)
        results: list[StepResult] = []
        for index, candidate in enumerate(candidates):
            last = index == len(candidates) - 1
            child = base if last else await base.clone()
            if child is None:  # an env that stopped cloning: fall back for the rest
                raise EnvError("environment clone() returned None after cloning before")
            result = await self._step(child, candidate.action)
            results.append(result)
            if not result.done:
                self.snapshots[candidate.node_id] = child
        return results

    async def _restore(self, path: Sequence[tuple[str, str]]) -> Env:
        """One env in the state at the end of ``path``: nearest snapshot + replay of the rest."""
        start = 0
        source: Env | None = None
        for index in range(len(path), 0, -1):
            snapshot = self.snapshots.get(path[index - 1][0])
            if snapshot is not None:
                source, start = snapshot, index
                break
        if source is None:
            env = await self.env.clone() if self.can_clone else None
            if env is None:
                raise EnvError("cannot restore a state: the environment did not clone")
            await env.reset(self.task_id)
            self.resets += 1
        else:
            cloned = await source.clone()
            if cloned is None:
                raise EnvError("cannot restore a state: the environment did not clone")
            env = cloned
        for _, action in path[start:]:
            await env.step(action)
            self.steps += 1
            self.replay_steps += 1
        return env

    async def _expand_by_replay(
        self, path: Sequence[tuple[str, str]], candidates: Sequence[Candidate]
    ) -> list[StepResult]:
        results: list[StepResult] = []
        for candidate in candidates:
            await self.env.reset(self.task_id)
            self.resets += 1
            for _, action in path:
                await self.env.step(action)
                self.steps += 1
                self.replay_steps += 1
            results.append(await self._step(self.env, candidate.action))
        return results

    async def _step(self, env: Env, action: str) -> StepResult:
        self.steps += 1
        try:
            return await env.step(action)
        except EnvError as exc:
            log.warning("environment failed on action %r: %s", action, exc)
            return StepResult(observation=f"Environment error: {exc}", reward=0.0, done=True, valid=False)

    async def close(self) -> None:
        for snapshot in self.snapshots.values():
            if snapshot is not self.env:
                await snapshot.close()
        self.snapshots.clear()
