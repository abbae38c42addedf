"""Owns playing one local model's episodes in worker PROCESSES (``evaluation.workers``).

``EpisodeWorkers`` is a pool of worker processes for one evaluation (``spawn``: fresh interpreters,
never forks of a process holding threads and a loaded model), started once and reused by every
batch of it (the starting model's episodes, its recovery continuations, the iteration model's): a
worker keeps the last model folder it loaded. The episodes of one ``play`` call are dealt
round-robin into shards, one per worker; each worker opens the environment from its URI and runs
the very same batched loop (``train_service.episodes.play``); the results come back in the
caller's order. ``ProcessPlayer`` is the pool bound to one model, as ``evaluate`` takes it.

Why processes: decoding the demo's tiny model is bound by Python (transformers' per-op overhead
under the GIL: docs/results.md, "Decode threads"), so decode threads of one process keep one core
busy and a second core idles through every evaluation. Why the results do not change: every
episode samples with its own seeds and a local policy's passes are batch-invariant by default
(each prompt runs alone), so an episode plays exactly the same whichever shard it lands in; the
tests compare sharded and in-process results episode by episode. With ``shared_passes`` a turn's
prompts share padded passes, so a shard's batch would change the floats: such an evaluation is
never sharded.

``auto_workers`` (pure) is the default: one process per usable core, at most one per
``MIN_EPISODES_PER_WORKER`` episodes (a process costs a few seconds to start and load the model)
and at most ``MAX_AUTO_WORKERS`` (each holds its own copy of the model: a big host's cores would
otherwise hold dozens; ``evaluation.workers`` sets more),
and 1 (in the caller's process) where a CUDA device decodes, where the caller is itself a daemonic
process (a Celery prefork child may not have children) or where there is one core.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import multiprocessing
import os
import queue as queue_module
import traceback
from collections.abc import Sequence
from typing import Any

from core.domain.metrics import EpisodeResult
from core.runtime.parent_watch import exit_with_parent
from train_service.episodes import EvalConfig, Progress, play

log = logging.getLogger(__name__)

MIN_EPISODES_PER_WORKER = 8
MAX_AUTO_WORKERS = 8
_POLL_S = 0.5


class EpisodeWorkerError(RuntimeError):
    """A worker process failed (its traceback is in the message) or died without its results."""


def auto_workers(episodes: int, cores: int, *, cuda: bool = False, daemonic: bool = False) -> int:
    """How many processes play ``episodes`` episodes on ``cores`` usable cores (module docstring)."""
    if cuda or daemonic or cores < 2 or episodes < 2 * MIN_EPISODES_PER_WORKER:
        return 1
    return max(1, min(cores, episodes // MIN_EPISODES_PER_WORKER, MAX_AUTO_WORKERS))


def resolve_workers(configured: int | None, episodes: int) -> int:
    """``evaluation.workers`` for a batch of ``episodes``: the configured count (never more processes
    than episodes), or ``auto_workers`` on this machine when unset; 1 in a daemonic process, which
    may not start children, whatever is configured."""
    daemonic = bool(multiprocessing.current_process().daemon)
    if daemonic:
        if configured not in (None, 1):
            log.warning(
                "evaluation.workers = %s ignored: a daemonic process may not start workers", configured
            )
        return 1
    if configured is not None:
        return max(1, min(configured, episodes))
    from core.runtime.torch_threads import usable_cores

    return auto_workers(episodes, usable_cores(), cuda=_cuda_available())


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
    """``workers.play`` bound to the local model folder ``model_ref`` on ``env_uri`` (the ``Player``
    that ``train_service.evaluation.evaluate`` takes); ``model_version`` is known once it has played."""

    def __init__(self, workers: EpisodeWorkers, model_ref: str, env_uri: str) -> None:
        self.workers = workers
        self.model_ref = model_ref
        self.env_uri = env_uri
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
        version, results = await self.workers.play(
            self.model_ref, self.env_uri, task_ids, cfg, seeds=seeds, prefixes=prefixes, progress=progress
        )
        self.model_version = self.model_version or version
        return results


class EpisodeWorkers:
    """``count`` worker processes that play episodes (an async context manager: started on entry,
    stopped on exit); one ``play`` call at a time."""

    def __init__(self, count: int, threads: int = 1) -> None:
        if count < 1:
            raise ValueError(f"workers must be >= 1, got {count}")
        self.count = count
        self.threads = threads
        self._ctx = multiprocessing.get_context("spawn")
        self._outbox: Any = None
        self._inboxes: list[Any] = []
        self._procs: list[Any] = []
        self._jobs = 0
        # the workers log and show transformers' progress bars as this process does
        self._quiet = _progress_bars_off()
        self._log_level = logging.getLogger().getEffectiveLevel()

    async def __aenter__(self) -> EpisodeWorkers:
        self._outbox = self._ctx.Queue()
        for k in range(self.count):
            inbox = self._ctx.Queue()
            proc = self._ctx.Process(
                target=_worker,
                args=(inbox, self._outbox, k, self.threads, self._quiet, self._log_level, os.getpid()),
                name=f"agentr-episodes-{k}",
                daemon=True,
            )
            proc.start()
            self._inboxes.append(inbox)
            self._procs.append(proc)
        log.info("started %d episode worker processes", self.count)
        return self

    async def __aexit__(self, *_exc: object) -> None:
        for inbox, proc in zip(self._inboxes, self._procs, strict=True):
            if proc.is_alive():
                inbox.put(None)
        for proc in self._procs:
            await asyncio.to_thread(proc.join, 10)
            if proc.is_alive():
                proc.terminate()
                await asyncio.to_thread(proc.join, 5)
        for queue in (*self._inboxes, self._outbox):
            queue.close()
        self._inboxes, self._procs = [], []

    def player(self, model_ref: str, env_uri: str) -> ProcessPlayer:
        return ProcessPlayer(self, model_ref, env_uri)

    async def play(
        self,
        model_ref: str,
        env_uri: str,
        task_ids: Sequence[str],
        cfg: EvalConfig,
        *,
        seeds: Sequence[int] | None = None,
        prefixes: Sequence[Sequence[str]] | None = None,
        progress: Progress | None = None,
    ) -> tuple[str, list[EpisodeResult]]:
        """(model version, one result per entry of ``task_ids`` in order), as ``play`` returns them."""
        if not self._procs:
            raise RuntimeError("EpisodeWorkers.play outside its 'async with' block")
        if prefixes is not None and len(prefixes) != len(task_ids):
            raise ValueError(f"{len(prefixes)} prefixes for {len(task_ids)} tasks")
        if seeds is not None and len(seeds) != len(task_ids):
            raise ValueError(f"{len(seeds)} seeds for {len(task_ids)} episodes")
        if not task_ids:
            return "", []
        all_seeds = list(seeds) if seeds is not None else list(range(len(task_ids)))
        all_prefixes = [list(p) for p in prefixes] if prefixes is not None else [[] for _ in task_ids]
        parts = shards(len(task_ids), self.count)
        self._jobs += 1
        job = self._jobs
        for k, indexes in enumerate(parts):
            shard_tasks = [task_ids[i] for i in indexes]
            shard_seeds = [all_seeds[i] for i in indexes]
            shard_prefixes = [all_prefixes[i] for i in indexes]
            self._inboxes[k].put((job, model_ref, env_uri, shard_tasks, cfg, shard_seeds, shard_prefixes))
        log.info("playing %d episodes of %s in %d processes", len(task_ids), model_ref, len(parts))
        done = [0] * len(parts)
        results: dict[int, list[EpisodeResult]] = {}
        version = ""
        while len(results) < len(parts):
            message = await asyncio.to_thread(_next_message, self._outbox)
            if message is None:
                self._check_alive(len(parts), results)
                continue
            kind, job_id, k, payload = message
            if job_id != job:
                continue  # a late message of an earlier, failed call
            if kind == "progress":
                done[k] = payload
                if progress:
                    progress(sum(done), len(task_ids))
            elif kind == "done":
                version = version or payload[0]
                results[k] = payload[1]
            else:
                raise EpisodeWorkerError(f"episode worker {k} failed playing {model_ref}:\n{payload}")
        ordered: list[EpisodeResult | None] = [None] * len(task_ids)
        for k, indexes in enumerate(parts):
            if len(results[k]) != len(indexes):
                raise EpisodeWorkerError(
                    f"episode worker {k} returned {len(results[k])} episodes for {len(indexes)}"
                )
            for i, result in zip(indexes, results[k], strict=True):
                ordered[i] = result
        return version, [r for r in ordered if r is not None]

    def _check_alive(self, busy: int, finished: dict[int, Any]) -> None:
        for k, proc in enumerate(self._procs[:busy]):
            if k not in finished and proc.exitcode is not None:
                raise EpisodeWorkerError(
                    f"episode worker {k} exited with code {proc.exitcode} before returning its episodes "
                    "(killed for memory?)"
                )


def _next_message(messages: Any) -> tuple[str, int, int, Any] | None:
    try:
        message: tuple[str, int, int, Any] = messages.get(timeout=_POLL_S)
        return message
    except queue_module.Empty:
        return None


def _next_job(inbox: Any) -> Any:
    """The next job, or None to stop: when told to, or when the parent process is gone (killed
    without its ``async with`` exit, a worker would otherwise wait on its queue forever)."""
    parent = multiprocessing.parent_process()
    while True:
        try:
            return inbox.get(timeout=_POLL_S)
        except queue_module.Empty:
            if parent is not None and not parent.is_alive():
                return None


def _progress_bars_off() -> bool:
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - the ml extra is what plays local models
        return False
    return not hf_logging.is_progress_bar_enabled()


def _worker(
    inbox: Any, outbox: Any, index: int, threads: int, quiet: bool, log_level: int, parent: int
) -> None:
    """A worker process: play each job sent to ``inbox`` (None stops it), keeping the last model;
    it ends when its parent process dies (core/runtime/parent_watch.py)."""
    exit_with_parent(parent)
    os.environ["OMP_NUM_THREADS"] = str(threads)  # before torch is imported in this process
    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import torch

    torch.set_num_threads(threads)
    if quiet:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    asyncio.run(_serve(inbox, outbox, index))


async def _serve(inbox: Any, outbox: Any, index: int) -> None:
    from core.envs.registry import open_env
    from core.llm.registry import open_policy

    policy: Any = None
    loaded = ""
    try:
        while (job := await asyncio.to_thread(_next_job, inbox)) is not None:
            job_id, model_ref, env_uri, task_ids, cfg, seeds, prefixes = job
            try:
                if model_ref != loaded:
                    if policy is not None:
                        await policy.close()
                        policy, loaded = None, ""
                    policy = await asyncio.to_thread(open_policy, model_ref)
                    loaded = model_ref

                def report(done: int, _total: int, job_id: int = job_id) -> None:
                    outbox.put(("progress", job_id, index, done))

                results = await play(
                    policy,
                    functools.partial(open_env, env_uri),
                    task_ids,
                    cfg,
                    seeds=seeds,
                    prefixes=prefixes,
                    progress=report,
                )
                outbox.put(("done", job_id, index, (policy.model_version, results)))
            except Exception:  # noqa: BLE001 - every failure goes back to the parent, named
                outbox.put(("error", job_id, index, traceback.format_exc()))
    finally:
        if policy is not None:
            await policy.close()
