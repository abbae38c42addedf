"""Owns playing one local model's episodes in worker PROCESSES (``evaluation.workers``).

The episodes of one ``play`` call are dealt round-robin into shards; each shard is played by a
process of its own (``spawn``: a fresh interpreter, never a fork of a process holding threads and a
loaded model) that loads the model folder, opens the environment from its URI and runs the very
same batched loop (``train_service.episodes.play``); the results come back in the caller's order.

Why processes: decoding the demo's tiny model is bound by Python (transformers' per-op overhead
under the GIL: docs/results.md, "Decode threads"), so decode threads of one process keep one core
busy and a second core idles through every evaluation. Why the results do not change: every
episode samples with its own seeds and a local policy's passes are batch-invariant by default
(each prompt runs alone), so an episode plays exactly the same whichever shard it lands in; the
tests compare sharded and in-process results episode by episode. With ``shared_passes`` a turn's
prompts share padded passes, so a shard's batch would change the floats: such an evaluation is
never sharded.

``auto_workers`` (pure) is the default: one process per usable core, at most one per
``MIN_EPISODES_PER_WORKER`` episodes (a process costs a few seconds to start and load the model),
and 1 (in the caller's process) where a CUDA device decodes, where the caller is itself a daemonic
process (a Celery prefork child may not have children) or where there is one core.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import queue as queue_module
import traceback
from collections.abc import Sequence
from typing import Any

from core.domain.metrics import EpisodeResult
from train_service.episodes import EvalConfig, Progress, play

log = logging.getLogger(__name__)

MIN_EPISODES_PER_WORKER = 8
_POLL_S = 0.5


class EpisodeWorkerError(RuntimeError):
    """A worker process failed (its traceback is in the message) or died without its results."""


def auto_workers(episodes: int, cores: int, *, cuda: bool = False, daemonic: bool = False) -> int:
    """How many processes play ``episodes`` episodes on ``cores`` usable cores (module docstring)."""
    if cuda or daemonic or cores < 2 or episodes < 2 * MIN_EPISODES_PER_WORKER:
        return 1
    return max(1, min(cores, episodes // MIN_EPISODES_PER_WORKER))


def resolve_workers(configured: int | None, episodes: int) -> int:
    """``evaluation.workers`` for a batch of ``episodes``: the configured count (never more processes
    than episodes), or ``auto_workers`` on this machine when unset."""
    if configured is not None:
        return max(1, min(configured, episodes))
    from core.runtime.torch_threads import usable_cores

    return auto_workers(
        episodes,
        usable_cores(),
        cuda=_cuda_available(),
        daemonic=bool(multiprocessing.current_process().daemon),
    )


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover - the ml extra is what plays local models
        return False
    return bool(torch.cuda.is_available())


def shards(count: int, workers: int) -> list[list[int]]:
    """Episode indexes dealt round-robin over ``workers`` shards (a mix of tasks in each), none empty."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    return [list(range(k, count, workers)) for k in range(min(workers, count))]


