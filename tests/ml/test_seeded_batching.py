"""Per-conversation seeds: a conversation samples the same whoever shares its backend call.

On the real tiny model: HFPolicy takes one seed per conversation and is batch-invariant (bit-identical
log-probabilities and label scores alone or batched, in any order); and a search tree run through
the cross-tree ``BatchingPolicy`` writes exactly the same events alone as alongside five other
concurrent trees, whatever their arrival order and batch sizes. The tree uses the tiny model
warm-started the way ``agentr run --quick`` does, so its expansions are real parseable actions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from core.domain.events import NewEvent, NodesExpanded, RolloutFinished
from core.domain.mcts import SearchConfig
from core.domain.trajectory import Message
from core.envs.registry import open_env
from core.llm.hf import HFPolicy
from core.llm.ports import conversation_seeds
from search_service.batching import BatchingPolicy
from search_service.engine import TreeRequest, TreeSearch
from tests.e2e.helpers import QUICK_WARM_START_STEPS, quick_tiny_model
from train_service.checkpoint import read_meta
from train_service.judge_data import JUDGE_PHASE_STEPS, JUDGE_SHARE


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    torch.set_num_threads(1)
    return quick_tiny_model(tmp_path_factory.getbasetemp() / "agentr-quick-home")


@pytest.fixture(scope="module")
def policy(quick: tuple[str, dict[str, Any]]) -> HFPolicy:
    return HFPolicy.from_folder(quick[0], device="cpu")


def conversations() -> list[list[Message]]:
    return [
        [Message("system", "You craft items."), Message("user", f"Goal: craft {item}.")]
        for item in ("oak planks", "stick", "crafting table", "birch planks")
    ]


def test_conversation_seeds_normalises_both_forms() -> None:
    assert conversation_seeds(None, 3) is None
    assert conversation_seeds(5, 3) == [5, 6, 7]
    assert conversation_seeds((9, 2), 2) == [9, 2]
    with pytest.raises(ValueError, match="2 seeds for 3 conversations"):
        conversation_seeds([1, 2], 3)
    with pytest.raises(ValueError, match="seeds must be ints"):
        conversation_seeds([1, "2"], 2)  # type: ignore[list-item]
    with pytest.raises(ValueError, match="int or a sequence of ints"):
        conversation_seeds("12", 2)


async def test_each_conversation_samples_with_its_own_seed_alone_or_batched(policy: HFPolicy) -> None:
    assert policy.batch_invariant  # the CPU default
    convs = conversations()
    seeds = [101, 7, 55, 3]
    kwargs: dict[str, Any] = {"n": 3, "temperature": 1.0, "max_tokens": 16, "logprobs": True}
    batched = await policy.sample(convs, seed=seeds, **kwargs)
    alone = [(await policy.sample([c], seed=s, **kwargs))[0] for c, s in zip(convs, seeds, strict=True)]
    reordered = await policy.sample(convs[::-1], seed=seeds[::-1], **kwargs)
    # bit-identical: same texts and the very same per-token log-probabilities
    assert [[(c.text, c.logprobs) for c in row] for row in batched] == [
        [(c.text, c.logprobs) for c in row] for row in alone
    ]
    assert reordered[::-1] == batched
    # an int seed is the per-conversation sequence seed, seed + 1, ...
    assert await policy.sample(convs, seed=101, **kwargs) == await policy.sample(
        convs, seed=[101, 102, 103, 104], **kwargs
    )
    # different seeds do give different samples
    assert await policy.sample(convs[:1], seed=[8], **kwargs) != batched[:1]
    with pytest.raises(ValueError, match="3 seeds for 4 conversations"):
        await policy.sample(convs, seed=[1, 2, 3])


async def test_label_scores_are_the_same_alone_or_batched(policy: HFPolicy) -> None:
    convs = conversations()
    labels = ["Good", "Bad", "Uncertain"]
    batched = await policy.score_labels(convs, labels)
    alone = [(await policy.score_labels([c], labels))[0] for c in convs]
    assert batched == alone  # exact floats, not approximately


class Recorder:
    def __init__(self) -> None:
        self.events: list[NewEvent] = []

    async def __call__(self, events: Sequence[NewEvent]) -> None:
        self.events.extend(events)


async def search_trees(
    policy: BatchingPolicy, env_uri: str, config: SearchConfig, tasks: Sequence[str], stagger_s: float
) -> dict[str, list[Any]]:
    """Search one tree per task concurrently (tree i starts ``i * stagger_s`` after the first)."""
    sinks = {task: Recorder() for task in tasks}

    async def one(index: int, task: str) -> None:
        await asyncio.sleep(index * stagger_s)
        request = TreeRequest(f"tree-{task}", env_uri, task, "tiny", config)
        await TreeSearch(request, open_env(env_uri), policy, sinks[task]).run()

    await asyncio.gather(*(one(i, task) for i, task in enumerate(tasks)))
    return {task: [e.event for e in sink.events] for task, sink in sinks.items()}


async def test_a_tree_searches_the_same_alone_or_beside_other_trees(
    policy: HFPolicy, quick: tuple[str, dict[str, Any]]
) -> None:
    env_uri = quick[1]["env"]
    config = SearchConfig.from_dict({**quick[1]["search"], "iterations": 4, "seed": 13})
    tasks = open_env(env_uri).task_ids("demo")[:6]
    target = tasks[0]

    solo = BatchingPolicy(policy, window_s=0.01)
    alone = (await search_trees(solo, env_uri, config, [target], 0.0))[target]

    crowd = BatchingPolicy(policy, max_batch=32, window_s=0.01)
    together = await search_trees(crowd, env_uri, config, tasks, 0.0)  # target arrives first
    small = BatchingPolicy(policy, max_batch=3, window_s=0.02)
    reversed_ = await search_trees(small, env_uri, config, tasks[::-1], 0.003)  # target arrives last

    assert crowd.stats.largest_batch > 1 and small.stats.largest_batch > 1, "nothing was batched"
    assert crowd.stats.history != small.stats.history  # the batches really were composed differently
    assert together[target] == alone
    assert reversed_[target] == alone
    for task in tasks:
        assert together[task] == reversed_[task]
    # the tree is a real one: the warm-started model proposes parseable actions that the env runs
    nodes = [r for e in alone if isinstance(e, NodesExpanded) for r in e.nodes]
    assert len(nodes) > 4 and sum(1 for r in nodes if r.action) > 3
    assert sum(isinstance(e, RolloutFinished) for e in alone) == 4


def test_model_folder_is_the_quick_runs_warm_start(quick: tuple[str, dict[str, Any]]) -> None:
    folder, config = quick
    # a real checkpoint: weights and meta.json written by the SFT trainer. The warm start has two
    # phases (agentr/cli/warm_start.py): expert episodes mixed with judge examples, whose step count
    # grows by 1 / (1 - JUDGE_SHARE) so the expert text seen is unchanged, then the judge phase on top.
    meta = read_meta(folder)
    assert meta.iteration == -1 and meta.dataset_id.startswith("judge-phase:")
    assert meta.config["max_steps"] == JUDGE_PHASE_STEPS
    mixed = read_meta(meta.base_model)
    assert mixed.iteration == -1 and mixed.dataset_id.startswith("warm-start:")
    assert mixed.config["max_steps"] == round(QUICK_WARM_START_STEPS / (1.0 - JUDGE_SHARE))
    assert Path(mixed.base_model).name.startswith("tiny-") and Path(meta.base_model) != Path(folder)
    assert config["model"] == folder  # the run config starts from this folder
