"""Owns model evaluation: seeded episodes on held-out tasks, the recovery test, and the metrics.

The protocol (after the Agent-R paper; the choices themselves are pure, in ``core.domain.eval_protocol``):

* tasks: the held-out split, capped by a STRATIFIED choice over the environment's strata
  (:func:`task_strata`: TextCraft's crafting depth), never "the first n ids";
* ``episodes_per_task`` episodes per task (default 3), each sampled at ``temperature`` (default 0.7;
  0 = greedy) with its own seed derived from the run's seed, the task and the episode index;
* ``max_steps`` actions per episode, default 100 (the paper's max rounds; a demo may set fewer);
* recovery (Table 3): the STARTING model's failed episodes on the held-out tasks, each truncated at
  a seeded random step (``recovery_episodes`` of them at most), built once
  (``build_recovery_set=True``) and continued by every evaluated model (``recovery=...``), the same
  prefixes for each; the continued episodes are summarised under ``recovery``.

Episodes are BATCHED: at every turn all live episodes go to the policy in ONE ``sample`` call, so a
local model decodes them together and a remote server gets one request per turn, never one
inference engine per task. One model's episode sets are played CONCURRENTLY in that batch: its
held-out episodes, its seen-task episodes (``seen=...``) and its recovery continuations (when the
prefixes are known up front; the starting model builds them from its held-out results, so its
recovery episodes follow in a second batch). The policy keeps its batch-invariant passes by
default (on CPU each prompt runs alone), so every episode is exactly what it is played alone.
``shared_passes = true`` runs each turn's prompts in SHARED, left-padded forward passes instead
(the hf policy's ``batch_invariant`` switched off for the evaluation; still deterministic per
seed, since a turn's batch depends only on earlier results, but tokens can differ in float
rounding). It saves CPU on short episodes but costs more at demo scale, where re-encoding whole
histories dominates and padding every prompt to the turn's longest one costs more than the
per-prompt passes save (bench/evaluation.py side by side; docs/results.md); hence the default.

With ``constrain_actions`` each turn's Action line is sampled among the episode's valid actions
(``core.llm.ports.sample_turns``; an environment that lists none for a state is sampled freely).

An answer without a parseable ``Action:`` is an invalid action (the
environment is not touched; the agent is told so). Metrics come from ``core.domain.metrics``; dead
loops and invalid actions are counted on the model's own actions only (a replayed prefix does not
count).

Playing episodes (``EvalConfig``, ``play_episodes``, ``shared_passes``) lives in
``train_service.episodes`` and is re-exported here. ``revision_lengths(store, run_id)`` reads the
mean revision length per iteration from the store.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any, Protocol

from core.domain.eval_protocol import (
    RecoveryPrefix,
    episode_seed,
    recovery_set,
    recovery_set_id,
    stratified_tasks,
)
from core.domain.metrics import EpisodeResult, summarize
from core.envs.base import Env
from core.llm.ports import Policy
from core.store.ports import EventStore
from core.store.queries import samples as samples_queries
from train_service.episodes import (
    INVALID_ANSWER as INVALID_ANSWER,
)
from train_service.episodes import (
    PAPER_MAX_ROUNDS as PAPER_MAX_ROUNDS,
)
from train_service.episodes import (
    EvalConfig as EvalConfig,
)
from train_service.episodes import (
    PlayedEpisode as PlayedEpisode,
)
from train_service.episodes import (
    Progress as Progress,
)
from train_service.episodes import (
    play as play,
)
from train_service.episodes import (
    play_episodes as play_episodes,
)
from train_service.episodes import (
    shared_passes as shared_passes,
)

log = logging.getLogger(__name__)


def task_strata(env: Env, task_ids: Sequence[str]) -> list[str]:
    """A stratum label per task: ``env.task_stratum(id)`` when the environment has one; for
    TextCraft (a recipe book and ``goal_of``) the goal's crafting depth; else one stratum."""
    stratum = getattr(env, "task_stratum", None)
    if callable(stratum):
        return [str(stratum(t)) for t in task_ids]
    book, goal_of = getattr(env, "book", None), getattr(env, "goal_of", None)
    depth = getattr(book, "depth", None)
    if isinstance(depth, dict) and callable(goal_of):
        return [f"depth {depth[goal_of(t)]}" for t in task_ids]
    return ["all"] * len(task_ids)


