"""Evaluation episodes in worker processes (``train_service.episode_processes``) with the real tiny
model of ``agentr run --quick`` on real TextCraft: the starting model's whole protocol (held-out and
seen episodes, its recovery set and the continuations) played in 2 and 3 processes gives the very
same episodes and metrics as in one process, and one pool serves two models in turn; a worker that
cannot load its model fails the call with the worker's own error and the pool still serves the
next one; ``RunEffects`` uses processes only where they cannot change results.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from core.envs.registry import open_env
from core.llm.hf import HFPolicy
from tests.e2e.helpers import quick_tiny_model
from train_service.episode_processes import (
    MAX_AUTO_WORKERS,
    MIN_EPISODES_PER_WORKER,
    EpisodeWorkerError,
    EpisodeWorkers,
    auto_workers,
    resolve_workers,
    shards,
)
from train_service.evaluation import EvalConfig, evaluate, play

pytestmark = pytest.mark.slow

ENV = "textcraft?distractors=0&max_steps=6"
HELD_OUT = ["goal:oak_planks", "goal:birch_button", "goal:stick"]
SEEN = ["goal:spruce_planks", "goal:jungle_button"]
CFG = EvalConfig(max_steps=6, max_tokens=32, episodes_per_task=2, temperature=1.0, recovery_episodes=4)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    torch.set_num_threads(1)
    ref, _config = quick_tiny_model(tmp_path_factory.mktemp("processes-home"))
    return ref


@pytest.fixture(scope="module")
def other_model(model: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The same model with its weights perturbed: other episodes, another model version."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tmp_path_factory.mktemp("other-model")
    net = AutoModelForCausalLM.from_pretrained(model)
    with torch.no_grad():
        generator = torch.Generator().manual_seed(0)
        for param in net.parameters():
            param.add_(0.05 * torch.randn(param.shape, generator=generator))
    net.save_pretrained(folder)
    AutoTokenizer.from_pretrained(model).save_pretrained(folder)
    return str(folder)


def _open() -> Any:
    return open_env(ENV)


def _without_version(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if k != "model_version"}


@pytest.mark.parametrize("workers", [2, 3])
async def test_sharded_evaluation_equals_in_process(model: str, other_model: str, workers: int) -> None:
    alone = {}
    for ref in (model, other_model):
        policy = HFPolicy.from_folder(ref, device="cpu")
        try:
            alone[ref] = await evaluate(
                policy, _open, HELD_OUT, CFG, seed=5, seen=SEEN, build_recovery_set=True
            )
        finally:
            await policy.close()
    async with EpisodeWorkers(workers) as pool:
        for ref in (model, other_model, model):  # one pool, the models in turn (each worker reloads)
            player = pool.player(ref, ENV)
            sharded = await evaluate(
                None, _open, HELD_OUT, CFG, seed=5, seen=SEEN, build_recovery_set=True, player=player
            )
            assert alone[ref]["recovery_set"], (
                "the quick model fails a held-out episode: continuations played"
            )
            assert sharded == alone[ref]  # every count, rate, per-task figure, recovery prefix, model version
            assert player.model_version == alone[ref]["model_version"]
    assert alone[model]["model_version"] != alone[other_model]["model_version"]


async def test_episodes_come_back_in_order_with_their_actions(model: str) -> None:
    tasks = [*HELD_OUT, *SEEN, HELD_OUT[0]]
    seeds = [11, 12, 13, 14, 15, 16]
    prefixes = [[], [], [], [], [], ["get 1 oak log"]]
    policy = HFPolicy.from_folder(model, device="cpu")
    try:
        alone = await play(policy, _open, tasks, CFG, seeds=seeds, prefixes=prefixes)
    finally:
        await policy.close()
    seen_progress: list[tuple[int, int]] = []
    async with EpisodeWorkers(2) as pool:
        sharded = await pool.player(model, ENV)(
            tasks, CFG, seeds=seeds, prefixes=prefixes, progress=lambda d, t: seen_progress.append((d, t))
        )
    assert [r.task_id for r in sharded] == tasks
    assert sharded == alone  # actions, validity, rewards, prefix lengths, episode by episode
    assert sharded[-1].prefix_steps == 1 and sharded[-1].actions[0] == "get 1 oak log"
    assert seen_progress and seen_progress[-1] == (len(tasks), len(tasks))


async def test_a_worker_that_fails_names_its_error_and_the_pool_goes_on(model: str, tmp_path: Path) -> None:
    missing = tmp_path / "no-model-here"
    async with EpisodeWorkers(2) as pool:
        with pytest.raises(EpisodeWorkerError, match="no-model-here"):
            await pool.player(str(missing), ENV)(HELD_OUT, CFG, seeds=[1, 2, 3])
        results = await pool.player(model, ENV)(HELD_OUT, CFG, seeds=[1, 2, 3])
    assert [r.task_id for r in results] == HELD_OUT
    with pytest.raises(RuntimeError, match="async with"):
        await pool.play(model, ENV, HELD_OUT, CFG)  # stopped on exit


def test_worker_counts() -> None:
    many = 10 * MIN_EPISODES_PER_WORKER
    assert auto_workers(many, 2) == 2
    assert auto_workers(4 * MIN_EPISODES_PER_WORKER, 16) == 4  # one process per MIN_EPISODES_PER_WORKER
    assert auto_workers(many, 64) == MAX_AUTO_WORKERS  # each holds a model copy: capped
    assert auto_workers(2 * MIN_EPISODES_PER_WORKER - 1, 8) == 1  # a small batch stays in-process
    assert auto_workers(many, 1) == 1
    assert auto_workers(many, 8, cuda=True) == 1  # one GPU decodes for all
    assert auto_workers(many, 8, daemonic=True) == 1  # a Celery prefork child may not fork
    assert resolve_workers(4, 3) == 3  # never more processes than episodes
    assert resolve_workers(1, 500) == 1
    assert shards(7, 3) == [[0, 3, 6], [1, 4], [2, 5]]
    assert shards(2, 5) == [[0], [1]]
    with pytest.raises(ValueError, match="workers"):
        shards(3, 0)
    with pytest.raises(ValueError, match="workers"):
        EvalConfig(workers=0)


def _pool_then_hang(pids: Any) -> None:
    """A parent that starts a pool, reports its workers' pids and hangs until it is killed."""
    import asyncio

    async def main() -> None:
        async with EpisodeWorkers(2) as pool:
            pids.put([proc.pid for proc in pool._procs])
            await asyncio.Event().wait()  # never set: only the kill ends this

    asyncio.run(main())


