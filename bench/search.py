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

5. ``search_model_utilisation`` (``--model``; needs the ml extra): generated tokens per second that
   MCTS gets out of the local transformers backend (core.llm.hf.HFPolicy on a tiny random-init
   Llama, CPU) against the same backend's raw batched ``generate`` on the very same calls: every
   policy call the searches made (same prompts as token ids, same n, max_tokens, seeds and action
   constraints) replayed straight into ``HFPolicy.generate`` of a second instance of the backend,
   each right after the search made it (both sides under the same load; the second instance's
   prefix cache sees the same calls in the same order), prompts rendered and tokenised before its
   clock starts; the replays' time is taken out of the search's. Same seeds give the same tokens,
   so the two sides count the same work. ratio = ours / baseline. The rest of the search's wall
   time is broken down on stderr and in the metric text: the policy call beyond raw generate (chat
   template, tokenising, the thread hop), fitting the prompt to the context (token counting),
   environment steps, event appends (the sink: a real PostgreSQL event store when AGENTR_TEST_PG
   reaches one, else none) and the tree bookkeeping (selection, parsing, dedup, event
   construction).

Prints one JSON line per comparison: {"metric", "ours", "baseline", "unit", "ratio"}.
Usage: python bench/search.py [--quick] [--model | --model-only]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.domain.events import NewEvent  # noqa: E402
from core.domain.mcts import SearchConfig  # noqa: E402
from core.domain.pairs import good_leaves  # noqa: E402
from core.envs.textcraft import TextCraftEnv  # noqa: E402
from core.llm.ports import SamplingParams  # noqa: E402
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


