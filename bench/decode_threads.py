"""Benchmark: the hf backend's decode threads (core/llm/hf.py) against one prompt at a time, on the
default demo's evaluation and search (bench/hf_workloads.py), side by side in one run: same model,
seeds, episodes and trees, torch at ONE intra-op thread as ``agentr run`` infers.

Each phase runs with ``--threads`` decode threads (ours, default 2) and with 1 (baseline, the
backend's default), the order alternating per phase. Prints JSON lines: ``<phase>_wall_s`` (ratio =
one at a time / threads: the speed-up; wall time is the point of threads, so the machine's load is
printed with it), ``<phase>_cpu_s`` (process CPU; ratio baseline / ours, below 1 when the threads
contend), and ``<phase>_same_share`` (share of episodes or trees whose actions are identical: 1.0 by
construction, each prompt decodes alone with its own generator).

Default: the default demo's warm-started tiny model (built and cached under ``--home``, as
``agentr run`` does). ``--quick``: the ``--quick`` run's model and 2 trees (about a minute).
``--model FOLDER``: the same episodes and trees on another model (e.g. SmolLM2 imported by
``agentr model import``), whose longer kernels leave the GIL more often.
Usage: python bench/decode_threads.py [--quick] [--home DIR] [--trees N] [--threads N] [--model DIR]
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hf_workloads import Work, in_home, line, same_share, side_by_side, workload_arguments, workloads  # noqa: E402


async def _measured(model: str, threads: int, work: Work) -> tuple[list[Any], float, float, int]:
    """(work's action lists, wall s, CPU s, decode threads used) on a fresh policy."""
    from core.llm.hf import HFPolicy

    policy = HFPolicy.from_folder(model, device="cpu", decode_threads=threads)
    wall, cpu = time.perf_counter(), time.process_time()
    actions = await work(policy)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    used = policy.decode_threads()
    await policy.close()
    return actions, wall, cpu, used


async def main(quick: bool, home: Path, trees: int, threads: int, model_folder: str) -> None:
    import torch

    torch.set_num_threads(1)
    model, works, info = workloads(quick, home, trees)
    model = model_folder or model  # --model: the same episodes and trees on another model
    print(json.dumps({**info, "model": model}), flush=True)
    load = os.getloadavg()[0]

    async def measure(setting: int, work: Work) -> tuple[Any, ...]:
        return await _measured(model, setting, work)

    async for phase, (ours, wall, cpu, used), (base, base_wall, base_cpu, _) in side_by_side(
        works, threads, 1, measure
    ):
        load = round(max(load, os.getloadavg()[0]), 2)
        line(f"{phase}_wall_s", wall, base_wall, "s", base_wall / wall, threads=used, load=load)
        line(f"{phase}_cpu_s", cpu, base_cpu, "s", base_cpu / cpu, threads=used)
        same = same_share(ours, base)
        line(f"{phase}_same_share", same, 1.0, "share", same)


if __name__ == "__main__":
    parser = workload_arguments(__doc__.splitlines()[0], 8)
    parser.add_argument("--threads", type=int, default=2, help="decode threads of 'ours' (default 2)")
    args = parser.parse_args()
    if args.threads < 2:
        parser.error("--threads must be >= 2 (1 is the baseline)")
    n_trees = args.trees or (2 if args.quick else 8)
    in_home(args.home, lambda home: main(args.quick, home, n_trees, args.threads, args.model))