def held_out_tasks(env: Env, task_ids: Sequence[str], cap: int | None, stratify: bool = True) -> list[str]:
    """``task_ids`` cut to ``cap``: a stratified choice (default) or the first ``cap``."""
    if not stratify:
        return list(task_ids)[:cap] if cap is not None else list(task_ids)
    return stratified_tasks(task_ids, task_strata(env, task_ids), cap)


def by_task(results: Sequence[EpisodeResult], success_threshold: float) -> dict[str, dict[str, Any]]:
    """``summarize`` per task (the unit of bench/paper.py's intervals and paired tests)."""
    groups: dict[str, list[EpisodeResult]] = {}
    for result in results:
        groups.setdefault(result.task_id, []).append(result)
    return {task: summarize(group, success_threshold=success_threshold) for task, group in groups.items()}


class _InProcess:
    """The default player: ``play`` with ``policy`` in this process."""

    def __init__(self, policy: Policy, env_opener: Callable[[], Env]) -> None:
        self.policy = policy
        self.env_opener = env_opener
        self.model_version = policy.model_version

    async def __call__(
        self,
        task_ids: Sequence[str],
        cfg: EvalConfig,
        *,
        seeds: Sequence[int] | None = None,
        prefixes: Sequence[Sequence[str]] | None = None,
        progress: Progress | None = None,
    ) -> list[EpisodeResult]:
        return await play(
            self.policy, self.env_opener, task_ids, cfg, seeds=seeds, prefixes=prefixes, progress=progress
        )


def _summary(
    model_version: str, task_ids: Sequence[str], results: Sequence[EpisodeResult], cfg: EvalConfig
) -> dict[str, Any]:
    metrics = summarize(results, success_threshold=cfg.success_threshold)
    metrics["by_task"] = by_task(results, cfg.success_threshold)
    metrics["model_version"] = model_version
    metrics["tasks"] = list(task_ids)
    metrics["episodes_per_task"] = cfg.episodes_per_task
    metrics["max_steps"] = cfg.max_steps
    metrics["temperature"] = cfg.temperature
    metrics["constrain_actions"] = cfg.constrain_actions
    metrics["constrain_tool_calls"] = cfg.constrain_tool_calls
    return metrics


class Player(Protocol):
    """Plays a batch of episodes as ``play`` does (``train_service.episode_processes.ProcessPlayer``:
    in worker processes); ``model_version`` names the model once it has played."""

    model_version: str

    async def __call__(
        self,
        task_ids: Sequence[str],
        cfg: EvalConfig,
        *,
        seeds: Sequence[int] | None = None,
        prefixes: Sequence[Sequence[str]] | None = None,
        progress: Progress | None = None,
    ) -> list[EpisodeResult]: ...


