"""The online learner's replay buffer as data (core/domain/replay.py): storable records, the FIFO
capacity, a rebuild that stops before a round, and the slots' round-robin over tasks."""

from __future__ import annotations

import pytest

from core.domain.events import EpisodePlayed
from core.domain.replay import (
    ReplayBuffer,
    buffer_id,
    episode_id,
    rebuild_buffer,
    round_slots,
    storable_trajectory,
)
from core.domain.trajectory import Step, Trajectory


def episode(round_index: int, index: int, steps: int, reward: float = 0.0) -> EpisodePlayed:
    traj = Trajectory(
        task="craft a stick",
        instruction="act",
        steps=tuple(Step(f"t{i}", f"get {i}", f"obs {i}", 0.0, False, True) for i in range(steps)),
        reward=reward,
    )
    buf = buffer_id("run", 0)
    return EpisodePlayed(
        buf,
        episode_id(buf, round_index, index),
        "run",
        0,
        round_index,
        index,
        "task",
        1,
        "archer",
        traj,
        False,
    )


def test_nul_characters_are_replaced_and_counted() -> None:
    traj = Trajectory("ta\x00sk", "i", (Step("a\x00\x00", "get 1", "o\x00", 0.0, False, True),), 1.0)
    clean = storable_trajectory(traj)
    assert "\x00" not in clean.task + clean.steps[0].thought + clean.steps[0].observation
    assert clean.steps[0].thought == "a\ufffd\ufffd" and clean.provenance["replaced_nul"] == 4
    assert storable_trajectory(clean) is clean  # nothing to replace: the same object


def test_buffer_keeps_the_most_recent_transitions() -> None:
    buffer = ReplayBuffer(capacity=5)
    buffer.add_episode(episode(0, 0, 3))
    buffer.add_episode(episode(0, 1, 4, reward=1.0))
    items = buffer.items()
    assert len(buffer) == 5 and buffer.episodes == 2
    assert [t.step.action for t in items] == ["get 2", "get 0", "get 1", "get 2", "get 3"]
    assert items[-1].done and items[-1].reward == 1.0 and not items[-2].done


def test_rebuild_stops_before_a_round_and_orders_by_slot() -> None:
    records = [episode(1, 0, 2), episode(0, 1, 1), episode(0, 0, 1)]
    assert len(rebuild_buffer(records, 100, before_round=1)) == 2
    assert [t.source_id for t in rebuild_buffer(records, 100).items()][:2] == [
        records[2].episode_id,
        records[1].episode_id,
    ]
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(0)


def test_slots_need_tasks() -> None:
    with pytest.raises(ValueError, match="at least one task"):
        round_slots((), 0, 2, seed=0)
