"""Owns the ``replay`` critic strategy: a critic that checks its answer. The bad path is replayed in
its environment from the task's reset, continued from each probed prefix by a continuation policy,
and the decisive step (the action after which the continuations stop succeeding) is found by the
binary search of ``core.domain.decisive_step`` within a budget of continuations.

Continuation policies (``critic.replay_policy``):

- ``expert`` (default): the environment's own expert (``core.envs.experts``: the TextCraft solver
  from the current inventory; tau2's remaining gold actions of the task). Deterministic, so one
  continuation per probe.
- ``model``: the iteration's actor (or the trace's critic model), ``critic.replay_m`` sampled
  continuations per probe, played by the batched episode loop the evaluation uses
  (``train_service.episodes.play_episodes``, which replays the prefix and batches the continuations'
  turns), at ``critic.replay_temperature``.

Every probe comes back as evidence (``Critique.probes``; the critic worker appends each as a
``ReplayProbed`` event: prefix length, policy, m, successes, the continuations' actions and rewards),
so a verdict is auditable. Where the path cannot be checked the critique says why by name
(``Critique.unverified``) and names no step: no environment or task named, an environment that
cannot reset to the task, one that declares itself non-deterministic (``deterministic = False``), a
replay whose observations differ from the recorded ones, no expert for ``expert``, a continuation
policy that does not solve the task from the start. A failed trace's decisive verdict becomes a pair
in the critic worker (``CriticHandlers._replay_pair``: a recovering continuation after the decisive
step makes a revision sample, else an alternative before it a preference pair) and the splice makes
the sample.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from core.domain.critic import transition_index
from core.domain.decisive_step import DecisiveStepSearch, Probe, ReplayVerdict, unverifiable_verdict
from core.domain.events import CriticStrategyName, StepVerdict
from core.domain.trajectory import Step, Trajectory
from core.envs.base import Env, EnvError
from core.envs.tau2 import tool_step
from core.llm.ports import Policy
from critic_service.strategies.base import ActorUse, CriticConfigError, CriticOptions, Critique, TraceUse

SUCCESS = 1.0  # a continuation succeeds when its final reward reaches this


class ReplayImpossible(Exception):
    """The path cannot be replayed (the message is the named reason)."""


@dataclass(frozen=True)
class Continuation:
    actions: tuple[str, ...]
    reward: float
    steps: tuple[Step, ...] = ()  # the continuation's steps (observations included), for the data


@dataclass(frozen=True)
class ProbeEvidence:
    """What one probe saw: the policy and each continuation (``Probe.detail``)."""

    policy: str
    continuations: tuple[Continuation, ...] = field(default_factory=tuple)


def _open_env(uri: str) -> Env:
    from core.envs.registry import open_env

    return open_env(uri)


def _same(recorded: str, replayed: str) -> bool:
    return " ".join(recorded.split()) == " ".join(replayed.split())


class Replayer:
    """Replays prefixes of one path in fresh environments and continues them (module docstring)."""

    def __init__(
        self,
        env_uri: str,
        task_id: str,
        path: Trajectory,
        env_opener: Callable[[str], Env] = _open_env,
        check_observations: bool = True,
        cache: dict[tuple[str, str, tuple[str, ...]], Probe] | None = None,
    ) -> None:
        self.env_uri, self.task_id, self.path = env_uri, task_id, path
        self.actions = [step.action for step in path.steps]
        self.opener = env_opener
        self.check_observations = check_observations
        # expert probes by (environment, task, replayed actions): the expert is deterministic, so
        # another path with the same prefix gets the same answer (a bench shares one cache; the
        # continuations are still counted where the search spends them)
        self.cache = cache

    async def replayed(self, prefix: int) -> tuple[Env, bool, float]:
        """A fresh environment after the first ``prefix`` actions: (env, done, reward so far)."""
        try:
            env = self.opener(self.env_uri)
        except EnvError as exc:
            raise ReplayImpossible(f"environment {self.env_uri!r} cannot be opened: {exc}") from exc
        if getattr(env, "deterministic", True) is False:
            await env.close()
            raise ReplayImpossible(f"environment {self.env_uri!r} declares itself non-deterministic")
        try:
            await env.reset(self.task_id)
        except EnvError as exc:
            await env.close()
            raise ReplayImpossible(
                f"environment {self.env_uri!r} cannot reset to task {self.task_id!r}: {exc}"
            ) from exc
        done, reward = False, 0.0
        for index, action in enumerate(self.actions[:prefix]):
            if done:
                break
            result = await env.step(action)
            recorded = self.path.steps[index].observation
            if self.check_observations and recorded.strip() and not _same(recorded, result.observation):
                await env.close()
                raise ReplayImpossible(
                    f"the replay in {self.env_uri!r} diverged at step {index} ({action!r}): recorded "
                    f"{recorded[:80]!r}, replayed {result.observation[:80]!r}"
                )
            done, reward = result.done, result.reward
        return env, done, reward

    async def expert_probe(self, prefix: int) -> Probe:
        """``V(prefix)`` under the environment's expert (one deterministic continuation)."""
        from core.envs.experts import expert_name, expert_rest

        key = (self.env_uri, self.task_id, tuple(self.actions[:prefix]))
        if self.cache is not None and key in self.cache:
            return self.cache[key]
        env, done, reward = await self.replayed(prefix)
        try:
            name = expert_name(env)
            if name is None:
                raise ReplayImpossible(f"environment {self.env_uri!r} has no expert to continue with")
            steps: list[Step] = []
            if not done:
                for action in expert_rest(env, self.task_id, self.actions[:prefix]):
                    result = await env.step(action)
                    # a tool-calling environment's turn stays a native tool step (tau2: its call and result)
                    steps.append(tool_step("", result, action))
                    reward = result.reward
                    if result.done:
                        break
        finally:
            await env.close()
        continuation = Continuation(tuple(s.action for s in steps), reward, tuple(steps))
        evidence = ProbeEvidence(name, (continuation,))
        probe = Probe(prefix, int(reward >= SUCCESS), 1, 0 if done else 1, evidence)
        if self.cache is not None:
            self.cache[key] = probe
        return probe

    async def model_probe(
        self, prefix: int, policy: Policy, m: int, temperature: float, max_steps: int, seed: int
    ) -> Probe:
        """``V(prefix)`` under ``policy``: ``m`` sampled continuations, their turns batched."""
        from train_service.episodes import EvalConfig, play_episodes

        env, done, reward = await self.replayed(prefix)  # checks the replay once
        await env.close()
        name = getattr(policy, "model_version", "") or "model"
        if done:
            return Probe(prefix, int(reward >= SUCCESS), 1, 0, ProbeEvidence(name))
        cfg = EvalConfig(max_steps=max_steps, temperature=temperature)
        played = await play_episodes(
            policy,
            lambda: self.opener(self.env_uri),
            [self.task_id] * m,
            cfg,
            seeds=[seed + 1000 * prefix + i for i in range(m)],
            prefixes=[self.actions[:prefix]] * m,
        )
        continuations = tuple(
            Continuation(
                tuple(s.action for s in e.steps[e.prefix_steps :]),
                max(0.0, min(1.0, e.reward)),
                tuple(e.steps[e.prefix_steps :]),
            )
            for e in played
        )
        successes = sum(c.reward >= SUCCESS for c in continuations)
        return Probe(prefix, successes, m, m, ProbeEvidence(name, continuations))


