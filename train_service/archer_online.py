"""Owns ONLINE ArCHer (Zhou et al. 2024) as the paper runs it: every round the current actor plays
episodes in the environment, they go into a replay buffer, the critic is trained by TD on the
buffer and the actor by the critic's advantage; ``train_archer_online``.

One round (``ArcherConfig``; the collection is ``train_service.archer_collect``'s, the updates are
``train_service.archer_updates.ArcherLearner``'s; this module owns the loop over rounds, budgets,
resume and the final checkpoint):

1. collect: the current actor (an ``HFPolicy`` over the learner's in-memory weights, no copy) plays
   ``rollout_episodes`` episodes on the run's training tasks, batched per turn through the same
   Env port and ``train_service.evaluation.play_episodes`` as evaluation (slots, tasks and seeds:
   ``core.domain.replay.round_slots``), at ``temperature``, at most ``episode_max_steps`` actions;
2. log: the round's episodes are appended to the event log (``EpisodePlayed`` on
   ``episodes-{buffer_id}``, one transaction per round, guarded by the stream's version so a round
   is recorded exactly once), and their transitions enter the buffer (``core.domain.replay``);
3. critic: ``critic_epochs`` TD updates on the buffer (double Q to ``r + gamma V_target(s')``, V to
   ``min Q_target`` at an action the current actor samples, Polyak target);
4. actor: after ``warmup_iters`` rounds, ``actor_epochs`` REINFORCE updates with the critic's
   advantage ``min Q(s, a) - min V(s)`` at actions the actor samples (plus the KL guard, ours);
5. checkpoint: the whole learner (actor, critic, target, both optimizers, counters) is saved as the
   round's resumable state in ``<out>/rounds/latest`` (replacing the previous round's).

Budgets: ``env_steps_budget`` (actions taken in the environment) and ``optimizer_steps_budget``
(critic + actor optimizer steps) end the loop after the round that reaches them; ``time_budget_s``
is a safety cap only (comparisons match steps, never wall-clock). Cancellation (``should_stop``) is
checked after every episode batch and every update.

Resume: a job started again on the same output folder loads ``rounds/latest`` and goes on with the
next round; its buffer is rebuilt from the log's ``EpisodePlayed`` records of the rounds it has
finished, and a round whose episodes are already in the log (a crash after logging, before the
checkpoint) reuses them instead of playing again.
"""

from __future__ import annotations

import asyncio
import logging
import math
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core.domain.events import EpisodePlayed
from core.domain.replay import ReplayBuffer, buffer_id, episode_transitions, rebuild_buffer
from core.domain.transitions import Transition, TransitionConfig
from train_service.archer import ActorWithCritic
from train_service.archer_collect import OnlineSetup, collect_round
from train_service.archer_config import ArcherConfig
from train_service.archer_rounds import LATEST, StoreEpisodeLog, load_round, rounds_dir, save_round
from train_service.archer_updates import ArcherLearner
from train_service.checkpoint import CheckpointMeta, existing_checkpoint, write_checkpoint
from train_service.hf_trainer import TrainingCancelled, TrainJob, TrainReport

__all__ = ["ALGORITHMS", "OnlineSetup", "StoreEpisodeLog", "train_archer_online", "train_archer_online_async"]

log = logging.getLogger(__name__)

ALGORITHMS = ("archer", "reinforce", "filtered_bc")
SUCCESS = 1.0  # an episode's final reward that counts as a success


def _baseline_data(
    algorithm: str,
    records: Sequence[EpisodePlayed],
    successes: ReplayBuffer,
    cfg: TransitionConfig | None,
) -> list[tuple[Transition, float]]:
    """The weighted steps a baseline trains on this round (``train_archer_online_async``)."""
    if algorithm == "filtered_bc":
        return [(t, 1.0) for t in successes.items()]
    returns = [float(r.trajectory.reward or 0.0) for r in records]
    baseline = sum(returns) / len(returns) if returns else 0.0
    return [
        (t, ret - baseline)
        for record, ret in zip(records, returns, strict=True)
        for t in episode_transitions(record, cfg)
    ]


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 6) if values else None


