"""The search engine on the real TextCraft environment with the noisy-expert policy (no database):
determinism, clone vs replay, batching across concurrent trees, crash-resume, "no valid action"."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from core.domain.events import (
    NewEvent,
    NodesExpanded,
    PairFound,
    RolloutFinished,
    TreeCompleted,
    TreeStarted,
)
from core.domain.mcts import SearchConfig, SearchTree
from core.domain.trajectory import Message, Step
from core.envs.textcraft import TextCraftEnv
from core.llm.context import ContextOverflow, fit_prompt
from core.llm.ports import PolicyError
from core.llm.prompts import build_messages
from search_service.batching import BatchingPolicy
from search_service.engine import TreeRequest, TreeSearch
from search_service.noisy_expert import NoisyExpertPolicy, from_ref

CONFIG = SearchConfig(iterations=8, max_depth=8, alpha=1.0, beta=0.5, seed=2)


class Recorder:
    """An event sink that keeps what it is given (optionally failing after ``fail_after`` appends)."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.events: list[NewEvent] = []
        self.appends = 0
        self.fail_after = fail_after

    async def __call__(self, events: Sequence[NewEvent]) -> None:
        if self.fail_after is not None and self.appends >= self.fail_after:
            raise ConnectionError("store went away")
        self.appends += 1
        self.events.extend(events)


async def search(
    task_id: str = "200", *, config: SearchConfig = CONFIG, use_clone: bool = True, mistake: float = 0.5
) -> tuple[TreeSearch, Recorder]:
    sink = Recorder()
    request = TreeRequest("tree-" + task_id, "textcraft", task_id, "noisy-expert", config)
    engine = TreeSearch(
        request, TextCraftEnv(), NoisyExpertPolicy(mistake_rate=mistake), sink, use_clone=use_clone
    )
    await engine.run()
    return engine, sink


def stats(tree: SearchTree) -> dict[str, tuple[int, float, tuple[str, ...]]]:
    return {n.node_id: (n.visits, n.value_sum, tuple(n.children)) for n in tree.nodes.values()}


async def test_search_writes_a_tree_whose_events_rebuild_it_exactly():
    engine, sink = await search()
    assert engine.tree is not None
    kinds = [type(e.event).__name__ for e in sink.events]
    assert kinds[0] == "TreeStarted" and kinds[1] == "NodesExpanded"
    assert kinds.count("RolloutFinished") == CONFIG.iterations
    rebuilt = SearchTree.from_events([e.event for e in sink.events])
    assert stats(rebuilt) == stats(engine.tree)
    # the root is visited once per leaf event: each descent's end plus each terminal child recorded
    assert engine.tree.root.visits == CONFIG.iterations + kinds.count("LeafRecorded")
    assert kinds.count("LeafRecorded") == engine.stats.leaves_recorded > 0
    # candidates of one expansion are distinct on the normalised action
    for e in sink.events:
        if isinstance(e.event, NodesExpanded):
            actions = [n.action.lower() for n in e.event.nodes]
            assert len(actions) == len(set(actions))
    # event ids are unique and derived (a re-run produces the same ids)
    assert len({e.event_id for e in sink.events}) == len(sink.events)


async def test_same_seed_same_tree_different_seed_different_tree():
    first, a = await search()
    second, b = await search()
    assert [(e.event_id, e.event) for e in a.events] == [(e.event_id, e.event) for e in b.events]
    other_config = SearchConfig(iterations=8, max_depth=8, alpha=1.0, beta=0.5, seed=3)
    _, c = await search(config=other_config)
    assert [e.event for e in a.events] != [e.event for e in c.events]


async def test_final_events_pair_good_and_bad_paths():
    engine, _ = await search()
    final = engine.final_events()
    completed = final[-1].event
    assert type(completed).__name__ == "TreeCompleted"
    pairs = [e.event for e in final if isinstance(e.event, PairFound)]
    assert completed.pairs == len(pairs) > 0
    for pair in pairs:
        assert pair.good.reward == 1.0 and pair.bad.reward is not None and pair.bad.reward <= 0.5
        shared = pair.shared_steps
        assert pair.bad.steps[:shared] == pair.good.steps[:shared]
        assert pair.bad.steps[shared].action != pair.good.steps[shared].action
        assert pair.bad.task == pair.good.task and pair.bad.instruction == TextCraftEnv.instruction
    assert len(pairs) <= CONFIG.max_pairs_per_tree


async def test_replay_mode_builds_the_same_tree_with_more_steps():
    cloned, a = await search(use_clone=True)
    replayed, b = await search(use_clone=False)
    assert cloned.states.mode == "clone" and replayed.states.mode == "replay"
    assert [e.event for e in a.events] == [e.event for e in b.events]
    assert cloned.states.replay_steps == 0
    assert replayed.states.steps > cloned.states.steps
    # clone: exactly one step per created node (every candidate stepped once)
    assert cloned.states.steps == len(cloned.tree.nodes) - 1  # type: ignore[union-attr]


