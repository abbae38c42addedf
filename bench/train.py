"""Benchmark: SFT training throughput (real, non-padding tokens per second) with and without packing.

Both runs train the same tiny Llama on the same mixed-length data (TextCraft expert episodes of
150-300 tokens plus short general chat turns, two per episode, shuffled: a dataset's mix of long
agent samples and short general samples) for the same number of epochs through
``train_service.sft.train_sft``, side by side in one process. "ours" = packing (fixed-length
blocks, per-sample attention), "baseline" = padded batches. Prints one JSON line:
{"metric", "ours", "baseline", "unit", "ratio"} with ratio = ours / baseline (higher is better).

Second line, ``ddp_2proc_vs_inline``: the same data and config (packing on, same per-device batch,
same epochs) trained by ``train.launcher: torchrun`` with 2 gloo processes (``ours``) and inline in
one process (``baseline``), both through ``run_train_iteration`` from the same dataset file; tokens/s
is the trainer's own (dataset tokens x epochs / training seconds, so process start-up and model
loading are not in it). Each process uses ``--threads`` torch threads: 2 processes use 2 cores.

Then the learners' lines of ``bench/learners.py`` (DPO tokens/s, ArCHer actor tokens/s and critic
updates/s next to SFT's, same episodes and model, trained side by side).

    python bench/train.py            # 3.4M-parameter model (hidden 256, 4 layers), 192 episodes
    python bench/train.py --quick    # smaller model and data, under a minute
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small model and data (< 1 minute)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    import torch

    torch.set_num_threads(args.threads)
    from core.domain.trajectory import Message, TrainingSample
    from core.envs.textcraft import TextCraftEnv
    from core.llm.tiny import build_tiny_model
    from train_service.sft import SFTConfig, train_sft
    from train_service.warm_start import expert_samples

    if args.quick:
        episodes, hidden, layers, batch = 32, 64, 2, 4
    else:
        episodes, hidden, layers, batch = 192, 256, 4, 8
    max_length, pack_length = 512, 320
    env = TextCraftEnv(distractors=4)
    samples = expert_samples(env, episodes, "train")
    chat = [
        TrainingSample(
            f"chat{i}",
            "general",
            (Message("user", f"Which item is task {i} about?"), Message("assistant", env.goal_of(str(i)), 1)),
        )
        for i in range(2 * episodes)
    ]
    samples = samples + chat
    random.Random(0).shuffle(samples)
    texts = [m.content for s in samples for m in s.messages]
    with tempfile.TemporaryDirectory(prefix="agentr-bench-train-") as tmp:
        root = Path(tmp)
        model = build_tiny_model(root / "base", texts, hidden=hidden, layers=layers, heads=4, vocab_size=1024)
        results = {}
        for packing in (False, True):
            cfg = SFTConfig(
                epochs=2,
                batch_size=batch,
                max_length=max_length,
                packing=packing,
                pack_length=pack_length,
                logging_steps=1000,
            )
            report = train_sft(model, samples, root / f"ckpt-{packing}", cfg)
            results[packing] = report.metrics
        ddp = launcher_comparison(root, model, samples, batch, max_length, pack_length, args.threads)
    ours, base = results[True]["tokens_per_s"], results[False]["tokens_per_s"]
    print(
        json.dumps(
            {
                "metric": "sft_training_tokens_per_s_packing_vs_padding",
                "ours": ours,
                "baseline": base,
                "unit": "tokens/s",
                "ratio": round(ours / base, 3) if base else None,
            }
        )
    )
    print(json.dumps(ddp))
    # DPO and ArCHer next to SFT on the same expert episodes (bench/learners.py; its own model)
    from learners import run_learner_bench

    for line in run_learner_bench(args.quick):
        print(json.dumps(line))


def launcher_comparison(
    root: Path, model: Path, samples: list, batch: int, max_length: int, pack_length: int, threads: int
) -> dict[str, object]:
    """tokens/s of 2 gloo torchrun processes vs 1 inline process on the same dataset file."""
    import os

    from core.formats.export import write_jsonl
    from train_service.celery_app import run_train_iteration

    dataset = root / "dataset.jsonl"
    write_jsonl(dataset, samples, "samples")
    config = {
        "epochs": 2,
        "batch_size": batch,
        "max_length": max_length,
        "packing": True,
        "pack_length": pack_length,
        "logging_steps": 1000,
    }
    os.environ["OMP_NUM_THREADS"] = str(threads)
    speeds = {}
    for name, launch in (("inline", {}), ("torchrun", {"launcher": "torchrun", "nproc_per_node": 2})):
        result = run_train_iteration(
            run_id=None,
            iteration=0,
            dataset_id=f"bench-{name}",
            dataset_path=str(dataset),
            model_path=str(model),
            out_dir=str(root / f"ckpt-{name}"),
            config=config,
            launch=launch,
        )
        speeds[name] = float(result["metrics"]["tokens_per_s"])
    ours, base = speeds["torchrun"], speeds["inline"]
    return {
        "metric": "ddp_2proc_vs_inline",
        "ours": ours,
        "baseline": base,
        "unit": "tokens/s",
        "ratio": round(ours / base, 3) if base else None,
    }


if __name__ == "__main__":
    main()