class _Interleaved:
    """A policy passed through that replays each sampling call, right after it, on the baseline:
    a second instance of the same backend (its own prefix cache, seeing the same calls in the same
    order), prompts rendered and tokenised before the baseline's clock starts and ``generate``
    timed alone. Interleaving keeps both sides under the same load. Also times the prompt fitting's
    token counts."""

    def __init__(self, inner: Any, raw: Any) -> None:
        self.inner = inner
        self.raw = raw
        self.calls = 0
        self.tokens = 0
        self.raw_tokens = 0
        self.raw_seconds = 0.0  # the baseline's generate calls
        self.replay_seconds = 0.0  # everything the replay added to the search's wall time
        self.count_seconds = 0.0

    @property
    def model_version(self) -> str:
        return str(self.inner.model_version)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _timed(self, fn: Any, *args: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.count_seconds += time.perf_counter() - started

    def prompt_tokens(self, conversation: Any) -> int:
        return int(self._timed(self.inner.prompt_tokens, conversation))

    def count_tokens(self, text: str) -> int:
        return int(self._timed(self.inner.count_tokens, text))

    async def sample(self, conversations: Any, n: int = 1, **options: Any) -> Any:
        out = await self.inner.sample(conversations, n, **options)
        await self._replay(conversations, None, n, options, out)
        return out

    async def sample_actions(
        self, conversations: Any, actions: Any, params: SamplingParams = SamplingParams()
    ) -> Any:
        out = await self.inner.sample_actions(conversations, actions, params)
        options = {"temperature": params.temperature, "max_tokens": params.max_tokens, "seed": params.seed}
        await self._replay(conversations, actions, params.n, options, out)
        return out

    async def _replay(
        self, conversations: Any, actions: Any, n: int, options: dict[str, Any], out: Any
    ) -> None:
        began = time.perf_counter()
        self.calls += 1
        self.tokens += sum(c.tokens for row in out for c in row)
        ids = [self.raw.encode(self.raw.render(c)) for c in conversations]
        temperature, max_tokens = options.get("temperature", 1.0), options.get("max_tokens", 64)
        started = time.perf_counter()
        samples = await self.raw.generate(
            ids, n, temperature, max_tokens, options.get("seed"), None, False, actions=actions
        )
        self.raw_seconds += time.perf_counter() - started
        self.raw_tokens += sum(s.completion.tokens for row in samples for s in row)
        self.replay_seconds += time.perf_counter() - began


async def _pg_sink() -> tuple[Any, Any]:
    """A sink appending to a throwaway PostgreSQL event store (and its cleanup), or (_discard, None)."""
    import os
    import uuid

    admin = os.environ.get("AGENTR_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
    try:
        import asyncpg

        conn = await asyncpg.connect(admin, timeout=3)
    except Exception:  # noqa: BLE001 - no database here: time the search without appends
        return _discard, None
    name = "agentr_bench_search_" + uuid.uuid4().hex[:8]
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    from core.store.factory import open_store

    url = f"{admin.rsplit('/', 1)[0]}/{name}".replace("postgresql://", "postgresql+asyncpg://")
    store = await open_store(url, create_tables=True)

    async def sink(events: Sequence[NewEvent]) -> None:
        await store.append(list(events))

    async def cleanup() -> None:
        await store.close()
        conn = await asyncpg.connect(admin)
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.close()

    return sink, cleanup


async def model_utilisation(quick: bool) -> None:
    """Print ``search_model_utilisation`` (module docstring, item 5)."""
    import tempfile

    from core.domain.trajectory import Message
    from core.llm.hf import HFPolicy
    from core.llm.tiny import build_tiny_model, default_corpus

    env = TextCraftEnv()
    train = env.task_ids("train")
    trees = 4 if quick else 12
    task_ids = [train[(i * len(train)) // trees] for i in range(trees)]
    config = SearchConfig(
        iterations=4 if quick else 8, max_depth=8, alpha=1.0, seed=0, constrain_actions=True
    )
    sink, cleanup = await _pg_sink()
    with tempfile.TemporaryDirectory(prefix="agentr-bench-tiny-") as folder:
        tiny = build_tiny_model(
            Path(folder) / "tiny", default_corpus(), hidden=64, layers=2, heads=4, vocab_size=512
        )
        inner = HFPolicy.from_folder(tiny, device="cpu")
        raw = HFPolicy.from_folder(tiny, device="cpu")
        try:
            policy = _Interleaved(inner, raw)
            sink_seconds = 0.0

            async def timed_sink(events: Sequence[NewEvent]) -> None:
                nonlocal sink_seconds
                started = time.perf_counter()
                await sink(events)
                sink_seconds += time.perf_counter() - started

            for warm in (inner, raw):
                await warm.sample([[Message("user", "warm up")]], n=1, max_tokens=4, seed=0)
            engines = []
            for task_id in task_ids:
                request = TreeRequest(f"bench-m{task_id}", "textcraft", task_id, "tiny", config)
                engine = TreeSearch(request, TextCraftEnv(), policy, timed_sink)  # type: ignore[arg-type]
                await engine.run()
                engines.append(engine)
        finally:
            await inner.close()
            await raw.close()
            if cleanup is not None:
                await cleanup()
    # the replays ran inside the search's policy calls: their time is not the search's
    search_s = sum(e.stats.search_seconds for e in engines) - policy.replay_seconds
    policy_s = sum(e.stats.policy_seconds for e in engines) - policy.replay_seconds
    env_s = sum(e.stats.env_seconds for e in engines)
    raw_s, raw_tokens = policy.raw_seconds, policy.raw_tokens
    ours, baseline = policy.tokens / search_s, raw_tokens / raw_s
    parts = {
        "raw generate": raw_s,
        "policy call beyond raw generate": policy_s - raw_s,
        "prompt fitting (token counts)": policy.count_seconds,
        "env steps": env_s,
        "event appends": sink_seconds,
        "tree bookkeeping": search_s - policy_s - env_s - sink_seconds - policy.count_seconds,
    }
    breakdown = ", ".join(f"{k} {100 * v / search_s:.1f}%" for k, v in parts.items())
    print(
        f"# model utilisation: {len(engines)} trees, {policy.calls} policy calls "
        f"(n={config.n_candidates}, max_tokens={config.max_tokens}), {policy.tokens} tokens in search "
        f"vs {raw_tokens} replayed; search {search_s:.2f}s: {breakdown}; "
        f"appends to {'PostgreSQL' if cleanup else 'nothing'}",
        file=sys.stderr,
    )
    emit(
        f"search_model_utilisation (tiny model, CPU; search wall {search_s:.1f}s = {breakdown})",
        ours,
        baseline,
        "generated tokens/s",
        ours / baseline,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a smaller run (under a minute)")
    parser.add_argument("--model", action="store_true", help="also search_model_utilisation (ml extra)")
    parser.add_argument("--model-only", action="store_true", help="only search_model_utilisation")
    args = parser.parse_args()
    started = time.perf_counter()
    if not args.model_only:
        asyncio.run(main(args.quick))
    if args.model or args.model_only:
        asyncio.run(model_utilisation(args.quick))
    print(f"# done in {time.perf_counter() - started:.1f}s", file=sys.stderr)