async def replay_verdict(
    replayer: Replayer,
    *,
    start: int,
    policy_kind: str,
    policy: Policy | None,
    m: int,
    budget: int,
    theta: float,
    temperature: float = 0.7,
    max_steps: int = 30,
    seed: int = 0,
) -> ReplayVerdict:
    """The decisive-step search on ``replayer``'s path with the named continuation policy."""
    expert = policy_kind == "expert"
    if not expert and policy is None:
        return unverifiable_verdict("the model continuation policy needs a model (none was given)")
    search = DecisiveStepSearch(
        len(replayer.actions), start, 1 if expert else m, budget, theta, confirm=not expert
    )
    try:
        while (prefix := search.next_prefix()) is not None:
            if expert:
                probe = await replayer.expert_probe(prefix)
            else:
                assert policy is not None
                probe = await replayer.model_probe(prefix, policy, m, temperature, max_steps, seed)
            search.record(probe)
    except ReplayImpossible as exc:
        verdict = unverifiable_verdict(str(exc))
        return ReplayVerdict(verdict.status, None, verdict.reason, tuple(search.probes), search.spent)
    return search.verdict()


def replay_critique(verdict: ReplayVerdict, n_steps: int, shared_steps: int) -> Critique:
    """The ``Critique`` of a verdict: t' = the decisive step (steps before it judged good by the
    replay), or no step with ``unverified`` naming why."""
    if verdict.status != "decisive" or verdict.decisive_step is None:
        return Critique(
            "replay", (), n_steps - 1, fallback=True, probes=verdict.probes, unverified=verdict.reason
        )
    t = verdict.decisive_step
    verdicts = tuple(
        StepVerdict(i, "good" if i < t else "bad", method="replay", reason="" if i < t else verdict.reason)
        for i in range(shared_steps, t + 1)
    )
    return Critique(
        "replay",
        verdicts,
        transition_index(list(verdicts), n_steps, shared_steps),
        probes=verdict.probes,
    )