class ProcessPlayer:
    """Plays episodes of the local model folder ``model_ref`` on ``env_uri`` in ``workers``
    processes; ``model_version`` is the loaded policy's (known after the first call)."""

    def __init__(self, model_ref: str, env_uri: str, workers: int, threads: int = 1) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.model_ref = model_ref
        self.env_uri = env_uri
        self.workers = workers
        self.threads = threads
        self.model_version = ""

    async def __call__(
        self,
        task_ids: Sequence[str],
        cfg: EvalConfig,
        *,
        seeds: Sequence[int] | None = None,
        prefixes: Sequence[Sequence[str]] | None = None,
        progress: Progress | None = None,
    ) -> list[EpisodeResult]:
        if prefixes is not None and len(prefixes) != len(task_ids):
            raise ValueError(f"{len(prefixes)} prefixes for {len(task_ids)} tasks")
        if seeds is not None and len(seeds) != len(task_ids):
            raise ValueError(f"{len(seeds)} seeds for {len(task_ids)} episodes")
        if not task_ids:
            return []
        all_seeds = list(seeds) if seeds is not None else list(range(len(task_ids)))
        all_prefixes = [list(p) for p in prefixes] if prefixes is not None else [[] for _ in task_ids]
        parts = shards(len(task_ids), self.workers)
        ctx = multiprocessing.get_context("spawn")
        messages: Any = ctx.Queue()
        procs = []
        for k, indexes in enumerate(parts):
            args = (
                messages,
                k,
                self.model_ref,
                self.env_uri,
                [task_ids[i] for i in indexes],
                cfg,
                [all_seeds[i] for i in indexes],
                [all_prefixes[i] for i in indexes],
                self.threads,
            )
            procs.append(ctx.Process(target=_play_shard, args=args, name=f"agentr-episodes-{k}", daemon=True))
        log.info("playing %d episodes of %s in %d processes", len(task_ids), self.model_ref, len(procs))
        done = [0] * len(parts)
        results: dict[int, list[EpisodeResult]] = {}
        try:
            for proc in procs:
                proc.start()
            while len(results) < len(parts):
                message = await asyncio.to_thread(_next_message, messages)
                if message is None:
                    _check_alive(procs, results)
                    continue
                kind, k, payload = message
                if kind == "progress":
                    done[k] = payload
                    if progress:
                        progress(sum(done), len(task_ids))
                elif kind == "done":
                    version, shard_results = payload
                    self.model_version = self.model_version or version
                    results[k] = shard_results
                else:
                    raise EpisodeWorkerError(f"episode worker {k} of {self.model_ref} failed:\n{payload}")
        finally:
            for proc in procs:
                if proc.is_alive():
                    proc.terminate()
            for proc in procs:
                proc.join(timeout=10)
            messages.close()
        ordered: list[EpisodeResult | None] = [None] * len(task_ids)
        for k, indexes in enumerate(parts):
            if len(results[k]) != len(indexes):
                raise EpisodeWorkerError(
                    f"episode worker {k} returned {len(results[k])} episodes for {len(indexes)}"
                )
            for i, result in zip(indexes, results[k], strict=True):
                ordered[i] = result
        return [r for r in ordered if r is not None]


def _next_message(messages: Any) -> tuple[str, int, Any] | None:
    try:
        message: tuple[str, int, Any] = messages.get(timeout=_POLL_S)
        return message
    except queue_module.Empty:
        return None


def _check_alive(procs: Sequence[Any], finished: dict[int, Any]) -> None:
    for k, proc in enumerate(procs):
        if k not in finished and proc.exitcode is not None:
            raise EpisodeWorkerError(
                f"episode worker {k} exited with code {proc.exitcode} before returning its episodes "
                "(killed for memory?)"
            )


def _play_shard(
    messages: Any,
    shard: int,
    model_ref: str,
    env_uri: str,
    task_ids: list[str],
    cfg: EvalConfig,
    seeds: list[int],
    prefixes: list[list[str]],
    threads: int,
) -> None:
    """A worker process: load the model, play the shard, send (version, results) back."""
    os.environ["OMP_NUM_THREADS"] = str(threads)  # before torch is imported in this process
    try:
        import torch

        torch.set_num_threads(threads)
        version, results = asyncio.run(
            _play(messages, shard, model_ref, env_uri, task_ids, cfg, seeds, prefixes)
        )
        messages.put(("done", shard, (version, results)))
    except BaseException:  # noqa: BLE001 - every failure goes back to the parent, named
        messages.put(("error", shard, traceback.format_exc()))


async def _play(
    messages: Any,
    shard: int,
    model_ref: str,
    env_uri: str,
    task_ids: list[str],
    cfg: EvalConfig,
    seeds: list[int],
    prefixes: list[list[str]],
) -> tuple[str, list[EpisodeResult]]:
    from core.envs.registry import open_env
    from core.llm.registry import open_policy

    policy = open_policy(model_ref)
    try:

        def report(done: int, _total: int) -> None:
            messages.put(("progress", shard, done))

        results = await play(
            policy, lambda: open_env(env_uri), task_ids, cfg, seeds=seeds, prefixes=prefixes, progress=report
        )
        return policy.model_version, results
    finally:
        await policy.close()