def test_workers_exit_when_their_parent_is_killed() -> None:
    """A parent SIGKILLed inside its ``async with`` never stops its pool: the workers notice the
    parent is gone and exit instead of waiting on their queues forever."""
    import multiprocessing
    import os
    import signal
    import time

    ctx = multiprocessing.get_context("spawn")
    pids = ctx.Queue()
    parent = ctx.Process(target=_pool_then_hang, args=(pids,))
    parent.start()
    workers = pids.get(timeout=120)
    assert len(workers) == 2 and all(_alive(pid) for pid in workers)
    os.kill(parent.pid, signal.SIGKILL)
    parent.join(10)
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in workers), "workers outlived their killed parent"


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped by init, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _resolve_in_child(results: Any) -> None:
    results.put((resolve_workers(4, 100), resolve_workers(None, 100)))


def test_a_daemonic_process_never_starts_workers() -> None:
    """A Celery prefork child is daemonic and may not have children: even a configured count is 1."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    child = ctx.Process(target=_resolve_in_child, args=(results,), daemon=True)
    child.start()
    try:
        assert results.get(timeout=120) == (1, 1)
    finally:
        child.join(30)
    assert resolve_workers(4, 100) == 4  # the same call in this (non-daemonic) process


async def test_run_effects_use_processes_only_where_results_cannot_change(tmp_path: Path) -> None:
    from core.runtime.settings import Settings
    from train_service.runs import RunEffects

    effects = RunEffects(Settings(home=tmp_path), store=None)
    local, served = "/models/m", "http://127.0.0.1:8000/v1"
    assert effects.eval_workers(EvalConfig(), 40, [local]) == resolve_workers(None, 40)
    assert effects.eval_workers(EvalConfig(workers=3), 40, [local]) == 3
    assert effects.eval_workers(EvalConfig(workers=3), 40, [served, local]) == 3  # the local one shards
    assert effects.eval_workers(EvalConfig(workers=4, shared_passes=True), 40, [local]) == 1
    assert effects.eval_workers(EvalConfig(workers=4), 40, [served]) == 1
    assert not effects._shardable(served) and effects._shardable(local)
    custom = RunEffects(Settings(home=tmp_path), store=None, env_opener=lambda uri: open_env(uri))
    assert custom.eval_workers(EvalConfig(workers=4), 40, [local]) == 1  # a test's own opener


def test_agentr_eval_workers_give_the_same_metrics(model: str, tmp_path: Path) -> None:
    """``agentr eval --workers 2`` (episodes in two processes) writes the same eval.json as
    ``--workers 1`` on the same model, tasks and seeds."""
    import json
    import subprocess
    import sys

    metrics = {}
    for workers in ("1", "2"):
        out = tmp_path / f"w{workers}"
        args = [str(Path(sys.executable).parent / "agentr"), "eval", "--model", model, "--env", ENV,
                "--tasks", ",".join(HELD_OUT + SEEN), "--max-steps", "4", "--max-tokens", "24",
                "--episodes", "2", "--workers", workers, "--out", str(out)]  # fmt: skip
        done = subprocess.run(args, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
        metrics[workers] = json.loads((out / "eval.json").read_text())
    assert metrics["1"]["episodes"] == 2 * len(HELD_OUT + SEEN)
    assert metrics["2"] == metrics["1"]
