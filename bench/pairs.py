"""Pair selection measured on the same trees: stratified (the default) against deepest (the baseline).

The scripted noisy expert (search_service/noisy_expert.py: the TextCraft expert solver with seeded
mistakes; model-free, so the bench takes seconds) searches every goal of the default ``agentr run``
(agentr.cli.demo: its goals, its environment and its search settings - candidates, descents, depth,
pair cap; free decoding, since a scripted policy cannot constrain its actions to the valid ones and
its invalid-action mistakes are part of what it is) once per seed. From EACH finished tree both
rules keep at most ``max_pairs_per_tree`` pairs (core.domain.pairs.select_pairs), so the two rules
see the very same candidates.

Prints one JSON line per setting: ``actions_after_divergence``: the mean number of bad actions after
the divergence per kept pair, stratified ("ours") against deepest ("baseline"), ratio = ours /
baseline; in the same line ``share_multi`` (the share of stratified pairs with >= 2 actions after
the divergence, where a critic can name something other than the only action),
``share_multi_baseline``, the pair counts, the trees and seeds. ``actions_after_divergence_depth20``:
the same at the paper's depth (20) with 16 descents and 8 pairs per tree, mistake rate 0.5. The
per-length histograms go to stderr.

Usage: python bench/pairs.py [--quick] [--seeds 0,1,2] [--mistake 0.3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentr.cli.demo import RunOptions, plan_run  # noqa: E402
from core.domain.events import NewEvent  # noqa: E402
from core.domain.mcts import SearchConfig, SearchTree  # noqa: E402
from core.domain.pairs import select_pairs  # noqa: E402
from core.envs.registry import open_env  # noqa: E402
from search_service.engine import TreeRequest, TreeSearch  # noqa: E402
from search_service.noisy_expert import NoisyExpertPolicy  # noqa: E402

ALPHA, BETA = 1.0, 0.5


async def _discard(_events: Sequence[NewEvent]) -> None:
    return None


async def search_trees(
    env_uri: str, goals: Sequence[str], seeds: Sequence[int], config: SearchConfig, mistake: float
) -> list[SearchTree]:
    """One tree per (seed, goal), searched by the noisy expert."""
    trees = []
    for seed in seeds:
        for goal in goals:
            seeded = SearchConfig.from_dict({**config.to_dict(), "seed": seed})
            request = TreeRequest(f"bench-pairs-{seed}-{goal}", env_uri, goal, "noisy-expert", seeded)
            policy = NoisyExpertPolicy(mistake_rate=mistake)
            trees.append(await TreeSearch(request, open_env(env_uri), policy, _discard).run())
    return trees


def suffixes(trees: Sequence[SearchTree], config: SearchConfig, selection: str) -> list[int]:
    """Actions after the divergence of every pair ``selection`` keeps, over ``trees``."""
    return [
        spec.actions_after_divergence
        for tree in trees
        for spec in select_pairs(tree, config.alpha, config.beta, config.max_pairs_per_tree, selection)
    ]


def compare(metric: str, trees: Sequence[SearchTree], config: SearchConfig, seeds: Sequence[int]) -> None:
    ours, base = suffixes(trees, config, "stratified"), suffixes(trees, config, "deepest")
    for name, values in (("stratified", ours), ("deepest", base)):
        histogram = sorted(Counter(values).items())
        print(
            f"# {metric} {name}: {len(values)} pairs, actions after the divergence {histogram}",
            file=sys.stderr,
        )
    mean_ours = sum(ours) / len(ours) if ours else 0.0
    mean_base = sum(base) / len(base) if base else 0.0
    line = {
        "metric": metric,
        "ours": round(mean_ours, 3),
        "baseline": round(mean_base, 3),
        "unit": "bad actions after the divergence per pair (mean)",
        "ratio": round(mean_ours / mean_base, 3) if mean_base else None,
        "share_multi": round(sum(v >= 2 for v in ours) / len(ours), 3) if ours else None,
        "share_multi_baseline": round(sum(v >= 2 for v in base) / len(base), 3) if base else None,
        "pairs": len(ours),
        "pairs_baseline": len(base),
        "trees": len(trees),
        "seeds": list(seeds),
        "search": {
            k: config.to_dict()[k] for k in ("n_candidates", "iterations", "max_depth", "max_pairs_per_tree")
        },
    }
    print(json.dumps(line), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="8 of the demo's goals")
    parser.add_argument("--seeds", default="0,1,2", help="search seeds (comma-separated)")
    parser.add_argument("--mistake", type=float, default=0.3, help="the noisy expert's mistake rate")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    plan = plan_run(RunOptions()).config
    goals = list(plan["tasks"])[:: 3 if args.quick else 1]
    known = set(SearchConfig.__dataclass_fields__)
    # the noisy expert is a scripted policy, not a model: it cannot constrain its Action lines to the
    # valid ones (core.llm.ports.CannotConstrain), and its mistakes (invalid crafts among them) are
    # what the bench measures, so the demo's constrained decoding is off here
    demo = SearchConfig.from_dict(
        {
            **{k: v for k, v in plan["search"].items() if k in known},
            "alpha": ALPHA,
            "beta": BETA,
            "constrain_actions": False,
        }
    )
    started = time.perf_counter()
    trees = asyncio.run(search_trees(plan["env"], goals, seeds, demo, args.mistake))
    compare("actions_after_divergence", trees, demo, seeds)
    deep = SearchConfig(
        n_candidates=4, iterations=16, max_depth=20, alpha=ALPHA, beta=BETA, max_pairs_per_tree=8
    )
    trees = asyncio.run(search_trees(plan["env"], goals, seeds, deep, 0.5))
    compare("actions_after_divergence_depth20", trees, deep, seeds)
    print(f"# done in {time.perf_counter() - started:.1f}s", file=sys.stderr)


if __name__ == "__main__":
    main()
