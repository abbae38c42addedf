"""A tau2 search (tau2:retail, task 0) driven by the scripted noisy expert
(search_service.noisy_expert.Tau2NoisyExpertPolicy: the tiny random model never makes a valid tool
call, so it would never find a success) through the real TreeSearch engine; its pairs splice and
replay through a fresh Tau2Env into native tool-call steps and a revision sample with tools."""

from __future__ import annotations

import pytest

pytest.importorskip("tau2.environment.environment")

from core.domain.events import PairFound  # noqa: E402
from core.domain.mcts import SearchConfig  # noqa: E402
from core.domain.splice import SplicedPath, revision_sample, splice_path  # noqa: E402
from core.envs.tau2 import Tau2Env, tool_step  # noqa: E402
from search_service.engine import TreeRequest, TreeSearch  # noqa: E402
from search_service.noisy_expert import Tau2NoisyExpertPolicy  # noqa: E402


@pytest.mark.slow
async def test_tau2_search_pairs_splice_into_tool_call_samples_that_replay() -> None:
    env = Tau2Env("retail", max_steps=12)
    opening = await env.reset("0")
    gold = env.gold_actions("0")
    policy = Tau2NoisyExpertPolicy({opening: gold}, mistake_rate=0.4)
    events: list = []

    async def sink(new: list) -> None:
        events.extend(new)

    config = SearchConfig(iterations=6, max_depth=10, alpha=1.0, beta=0.5, seed=1)
    engine = TreeSearch(TreeRequest("tree-tau2", "tau2:retail", "0", "noisy", config), env, policy, sink)
    await engine.run()
    pairs = [e.event for e in engine.final_events() if isinstance(e.event, PairFound)]
    assert pairs, "the noisy expert's tree has no good/bad pair"
    pair = pairs[0]
    assert pair.good.reward == 1.0 and (pair.bad.reward or 0.0) < 1.0
    path = splice_path(pair.bad, pair.good, pair.shared_steps, len(pair.bad.steps) - 1)

    replay = Tau2Env("retail", max_steps=40)
    await replay.reset("0")
    native = []
    for step in path.steps:
        native.append(tool_step(step.thought, await replay.step(step.action), step.action))
    assert native[-1].done and native[-1].reward == 1.0  # the spliced actions reach tau2's reward 1
    assert [s.action for s in native] == path.actions
    assert {s.kind for s in native} >= {"tool", "answer"}
    a, b = len(path.prefix), len(path.prefix) + len(path.bad)
    tool_path = SplicedPath(prefix=tuple(native[:a]), bad=tuple(native[a:b]), good=tuple(native[b:]))
    good = pair.good.__class__(pair.good.task, pair.good.instruction, pair.good.steps, 1.0, tools=env.tools)
    sample = revision_sample(
        "s0", pair.bad, good, tool_path, "I ended too early; I must finish the exchange."
    )
    assert sample.tools == env.tools
    calls = [m for m in sample.messages if m.role == "assistant" and m.tool_calls]
    results = [m for m in sample.messages if m.role == "tool"]
    assert calls and len(results) == sum(len(m.tool_calls) for m in calls)
    assert {m.tool_call_id for m in results} == {c.call_id for m in calls for c in m.tool_calls}
    trained = [m for m in sample.messages if m.weight == 1]
    assert trained and all(m.role == "assistant" for m in trained)  # the good continuation
    assert trained[0].content.startswith("I ended too early")  # the reflection opens it
