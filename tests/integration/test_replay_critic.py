"""The ``replay`` critic strategy on real environments: the bad path replayed from the task's reset,
continued by the environment's expert (TextCraft's solver, tau2's gold actions) or by a policy, the
decisive step found by binary search, every probe recorded as a ``ReplayProbed`` event by the critic
worker, and a path it cannot check named as such (no environment, a replay that diverges, no
expert, a policy that cannot solve the task)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from core.domain.config import RunConfig
from core.domain.events import (
    FirstErrorMarked,
    IterationStarted,
    Metadata,
    NewEvent,
    PairFound,
    ReplayProbed,
    RevisionRejected,
    RunRequested,
)
from core.domain.ids import new_id, pair_stream, run_stream
from core.domain.trajectory import Step, Trajectory
from core.envs.registry import open_env
from core.envs.textcraft import TextCraftEnv
from core.envs.textcraft.solver import solve
from core.llm.ports import Policy
from critic_service.critic import CriticConfig, CriticConfigError, critique


async def _play(env_uri: str, task_id: str, actions: Sequence[str]) -> Trajectory:
    env = open_env(env_uri)
    task = await env.reset(task_id)
    steps = []
    for action in actions:
        result = await env.step(action)
        steps.append(
            Step(f"I do {action}", action, result.observation, result.reward, result.done, result.valid)
        )
        if result.done:
            break
    await env.close()
    return Trajectory(task, env.instruction, tuple(steps), reward=steps[-1].reward)


def _textcraft_task() -> tuple[str, list[str]]:
    env = TextCraftEnv()
    task = next(t for t in env.task_ids("test") if len(solve(env.goal_of(t))) >= 4)
    return task, solve(env.goal_of(task))


async def test_the_expert_replay_finds_a_wasted_step_under_a_tight_step_limit() -> None:
    task, gold = _textcraft_task()
    uri = f"textcraft?max_steps={len(gold)}"
    bad = await _play(uri, task, [gold[0], gold[1], "inventory", *gold[2:]])
    assert bad.reward == 0.0
    config = CriticConfig.from_data({"strategy": "replay"})
    result = await critique(config, bad, 0, env_uri=uri, task_id=task)
    assert result.strategy == "replay" and result.transition_index == 2 and result.unverified is None
    assert [(v.step_index, v.label, v.method) for v in result.verdicts] == [
        (0, "good", "replay"), (1, "good", "replay"), (2, "bad", "replay"),
    ]  # fmt: skip
    assert "decisive step 2" in result.verdicts[-1].reason
    values = {p.prefix: p.successes for p in result.probes}
    assert values[2] == 1 and values[3] == 0 and values[0] == 1
    assert sum(p.spent for p in result.probes) <= config.replay_budget
    solver_run = next(p for p in result.probes if p.prefix == 2).detail
    assert solver_run.policy == "textcraft-solver" and solver_run.continuations[0].reward == 1.0
    # a search pair is judged from its divergence on
    from_divergence = await critique(config, bad, 1, env_uri=uri, task_id=task)
    assert from_divergence.transition_index == 2 and min(p.prefix for p in from_divergence.probes) == 1


async def test_what_cannot_be_checked_is_named_never_guessed() -> None:
    task, gold = _textcraft_task()
    uri = f"textcraft?max_steps={len(gold)}"
    bad = await _play(uri, task, [gold[0], "inventory", *gold[1:]])
    config = CriticConfig.from_data({"strategy": "replay"})
    nowhere = await critique(config, bad, 0)
    assert nowhere.unverified is not None and nowhere.unverified.startswith("unverifiable: no environment")
    assert nowhere.verdicts == () and nowhere.probes == ()
    edited = replace(bad, steps=(replace(bad.steps[0], observation="Got 99 diamonds"), *bad.steps[1:]))
    diverged = await critique(config, edited, 0, env_uri=uri, task_id=task)
    assert diverged.unverified is not None and "diverged at step 0" in diverged.unverified
    unknown = await critique(config, bad, 0, env_uri=uri, task_id="goal:no_such_item")
    assert unknown.unverified is not None and "cannot reset to task" in unknown.unverified
    # TextCraft served AgentGym-style has no expert here
    agentgym = await critique(config, bad, 0, env_uri=f"{uri}&rules=agentgym", task_id=task)
    assert agentgym.unverified is not None
    with pytest.raises(CriticConfigError, match="replay_policy"):
        CriticConfig.from_data({"strategy": "replay", "replay_policy": "oracle"})
    with pytest.raises(CriticConfigError, match="replay_budget"):
        CriticConfig.from_data(
            {"strategy": "replay", "replay_policy": "model", "replay_m": 8, "replay_budget": 4}
        )


async def test_model_continuations_batch_through_the_episode_loop() -> None:
    """replay_policy model: sampled continuations from each probed prefix (here the noisy expert
    with no mistakes: it finishes every prefix the step limit still allows)."""
    from search_service.noisy_expert import NoisyExpertPolicy

    task, gold = _textcraft_task()
    uri = f"textcraft?max_steps={len(gold)}"
    bad = await _play(uri, task, [gold[0], "inventory", *gold[1:]])
    config = CriticConfig.from_data(
        {"strategy": "replay", "replay_policy": "model", "replay_m": 2, "replay_budget": 24}
    )
    result = await critique(config, bad, 0, NoisyExpertPolicy(mistake_rate=0.0), env_uri=uri, task_id=task)
    assert result.transition_index == 1 and result.unverified is None
    assert all(p.m == 2 for p in result.probes if p.spent)
    at_one = [p for p in result.probes if p.prefix == 1]
    assert at_one and all(p.successes == 2 for p in at_one)  # confirmed: looked at twice
    assert len(at_one) == 2 and at_one[0].detail.continuations[0].actions == tuple(gold[1:])
    hopeless = await critique(
        config, bad, 0, NoisyExpertPolicy(mistake_rate=1.0, seed=3), env_uri=uri, task_id=task
    )
    assert hopeless.unverified is not None and "succeeds after prefix 0 in 0 of" in hopeless.unverified


async def test_tau2_gold_continuations_find_a_premature_end() -> None:
    pytest.importorskip("tau2")
    from core.envs.tau2 import Tau2Env

    env = Tau2Env("retail")
    task = next(t for t in env.task_ids("all") if len(env.gold_actions(t)) >= 4)
    gold = env.gold_actions(task)
    bad = await _play("tau2:retail", task, [*gold[:2], gold[-1]])  # the closing message too early
    assert bad.reward == 0.0 and len(bad.steps) == 3
    result = await critique(CriticConfig(strategy="replay"), bad, 0, env_uri="tau2:retail", task_id=task)
    assert result.transition_index == 2 and result.unverified is None
    assert next(p for p in result.probes if p.prefix == 0).detail.policy == "tau2-gold"
    assert next(p for p in result.probes if p.prefix == 3).spent == 0  # the episode was over


async def test_the_critic_worker_records_every_probe_as_evidence(pg_url: str) -> None:
    from core.llm.policy_cache import PolicyCache
    from core.runtime.settings import Settings
    from core.store.factory import open_store
    from critic_service.service import CriticHandlers

    task, gold = _textcraft_task()
    uri = f"textcraft?max_steps={len(gold)}"
    bad = await _play(uri, task, [gold[0], gold[1], "inventory", *gold[2:]])
    good = await _play(uri, task, gold)
    store = await open_store(pg_url, create_tables=True)
    try:
        run_id, project = new_id(), new_id()
        meta = Metadata(project_id=project)
        config = RunConfig(env=uri, critic={"strategy": "replay"})
        pair = PairFound(
            new_id(), "search", task, bad, good, 1, run_id=run_id, iteration=0, env_uri=uri, task_id=task
        )
        unknown = PairFound(new_id(), "search", task, bad, good, 1, run_id=run_id, iteration=0, env_uri=uri,
                            task_id="goal:no_such_item")  # fmt: skip
        await store.append(
            [
                NewEvent(run_stream(run_id), RunRequested(run_id, project, config.to_data()), meta),
                NewEvent(run_stream(run_id), IterationStarted(run_id, 0, "tiny", 1.0, ()), meta),
                NewEvent(pair_stream(pair.pair_id), pair, meta),
                NewEvent(pair_stream(unknown.pair_id), unknown, meta),
            ]
        )

        def no_model(ref: str) -> Policy:
            raise AssertionError(f"the expert replay opened a model: {ref}")

        handlers = CriticHandlers(Settings(), store, PolicyCache(no_model))  # type: ignore[call-arg]
        ids = []
        for found in (pair, unknown):
            stream = await store.read_stream(pair_stream(found.pair_id))
            (recorded,) = [r for r in stream if isinstance(r.event, PairFound)]
            result = await handlers.on_pair_found(recorded)
            again = await handlers.on_pair_found(recorded)  # a redelivered message: the same event ids
            assert [e.event_id for e in again.events] == [e.event_id for e in result.events]
            ids += [e.event_id for e in result.events]
            await store.append(result.events)
        assert len(set(ids)) == len(ids)
        events = [r.event for r in await store.read_stream(pair_stream(pair.pair_id))]
        probes = [e for e in events if isinstance(e, ReplayProbed)]
        (marked,) = [e for e in events if isinstance(e, FirstErrorMarked)]
        assert (marked.strategy, marked.transition_index, marked.oracle_index) == ("replay", 2, 2)
        assert [p.prefix_steps for p in probes][:2] == [1, len(bad.steps)]  # the divergence, then the end
        assert {p.policy for p in probes} == {"textcraft-solver"} and all(p.m == 1 for p in probes)
        at = {p.prefix_steps: p for p in probes}
        assert at[2].successes == 1 and at[3].successes == 0 and at[2].rewards == (1.0,)
        assert at[2].continuations == (tuple(gold[2:]),)
        assert events.index(marked) == len(events) - 1  # the evidence comes first
        rejected = [r.event for r in await store.read_stream(pair_stream(unknown.pair_id))]
        (why,) = [e for e in rejected if isinstance(e, RevisionRejected)]
        assert "unverifiable" in why.reason and "cannot reset to task" in why.reason
    finally:
        await store.close()
