"""Benchmark: the hf backend's cross-call prefix cache (core.llm.kv_prefix) against no cache, on the
default demo's two model-heavy phases, side by side in one run, same model, seeds and episodes.

- evaluation: one model's concurrent evaluation as ``agentr run`` plays it: every turn's prompt is
  the episode so far, so without the cache each turn prefills the whole history again;
- search: MCTS trees on the first ``--trees`` searched goals with the demo's search settings (every
  expansion's prompt is its node's path; siblings and children share it).
(bench/hf_workloads.py owns both.)

Each is run with the cache (ours, the default) and with ``prefix_cache_mb = 0`` (baseline); the
order alternates per phase so neither always runs on a warmer machine. Prints JSON lines:
``<phase>_cpu_s`` (``time.process_time``; ratio = no cache / cache, the figure that holds on a loaded
machine: torch runs single-threaded), ``<phase>_prefill_share`` (prompt tokens actually computed
/ prompt tokens in the calls; baseline 1.0), and ``<phase>_same_share`` (share of episodes or trees
whose actions are identical with and without the cache: the cached prefill is exact between its
own cold and warm calls, but not bit-identical to ONE unchunked pass, so a near-tied sample can
flip; informational).

Default: the default demo's warm-started tiny model (built and cached under ``--home``, as
``agentr run`` does). ``--quick``: the ``--quick`` run's model and 2 trees (about a minute).
Usage: OMP_NUM_THREADS=1 python bench/prefix_cache.py [--quick] [--home DIR] [--trees N]
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hf_workloads import Work, in_home, line, same_share, side_by_side, workload_arguments, workloads  # noqa: E402


class PromptTokens:
    """Counts the prompt tokens a policy is asked to prefill (wraps ``HFPolicy.generate``)."""

    def __init__(self, policy: Any) -> None:
        self.total = 0
        inner = policy.generate

        async def generate(prompts: Sequence[Any], *args: Any, **kwargs: Any) -> Any:
            self.total += sum(len(policy.encode(p)) if isinstance(p, str) else len(p) for p in prompts)
            return await inner(prompts, *args, **kwargs)

        policy.generate = generate


async def _measured(model: str, cache_mb: int, work: Work) -> tuple[list[Any], float, float]:
    """(work's action lists, CPU seconds, share of prompt tokens computed) on a fresh policy."""
    from core.llm.hf import HFPolicy

    policy = HFPolicy.from_folder(model, device="cpu", prefix_cache_mb=cache_mb)
    counter = PromptTokens(policy)
    cpu = time.process_time()
    actions = await work(policy)
    spent = time.process_time() - cpu
    store = policy.prefix_cache
    share = store.stats.computed_tokens / counter.total if store is not None and counter.total else 1.0
    await policy.close()
    return actions, spent, share


async def main(quick: bool, home: Path, trees: int) -> None:
    import torch

    torch.set_num_threads(1)
    model, works, info = workloads(quick, home, trees)
    print(json.dumps(info), flush=True)

    async def measure(cache_mb: int, work: Work) -> tuple[Any, ...]:
        return await _measured(model, cache_mb, work)

    async for phase, (on_actions, on_cpu, on_share), (off_actions, off_cpu, _) in side_by_side(
        works, 512, 0, measure
    ):
        line(f"{phase}_cpu_s", on_cpu, off_cpu, "s", off_cpu / on_cpu)
        line(f"{phase}_prefill_share", on_share, 1.0, "share", 1.0 / on_share if on_share else 0.0)
        same = same_share(on_actions, off_actions)
        line(f"{phase}_same_share", same, 1.0, "share", same)


if __name__ == "__main__":
    parser = workload_arguments(__doc__.splitlines()[0], 6, model=False)
    args = parser.parse_args()
    n_trees = args.trees or (2 if args.quick else 6)
    in_home(args.home, lambda home: main(args.quick, home, n_trees))
