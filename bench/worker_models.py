"""Benchmark: the memory a worker's models take, ours against the naive way, measured side by side.

Two situations, each arm in a spawned process of its own (``paper.in_child``), the resident set
(VmRSS of /proc/self/status) read after every step:

- ``worker_rss_after_checkpoints``: a long-lived search / critic / splice worker serves one
  iteration's checkpoint after another (``--checkpoints`` distinct model folders; here links to the
  same weights, as each iteration's checkpoint is a new folder of the same size). Ours:
  ``core.llm.policy_cache.PolicyCache`` with ``max_open`` 2 (``AGENTR_MAX_OPEN_MODELS``' default).
  Baseline: the same cache with no bound (what the workers did before: every checkpoint they ever
  served stayed open).
- ``embedded_rss_three_services``: an embedded ``agentr run`` (search, critic and splice services
  in one process) using one model. Ours: one cache shared by the three. Baseline: one cache per
  service (three copies of the model).

Each step opens the model (if not open) and samples one short completion, so the prefix cache and
decode threads are in use as in a search. Prints one JSON line per situation: the RSS in MiB after
the last step, ratio = baseline / ours (higher is better), and the per-step RSS of both arms.

Usage: python bench/worker_models.py [--model FOLDER] [--checkpoints 4]
(default model: the tiny demo model, built in a temporary folder; SmolLM2-135M-Instruct imported
with ``agentr model import`` shows a real model's size).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

CONVERSATION = "Crafting commands:\ncraft 4 oak planks using 1 oak logs\nGoal: craft 4 oak planks."


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


async def _serve(refs: list[str], caches: int, max_open: int) -> list[float]:
    """Lease each of ``refs`` in turn from each of ``caches`` caches, sampling once per lease; the
    RSS after each ref."""
    from core.domain.trajectory import Message
    from core.llm.policy_cache import PolicyCache
    from core.llm.registry import open_policy

    pools = [PolicyCache(open_policy, max_open=max_open) for _ in range(caches)]
    conversation = [Message("user", CONVERSATION)]
    out = []
    for ref in refs:
        for pool in pools:
            async with pool.lease(ref) as policy:
                await policy.sample([conversation], n=1, max_tokens=8, seed=0)
        out.append(round(rss_mib(), 1))
    for pool in pools:
        await pool.close()
    return out


def serve(refs: list[str], caches: int, max_open: int) -> list[float]:
    import torch

    torch.set_num_threads(1)
    return asyncio.run(_serve(refs, caches, max_open))


def line(metric: str, ours: list[float], baseline: list[float], **extra: object) -> None:
    print(
        json.dumps(
            {
                "metric": metric,
                "ours": ours[-1],
                "baseline": baseline[-1],
                "unit": "MiB resident after the last step",
                "ratio": round(baseline[-1] / ours[-1], 2),
                "ours_per_step": ours,
                "baseline_per_step": baseline,
                **extra,
            }
        ),
        flush=True,
    )


def main() -> int:
    from paper import in_child

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="", help="model folder (default: the tiny demo model)")
    parser.add_argument("--checkpoints", type=int, default=4, help="checkpoints the worker serves in turn")
    args = parser.parse_args()
    if args.checkpoints < 3:
        parser.error("--checkpoints must be >= 3 (ours keeps 2 open)")
    with tempfile.TemporaryDirectory(prefix="bench-worker-models-") as tmp:
        model = Path(args.model).resolve() if args.model else None
        if model is None:
            from core.llm.tiny import build_tiny_model, default_corpus

            model = build_tiny_model(Path(tmp) / "tiny", default_corpus())
        if not (model / "config.json").is_file():
            parser.error(f"--model {model}: no config.json (a transformers model folder)")
        refs = []
        for index in range(args.checkpoints):  # one folder per iteration's checkpoint
            link = Path(tmp) / f"iter-{index}"
            link.symlink_to(model, target_is_directory=True)
            refs.append(str(link))
        arms = {
            "worker_ours": (refs, 1, 2),
            "worker_naive": (refs, 1, len(refs)),
            "embedded_ours": (refs[:1], 1, 2),
            "embedded_naive": (refs[:1], 3, 2),
        }
        got: dict[str, list[float]] = {}
        for name, arm in arms.items():
            value, code = in_child(serve, *arm)
            if value is None:
                raise SystemExit(f"arm {name}: its process died (exit code {code})")
            got[name] = value
        print(f"# model {model}", file=sys.stderr)
        line("worker_rss_after_checkpoints", got["worker_ours"], got["worker_naive"],
             checkpoints=len(refs), max_open=2)  # fmt: skip
        line("embedded_rss_three_services", got["embedded_ours"], got["embedded_naive"], services=3)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
