"""Benchmark: one model's evaluation in worker processes (ours) against the same evaluation in the
evaluating process (baseline), same model, goals, seeds and protocol, side by side in one run.

The evaluation is the starting model's in ``agentr run``: held-out and seen episodes in one batch,
then the recovery set built from its failed held-out episodes and continued
(``train_service.evaluation.evaluate`` with ``build_recovery_set``). Baseline: ``play`` in this
process (what every evaluation did before ``evaluation.workers``); ours:
``train_service.episode_processes.EpisodeWorkers`` with ``--workers`` processes (default: what
``evaluation.workers = null`` picks on this machine for the batch).

Prints JSON lines: ``eval_wall_s`` (wall seconds; ratio = baseline / ours: the speed-up),
``eval_cpu_s`` (CPU seconds of this process and its children, ``resource.getrusage``; ratio =
baseline / ours: below 1 is what the processes cost in starting and loading the model), and
``metrics_identical`` (1.0 when every metric, per-task figure and recovery prefix of both
evaluations is equal: the processes change nothing but the time).

Default: the default demo's warm-started tiny model (built and cached under ``--home``, as
``agentr run`` does) on its held-out and seen goals; ``--quick``: the ``--quick`` run's model on 3
held-out and 2 seen goals. Use an otherwise idle machine: the speed-up needs free cores.
Usage: python bench/eval_processes.py [--quick] [--home DIR] [--workers N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluation import _setup  # noqa: E402  (bench/evaluation.py: the demo's model, goals, config)


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


async def _timed(work: Any) -> tuple[Any, float, float]:
    cpu, wall = _cpu_s(), time.perf_counter()
    out = await work
    return out, _cpu_s() - cpu, time.perf_counter() - wall


def _line(metric: str, ours: float, baseline: float, unit: str, **extra: Any) -> None:
    ratio = baseline / ours if ours else None
    row = {"metric": metric, "ours": round(ours, 3), "baseline": round(baseline, 3), "unit": unit,
           "ratio": None if ratio is None else round(ratio, 3), **extra}  # fmt: skip
    print(json.dumps(row), flush=True)


async def main(quick: bool, home: Path, workers: int | None) -> None:
    import torch

    from core.envs.registry import open_env
    from core.llm.hf import HFPolicy
    from train_service.episode_processes import EpisodeWorkers, resolve_workers
    from train_service.evaluation import evaluate

    torch.set_num_threads(1)
    model, env_uri, held, seen, cfg = _setup(quick, home)
    episodes = (len(held) + len(seen)) * cfg.episodes_per_task
    count = workers or resolve_workers(None, episodes)
    if count < 2:
        raise SystemExit(f"{episodes} episodes on this machine give {count} worker; pass --workers 2")

    def opener() -> Any:
        return open_env(env_uri)

    async def in_process() -> dict[str, Any]:
        policy = HFPolicy.from_folder(model, device="cpu")  # loaded inside the timing, as the run does
        try:
            return await evaluate(policy, opener, held, cfg, seen=seen, build_recovery_set=True)
        finally:
            await policy.close()

    async def in_workers() -> dict[str, Any]:  # the pool started inside the timing, as the run does
        async with EpisodeWorkers(count) as pool:
            player = pool.player(model, env_uri)
            return await evaluate(None, opener, held, cfg, seen=seen, build_recovery_set=True, player=player)

    baseline, base_cpu, base_wall = await _timed(in_process())
    ours, our_cpu, our_wall = await _timed(in_workers())
    shape = {"model": model, "held_out": len(held), "seen": len(seen), "episodes": episodes,
             "recovery_prefixes": len(baseline.get("recovery_set", [])), "workers": count}  # fmt: skip
    print(json.dumps(shape), flush=True)
    _line("eval_wall_s", our_wall, base_wall, "s (ratio: speed-up)", workers=count)
    _line("eval_cpu_s", our_cpu, base_cpu, "CPU s, this process and its children", workers=count)
    same = 1.0 if ours == baseline else 0.0
    print(json.dumps({"metric": "metrics_identical", "ours": same, "baseline": 1.0, "unit": "share",
                      "ratio": same}), flush=True)  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the --quick run's model, 5 goals")
    parser.add_argument("--home", default="", help="AGENTR_HOME whose cached warm start to reuse")
    parser.add_argument("--workers", type=int, default=None, help="processes (default: the auto rule)")
    args = parser.parse_args()
    if args.workers is not None and args.workers < 2:
        parser.error("--workers must be >= 2 (1 is the baseline)")
    if args.home:
        asyncio.run(main(args.quick, Path(args.home), args.workers))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            asyncio.run(main(args.quick, Path(tmp), args.workers))
