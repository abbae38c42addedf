"""Benchmark: concurrent evaluation against the sequential protocol, same episodes, same seeds.

One model, the episodes of one ``agentr run`` evaluation (held-out goals x episodes, seen goals x
episodes, the recovery continuations), played three ways side by side in one run:

- sequential (baseline, the protocol before concurrency): the held-out episodes, then the recovery
  continuations, then the seen episodes, each set in its own batches, batch-invariant forward
  passes (the CPU default of the hf policy: one pass per prompt);
- batched-invariant (``--batched-invariant``): every set in ONE batch per turn, still
  batch-invariant passes (the same episodes token for token as sequential);
- concurrent (ours, ``shared_passes = true``): every set in one batch per turn AND shared forward
  passes (the default evaluation is the batched-invariant one: shared passes cost more CPU at
  demo scale, see train_service/evaluation.py).

The sequential pass builds the recovery set from its held-out episodes (as the starting model
does); the concurrent one continues those prefixes in the same batch as its other episodes (as
an iteration's model does).

Prints JSON lines: ``eval_cpu_s`` (CPU seconds of the whole evaluation, ``time.process_time``;
ratio = sequential / concurrent, the figure that holds on a loaded machine, since torch runs
single-threaded), ``eval_wall_s`` (the same in wall seconds), ``eval_cpu_s_batched_invariant``
(sequential / batched-invariant) and ``episodes_identical_share`` (share of episodes whose actions
are identical in the concurrent and the sequential evaluation; baseline 1.0 = batch-invariant).
The success rates of both are printed too (``held_out_success`` / ``seen_success``: ours =
concurrent, baseline = sequential; ratio = ours / baseline), to show whether shared passes move
the metrics.

Default: the default demo's warm-started tiny model (built and cached under ``--home``, as
``agentr run`` does) on its 10 held-out and 8 seen goals, 2 episodes each, 12 actions at most, and
the starting model's recovery set (8 prefixes). ``--quick``: the ``--quick`` run's 64-hidden model on
3 held-out and 2 seen goals (< 1 minute on an idle core).
Usage: OMP_NUM_THREADS=1 python bench/evaluation.py [--quick] [--home DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _line(metric: str, ours: float, baseline: float, unit: str, ratio: float) -> None:
    print(json.dumps({"metric": metric, "ours": round(ours, 4), "baseline": round(baseline, 4),
                      "unit": unit, "ratio": round(ratio, 2)}), flush=True)  # fmt: skip


def _setup(quick: bool, home: Path) -> tuple[str, str, list[str], list[str], Any]:
    """(model folder, env URI, held-out goals, seen goals, EvalConfig) of the demo or --quick run."""
    from agentr.cli.demo import RunOptions, plan_run
    from agentr.cli.warm_start import prepare_model
    from core.domain.config import RunConfig
    from core.envs.registry import open_env
    from train_service.evaluation import EvalConfig, held_out_tasks

    plan = plan_run(RunOptions(quick=quick))
    config = RunConfig.from_data(plan.config)
    model = prepare_model(plan, home, config.seed)
    env = open_env(config.env)
    cfg = EvalConfig.from_data(config.evaluation)
    if quick:
        held = ["goal:oak_planks", "goal:birch_button", "goal:stick"]
        seen = ["goal:spruce_planks", "goal:jungle_button"]
        cfg = replace(cfg, max_steps=6, recovery_episodes=4)
    else:
        held = held_out_tasks(env, list(config.eval_tasks), config.max_eval_tasks, cfg.stratify)
        searched = list(config.tasks)[: config.max_tasks] if config.max_tasks else list(config.tasks)
        seen = (
            held_out_tasks(env, searched, cfg.seen_max_tasks, cfg.stratify)
            if cfg.seen_max_tasks
            else searched
        )
    return model, config.env, held, seen, cfg


async def _timed(work: Any) -> tuple[Any, float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    out = await work
    return out, time.process_time() - cpu, time.perf_counter() - wall


async def main(quick: bool, home: Path, batched_invariant: bool) -> None:
    import torch

    from core.domain.eval_protocol import RecoveryPrefix, episode_seed, recovery_set
    from core.envs.registry import open_env
    from core.llm.hf import HFPolicy
    from train_service.evaluation import evaluate, play

    torch.set_num_threads(1)
    model, env_uri, held, seen, cfg = _setup(quick, home)
    seed = 0
    policy = HFPolicy.from_folder(model, device="cpu")

    def opener() -> Any:
        return open_env(env_uri)

    invariant = replace(cfg, shared_passes=False)

    def runs(tasks: list[str]) -> tuple[list[str], list[int]]:
        pairs = [(t, e) for t in tasks for e in range(cfg.episodes_per_task)]
        return [t for t, _ in pairs], [episode_seed(seed, t, e) for t, e in pairs]

    prefixes: list[RecoveryPrefix] = []

    async def sequential() -> list[Any]:  # the protocol before concurrency: one set after another
        ids, seeds = runs(held)
        held_results = await play(policy, opener, ids, invariant, seeds=seeds)
        # the recovery set as the run builds it: the starting model's failed held-out episodes
        episodes = [e for _ in held for e in range(cfg.episodes_per_task)]
        prefixes.extend(
            recovery_set(
                list(zip(episodes, held_results, strict=True)), limit=cfg.recovery_episodes, seed=seed
            )
        )
        recovered = await play(
            policy,
            opener,
            [p.task_id for p in prefixes],
            invariant,
            seeds=[episode_seed(seed, p.task_id, p.episode, "recovery") for p in prefixes],
            prefixes=[p.actions for p in prefixes],
        )
        ids, seeds = runs(seen)
        return [held_results, recovered, await play(policy, opener, ids, invariant, seeds=seeds)]

    old, old_cpu, old_wall = await _timed(sequential())
    inv_cpu = 0.0
    if batched_invariant:
        _, inv_cpu, _ = await _timed(
            evaluate(policy, opener, held, invariant, seed=seed, seen=seen, recovery=prefixes)
        )
    new, new_cpu, new_wall = await _timed(
        evaluate(policy, opener, held, cfg, seed=seed, seen=seen, recovery=prefixes)
    )
    await policy.close()

    episodes = sum(len(s) for s in old)
    print(json.dumps({"model": model, "held_out": len(held), "seen": len(seen), "recovery": len(prefixes),
                      "episodes": episodes, "max_steps": cfg.max_steps}), flush=True)  # fmt: skip
    _line("eval_cpu_s", new_cpu, old_cpu, "s", old_cpu / new_cpu)
    _line("eval_wall_s", new_wall, old_wall, "s", old_wall / new_wall)
    if batched_invariant:
        _line("eval_cpu_s_batched_invariant", inv_cpu, old_cpu, "s", old_cpu / inv_cpu)
    # the concurrent evaluation's episodes against the sequential ones, same seeds: replay them
    held_ids, held_seeds = runs(held)
    seen_ids, seen_seeds = runs(seen)
    ids = held_ids + seen_ids + [p.task_id for p in prefixes]
    seeds = held_seeds + seen_seeds + [episode_seed(seed, p.task_id, p.episode, "recovery") for p in prefixes]
    replays = [()] * (len(held_ids) + len(seen_ids)) + [p.actions for p in prefixes]
    from train_service.evaluation import shared_passes

    policy = HFPolicy.from_folder(model, device="cpu")
    with shared_passes(policy, True):
        concurrent = await play(policy, opener, ids, cfg, seeds=seeds, prefixes=replays)
    await policy.close()
    flat_old = old[0] + old[2] + old[1]  # held-out, seen, recovery order
    same = sum(a.actions == b.actions for a, b in zip(concurrent, flat_old, strict=True)) / len(flat_old)
    _line("episodes_identical_share", same, 1.0, "share", same)
    old_seen = old[2]
    for metric, ours, baseline in (
        ("held_out_success", new["success_rate"], _success(old[0])),
        ("seen_success", new["seen"]["success_rate"], _success(old_seen)),
    ):
        _line(metric, ours, baseline, "share", ours / baseline if baseline else 1.0 if not ours else 0.0)


def _success(results: list[Any]) -> float:
    from core.domain.metrics import summarize

    return float(summarize(results)["success_rate"])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the --quick run's model, 5 goals (< 1 minute)")
    parser.add_argument("--home", default="", help="AGENTR_HOME whose cached warm start to reuse")
    parser.add_argument(
        "--batched-invariant",
        action="store_true",
        help="also time one batch per turn with batch-invariant passes",
    )
    args = parser.parse_args()
    if args.home:
        asyncio.run(main(args.quick, Path(args.home), args.batched_invariant))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            asyncio.run(main(args.quick, Path(tmp), args.batched_invariant))
