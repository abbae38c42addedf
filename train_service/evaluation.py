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
rounding). Measured (bench/evaluation.py, same episodes and seeds side by side): 1.8x less CPU on the
``--quick`` model's short episodes, but 0.6x at demo scale, where re-encoding whole histories of
up to 12 turns dominates and padding every prompt to the turn's longest one costs more than
the per-prompt passes save; hence the default.

With ``constrain_actions`` each turn's Action line is sampled among the episode's valid actions
(``core.llm.ports.sample_turns``; an environment that lists none for a state is sampled freely).

An answer without a parseable ``Action:`` is an invalid action (the
environment is not touched; the agent is told so). Metrics come from ``core.domain.metrics``; dead
loops and invalid actions are counted on the model's own actions only (a replayed prefix does not
count).

``revision_lengths(store, run_id)`` reads the mean revision length per iteration from the store.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from core.domain.eval_protocol import (
    RecoveryPrefix,
    episode_seed,
    recovery_set,
    recovery_set_id,
    stratified_tasks,
)
from core.domain.metrics import EpisodeResult, summarize
from core.domain.trajectory import Step, Trajectory
from core.envs.base import Env, valid_actions_of
from core.llm.ports import Policy, sample_turns
from core.llm.prompts import build_prompt, parse_action

log = logging.getLogger(__name__)

INVALID_ANSWER = "Invalid answer: reply with 'Thought: ...' and 'Action: <one command>'."

Progress = Callable[[int, int], None]  # (finished episodes, total episodes)

PAPER_MAX_ROUNDS = 100


@dataclass(frozen=True)
class EvalConfig:
    """How a model is evaluated.

    max_steps: the model's own actions per episode before it is cut; a recovery continuation gets
        ``max_steps`` actions AFTER its replayed prefix (the prefix does not use the budget up);
        default 100, the paper's max rounds.
    max_tokens: generation budget per turn.
    prompt_budget: prompt size in tokens (when the policy can count them), older turns dropped whole.
    episodes_per_task: seeded episodes per task (and per seen task).
    temperature: sampling temperature of evaluation episodes (0 = greedy: then every episode of a
        task is the same in a deterministic environment, so use ``episodes_per_task = 1``).
    recovery_episodes: at most this many failed, truncated episodes of the starting model are
        continued for the recovery test (0 = no recovery test).
    recovery_seeds: seeded continuations of each recovery prefix (the rates are over prefixes x
        seeds); continuation 0 keeps the seed a single continuation always had.
    success_threshold: final reward that counts as a success.
    baseline: also evaluate the run's starting model (once, with the first iteration); the
        starting model's held-out episodes are played anyway when ``recovery_episodes > 0``, since
        the recovery set is built from them.
    seen_tasks: also evaluate on the run's SEARCH tasks (seen in training: searched, and their
        good / revised paths trained on), reported apart from the held-out ones, to show whether
        the loop changes behaviour where it has data (held-out goals measure generalisation).
    seen_max_tasks: evaluate at most this many of the searched tasks as seen ones (chosen like
        the held-out ones); None = all of them.
    stratify: cap the held-out split with :func:`stratified_tasks` (False: its first ids).
    shared_passes: run each turn's prompts in shared forward passes of a local policy (module
        docstring: deterministic per seed; cheaper only for short prompts); False (default) =
        batch-invariant passes, every episode exactly as if played alone.
    constrain_actions: each turn's Action line is sampled among the episode's valid actions (the
        env's ``valid_actions()``; free where it lists none) by constrained decoding
        (docs/constrained-decoding.md); False (default) = free decoding. Recorded in the metrics.
    """

    max_steps: int = PAPER_MAX_ROUNDS
    max_tokens: int = 40
    prompt_budget: int | None = 1536
    episodes_per_task: int = 3
    temperature: float = 0.7
    recovery_episodes: int = 8
    recovery_seeds: int = 3
    success_threshold: float = 1.0
    baseline: bool = True
    seen_tasks: bool = True
    seen_max_tasks: int | None = None
    stratify: bool = True
    shared_passes: bool = False
    constrain_actions: bool = False

    def __post_init__(self) -> None:
        if self.max_steps < 1 or self.max_tokens < 1:
            raise ValueError("EvalConfig: max_steps and max_tokens must be >= 1")
        if self.recovery_episodes < 0:
            raise ValueError("EvalConfig: recovery_episodes must be >= 0")
        if self.seen_max_tasks is not None and self.seen_max_tasks < 1:
            raise ValueError(f"EvalConfig: seen_max_tasks must be >= 1 or null, got {self.seen_max_tasks}")
        if self.recovery_seeds < 1:
            raise ValueError(f"EvalConfig: recovery_seeds must be >= 1, got {self.recovery_seeds}")
        if self.episodes_per_task < 1:
            raise ValueError(f"EvalConfig: episodes_per_task must be >= 1, got {self.episodes_per_task}")
        if not 0.0 <= self.temperature <= 5.0:
            raise ValueError(f"EvalConfig: temperature must be in [0, 5], got {self.temperature}")

    @classmethod
    def from_data(cls, data: dict[str, Any] | None) -> EvalConfig:
        data = dict(data or {})
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"evaluation config: unknown field(s) {unknown}; known: {sorted(known)}")
        return cls(**data)


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


