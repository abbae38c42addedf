"""Owns online ArCHer's collection step: where the learner plays (``OnlineSetup``: environment
opener, training tasks, episode log), the current actor as a Policy over the learner's in-memory
weights, one round's episodes played through ``train_service.evaluation.play_episodes`` (slots,
tasks and seeds: ``core.domain.replay.round_slots``) and each recorded as an ``EpisodePlayed``
(``train_service.archer_online``'s docstring, step 1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.domain.events import EpisodePlayed
from core.domain.replay import Slot, buffer_id, episode_id, round_slots, storable_trajectory
from core.envs.base import Env
from train_service.archer_config import ArcherConfig
from train_service.archer_rounds import EpisodeLog
from train_service.archer_updates import ArcherLearner
from train_service.evaluation import EvalConfig, play_episodes


@dataclass(frozen=True)
class OnlineSetup:
    """Where the online learner plays: the environment, the tasks, and the log (an ``EpisodeLog``
    or the store URL to open one on). ``env_opener`` opens one environment per episode."""

    env_opener: Callable[[], Env]
    task_ids: tuple[str, ...]
    episode_log: EpisodeLog


def _actor_policy(learner: ArcherLearner, round_index: int) -> Any:
    """The current actor as a Policy: no copy of the weights and no prefix cache (they change)."""
    from core.llm.hf import HFPolicy

    learner.actor.eval()
    learner.actor.config.use_cache = True
    return HFPolicy(learner.actor, learner.tokenizer, f"archer-actor@round-{round_index}", prefix_cache_mb=0)


async def collect_round(
    learner: ArcherLearner,
    cfg: ArcherConfig,
    setup: OnlineSetup,
    round_index: int,
    *,
    run_id: str | None,
    iteration: int,
) -> list[EpisodePlayed]:
    slots = round_slots(setup.task_ids, round_index, cfg.rollout_episodes, cfg.seed)
    eval_cfg = EvalConfig(
        max_steps=cfg.episode_max_steps,
        max_tokens=cfg.max_new_tokens,
        temperature=cfg.temperature,
        episodes_per_task=1,
        recovery_episodes=0,
    )
    policy = _actor_policy(learner, round_index)
    played = await play_episodes(
        policy, setup.env_opener, [s.task_id for s in slots], eval_cfg, seeds=[s.seed for s in slots]
    )
    learner.actor.config.use_cache = False
    return [
        _record(run_id, iteration, round_index, slot, episode.trajectory(), episode.done)
        for slot, episode in zip(slots, played, strict=True)
    ]


def _record(
    run_id: str | None, iteration: int, round_index: int, slot: Slot, trajectory: Any, done: bool
) -> EpisodePlayed:
    buf = buffer_id(run_id, iteration)
    return EpisodePlayed(
        buffer_id=buf,
        episode_id=episode_id(buf, round_index, slot.index),
        run_id=run_id,
        iteration=iteration,
        round=round_index,
        index=slot.index,
        task_id=slot.task_id,
        seed=slot.seed,
        learner="archer",
        trajectory=storable_trajectory(trajectory),
        done=done,
    )
