"""Owns the evaluation protocol's choices (pure, stdlib only): which held-out tasks are evaluated,
the seed of every evaluation episode, and the recovery set of the paper's Table 3.

* :func:`stratified_tasks` picks ``n`` of a split's tasks spread over its strata (TextCraft: crafting
  depth), so a cap never means "the first ``n`` ids" (which in TextCraft are all depth-1 goals).
  Allocation: every stratum gets one task while ``n`` allows, the rest goes by largest remainder of
  ``n * size / total`` (ties: the earlier stratum); inside a stratum the tasks are spread evenly
  (the i-th of k at position ``(i * size) // k``). The result keeps the split's order.
* :func:`episode_seed` derives the sampling seed of episode ``e`` of a task from the run's seed, the
  task id and a purpose label (SHA-256, so it is the same on every machine and Python run).
* :func:`recovery_set` is the Table 3 protocol: the STARTING model's FAILED episodes on the HELD-OUT
  tasks (reward below the success threshold, at least two actions), at most ``limit`` of them (a
  seeded choice when there are more), each truncated at a seeded random step: the prefix keeps
  ``cut`` actions, ``1 <= cut <= len - 1``. Every evaluated model continues the SAME prefixes.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core.domain.metrics import EpisodeResult


def stratified_tasks(task_ids: Sequence[str], strata: Sequence[str], n: int | None) -> list[str]:
    """``n`` of ``task_ids`` spread over their ``strata`` (one label per task); all when ``n`` is
    None or at least the number of tasks."""
    if len(strata) != len(task_ids):
        raise ValueError(f"{len(strata)} strata labels for {len(task_ids)} tasks")
    if n is not None and n < 1:
        raise ValueError(f"the number of tasks to choose must be >= 1, got {n}")
    if n is None or n >= len(task_ids):
        return list(task_ids)
    groups: dict[str, list[int]] = {}
    for position, label in enumerate(strata):
        groups.setdefault(label, []).append(position)
    labels = list(groups)  # in order of first appearance
    total = len(task_ids)
    quota = {label: 0 for label in labels}
    left = n
    for label in labels:  # one per stratum while n allows
        if left == 0:
            break
        quota[label] = 1
        left -= 1
    if left:
        shares = {label: left * len(groups[label]) / total for label in labels}
        for label in labels:
            quota[label] += min(int(shares[label]), len(groups[label]) - quota[label])
        left = n - sum(quota.values())
        by_remainder = sorted(labels, key=lambda lb: (-(shares[lb] - int(shares[lb])), labels.index(lb)))
        while left:
            placed = False
            for label in by_remainder:
                if left and quota[label] < len(groups[label]):
                    quota[label] += 1
                    left -= 1
                    placed = True
            if not placed:  # pragma: no cover - n < total guarantees room
                break
    chosen: list[int] = []
    for label in labels:
        members, k = groups[label], quota[label]
        chosen += [members[(i * len(members)) // k] for i in range(k)]
    return [task_ids[p] for p in sorted(chosen)]


def episode_seed(seed: int, task_id: str, episode: int, purpose: str = "eval") -> int:
    """The sampling seed of episode ``episode`` of ``task_id`` (a 31-bit int)."""
    digest = hashlib.sha256(f"{purpose}:{seed}:{task_id}:{episode}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


@dataclass(frozen=True)
class RecoveryPrefix:
    """A failed episode of the starting model on a held-out task, truncated for the recovery test.

    actions: the kept actions (``""`` = an answer without a parseable action, replayed as such);
    episode: which of the task's evaluation episodes it came from; source_steps: that episode's
    length; the prefix keeps ``len(actions)`` of them.
    """

    task_id: str
    actions: tuple[str, ...]
    episode: int
    source_steps: int

    def __post_init__(self) -> None:
        if not 1 <= len(self.actions) < self.source_steps:
            raise ValueError(
                f"recovery prefix of task {self.task_id}: keeps {len(self.actions)} of "
                f"{self.source_steps} actions (must keep at least 1 and drop at least 1)"
            )

    def to_data(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "actions": list(self.actions),
            "episode": self.episode,
            "source_steps": self.source_steps,
        }

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> RecoveryPrefix:
        return cls(
            str(data["task_id"]), tuple(data["actions"]), int(data["episode"]), int(data["source_steps"])
        )


def recovery_set(
    episodes: Sequence[tuple[int, EpisodeResult]],
    *,
    limit: int,
    seed: int,
    success_threshold: float = 1.0,
) -> list[RecoveryPrefix]:
    """The recovery prefixes from the starting model's ``(episode index, result)`` pairs on the
    held-out tasks (see the module docstring)."""
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    failed = [
        (episode, result)
        for episode, result in episodes
        if result.reward < success_threshold and len(result.actions) >= 2 and result.prefix_steps == 0
    ]
    if len(failed) > limit:
        keep = sorted(random.Random(f"recovery:{seed}:choice").sample(range(len(failed)), limit))
        failed = [failed[i] for i in keep]
    out: list[RecoveryPrefix] = []
    for episode, result in failed:
        steps = len(result.actions)
        cut = random.Random(f"recovery:{seed}:{result.task_id}:{episode}").randint(1, steps - 1)
        out.append(RecoveryPrefix(result.task_id, tuple(result.actions[:cut]), episode, steps))
    return out


def recovery_set_id(prefixes: Sequence[RecoveryPrefix]) -> str:
    """A content id of a recovery set: equal ids mean every model continued the same prefixes."""
    data = json.dumps([p.to_data() for p in prefixes], sort_keys=True)
    return hashlib.sha256(data.encode()).hexdigest()[:16]