@dataclass(frozen=True)
class ReplayStrategy:
    name: CriticStrategyName = "replay"
    needs_policy: bool = False  # the expert continues without a model; replay_policy model asks for one
    on_traces: TraceUse = "as-set"

    def actor_use(self, options: CriticOptions) -> ActorUse:
        return "required" if options.replay_policy == "model" else "none"

    needs_environment: bool = True

    async def judge(
        self, options: CriticOptions, path: Trajectory, shared_steps: int, policy: Policy | None
    ) -> Critique:
        raise CriticConfigError(
            "the replay strategy needs the path's environment and task (critique(..., env_uri=, task_id=))"
        )

    async def judge_in(
        self,
        options: CriticOptions,
        path: Trajectory,
        shared_steps: int,
        policy: Policy | None,
        env_uri: str | None,
        task_id: str | None,
        env_opener: Callable[[str], Env] | None = None,
    ) -> Critique:
        n_steps = len(path.steps)
        if not env_uri or task_id is None:
            verdict = unverifiable_verdict(
                "no environment: the path names no environment and task to replay in"
            )
            return replay_critique(verdict, n_steps, shared_steps)
        replayer = Replayer(env_uri, task_id, path, env_opener or _open_env)
        verdict = await replay_verdict(
            replayer,
            start=shared_steps,
            policy_kind=getattr(options, "replay_policy", "expert"),
            policy=policy,
            m=int(getattr(options, "replay_m", 4)),
            budget=int(getattr(options, "replay_budget", 16)),
            theta=float(getattr(options, "replay_theta", 0.5)),
            temperature=float(getattr(options, "replay_temperature", 0.7)),
        )
        return replay_critique(verdict, n_steps, shared_steps)


STRATEGY = ReplayStrategy()


def continuation_of(verdict: ReplayVerdict, prefix: int) -> Sequence[Continuation]:
    """The successful continuations the verdict's probes ran after ``prefix`` actions."""
    out = []
    for probe in verdict.probes:
        if probe.prefix == prefix and isinstance(probe.detail, ProbeEvidence):
            out += [c for c in probe.detail.continuations if c.reward >= SUCCESS]
    return out
