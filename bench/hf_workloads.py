"""The default demo's two model-heavy phases as benchmark workloads, shared by bench/prefix_cache.py
and bench/decode_threads.py: each is a coroutine over a policy that returns its actions (to check
that two settings behave the same).

- evaluation: one model's concurrent evaluation as ``agentr run`` plays it (held-out and seen goals
  x episodes, 12 actions at most): every turn's prompt is the episode so far;
- search: MCTS trees on the first ``trees`` searched goals with the demo's search settings, searched
  at once through ``BatchingPolicy`` as the search service does (concurrent trees' expansions become
  one backend call).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from evaluation import _setup  # noqa: E402  (bench/evaluation.py: the demo's model, goals, EvalConfig)

Work = Callable[[Any], Awaitable[list[Any]]]


def line(metric: str, ours: float, baseline: float, unit: str, ratio: float, **extra: Any) -> None:
    """One JSON line of a comparison (the benches' output format)."""
    print(json.dumps({"metric": metric, "ours": round(ours, 4), "baseline": round(baseline, 4),
                      "unit": unit, "ratio": round(ratio, 3), **extra}), flush=True)  # fmt: skip


def same_share(ours: Sequence[Any], baseline: Sequence[Any]) -> float:
    """Share of episodes or trees whose actions are identical under both settings."""
    return sum(a == b for a, b in zip(ours, baseline, strict=True)) / len(ours)


async def side_by_side(
    works: dict[str, Work],
    ours: Any,
    baseline: Any,
    measured: Callable[[Any, Work], Awaitable[tuple[Any, ...]]],
) -> AsyncIterator[tuple[str, tuple[Any, ...], tuple[Any, ...]]]:
    """Each phase measured under both settings, the order alternating per phase (so neither always
    runs on a warmer machine): (phase, ``measured(ours, work)``, ``measured(baseline, work)``)."""
    for index, (phase, work) in enumerate(works.items()):
        order = (ours, baseline) if index % 2 == 0 else (baseline, ours)
        results = [await measured(setting, work) for setting in order]
        first, second = results if index % 2 == 0 else results[::-1]
        yield phase, first, second


def workload_arguments(
    description: str, default_trees: int, *, model: bool = True
) -> argparse.ArgumentParser:
    """A parser with the options every workload bench shares: --quick, --home, --trees [, --model]."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="the --quick run's model and 2 trees")
    parser.add_argument("--home", default="", help="AGENTR_HOME whose cached warm start to reuse")
    parser.add_argument(
        "--trees", type=int, default=0, help=f"searched goals (default {default_trees}; --quick 2)"
    )
    if model:
        parser.add_argument("--model", default="", help="a model folder instead of the demo's tiny model")
    return parser


def in_home(home: str, main: Callable[[Path], Coroutine[Any, Any, None]]) -> None:
    """Run ``main(home)`` in ``home``, or in a temporary folder removed afterwards when it is ""."""
    if home:
        asyncio.run(main(Path(home)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(main(Path(tmp)))


def workloads(quick: bool, home: Path, trees: int) -> tuple[str, dict[str, Work], dict[str, Any]]:
    """(model folder, {"evaluation": work, "search": work}, what they run) of the demo or --quick."""
    from agentr.cli.demo import RunOptions, plan_run
    from core.domain.config import RunConfig
    from core.domain.eval_protocol import episode_seed
    from core.domain.mcts import SearchConfig
    from core.envs.registry import open_env
    from search_service.batching import BatchingPolicy
    from search_service.engine import TreeRequest, TreeSearch
    from train_service.evaluation import play

    model, env_uri, held, seen, cfg = _setup(quick, home)
    config = RunConfig.from_data(plan_run(RunOptions(quick=quick)).config)
    ids = [t for t in held + seen for _ in range(cfg.episodes_per_task)]
    seeds = [episode_seed(0, t, e) for t in held + seen for e in range(cfg.episodes_per_task)]

    async def evaluation(policy: Any) -> list[Any]:
        results = await play(policy, lambda: open_env(env_uri), ids, cfg, seeds=seeds)
        return [r.actions for r in results]

    goals = (list(config.tasks) or seen)[:trees]  # the searched goals (seen ones: a subset of them)
    search_config = SearchConfig.from_dict({**dict(config.search), "seed": config.seed})

    async def search(policy: Any) -> list[Any]:
        batched = BatchingPolicy(policy, max_batch=8)  # the search service's default concurrency

        async def discard(_events: Sequence[Any]) -> None:
            return None

        async def one(task_id: str) -> Any:
            request = TreeRequest(f"bench-{task_id}", env_uri, task_id, model, search_config)
            tree = await TreeSearch(request, open_env(env_uri), batched, discard).run()
            return sorted((n.depth, n.action or "") for n in tree.nodes.values())

        return list(await asyncio.gather(*(one(t) for t in goals)))

    info = {"model": model, "episodes": len(ids), "max_steps": cfg.max_steps, "trees": len(goals),
            "search": config.search}  # fmt: skip
    return model, {"evaluation": evaluation, "search": search}, info