@dataclass
class PlayedEpisode:
    """One episode as played: its environment, steps and outcome (``play_episodes``)."""

    task_id: str
    env: Env
    instruction: str
    seed: int
    task: str = ""
    steps: list[Step] = field(default_factory=list)
    prefix_steps: int = 0
    limit: int = 0  # the episode ends at this many steps: the prefix + max_steps of the model's own
    reward: float = 0.0
    done: bool = False
    finished: bool = False

    def result(self) -> EpisodeResult:
        return EpisodeResult(
            task_id=self.task_id,
            actions=tuple(s.action for s in self.steps),
            valid=tuple(s.valid for s in self.steps),
            reward=max(0.0, min(1.0, self.reward)),
            done=self.done,
            prefix_steps=self.prefix_steps,
        )

    def trajectory(self) -> Trajectory:
        """The episode as a trajectory (its final reward clipped to [0, 1])."""
        return Trajectory(
            task=self.task,
            instruction=self.instruction,
            steps=tuple(self.steps),
            reward=max(0.0, min(1.0, self.reward)),
        )


async def _start(episode: PlayedEpisode, prefix: Sequence[str], max_steps: int) -> None:
    episode.task = await episode.env.reset(episode.task_id)
    for action in prefix:
        if not action:  # the source episode's answer had no parseable action: replayed as such
            episode.steps.append(Step("", "", INVALID_ANSWER, episode.reward, False, False))
            continue
        result = await episode.env.step(action)
        episode.steps.append(Step("", action, result.observation, result.reward, result.done, result.valid))
        episode.reward, episode.done = result.reward, result.done
        if result.done:
            break
    episode.prefix_steps = len(episode.steps)
    episode.limit = episode.prefix_steps + max_steps  # the budget counts the model's own actions
    episode.finished = episode.done or len(episode.steps) >= episode.limit


async def play(
    policy: Policy,
    env_opener: Callable[[], Env],
    task_ids: Sequence[str],
    cfg: EvalConfig,
    *,
    seeds: Sequence[int] | None = None,
    prefixes: Sequence[Sequence[str]] | None = None,
    progress: Progress | None = None,
) -> list[EpisodeResult]:
    """One episode per entry of ``task_ids`` (after replaying ``prefixes[i]`` when given), batched
    per turn; episode ``i`` samples turn ``k`` with seed ``seeds[i] + k`` at ``cfg.temperature``."""
    played = await play_episodes(
        policy, env_opener, task_ids, cfg, seeds=seeds, prefixes=prefixes, progress=progress
    )
    return [e.result() for e in played]


async def play_episodes(
    policy: Policy,
    env_opener: Callable[[], Env],
    task_ids: Sequence[str],
    cfg: EvalConfig,
    *,
    seeds: Sequence[int] | None = None,
    prefixes: Sequence[Sequence[str]] | None = None,
    progress: Progress | None = None,
) -> list[PlayedEpisode]:
    """``play``, returning the whole episodes (steps with thoughts and observations): what an
    online learner records and learns from."""
    if prefixes is not None and len(prefixes) != len(task_ids):
        raise ValueError(f"{len(prefixes)} prefixes for {len(task_ids)} tasks")
    if seeds is not None and len(seeds) != len(task_ids):
        raise ValueError(f"{len(seeds)} seeds for {len(task_ids)} episodes")
    episodes: list[PlayedEpisode] = []
    try:
        for index, task_id in enumerate(task_ids):
            env = env_opener()
            episode = PlayedEpisode(
                task_id, env, env.instruction, seeds[index] if seeds is not None else index
            )
            episodes.append(episode)
            await _start(episode, prefixes[index] if prefixes else (), cfg.max_steps)
        measure = getattr(policy, "count_tokens", None)
        budget = cfg.prompt_budget if measure is not None else None
        total = len(episodes)
        if progress:
            progress(sum(e.finished for e in episodes), total)
        while live := [e for e in episodes if not e.finished]:
            prompts = [build_prompt(e.instruction, e.task, e.steps, budget, measure or len) for e in live]
            actions = [await valid_actions_of(e.env) for e in live] if cfg.constrain_actions else None
            completions = await sample_turns(
                policy,
                prompts,
                actions,
                n=1,
                temperature=cfg.temperature,
                max_tokens=cfg.max_tokens,
                seed=[(e.seed + len(e.steps)) & 0x7FFFFFFF for e in live],
            )
            for episode, (completion, *_rest) in zip(live, completions, strict=True):
                parsed = parse_action(completion.text)
                if parsed is None:
                    episode.steps.append(
                        Step(completion.text.strip()[:200], "", INVALID_ANSWER, episode.reward, False, False)
                    )
                else:
                    result = await episode.env.step(parsed.action)
                    episode.steps.append(
                        Step(
                            parsed.thought,
                            parsed.normalized,
                            result.observation,
                            result.reward,
                            result.done,
                            result.valid,
                        )
                    )
                    episode.reward, episode.done = result.reward, result.done
                episode.finished = episode.done or len(episode.steps) >= episode.limit
            if progress:
                progress(sum(e.finished for e in episodes), total)
    finally:
        for episode in episodes:
            await episode.env.close()
    return episodes


