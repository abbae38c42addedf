"""Owns model evaluation: greedy episodes on held-out tasks, the recovery test, and the metrics.

``evaluate(policy, env_opener, env_uri, task_ids, cfg)`` plays one greedy episode per task. Episodes
are BATCHED: at every turn all live episodes go to the policy in ONE ``sample`` call (temperature 0),
so a local model decodes them together and a remote server gets one request per turn, never one
inference engine per task. An answer without a parseable ``Action:`` is an invalid action (the
environment is not touched; the agent is told so). Metrics come from ``core.domain.metrics``.

Recovery from failed prefixes (``prefixes``): each :class:`FailedPrefix` is a failed trajectory of
the run's STARTING model (a bad path of iteration 0), cut right after its first wrong action (the
critic's transition index). The prefix is replayed in the environment, then the evaluated model
continues greedily; the continued episodes are summarised under ``recovery``.

``failed_prefixes(store, run_id)`` and ``revision_lengths(store, run_id)`` read those inputs from the
event store (pair streams and the samples read model).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.domain.metrics import EpisodeResult, recovery_cut, summarize
from core.domain.trajectory import Step
from core.envs.base import Env
from core.llm.ports import Policy
from core.llm.prompts import build_prompt, parse_action

log = logging.getLogger(__name__)

INVALID_ANSWER = "Invalid answer: reply with 'Thought: ...' and 'Action: <one command>'."

Progress = Callable[[int, int], None]  # (finished episodes, total episodes)


@dataclass(frozen=True)
class EvalConfig:
    """How a model is evaluated.

    max_steps: actions per episode before it is cut (counted from the task's start, prefix included).
    max_tokens: generation budget per turn.
    prompt_budget: prompt size in tokens (when the policy can count them), older turns dropped whole.
    recovery_episodes: failed prefixes continued for the recovery test (0 = no recovery test).
    success_threshold: final reward that counts as a success.
    baseline: also evaluate the run's starting model (once, with the first iteration).
    seen_tasks: also evaluate on the run's SEARCH tasks (seen in training: searched, and their
        good / revised paths trained on), reported apart from the held-out ones, to show whether
        the loop changes behaviour where it has data (held-out goals measure generalisation).
    """

    max_steps: int = 12
    max_tokens: int = 40
    prompt_budget: int | None = 1536
    recovery_episodes: int = 8
    success_threshold: float = 1.0
    baseline: bool = True
    seen_tasks: bool = True

    def __post_init__(self) -> None:
        if self.max_steps < 1 or self.max_tokens < 1:
            raise ValueError("EvalConfig: max_steps and max_tokens must be >= 1")
        if self.recovery_episodes < 0:
            raise ValueError("EvalConfig: recovery_episodes must be >= 0")

    @classmethod
    def from_data(cls, data: dict[str, Any] | None) -> EvalConfig:
        data = dict(data or {})
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"evaluation config: unknown field(s) {unknown}; known: {sorted(known)}")
        return cls(**data)


@dataclass(frozen=True)
class FailedPrefix:
    """A failed trajectory's actions and where it goes wrong (None = unknown: cut halfway)."""

    task_id: str
    actions: tuple[str, ...]
    first_error_index: int | None = None


@dataclass
class _Episode:
    task_id: str
    env: Env
    instruction: str
    task: str = ""
    steps: list[Step] = field(default_factory=list)
    prefix_steps: int = 0
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


async def _start(episode: _Episode, prefix: Sequence[str], max_steps: int) -> None:
    episode.task = await episode.env.reset(episode.task_id)
    for action in prefix:
        result = await episode.env.step(action)
        episode.steps.append(Step("", action, result.observation, result.reward, result.done, result.valid))
        episode.reward, episode.done = result.reward, result.done
        if result.done:
            break
    episode.prefix_steps = len(episode.steps)
    episode.finished = episode.done or len(episode.steps) >= max_steps