async def evaluate(
    policy: Policy | None,
    env_opener: Callable[[], Env],
    task_ids: Sequence[str],
    cfg: EvalConfig,
    *,
    seed: int = 0,
    seen: Sequence[str] = (),
    recovery: Sequence[RecoveryPrefix] = (),
    build_recovery_set: bool = False,
    progress: Progress | None = None,
    player: Player | None = None,
) -> dict[str, Any]:
    """Metrics of ``policy`` on ``task_ids`` (``cfg.episodes_per_task`` seeded episodes each).

    ``player``: plays the episodes instead of ``play(policy, env_opener, ...)`` in this process
    (then ``policy`` may be None): the same episodes, seeds and protocol, e.g. in worker processes.

    ``seen``: the run's searched tasks, evaluated the same way in the same batches and summarised
    under ``seen`` (none: no ``seen`` key).
    ``recovery``: prefixes to continue (the recovery test), summarised under ``recovery``.
    ``build_recovery_set``: this is the STARTING model: the recovery set is built from its own
    failed episodes here (stored under ``recovery_set`` as data) and continued at once.
    All episodes known up front are played concurrently (module docstring).
    """
    if not task_ids:
        raise ValueError("evaluation needs at least one task")
    if player is None:
        if policy is None:
            raise ValueError("evaluation needs a policy or a player")
        player = _InProcess(policy, env_opener)
    if build_recovery_set and recovery:
        raise ValueError("give recovery prefixes or build_recovery_set, not both")
    overlap = sorted(set(task_ids) & set(seen))
    if overlap:
        raise ValueError(f"tasks {overlap[:3]} are both held-out and seen")
    runs = [(task, e) for task in task_ids for e in range(cfg.episodes_per_task)]
    seen_runs = [(task, e) for task in seen for e in range(cfg.episodes_per_task)]
    prefixes = list(recovery)
    k = cfg.recovery_seeds
    expected_recovery = k * (
        len(prefixes) if prefixes else (cfg.recovery_episodes if build_recovery_set else 0)
    )
    state = {"total": len(runs) + len(seen_runs) + expected_recovery, "before": 0}

    def report(done: int, _n: int) -> None:
        if progress:
            progress(state["before"] + done, state["total"])

    # one batch: held-out episodes, seen episodes, then the known recovery continuations
    continued = [(p, c) for p in prefixes for c in range(k)]
    episode_tasks = [task for task, _ in runs + seen_runs] + [p.task_id for p, _ in continued]
    seeds = [episode_seed(seed, task, e) for task, e in runs + seen_runs]
    seeds += [recovery_seed(seed, p, c) for p, c in continued]
    replays: list[Sequence[str]] = [()] * (len(runs) + len(seen_runs)) + [p.actions for p, _ in continued]
    with shared_passes(policy, cfg.shared_passes) if policy is not None else nullcontext():
        results = await player(episode_tasks, cfg, seeds=seeds, prefixes=replays, progress=report)
        held, seen_results = results[: len(runs)], results[len(runs) : len(runs) + len(seen_runs)]
        recovered = results[len(runs) + len(seen_runs) :]
        metrics = _summary(player.model_version, task_ids, held, cfg)
        if build_recovery_set:
            prefixes = recovery_set(
                [(e, r) for (_, e), r in zip(runs, held, strict=True)],
                limit=cfg.recovery_episodes,
                seed=seed,
                success_threshold=cfg.success_threshold,
            )
            metrics["recovery_set"] = [p.to_data() for p in prefixes]
            state["before"] = len(runs) + len(seen_runs)
            state["total"] = state["before"] + k * len(prefixes)
            if prefixes:
                continued = [(p, c) for p in prefixes for c in range(k)]
                recovered = await player(
                    [p.task_id for p, _ in continued],
                    cfg,
                    seeds=[recovery_seed(seed, p, c) for p, c in continued],
                    prefixes=[p.actions for p, _ in continued],
                    progress=report,
                )
    if prefixes:
        metrics["recovery"] = summarize(recovered, success_threshold=cfg.success_threshold)
        metrics["recovery"]["set_id"] = recovery_set_id(prefixes)
        metrics["recovery"]["prefixes"] = len(prefixes)
        metrics["recovery"]["by_task"] = by_task(recovered, cfg.success_threshold)
        metrics["recovery"]["seeds"] = k
    else:
        metrics["recovery"] = summarize([])
    if seen:
        metrics["seen"] = _summary(player.model_version, seen, seen_results, cfg)
        metrics["seen"]["recovery"] = summarize([])
    log.info(
        "evaluated %s on %d tasks x %d episodes: success %.2f, reward %.2f, invalid %.2f, loops %.2f; "
        "recovery %s/%s; seen tasks %d",
        player.model_version, len(task_ids), cfg.episodes_per_task, metrics["success_rate"],
        metrics["avg_reward"], metrics["invalid_action_rate"], metrics["dead_loop_rate"],
        metrics["recovery"]["success_rate"], metrics["recovery"]["episodes"], len(seen),
    )  # fmt: skip
    return metrics


def recovery_seed(seed: int, prefix: RecoveryPrefix, continuation: int) -> int:
    """The sampling seed of continuation ``continuation`` of a recovery prefix (continuation 0 has
    the seed the single continuation always had, so one-seed results stay comparable)."""
    purpose = "recovery" if continuation == 0 else f"recovery:{continuation}"
    return episode_seed(seed, prefix.task_id, prefix.episode, purpose)


def recorded_recovery_set(metrics: dict[str, Any] | None) -> list[RecoveryPrefix] | None:
    """The recovery set stored in the starting model's evaluation metrics, or None when absent."""
    if not metrics or "recovery_set" not in metrics:
        return None
    return [RecoveryPrefix.from_data(item) for item in metrics["recovery_set"]]


# --------------------------------------------------------------------------------------------
# Inputs read from the store
# --------------------------------------------------------------------------------------------


async def revision_lengths(store: EventStore, run_id: str) -> dict[int, float]:
    """Mean ``RevisionMaterialized.revision_length`` per iteration of the run (from the samples model)."""
    return await samples_queries.revision_lengths(store, run_id)