async def test_resume_after_a_crash_finishes_the_same_tree_without_duplicates():
    whole, uninterrupted = await search()
    crashed = Recorder(fail_after=3)
    request = TreeRequest("tree-200", "textcraft", "200", "noisy-expert", CONFIG)
    engine = TreeSearch(request, TextCraftEnv(), NoisyExpertPolicy(mistake_rate=0.5), crashed)
    with pytest.raises(ConnectionError):
        await engine.run()
    assert 0 < len(crashed.events) < len(uninterrupted.events)
    # the crash falls after a descent that recorded terminal children on the way (LeafRecorded)
    assert any(type(e.event).__name__ == "LeafRecorded" for e in crashed.events)
    resumed = Recorder()
    again = TreeSearch(request, TextCraftEnv(), NoisyExpertPolicy(mistake_rate=0.5), resumed)
    await again.run([e.event for e in crashed.events])
    combined = crashed.events + resumed.events
    assert not any(isinstance(e.event, TreeStarted) for e in resumed.events)
    assert [(e.event_id, e.event) for e in combined] == [(e.event_id, e.event) for e in uninterrupted.events]
    assert [e.event_id for e in again.final_events()] == [e.event_id for e in whole.final_events()]


async def test_policy_without_parseable_action_ends_rollouts_with_no_valid_action():
    sink = Recorder()
    request = TreeRequest("t-garbage", "textcraft", "5", "noisy-expert", SearchConfig(iterations=3))
    policy = NoisyExpertPolicy(mistake_rate=0.0, garbage_rate=1.0)
    engine = TreeSearch(request, TextCraftEnv(), policy, sink)
    tree = await engine.run()
    rollouts = [e.event for e in sink.events if isinstance(e.event, RolloutFinished)]
    # the root is a dead end: closed after one descent, so the tree is exhausted and stops early
    assert [r.terminal_reason for r in rollouts] == ["no valid action"]
    assert rollouts[0].leaf_id == tree.root_id
    assert len(tree.nodes) == 1 and tree.root.visits == 1
    assert tree.exhausted and engine.stats.exhausted and engine.stats.policy_calls == 1
    completed = engine.final_events()[-1].event
    assert isinstance(completed, TreeCompleted) and completed.exhausted and completed.rollouts == 1
    # the old leaf-only rule spends every descent re-asking the same (seeded) question
    old_sink = Recorder()
    old = replace(request, config=SearchConfig(iterations=3, record_terminal_children=False))
    old_engine = TreeSearch(
        old, TextCraftEnv(), NoisyExpertPolicy(mistake_rate=0.0, garbage_rate=1.0), old_sink
    )
    old_tree = await old_engine.run()
    assert (
        old_tree.rollouts == 3
        and old_tree.root.visits == 3
        and not old_engine.final_events()[-1].event.exhausted
    )


async def test_concurrent_trees_share_batched_policy_calls():
    inner = NoisyExpertPolicy(mistake_rate=0.3)
    batching = BatchingPolicy(inner, max_batch=8, window_s=0.01)
    config = SearchConfig(iterations=4, max_depth=6, alpha=1.0)
    engines = [
        TreeSearch(
            TreeRequest(f"tree-b{i}", "textcraft", str(i), "noisy", config),
            TextCraftEnv(),
            batching,
            Recorder(),
        )
        for i in range(6)
    ]
    trees = await asyncio.gather(*(engine.run() for engine in engines))
    assert all(tree.rollouts == 4 for tree in trees)
    assert batching.stats.calls == sum(e.stats.policy_calls for e in engines)
    assert batching.stats.backend_calls == inner.calls
    assert batching.stats.backend_calls < batching.stats.calls
    assert batching.stats.largest_batch > 1


async def test_batching_keeps_a_single_trees_seeded_results():
    config = SearchConfig(iterations=5, max_depth=6, alpha=1.0, seed=11)
    plain, batched = Recorder(), Recorder()
    request = TreeRequest("tree-s", "textcraft", "150", "noisy", config)
    await TreeSearch(request, TextCraftEnv(), NoisyExpertPolicy(), plain).run()
    await TreeSearch(request, TextCraftEnv(), BatchingPolicy(NoisyExpertPolicy()), batched).run()
    assert [e.event for e in plain.events] == [e.event for e in batched.events]


def test_noisy_expert_refs():
    policy = from_ref("noisy-expert?mistake=0.1&garbage=0.2")
    assert policy is not None and policy.mistake_rate == 0.1 and policy.garbage_rate == 0.2
    assert from_ref("/models/tiny") is None
    with pytest.raises(ValueError, match="unknown option"):
        from_ref("noisy-expert?mistakes=0.1")
    with pytest.raises(ValueError, match="mistake_rate"):
        from_ref("noisy-expert?mistake=2")


async def test_noisy_expert_without_mistakes_solves_the_task():
    config = SearchConfig(iterations=1, max_depth=20, alpha=1.0)
    engine, sink = await search("450", config=config, mistake=0.0)
    (rollout,) = [e.event for e in sink.events if isinstance(e.event, RolloutFinished)]
    assert rollout.terminal_reason == "done" and rollout.reward == 1.0


