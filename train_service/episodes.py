"""Owns playing episodes: the evaluation config (``EvalConfig``) and the BATCHED episode loop
(``play_episodes``: at every turn all live episodes go to the policy in ONE ``sample`` call), one
episode (``play``), and ``shared_passes``. ``train_service.evaluation`` builds the protocol (tasks,
seeds, the recovery set) and the metrics on top; its module docstring describes both. Online
learners (train_service.archer_online) play their rounds through the same loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from core.domain.metrics import EpisodeResult
from core.domain.trajectory import Step, Trajectory
from core.envs.base import Env, valid_actions_of
from core.llm.ports import ActionSpec, Policy, SamplingParams, constrains_tool_calls, sample_turns
from core.llm.prompts import build_prompt, parse_action
from core.llm.tool_grammar import tool_calls_of

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
    workers: processes that play a local model's episodes (``train_service.episode_processes``:
        the same episodes, shard by shard, since each plays as if alone); None (default) = one per
        usable core where the batch is large enough, 1 = in the evaluating process. Never more
        than one under ``shared_passes``.
    constrain_actions: each turn's Action line is sampled among the episode's valid actions (the
        env's ``valid_actions()``; free where it lists none) by constrained decoding
        (docs/constrained-decoding.md); False (default) = free decoding. Recorded in the metrics.
    constrain_tool_calls: in a tool-calling environment (``env.tools``), each turn's Action line is
        a well-formed call of one of its tools with schema-valid arguments, or a message
        (core.llm.tool_grammar), where the policy can (the hf backend); True (default), no effect
        elsewhere. Recorded in the metrics.
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
    constrain_tool_calls: bool = True
    workers: int | None = None

    def __post_init__(self) -> None:
        if self.max_steps < 1 or self.max_tokens < 1:
            raise ValueError("EvalConfig: max_steps and max_tokens must be >= 1")
        if self.recovery_episodes < 0:
            raise ValueError("EvalConfig: recovery_episodes must be >= 0")
        if self.seen_max_tasks is not None and self.seen_max_tasks < 1:
            raise ValueError(f"EvalConfig: seen_max_tasks must be >= 1 or null, got {self.seen_max_tasks}")
        if self.workers is not None and (isinstance(self.workers, bool) or self.workers < 1):
            raise ValueError(f"EvalConfig: workers must be >= 1 or null, got {self.workers}")
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


async def _action_spec(env: Env, cfg: EvalConfig, policy: Policy) -> ActionSpec:
    """What ``env``'s next Action line is constrained to under ``cfg`` (None: free): its valid
    actions (``constrain_actions``), else its tools' calls (``constrain_tool_calls``, where the
    policy can: ``core.llm.ports.constrains_tool_calls``)."""
    listed = await valid_actions_of(env) if cfg.constrain_actions else None
    if listed:
        return listed
    return tool_calls_of(env) if cfg.constrain_tool_calls and constrains_tool_calls(policy) else None


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
            actions = [await _action_spec(e.env, cfg, policy) for e in live]
            completions = await sample_turns(
                policy,
                prompts,
                actions,
                SamplingParams(
                    n=1,
                    temperature=cfg.temperature,
                    max_tokens=cfg.max_tokens,
                    seed=[(e.seed + len(e.steps)) & 0x7FFFFFFF for e in live],
                ),
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
