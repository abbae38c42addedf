"""Owns the evaluation metrics: per-episode measures and their aggregates (pure, stdlib only).

An evaluated episode is an :class:`EpisodeResult`: the actions taken, which of them the environment
could execute, the final reward in [0, 1] and whether it ended done. Aggregates
(:func:`summarize`):

* ``avg_reward`` / ``success_rate`` (reward >= ``success_threshold``, default 1.0) / ``avg_steps``;
* ``invalid_action_rate``: invalid actions (unparseable answers included) over all actions;
* ``dead_loop_rate``: episodes caught in a dead loop, i.e. whose actions end with one block of 1 to
  ``max_period`` actions repeated at least ``min_repeats`` times in a row (see :func:`dead_loop`);
  ``repeated_action_rate``: actions identical to an earlier action of the same episode;
* recovery (:func:`recovery_cut`, :func:`summarize` on continued episodes): a failed trajectory is
  cut right after its first wrong action (or halfway when that is unknown), the model continues from
  there, and the continued episode is scored like any other.

Revision length per iteration (:func:`mean`) comes from ``RevisionMaterialized.revision_length``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class EpisodeResult:
    task_id: str
    actions: tuple[str, ...]  # normalised actions ("" for an answer with no parseable action)
    valid: tuple[bool, ...]  # per action: the environment executed it
    reward: float
    done: bool
    prefix_steps: int = 0  # steps replayed from a given prefix (recovery episodes), not the model's

    def __post_init__(self) -> None:
        if len(self.actions) != len(self.valid):
            raise ValueError(
                f"episode {self.task_id}: {len(self.actions)} actions but {len(self.valid)} validity flags"
            )
        if not 0.0 <= self.reward <= 1.0:
            raise ValueError(f"episode {self.task_id}: reward {self.reward} is outside [0, 1]")
        if not 0 <= self.prefix_steps <= len(self.actions):
            raise ValueError(f"episode {self.task_id}: prefix_steps {self.prefix_steps} out of range")

    @property
    def model_actions(self) -> tuple[str, ...]:
        return self.actions[self.prefix_steps :]

    @property
    def model_valid(self) -> tuple[bool, ...]:
        return self.valid[self.prefix_steps :]


def dead_loop(actions: Sequence[str], min_repeats: int = 3, max_period: int = 3) -> int | None:
    """The period (1..max_period) of the block the actions END with when it repeats at least
    ``min_repeats`` times back to back (e.g. a,b,a,b,a,b -> 2); None when there is no such loop.

    The shortest period wins. Empty actions (unparseable answers) count as actions too: a model that
    keeps answering garbage is looping.
    """
    if min_repeats < 2 or max_period < 1:
        raise ValueError("dead_loop needs min_repeats >= 2 and max_period >= 1")
    for period in range(1, max_period + 1):
        span = period * min_repeats
        if len(actions) < span:
            break
        tail = actions[-span:]
        block = tail[:period]
        if all(tail[i] == block[i % period] for i in range(span)):
            return period
    return None


def repeated_actions(actions: Sequence[str]) -> int:
    """How many actions repeat an earlier action of the same episode."""
    seen: set[str] = set()
    repeats = 0
    for action in actions:
        if action in seen:
            repeats += 1
        seen.add(action)
    return repeats


def recovery_cut(steps: int, first_error_index: int | None) -> int:
    """Where a failed trajectory of ``steps`` actions is cut for the recovery test: right after its
    first wrong action when known (the model must notice and repair it), else after half of it.
    Always leaves at least one action in the prefix and at least one action removed."""
    if steps < 2:
        raise ValueError(f"a trajectory needs at least 2 actions to be cut, got {steps}")
    cut = first_error_index + 1 if first_error_index is not None else steps // 2
    return max(1, min(cut, steps - 1))


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize(
    episodes: Sequence[EpisodeResult],
    *,
    success_threshold: float = 1.0,
    min_repeats: int = 3,
    max_period: int = 3,
) -> dict[str, Any]:
    """Aggregate metrics over episodes (only the model's own actions count for rates and steps)."""
    n = len(episodes)
    if n == 0:
        return {
            "episodes": 0,
            "avg_reward": None,
            "success_rate": None,
            "avg_steps": None,
            "invalid_action_rate": None,
            "dead_loop_rate": None,
            "repeated_action_rate": None,
        }
    actions = sum(len(e.model_actions) for e in episodes)
    invalid = sum(1 for e in episodes for ok in e.model_valid if not ok)
    loops = sum(1 for e in episodes if dead_loop(e.model_actions, min_repeats, max_period) is not None)
    repeats = sum(
        repeated_actions(e.actions) - repeated_actions(e.actions[: e.prefix_steps]) for e in episodes
    )
    return {
        "episodes": n,
        "avg_reward": sum(e.reward for e in episodes) / n,
        "success_rate": sum(1 for e in episodes if e.reward >= success_threshold) / n,
        "avg_steps": actions / n,
        "invalid_action_rate": invalid / actions if actions else 0.0,
        "dead_loop_rate": loops / n,
        "repeated_action_rate": repeats / actions if actions else 0.0,
    }