async def test_batching_hands_a_backend_error_to_every_caller_of_the_batch():
    from core.domain.trajectory import Message

    batching = BatchingPolicy(NoisyExpertPolicy(), window_s=0.01)
    good = [Message("system", "x"), Message("user", "Goal: craft stick.")]
    results = await asyncio.gather(
        batching.sample([good]),
        batching.sample([123]),
        return_exceptions=True,  # type: ignore[list-item]
    )
    assert all(isinstance(r, TypeError) for r in results)
    # calls with different sampling parameters never share a backend call
    inner = NoisyExpertPolicy()
    batching = BatchingPolicy(inner, window_s=0.01)
    one, two = await asyncio.gather(batching.sample([good], n=1), batching.sample([good], n=2))
    assert (len(one[0]), len(two[0])) == (1, 2) and inner.calls == 2
    assert "Action:" in one[0][0].text


class ExpertOnTinyModel:
    """A Policy whose actions come from the noisy expert but whose every call also runs the real tiny
    HF model on the same conversations (so HFPolicy's context check applies), and which tells the tiny
    model's context (ContextWindow). Records the prompts it was given."""

    def __init__(self, hf: Any, expert: NoisyExpertPolicy) -> None:
        self.hf = hf
        self.expert = expert
        self.model_version = f"expert-on-{hf.model_version}"
        self.max_context_tokens = hf.max_context_tokens
        self.prompts: list[list[Message]] = []

    def prompt_tokens(self, conversation: Sequence[Message]) -> int:
        return int(self.hf.prompt_tokens(conversation))

    def count_tokens(self, text: str) -> int:
        return int(self.hf.count_tokens(text))

    async def sample(
        self, conversations, n=1, temperature=1.0, max_tokens=64, seed=None, stop=None, logprobs=False
    ):  # type: ignore[no-untyped-def]
        self.prompts.extend(list(c) for c in conversations)
        await self.hf.sample(conversations, n=1, temperature=0.0, max_tokens=max_tokens, seed=seed)
        return await self.expert.sample(conversations, n, temperature, max_tokens, seed, stop, logprobs)

    async def score_labels(self, conversations, labels):  # type: ignore[no-untyped-def]
        return await self.hf.score_labels(conversations, labels)

    async def close(self) -> None:
        await self.hf.close()


@pytest.fixture(scope="module")
def short_context_model(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    import torch

    torch.set_num_threads(1)
    from core.llm.hf import HFPolicy
    from core.llm.tiny import build_tiny_model, default_corpus

    folder = tmp_path_factory.mktemp("tiny-short") / "model"
    build_tiny_model(
        folder, default_corpus(), hidden=32, layers=1, heads=2, vocab_size=512, seed=0, max_positions=640
    )
    return HFPolicy.from_folder(folder, device="cpu")


async def test_long_episodes_are_truncated_to_the_models_context(short_context_model):  # type: ignore[no-untyped-def]
    hf = short_context_model
    assert hf.max_context_tokens == 640
    policy = ExpertOnTinyModel(hf, NoisyExpertPolicy(mistake_rate=0.3))
    config = SearchConfig(n_candidates=2, iterations=3, max_depth=12, max_tokens=16, alpha=1.0, seed=4)
    sink = Recorder()
    request = TreeRequest("tree-ctx", "textcraft", "200", "expert-on-tiny", config)
    engine = TreeSearch(request, TextCraftEnv(), policy, sink)
    tree = await engine.run()  # without fitting, the tiny model raises PolicyError past 640 tokens
    assert tree.rollouts == 3
    truncated = [p for p in policy.prompts if "earlier steps omitted]" in p[1].content]
    assert truncated, "the episodes never outgrew the context: the test does not test truncation"
    for prompt in policy.prompts:
        assert hf.prompt_tokens(prompt) + config.max_tokens <= 640
        assert prompt[0].content == engine.env.instruction  # instruction and task always kept
        assert prompt[1].content.startswith(engine.task)
    # the deepest node's full history would not have fit
    deepest = max(tree.nodes.values(), key=lambda n: n.depth)
    steps = [Step(n.thought, n.action, n.observation) for n in tree.path(deepest.node_id)[1:]]
    full = build_messages(engine.env.instruction, engine.task, steps)
    assert hf.prompt_tokens(full) + config.max_tokens > 640
    with pytest.raises(PolicyError, match="exceeds the model's context"):
        await hf.sample([full], max_tokens=config.max_tokens)


async def test_a_task_longer_than_the_context_is_a_clear_error(short_context_model):  # type: ignore[no-untyped-def]
    messages = [Message("system", "x " * 2000), Message("user", "Goal: craft stick.")]
    with pytest.raises(ContextOverflow, match="exceeds the model's context of 640 tokens"):
        fit_prompt(short_context_model, messages, reserve=16)
    # a policy that does not tell its context is left alone
    assert fit_prompt(NoisyExpertPolicy(), messages, reserve=16) == messages