async def train_archer_online_async(
    job: TrainJob,
    cfg: ArcherConfig,
    setup: OnlineSetup,
    *,
    transition_config: TransitionConfig | None = None,
    algorithm: str = "archer",
) -> TrainReport:
    """Online ArCHer (module docstring); the final actor + ``critic/`` go to ``job.out_dir``.

    ``algorithm`` swaps the updates for the paper's comparison (the collection, log, budgets and
    checkpoints stay the same; no critic is trained): ``reinforce`` (on-policy, trajectory-level
    REINFORCE with a baseline: each of the round's fresh steps weighted by its episode's return
    minus the round's mean return; ``actor_epochs`` steps per round from round 0) or
    ``filtered_bc`` (online filtered behaviour cloning: the steps of every successful episode so
    far, weight 1)."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    if cfg.mode != "online":
        raise ValueError(f"train_archer_online needs mode 'online', got {cfg.mode!r}")
    out = Path(job.out_dir)
    if job.dataset_id and (found := existing_checkpoint(out, job.dataset_id)) is not None:
        return TrainReport(found, {}, reused=True)
    if not setup.task_ids:
        raise ValueError("online ArCHer needs at least one training task to play")
    learner = ArcherLearner(job.model_path, cfg)
    latest = rounds_dir(out) / LATEST
    buf = buffer_id(job.run_id, job.iteration)
    logged = await setup.episode_log.read(buf)
    saved = load_round(learner, latest)
    if saved is not None and saved.get("dataset_id") != job.dataset_id:
        log.warning(
            "ignoring saved ArCHer round in %s: it belongs to dataset %s", latest, saved.get("dataset_id")
        )
        saved = None
        learner = ArcherLearner(job.model_path, cfg)
    state: dict[str, Any] = saved or {
        "dataset_id": job.dataset_id,
        "next_round": 0,
        "env_steps": 0,
        "episodes": 0,
        "critic_updates": 0,
        "actor_updates": 0,
        "rounds": [],
    }
    start_round = int(state["next_round"])
    buffer: ReplayBuffer = rebuild_buffer(
        logged, cfg.buffer_capacity, transition_config, before_round=start_round
    )
    successes_buffer = rebuild_buffer(
        [r for r in logged if (r.trajectory.reward or 0.0) >= SUCCESS],
        cfg.buffer_capacity,
        transition_config,
        before_round=start_round,
    )
    if start_round:
        log.info(
            "online ArCHer resumes at round %d (%d transitions rebuilt from the log)",
            start_round,
            len(buffer),
        )
    total_steps = (
        cfg.iterations * cfg.critic_epochs + max(0, cfg.iterations - cfg.warmup_iters) * cfg.actor_epochs
    )
    if cfg.optimizer_steps_budget is not None:
        total_steps = min(total_steps, cfg.optimizer_steps_budget)
    started = time.monotonic()
    stop_reason = "rounds"

    def check() -> None:
        if job.should_stop is not None and job.should_stop():
            raise TrainingCancelled(
                f"online ArCHer of dataset {job.dataset_id or '?'} was cancelled in round "
                f"{state['next_round']}"
            )

    def steps_done() -> int:
        return int(state["critic_updates"]) + int(state["actor_updates"])

    for round_index in range(start_round, cfg.iterations):
        if cfg.env_steps_budget is not None and state["env_steps"] >= cfg.env_steps_budget:
            stop_reason = "env_steps_budget"
            break
        if cfg.optimizer_steps_budget is not None and steps_done() >= cfg.optimizer_steps_budget:
            stop_reason = "optimizer_steps_budget"
            break
        if cfg.time_budget_s is not None and time.monotonic() - started >= cfg.time_budget_s:
            stop_reason = "time_budget_s"
            break
        already = [r for r in logged if r.round == round_index]
        if already:  # logged before a crash: the same episodes, never played twice
            records = sorted(already, key=lambda r: r.index)
        else:
            records = await collect_round(
                learner, cfg, setup, round_index, run_id=job.run_id, iteration=job.iteration
            )
            await setup.episode_log.append_round(
                buf, records, expected=sum(1 for r in logged if r.round < round_index)
            )
            logged.extend(records)
        check()
        for record in records:
            buffer.add_episode(record, transition_config)
        env_steps = sum(len(r.trajectory.steps) for r in records)
        successes = sum(1 for r in records if (r.trajectory.reward or 0.0) >= SUCCESS)
        state["env_steps"] += env_steps
        state["episodes"] += len(records)
        critic_losses: list[float] = []
        actor_info: list[dict[str, float]] = []
        if algorithm != "archer":
            for record in records:
                if (record.trajectory.reward or 0.0) >= SUCCESS:
                    successes_buffer.add_episode(record, transition_config)
            data = _baseline_data(algorithm, records, successes_buffer, transition_config)
            for _ in range(cfg.actor_epochs if data else 0):
                if cfg.optimizer_steps_budget is not None and steps_done() >= cfg.optimizer_steps_budget:
                    break
                actor_info.append(
                    learner.weighted_update([learner.draw(data) for _ in range(cfg.grad_accumulation)])
                )
                state["actor_updates"] += 1
                if job.on_step:
                    job.on_step(steps_done(), total_steps, None)
                check()
        items = buffer.items() if algorithm == "archer" else ()
        for _ in range(cfg.critic_epochs if algorithm == "archer" else 0):
            if cfg.optimizer_steps_budget is not None and steps_done() >= cfg.optimizer_steps_budget:
                break
            batches = [learner.draw(items) for _ in range(cfg.grad_accumulation)]
            critic_losses.append(learner.critic_update(batches))
            state["critic_updates"] += 1
            if job.on_step:
                job.on_step(steps_done(), total_steps, critic_losses[-1])
            check()
        if algorithm == "archer" and round_index >= cfg.warmup_iters:
            for _ in range(cfg.actor_epochs):
                if cfg.optimizer_steps_budget is not None and steps_done() >= cfg.optimizer_steps_budget:
                    break
                batches = [learner.draw(items) for _ in range(cfg.grad_accumulation)]
                actor_info.append(learner.actor_update(batches))
                state["actor_updates"] += 1
                if job.on_step:
                    job.on_step(steps_done(), total_steps, critic_losses[-1] if critic_losses else None)
                check()
        summary = {
            "round": round_index,
            "episodes": len(records),
            "env_steps": env_steps,
            "success_rate": round(successes / len(records), 6) if records else None,
            "mean_reward": _mean([float(r.trajectory.reward or 0.0) for r in records]),
            "buffer": len(buffer),
            "critic_updates": len(critic_losses),
            "actor_updates": len(actor_info),
            "td_loss": _mean(critic_losses),
            "kl": _mean([a["kl"] for a in actor_info]),
            "advantage": _mean([a["advantage"] for a in actor_info]),
        }
        state["rounds"] = [*state["rounds"], summary]
        state["next_round"] = round_index + 1
        save_round(learner, latest, state)
        log.info(
            "online ArCHer round %d: %d episodes, %d env steps, success %.3f, buffer %d, "
            "%d critic / %d actor updates (TD %.4f)",
            round_index,
            len(records),
            env_steps,
            summary["success_rate"] or 0.0,
            len(buffer),
            len(critic_losses),
            len(actor_info),
            summary["td_loss"] if summary["td_loss"] is not None else math.nan,
        )
    rounds = state["rounds"]
    metrics: dict[str, Any] = {
        "method": "archer",
        "mode": "online",
        "algorithm": algorithm,
        "actor_objective": cfg.actor_objective,
        "rounds": len(rounds),
        "episodes": state["episodes"],
        "env_steps": state["env_steps"],
        "critic_updates": state["critic_updates"],
        "actor_updates": state["actor_updates"],
        "steps": steps_done(),
        "buffer": len(buffer),
        "buffer_id": buf,
        "stopped_by": stop_reason,
        "stopped_by_time_budget": stop_reason == "time_budget_s",
        "resumed_at_round": start_round or None,
        "td_loss_first": next((r["td_loss"] for r in rounds if r["td_loss"] is not None), None),
        "td_loss_last": next((r["td_loss"] for r in reversed(rounds) if r["td_loss"] is not None), None),
        "kl_last": next((r["kl"] for r in reversed(rounds) if r["kl"] is not None), None),
        "success_by_round": [r["success_rate"] for r in rounds],
        "env_steps_by_round": [r["env_steps"] for r in rounds],
        "seconds": round(time.monotonic() - started, 3),
    }
    learner.actor.config.use_cache = True
    meta = CheckpointMeta(
        iteration=job.iteration,
        dataset_id=job.dataset_id,
        base_model=str(job.model_path),
        config={"method": "archer", **cfg.to_dict()},
        run_id=job.run_id,
        metrics=metrics,
    )
    path = write_checkpoint(ActorWithCritic(learner.actor, learner.critic), learner.tokenizer, out, meta)
    shutil.rmtree(rounds_dir(out), ignore_errors=True)
    log.info(
        "online ArCHer: %d rounds, %d episodes, %d env steps, %d critic / %d actor updates: checkpoint %s",
        len(rounds),
        state["episodes"],
        state["env_steps"],
        state["critic_updates"],
        state["actor_updates"],
        path,
    )
    return TrainReport(path, metrics)


def train_archer_online(
    job: TrainJob,
    cfg: ArcherConfig,
    *,
    env_uri: str,
    task_ids: Sequence[str],
    store_url: str,
    project_id: str | None = None,
    **kwargs: Any,
) -> TrainReport:
    """The training job's entry (a worker thread or a Celery worker): opens the environment by URI
    and the event store by URL, then runs ``train_archer_online_async`` on its own event loop."""
    from core.envs.registry import open_env
    from core.store.factory import open_store

    async def main() -> TrainReport:
        store = await open_store(store_url)
        try:
            setup = OnlineSetup(
                lambda: open_env(env_uri), tuple(task_ids), StoreEpisodeLog(store, project_id)
            )
            return await train_archer_online_async(job, cfg, setup, **kwargs)
        finally:
            await store.engine.dispose()

    return asyncio.run(main())
