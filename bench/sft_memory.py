"""Benchmark: peak resident memory of one SFT on a pretrained model, in micro-batches of 2
accumulated to 8 (ours: what ``agentr run --model`` trains with, agentr.cli.demo.REAL_MODEL_MICRO_BATCH)
vs one batch of 8 (the baseline), side by side in one command, each in a process of its own.

Same dataset, steps (2 epochs), learning rate (5e-5), max_length 768 and packing as ``agentr run
--model``'s iteration SFT; torch at 2 threads. Prints JSON lines ``sft_peak_rss_mib`` (ratio =
baseline / ours) and ``sft_seconds`` (process wall for the training, ratio baseline / ours).
Usage: python bench/sft_memory.py --model FOLDER --dataset ITER.jsonl [--mixed-bf16]
(a dataset: ``<home>/runs/<run>/datasets/iter-0.jsonl`` of an ``agentr run --model`` run)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _child(model: str, dataset: str, micro: int, mixed: bool, out: str) -> None:
    import torch

    from core.formats.export import read_samples_jsonl
    from train_service.hf_trainer import TrainJob
    from train_service.sft import SFTConfig, train_sft

    torch.set_num_threads(2)
    cfg = SFTConfig(epochs=2.0, learning_rate=5e-5, batch_size=micro, grad_accumulation=8 // micro,
                    max_length=768, packing=True, mixed_bf16=mixed, logging_steps=1)  # fmt: skip
    start = time.monotonic()
    train_sft(TrainJob(model, out), list(read_samples_jsonl(dataset)), cfg)
    seconds = time.monotonic() - start
    hwm = next(
        line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM")
    )
    print(json.dumps({"peak_mib": int(hwm.split()[1]) // 1024, "seconds": round(seconds, 1)}))


def measure(model: str, dataset: str, micro: int, mixed: bool, out: str) -> dict[str, float]:
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); sys.path.insert(0, {str(ROOT / 'bench')!r}); "
    code += f"from sft_memory import _child; _child({model!r}, {dataset!r}, {micro}, {mixed}, {out!r})"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a pretrained model folder")
    parser.add_argument("--dataset", required=True, help="an iteration's dataset (.jsonl)")
    parser.add_argument("--mixed-bf16", action="store_true", help="mixed bfloat16 (a CPU with native bf16)")
    args = parser.parse_args()
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        ours = measure(args.model, args.dataset, 2, args.mixed_bf16, f"{tmp}/ours")
        base = measure(args.model, args.dataset, 8, args.mixed_bf16, f"{tmp}/base")
    for metric, key in (("sft_peak_rss_mib", "peak_mib"), ("sft_seconds", "seconds")):
        print(json.dumps({"metric": metric, "ours": ours[key], "baseline": base[key], "unit": key,
                          "ratio": round(base[key] / ours[key], 2), "micro_batch": 2,
                          "mixed_bf16": args.mixed_bf16}), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