@contextmanager
def shared_passes(policy: Policy, enabled: bool) -> Iterator[None]:
    """While inside, a policy with a ``batch_invariant`` switch (the local ``hf`` backend) runs a
    call's prompts in shared forward passes when ``enabled`` (restored on exit); other policies
    (an OpenAI-compatible server, a wrapper without the switch) are left as they are."""
    if not enabled or not hasattr(policy, "batch_invariant"):
        yield
        return
    before = getattr(policy, "batch_invariant")  # noqa: B009 (a duck-typed switch, not on the port)
    setattr(policy, "batch_invariant", False)  # noqa: B010
    try:
        yield
    finally:
        setattr(policy, "batch_invariant", before)  # noqa: B010


def by_task(results: Sequence[EpisodeResult], success_threshold: float) -> dict[str, dict[str, Any]]:
    """``summarize`` per task (the unit of bench/paper.py's intervals and paired tests)."""
    groups: dict[str, list[EpisodeResult]] = {}
    for result in results:
        groups.setdefault(result.task_id, []).append(result)
    return {task: summarize(group, success_threshold=success_threshold) for task, group in groups.items()}


def _summary(
    policy: Policy, task_ids: Sequence[str], results: Sequence[EpisodeResult], cfg: EvalConfig
) -> dict[str, Any]:
    metrics = summarize(results, success_threshold=cfg.success_threshold)
    metrics["by_task"] = by_task(results, cfg.success_threshold)
    metrics["model_version"] = policy.model_version
    metrics["tasks"] = list(task_ids)
    metrics["episodes_per_task"] = cfg.episodes_per_task
    metrics["max_steps"] = cfg.max_steps
    metrics["temperature"] = cfg.temperature
    metrics["constrain_actions"] = cfg.constrain_actions
    return metrics


async def evaluate(
    policy: Policy,
    env_opener: Callable[[], Env],
    task_ids: Sequence[str],
    cfg: EvalConfig,
    *,
    seed: int = 0,
    seen: Sequence[str] = (),
    recovery: Sequence[RecoveryPrefix] = (),
    build_recovery_set: bool = False,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Metrics of ``policy`` on ``task_ids`` (``cfg.episodes_per_task`` seeded episodes each).

    ``seen``: the run's searched tasks, evaluated the same way in the same batches and summarised
    under ``seen`` (none: no ``seen`` key).
    ``recovery``: prefixes to continue (the recovery test), summarised under ``recovery``.
    ``build_recovery_set``: this is the STARTING model: the recovery set is built from its own
    failed episodes here (stored under ``recovery_set`` as data) and continued at once.
    All episodes known up front are played concurrently (module docstring).
    """
    if not task_ids:
        raise ValueError("evaluation needs at least one task")
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
    with shared_passes(policy, cfg.shared_passes):
        results = await play(
            policy, env_opener, episode_tasks, cfg, seeds=seeds, prefixes=replays, progress=report
        )
        held, seen_results = results[: len(runs)], results[len(runs) : len(runs) + len(seen_runs)]
        recovered = results[len(runs) + len(seen_runs) :]
        metrics = _summary(policy, task_ids, held, cfg)
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
                recovered = await play(
                    policy,
                    env_opener,
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
        metrics["seen"] = _summary(policy, seen, seen_results, cfg)
        metrics["seen"]["recovery"] = summarize([])
    log.info(
        "evaluated %s on %d tasks x %d episodes: success %.2f, reward %.2f, invalid %.2f, loops %.2f; "
        "recovery %s/%s; seen tasks %d",
        policy.model_version, len(task_ids), cfg.episodes_per_task, metrics["success_rate"],
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


async def revision_lengths(store: Any, run_id: str) -> dict[int, float]:
    """Mean ``RevisionMaterialized.revision_length`` per iteration of the run (from the samples model)."""
    from sqlalchemy import func, select

    from core.store.tables import samples

    async with store.engine.connect() as conn:
        rows = (
            await conn.execute(
                select(samples.c.iteration, func.avg(samples.c.revision_length))
                .where(samples.c.run_id == run_id, samples.c.kind == "revision")
                .group_by(samples.c.iteration)
            )
        ).all()
    return {int(it): float(avg) for it, avg in rows if avg is not None}
