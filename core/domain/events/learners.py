"""Owns the events of the online learners' streams (``episodes-{buffer_id}``: one replay buffer per
run iteration): the episodes an online learner played in the environment."""

from __future__ import annotations

from dataclasses import dataclass

from core.domain.events.base import DomainEvent, register
from core.domain.trajectory import Trajectory


@register
@dataclass(frozen=True)
class EpisodePlayed(DomainEvent):
    """An episode an online learner (ArCHer, ``train_service/archer_online.py``) played in the
    environment with its current actor; the replay buffer is rebuilt from these."""

    buffer_id: str  # derived_id("replay", run_id, iteration): the stream of this iteration's buffer
    episode_id: str  # derived_id("episode", buffer_id, round, index)
    run_id: str | None
    iteration: int
    round: int  # the learner's round (0-based) that played it
    index: int  # position within the round
    task_id: str
    seed: int
    learner: str  # "archer"
    trajectory: Trajectory  # the steps, reward = the final reward
    done: bool  # the environment ended it (False: cut at the step limit)