async def play(
    policy: Policy,
    env_opener: Callable[[], Env],
    task_ids: Sequence[str],
    cfg: EvalConfig,
    *,
    prefixes: Sequence[Sequence[str]] | None = None,
    progress: Progress | None = None,
) -> list[EpisodeResult]:
    """One greedy episode per task (after replaying ``prefixes[i]`` when given), batched per turn."""
    if prefixes is not None and len(prefixes) != len(task_ids):
        raise ValueError(f"{len(prefixes)} prefixes for {len(task_ids)} tasks")
    episodes: list[_Episode] = []
    try:
        for index, task_id in enumerate(task_ids):
            env = env_opener()
            episode = _Episode(task_id, env, env.instruction)
            episodes.append(episode)
            await _start(episode, prefixes[index] if prefixes else (), cfg.max_steps)
        measure = getattr(policy, "count_tokens", None)
        budget = cfg.prompt_budget if measure is not None else None
        total = len(episodes)
        if progress:
            progress(sum(e.finished for e in episodes), total)
        while live := [e for e in episodes if not e.finished]:
            prompts = [build_prompt(e.instruction, e.task, e.steps, budget, measure or len) for e in live]
            completions = await policy.sample(
                prompts, n=1, temperature=0.0, max_tokens=cfg.max_tokens, seed=0
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
                episode.finished = episode.done or len(episode.steps) >= cfg.max_steps
            if progress:
                progress(sum(e.finished for e in episodes), total)
    finally:
        for episode in episodes:
            await episode.env.close()
    return [e.result() for e in episodes]


async def evaluate(
    policy: Policy,
    env_opener: Callable[[], Env],
    task_ids: Sequence[str],
    cfg: EvalConfig,
    *,
    prefixes: Sequence[FailedPrefix] = (),
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Metrics of ``policy`` on ``task_ids`` plus, when ``prefixes`` are given, the recovery test."""
    if not task_ids:
        raise ValueError("evaluation needs at least one task")
    chosen = [p for p in prefixes if len(p.actions) >= 2][: cfg.recovery_episodes]
    cuts = [list(p.actions[: recovery_cut(len(p.actions), p.first_error_index)]) for p in chosen]
    total = len(task_ids) + len(chosen)

    def main_progress(done: int, _n: int) -> None:
        if progress:
            progress(done, total)

    results = await play(policy, env_opener, task_ids, cfg, progress=main_progress)
    metrics = summarize(results, success_threshold=cfg.success_threshold)
    metrics["model_version"] = policy.model_version
    metrics["tasks"] = list(task_ids)
    if chosen:

        def recovery_progress(done: int, _n: int) -> None:
            if progress:
                progress(len(task_ids) + done, total)

        recovered = await play(
            policy, env_opener, [p.task_id for p in chosen], cfg, prefixes=cuts, progress=recovery_progress
        )
        metrics["recovery"] = summarize(recovered, success_threshold=cfg.success_threshold)
    else:
        metrics["recovery"] = summarize([])
    log.info(
        "evaluated %s on %d tasks: success %.2f, reward %.2f, invalid %.2f, loops %.2f; recovery %s/%s",
        policy.model_version, len(task_ids), metrics["success_rate"], metrics["avg_reward"],
        metrics["invalid_action_rate"], metrics["dead_loop_rate"],
        metrics["recovery"]["success_rate"], metrics["recovery"]["episodes"],
    )  # fmt: skip
    return metrics


# --------------------------------------------------------------------------------------------
# Inputs read from the store
# --------------------------------------------------------------------------------------------


async def failed_prefixes(store: Any, run_id: str, iteration: int = 0, limit: int = 8) -> list[FailedPrefix]:
    """Bad paths of ``iteration`` (default 0: the starting model's) with the critic's first error."""
    from sqlalchemy import select

    from core.domain.events import FirstErrorMarked, PairFound
    from core.domain.ids import pair_stream
    from core.store.tables import pairs

    async with store.engine.connect() as conn:
        rows = (
            await conn.execute(
                select(pairs.c.pair_id)
                .where(pairs.c.run_id == run_id, pairs.c.iteration == iteration, pairs.c.source == "search")
                .order_by(pairs.c.pair_id)
            )
        ).all()
    out: list[FailedPrefix] = []
    for (pair_id,) in rows:
        if len(out) >= limit:
            break
        found: PairFound | None = None
        first_error: int | None = None
        for recorded in await store.read_stream(pair_stream(pair_id)):
            event = recorded.event
            if isinstance(event, PairFound):
                found = event
            elif isinstance(event, FirstErrorMarked):
                first_error = event.transition_index
        if found is None or found.task_id is None or len(found.bad.steps) < 2:
            continue
        out.append(FailedPrefix(found.task_id, tuple(s.action for s in found.bad.steps), first_error))
    return out


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
