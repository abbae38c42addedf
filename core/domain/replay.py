"""Owns an online learner's replay buffer as data: which episodes a round plays (a task and a seed
per slot), the ``EpisodePlayed`` record of a played episode, and the buffer rebuilt from those
records. Pure: no I/O (``train_service/archer_online.py`` plays the episodes and appends the records).

* Slots: round ``r`` plays ``episodes`` episodes; slot ``k`` of the run's whole sequence (``k = r *
  episodes + i``) takes task ``task_ids[k % len(task_ids)]`` (round-robin, carried across rounds, so
  every task is played equally often) and the seed ``episode_seed(seed, task, k, "archer")``.
* Transitions: an episode gives one transition per step, the last one ``done`` with the episode's
  final reward (``core.domain.transitions.trajectory_transitions``: the paper's sparse reward, less
  ``invalid_action_penalty`` where configured). An episode cut at the step limit keeps its last
  transition ``done`` too: the learner never sees past the limit, as in ArCHer's environments,
  whose horizon ends the episode.
* Records (``EpisodePlayed``, built by the learner): the episode's trajectory, any NUL character
  the model sampled replaced by U+FFFD (PostgreSQL's JSON cannot hold it; the count is in
  ``provenance["replaced_nul"]``).
* Buffer: a FIFO of transitions holding the most recent ``capacity`` (ArCHer's ``capacity``, 10,000
  by default); rebuilt from the log's records in (round, index) order, it is the same buffer the
  learner held when it wrote them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from core.domain.eval_protocol import episode_seed
from core.domain.events import EpisodePlayed
from core.domain.ids import derived_id
from core.domain.trajectory import Trajectory
from core.domain.transitions import TrajectorySource, Transition, TransitionConfig, trajectory_transitions


def buffer_id(run_id: str | None, iteration: int) -> str:
    """The id of a run iteration's replay buffer (its episodes' stream is ``episodes-{buffer_id}``)."""
    return derived_id("replay", run_id or "-", iteration)


@dataclass(frozen=True)
class Slot:
    """One episode a round plays: its index in the round, task and seed."""

    index: int
    task_id: str
    seed: int


def round_slots(task_ids: Sequence[str], round_index: int, episodes: int, seed: int) -> list[Slot]:
    """The ``episodes`` slots of round ``round_index`` (module docstring)."""
    if not task_ids:
        raise ValueError("an online learner needs at least one task to play")
    if episodes < 1 or round_index < 0:
        raise ValueError(f"episodes must be >= 1 and the round >= 0, got {episodes} and {round_index}")
    out = []
    for i in range(episodes):
        k = round_index * episodes + i
        task = task_ids[k % len(task_ids)]
        out.append(Slot(i, task, episode_seed(seed, task, k, "archer")))
    return out


def _storable(text: str) -> str:
    return text.replace("\x00", "\ufffd")


def storable_trajectory(trajectory: Trajectory) -> Trajectory:
    """The trajectory with every NUL character (which a model may sample, and PostgreSQL's JSON
    cannot hold) replaced by U+FFFD; the count is kept in ``provenance["replaced_nul"]``."""
    count = sum(
        s.thought.count("\x00") + s.action.count("\x00") + s.observation.count("\x00")
        for s in trajectory.steps
    )
    count += trajectory.task.count("\x00") + trajectory.instruction.count("\x00")
    if not count:
        return trajectory
    steps = tuple(
        replace(
            s, thought=_storable(s.thought), action=_storable(s.action), observation=_storable(s.observation)
        )
        for s in trajectory.steps
    )
    return replace(
        trajectory,
        task=_storable(trajectory.task),
        instruction=_storable(trajectory.instruction),
        steps=steps,
        provenance={**trajectory.provenance, "replaced_nul": count},
    )


def episode_id(buffer: str, round_index: int, index: int) -> str:
    """The id of the episode played in slot ``index`` of round ``round_index`` of ``buffer``."""
    return derived_id("episode", buffer, round_index, index)


def episode_transitions(record: EpisodePlayed, cfg: TransitionConfig | None = None) -> list[Transition]:
    """The episode's transitions (module docstring); [] for an episode with no step."""
    source = TrajectorySource(record.episode_id, record.trajectory, record.round)
    return trajectory_transitions(source, cfg)


class ReplayBuffer:
    """The most recent ``capacity`` transitions, oldest dropped first."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"the replay buffer's capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._items: deque[Transition] = deque(maxlen=capacity)
        self.episodes = 0

    def add_episode(self, record: EpisodePlayed, cfg: TransitionConfig | None = None) -> int:
        """Add an episode's transitions; returns how many."""
        transitions = episode_transitions(record, cfg)
        self._items.extend(transitions)
        self.episodes += 1
        return len(transitions)

    def items(self) -> tuple[Transition, ...]:
        return tuple(self._items)

    def __len__(self) -> int:
        return len(self._items)


def rebuild_buffer(
    records: Iterable[EpisodePlayed],
    capacity: int,
    cfg: TransitionConfig | None = None,
    *,
    before_round: int | None = None,
) -> ReplayBuffer:
    """The buffer as it stood after the rounds before ``before_round`` (all rounds when None)."""
    buffer = ReplayBuffer(capacity)
    ordered = sorted(records, key=lambda r: (r.round, r.index))
    for record in ordered:
        if before_round is None or record.round < before_round:
            buffer.add_episode(record, cfg)
    return buffer
