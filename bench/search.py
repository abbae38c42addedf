"""Search engine costs, measured side by side in one run on TextCraft with the noisy-expert policy.

1. Environment steps per expansion: returning to a node's state by ``clone()`` (one restored state
   per expanded node, cloned per candidate) against replay from reset for every candidate (what an
   environment without clone needs, and what the paper's code did). Both searches build the very
   same trees (same seeds), so the counts compare like with like. Lower is better: ratio =
   replay / clone.
2. The search framework's own overhead per created node (wall time minus time in the policy and the
   environment: prompt building, parsing, dedup, UCT, tree bookkeeping, event construction) against
   the environment's own time per step on the same run. Ratio = env step time / overhead per node:
   TextCraft steps take microseconds, so a ratio below 1 is expected; against a real model or an
   HTTP environment the overhead is negligible.
3. Policy calls reaching the backend when several trees are searched concurrently through
   ``BatchingPolicy`` against one backend call per expansion. Ratio = unbatched / batched calls.
4. ``good_leaves_per_100_calls``: distinct good leaves (reward >= alpha = 1.0, each one a
   ``GoodTrajectoryFound``) per 100 policy calls, searching that keeps what it sees (every terminal
   child a leaf at once, closed nodes never selected: the default) against the old leaf-only rule
   (``SearchConfig(record_terminal_children=False)``), same train goals, seeds and budget (8
   descents, depth 8), noisy expert with mistake rate 0.5. Ratio = ours / baseline.

Prints one JSON line per comparison: {"metric", "ours", "baseline", "unit", "ratio"}.
Usage: python bench/search.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.domain.events import NewEvent  # noqa: E402
from core.domain.mcts import SearchConfig  # noqa: E402
from core.domain.pairs import good_leaves  # noqa: E402
from core.envs.textcraft import TextCraftEnv  # noqa: E402
from search_service.batching import BatchingPolicy  # noqa: E402
from search_service.engine import TreeRequest, TreeSearch  # noqa: E402
from search_service.noisy_expert import NoisyExpertPolicy  # noqa: E402


def emit(metric: str, ours: float, baseline: float, unit: str, ratio: float) -> None:
    line = {
        "metric": metric,
        "ours": round(ours, 3),
        "baseline": round(baseline, 3),
        "unit": unit,
        "ratio": round(ratio, 3),
    }
    print(json.dumps(line), flush=True)


async def _discard(_events: Sequence[NewEvent]) -> None:
    return None


async def run_trees(task_ids: list[str], config: SearchConfig, *, use_clone: bool) -> list[TreeSearch]:
    engines = []
    for task_id in task_ids:
        request = TreeRequest(f"bench-{task_id}", "textcraft", task_id, "noisy-expert", config)
        engine = TreeSearch(
            request, TextCraftEnv(), NoisyExpertPolicy(mistake_rate=0.3), _discard, use_clone=use_clone
        )
        await engine.run()
        engines.append(engine)
    return engines


async def good_leaves_per_calls(task_ids: list[str], *, keep: bool) -> tuple[int, int, int, int, int]:
    """(good leaves, policy calls, pairs, successes stepped, trees that stepped a success but
    recorded none) over ``task_ids`` with the given leaf rule."""
    config = SearchConfig(
        iterations=8, max_depth=8, alpha=1.0, beta=0.5, seed=0, record_terminal_children=keep
    )
    goods = calls = pairs = stepped = lost_trees = 0
    for task_id in task_ids:
        request = TreeRequest(f"bench-g{task_id}", "textcraft", task_id, "noisy-expert", config)
        engine = TreeSearch(request, TextCraftEnv(), NoisyExpertPolicy(mistake_rate=0.5), _discard)
        tree = await engine.run()
        found = len(good_leaves(tree, config.alpha))
        successes = sum(1 for n in tree.nodes.values() if n.done and n.reward >= config.alpha)
        goods += found
        stepped += successes
        lost_trees += int(successes > 0 and found == 0)
        calls += engine.stats.policy_calls
        pairs += sum(1 for e in engine.final_events() if type(e.event).__name__ == "PairFound")
    return goods, calls, pairs, stepped, lost_trees


async def main(quick: bool) -> None:
    env = TextCraftEnv()
    count = 12 if quick else 60
    ids = env.task_ids("all")
    task_ids = [ids[(i * len(ids)) // count] for i in range(count)]  # spread over depths 1-4
    config = SearchConfig(iterations=8, max_depth=20, alpha=1.0)

    train = env.task_ids("train")
    goals = [train[(i * len(train)) // (10 if quick else 30)] for i in range(10 if quick else 30)]
    new_goods, new_calls, new_pairs, new_stepped, new_lost = await good_leaves_per_calls(goals, keep=True)
    old_goods, old_calls, old_pairs, old_stepped, old_lost = await good_leaves_per_calls(goals, keep=False)
    ours, baseline = 100 * new_goods / new_calls, 100 * old_goods / old_calls
    print(
        f"# good leaves on {len(goals)} train goals: keep-what-it-sees {new_goods} of {new_stepped} successes"
        f" stepped, in {new_calls} calls ({new_pairs} pairs, {new_lost} trees lost a seen success); leaf-only"
        f" {old_goods} of {old_stepped} in {old_calls} calls ({old_pairs} pairs, {old_lost} trees lost a seen"
        " success)",
        file=sys.stderr,
    )
    emit("good_leaves_per_100_calls", ours, baseline, "good leaves / 100 policy calls", ours / baseline)

    cloned = await run_trees(task_ids, config, use_clone=True)
    replayed = await run_trees(task_ids, config, use_clone=False)
    expansions = sum(e.stats.expansions for e in cloned)
    assert expansions == sum(e.stats.expansions for e in replayed), "the two modes built different trees"
    clone_steps = sum(e.states.steps for e in cloned) / expansions
    replay_steps = sum(e.states.steps for e in replayed) / expansions
    emit(
        "env steps per expansion (clone vs replay)",
        clone_steps,
        replay_steps,
        "steps",
        replay_steps / clone_steps,
    )

    # overhead per node: best of a few repeats of the clone-mode search
    best: tuple[float, float] | None = None
    for _ in range(2 if quick else 5):
        engines = await run_trees(task_ids, config, use_clone=True)
        created = sum(len(e.tree.nodes) - 1 for e in engines if e.tree is not None)
        total = sum(e.stats.search_seconds for e in engines)
        inside = sum(e.stats.policy_seconds + e.stats.env_seconds for e in engines)
        steps = sum(e.states.steps for e in engines)
        overhead_us = (total - inside) / created * 1e6
        step_us = sum(e.stats.env_seconds for e in engines) / steps * 1e6
        if best is None or overhead_us < best[0]:
            best = (overhead_us, step_us)
    assert best is not None
    emit("search overhead per node vs env step time", best[0], best[1], "us", best[1] / best[0])

    # cross-tree batching of policy calls
    inner = NoisyExpertPolicy(mistake_rate=0.3)
    batching = BatchingPolicy(inner, max_batch=64, window_s=0.002)
    engines = [
        TreeSearch(
            TreeRequest(f"bench-b{task_id}", "textcraft", task_id, "noisy-expert", config),
            TextCraftEnv(),
            batching,
            _discard,
        )
        for task_id in task_ids
    ]
    await asyncio.gather(*(engine.run() for engine in engines))
    unbatched = sum(e.stats.policy_calls for e in engines)
    emit(
        f"policy backend calls, {len(engines)} concurrent trees (batched vs one per expansion)",
        batching.stats.backend_calls,
        unbatched,
        "calls",
        unbatched / batching.stats.backend_calls,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a smaller run (under a minute)")
    args = parser.parse_args()
    started = time.perf_counter()
    asyncio.run(main(args.quick))
    print(f"# done in {time.perf_counter() - started:.1f}s", file=sys.stderr)
