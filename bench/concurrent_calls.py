"""Benchmark: one model copy serving two services at once (core/llm/hf.py: concurrent calls), as an
embedded ``agentr run``'s search and critic share one model (core/llm/policy_cache.py), against the
same copy serving one call at a time, side by side in one run.

The workload is the default demo's evaluation episodes and search trees (bench/hf_workloads.py)
played AT THE SAME TIME on one policy: their calls interleave as two services' calls do. Ours:
``concurrent_calls=2`` (the CPU default); baseline: ``concurrent_calls=1`` (the policy before: one
call at a time), the order alternating per repeat. Torch at ONE intra-op thread, as ``agentr run``
infers. Prints JSON lines: ``two_services_wall_s`` (ratio = one at a time / concurrent: the
speed-up, with the load seen), ``two_services_cpu_s`` (process CPU, ratio baseline / ours) and
``two_services_same_share`` (episodes and trees whose actions are identical under both: 1.0, each
call runs its own passes).

Default: the default demo's warm-started tiny model (built and cached under ``--home``), whose
decoding is bound by the GIL, so little is expected; ``--model FOLDER`` (e.g. SmolLM2-135M imported
by ``agentr model import``): longer kernels, where the overlap pays. ``--quick``: the quick run's
model and 2 trees.
Usage: python bench/concurrent_calls.py [--quick] [--home DIR] [--trees N] [--model DIR] [--repeats N]
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hf_workloads import Work, in_home, line, same_share, workload_arguments, workloads  # noqa: E402


async def _measured(model: str, calls: int, works: dict[str, Work]) -> tuple[list[Any], float, float]:
    """(both works' action lists, wall s, CPU s) with every work started at once on one fresh policy."""
    from core.llm.hf import HFPolicy

    policy = HFPolicy.from_folder(model, device="cpu", concurrent_calls=calls)
    wall, cpu = time.perf_counter(), time.process_time()
    parts = await asyncio.gather(*(work(policy) for work in works.values()))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    await policy.close()
    return [actions for part in parts for actions in part], wall, cpu


async def main(quick: bool, home: Path, trees: int, model_folder: str, repeats: int) -> None:
    import torch

    torch.set_num_threads(1)
    model, works, info = workloads(quick, home, trees)
    model = model_folder or model
    print(json.dumps({**info, "model": model, "repeats": repeats}), flush=True)
    load = os.getloadavg()[0]
    ours_wall = base_wall = ours_cpu = base_cpu = 0.0
    same = 1.0
    for repeat in range(repeats):
        order = (2, 1) if repeat % 2 == 0 else (1, 2)
        results = {calls: await _measured(model, calls, works) for calls in order}
        (ours, wall, cpu), (base, b_wall, b_cpu) = results[2], results[1]
        ours_wall, ours_cpu = ours_wall + wall, ours_cpu + cpu
        base_wall, base_cpu = base_wall + b_wall, base_cpu + b_cpu
        same = min(same, same_share(ours, base))
        load = max(load, os.getloadavg()[0])
    line("two_services_wall_s", ours_wall / repeats, base_wall / repeats, "s", base_wall / ours_wall,
         concurrent_calls=2, load=round(load, 2))  # fmt: skip
    line("two_services_cpu_s", ours_cpu / repeats, base_cpu / repeats, "s", base_cpu / ours_cpu)
    line("two_services_same_share", same, 1.0, "share", same)


if __name__ == "__main__":
    parser = workload_arguments(__doc__.splitlines()[0], 8)
    parser.add_argument("--repeats", type=int, default=2, help="measurements per setting (default 2)")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    n_trees = args.trees or (2 if args.quick else 8)
    in_home(args.home, lambda home: main(args.quick, home, n_trees, args.model, args.repeats))
