"""Benchmark: training throughput of every learner, side by side in one process on the same data.

One tiny Llama and one set of TextCraft expert episodes (plus short general chat turns, two per
episode) serve every line; all JSON lines are {"metric", "ours", "baseline", "unit", "ratio"} with
ratio = ours / baseline (higher is better).

* ``sft_training_tokens_per_s_packing_vs_padding`` (section ``packing``): SFT through
  ``train_service.sft.train_sft`` on the mixed-length data (episodes of 150-300 tokens and the chat
  turns, shuffled), packed blocks with per-sample attention (ours) vs padded batches (baseline),
  same epochs; real, non-padding tokens per second.
* ``ddp_2proc_vs_inline`` (section ``ddp``): the same data and config (packing on, same per-device
  batch, same epochs) trained by ``train.launcher: torchrun`` with 2 gloo processes (ours) and
  inline in one process (baseline), both through ``run_train_iteration`` from the same dataset
  file; tokens/s is the trainer's own (dataset tokens x epochs / training seconds: process start-up
  and model loading are not in it). Each process uses ``--threads`` torch threads.
* the learners (section ``learners``): the first ``learner episodes`` of the same episodes in three
  views, SFT samples (every assistant turn trained), DPO pairs (diverging after the first action:
  chosen = the expert's continuation, rejected = an invalid action the environment refuses) and
  ArCHer transitions (one per step, terminal reward 1), each trained on the same model with the
  same per-step batch:

  - ``dpo_training_tokens_per_s_vs_sft``: DPO tokens/s (both sides of every pair x epochs / training
    seconds plus the frozen reference's one pass) vs SFT tokens/s (the trainer's own count);
  - ``archer_actor_tokens_per_s_vs_sft``: tokens through the actor's updates per second of actor
    update time (history + turn; includes the critic's advantage pass and the KL reference pass)
    vs SFT tokens/s;
  - ``archer_critic_updates_per_s_vs_sft_steps``: critic optimizer steps (each over ``batch``
    transitions: state, action and next-state encodings, target pass, Polyak update) per second vs
    SFT optimizer steps per second at the same batch size.

  A ratio below 1 is expected there: these learners do more work per token than SFT (a reference
  or a critic beside the actor); the lines say how much more.

    python bench/train.py            # hidden 256 x 4 layers, 192 episodes (learners: 96)
    python bench/train.py --quick    # hidden 64 x 2 layers, 32 episodes (learners: 16)
    python bench/train.py --only learners   # one section (packing, ddp, learners; comma-separated)

* ``sft_steps_per_s_mixed_bf16_vs_fp32`` and ``sft_loss_mixed_bf16_vs_fp32`` (section
  ``precision``): the same SFT (packing, same steps, same seed) under ``mixed_bf16`` (fp32 weights,
  the MLP blocks in bfloat16 autocast, train_service/precision.py) and in fp32, one after the other;
  optimizer steps per second, and the trained model's mean loss on the training samples evaluated
  in fp32 (a ratio above 1 there means mixed_bf16 trained WORSE). ``native_bf16`` says whether
  this CPU multiplies bfloat16 natively (on one that does not, expect a ratio below 1).

The learner comparison on whole runs (held-out success, recovery) is ``bench/learners.py``.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SECTIONS = ("packing", "ddp", "learners", "precision")


def _line(metric: str, ours: float, baseline: float, unit: str) -> dict[str, Any]:
    return {
        "metric": metric,
        "ours": ours,
        "baseline": baseline,
        "unit": unit,
        "ratio": round(ours / baseline, 3) if baseline else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small model and data (about a minute)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument(
        "--only", default=",".join(SECTIONS), help=f"sections to run, comma-separated ({', '.join(SECTIONS)})"
    )
    args = parser.parse_args()
    sections = [s.strip() for s in args.only.split(",") if s.strip()]
    if not sections or set(sections) - set(SECTIONS):
        parser.error(f"--only takes {', '.join(SECTIONS)}, got {args.only!r}")
    logging.basicConfig(level=logging.WARNING)

    import torch

    torch.set_num_threads(args.threads)
    from core.domain.good_samples import trajectory_to_sample
    from core.domain.trajectory import Message, TrainingSample
    from core.envs.textcraft import TextCraftEnv
    from core.llm.tiny import build_tiny_model
    from train_service.warm_start import expert_trajectories

    if args.quick:
        episodes, learner_episodes, hidden, layers, batch = 32, 16, 64, 2, 4
    else:
        episodes, learner_episodes, hidden, layers, batch = 192, 96, 256, 4, 8
    max_length, pack_length = 512, 320
    env = TextCraftEnv(distractors=4)
    ids = env.task_ids("train")
    trajectories = list(expert_trajectories(env, [ids[i % len(ids)] for i in range(episodes)]))
    chat = [
        TrainingSample(
            f"chat{i}",
            "general",
            (Message("user", f"Which item is task {i} about?"), Message("assistant", env.goal_of(str(i)), 1)),
        )
        for i in range(2 * episodes)
    ]
    samples = [trajectory_to_sample(t, f"e{i}") for i, t in enumerate(trajectories)] + chat
    random.Random(0).shuffle(samples)
    texts = [m.content for s in samples for m in s.messages]
    with tempfile.TemporaryDirectory(prefix="agentr-bench-train-") as tmp:
        root = Path(tmp)
        model = build_tiny_model(root / "base", texts, hidden=hidden, layers=layers, heads=4, vocab_size=1024)
        if "packing" in sections:
            print(json.dumps(packing_comparison(root, model, samples, batch, max_length, pack_length)))
        if "ddp" in sections:
            ddp = launcher_comparison(root, model, samples, batch, max_length, pack_length, args.threads)
            print(json.dumps(ddp))
        if "learners" in sections:
            for line in learner_lines(root, model, trajectories[:learner_episodes], batch, max_length):
                print(json.dumps(line))
        if "precision" in sections:
            for line in precision_lines(root, model, samples, batch, max_length, 20 if args.quick else 60):
                print(json.dumps(line))


def precision_lines(
    root: Path, model: Path, samples: list[Any], batch: int, max_length: int, steps: int
) -> list[dict[str, Any]]:
    """The same SFT under mixed_bf16 (ours) and fp32 (baseline): steps/s and the trained loss."""
    import torch

    from core.runtime.cpu_features import native_bf16
    from train_service.checkpoint import load_checkpoint
    from train_service.hf_trainer import TrainJob
    from train_service.sft import SFTConfig, train_sft
    from train_service.tokenize import collate, tokenize_sample

    speed, loss = {}, {}
    for mixed in (True, False):
        cfg = SFTConfig(
            max_steps=steps, batch_size=batch, max_length=max_length, packing=True, learning_rate=3e-3,
            lr_scheduler="cosine", warmup=0.05, logging_steps=1000, mixed_bf16=mixed,
        )  # fmt: skip
        report = train_sft(TrainJob(model, root / f"ckpt-mixed-{mixed}"), samples, cfg)
        speed[mixed] = report.metrics["steps"] / report.metrics["seconds"]
        trained, tokenizer, _ = load_checkpoint(report.checkpoint)
        with torch.inference_mode():
            losses = [
                trained(**collate([tokenize_sample(tokenizer, s)], tokenizer.pad_token_id)).loss.item()
                for s in samples[:64]
            ]
        loss[mixed] = sum(losses) / len(losses)
    native = {"native_bf16": native_bf16()}
    return [
        {**_line("sft_steps_per_s_mixed_bf16_vs_fp32", speed[True], speed[False], "steps/s"), **native},
        {**_line("sft_loss_mixed_bf16_vs_fp32", loss[True], loss[False], "loss"), **native},
    ]


def packing_comparison(
    root: Path, model: Path, samples: list[Any], batch: int, max_length: int, pack_length: int
) -> dict[str, Any]:
    """SFT tokens/s with packing (ours) vs padded batches (baseline), same data and epochs."""
    from train_service.hf_trainer import TrainJob
    from train_service.sft import SFTConfig, train_sft

    speeds = {}
    for packing in (False, True):
        cfg = SFTConfig(
            epochs=2,
            batch_size=batch,
            max_length=max_length,
            packing=packing,
            pack_length=pack_length,
            logging_steps=1000,
        )
        speeds[packing] = train_sft(TrainJob(model, root / f"ckpt-{packing}"), samples, cfg).metrics[
            "tokens_per_s"
        ]
    return _line("sft_training_tokens_per_s_packing_vs_padding", speeds[True], speeds[False], "tokens/s")


def launcher_comparison(
    root: Path, model: Path, samples: list[Any], batch: int, max_length: int, pack_length: int, threads: int
) -> dict[str, Any]:
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
    return _line("ddp_2proc_vs_inline", speeds["torchrun"], speeds["inline"], "tokens/s")


def learner_lines(
    root: Path, model: Path, trajectories: list[Any], batch: int, max_length: int
) -> list[dict[str, Any]]:
    """Train SFT, DPO and ArCHer on views of ``trajectories`` (module docstring); the JSON lines."""
    from core.domain.good_samples import trajectory_to_sample
    from core.domain.preferences import preference_pair
    from core.domain.trajectory import Step, Trajectory
    from core.domain.transitions import TrajectorySource, build_transitions
    from train_service.archer import ArcherConfig, train_archer
    from train_service.dpo import DPOConfig, train_dpo
    from train_service.hf_trainer import TrainJob
    from train_service.sft import SFTConfig, train_sft

    samples = [trajectory_to_sample(t, f"s{i}") for i, t in enumerate(trajectories)]
    pairs = []
    for i, good in enumerate(trajectories):
        if len(good.steps) < 2:
            continue
        wrong = Step("I need dirt.", "get 1 dirt", "Could not find enough items to get 1 dirt.", valid=False)
        bad = Trajectory(good.task, good.instruction, (good.steps[0], wrong), reward=0.0)
        pairs.append(preference_pair(f"p{i}", bad, good, 1, i))
    transitions = build_transitions(
        run_id=None,
        iteration=0,
        trajectories=[TrajectorySource(f"e{i}", t, i) for i, t in enumerate(trajectories)],
    ).transitions

    sft = train_sft(
        TrainJob(model, root / "learner-sft"),
        samples,
        SFTConfig(
            epochs=2, batch_size=batch, max_length=max_length, logging_steps=1000, lr_scheduler="constant"
        ),
    ).metrics
    dpo = train_dpo(
        TrainJob(model, root / "learner-dpo"),
        pairs,
        DPOConfig(
            epochs=2, batch_size=max(1, batch // 2), max_length=max_length, logging_steps=1000, warmup=0
        ),
    ).metrics
    archer = train_archer(
        TrainJob(model, root / "learner-archer"),
        transitions,
        ArcherConfig(
            iterations=4,
            warmup_iters=2,
            critic_epochs=5,
            actor_epochs=3,
            batch_size=batch,
            grad_accumulation=1,
            max_state_tokens=max_length,
            max_length=max_length,
        ),
    ).metrics
    sft_steps_per_s = sft["steps"] / max(sft["seconds"], 1e-9)
    # DPO's frozen-reference pass runs once before training: counted in its time here
    dpo_tokens_per_s = round(
        dpo["tokens"] * dpo["epochs"] / max(dpo["seconds"] + dpo["reference_seconds"], 1e-9), 1
    )
    return [
        _line("dpo_training_tokens_per_s_vs_sft", dpo_tokens_per_s, sft["tokens_per_s"], "tokens/s"),
        _line(
            "archer_actor_tokens_per_s_vs_sft", archer["actor_tokens_per_s"], sft["tokens_per_s"], "tokens/s"
        ),
        _line(
            "archer_critic_updates_per_s_vs_sft_steps",
            archer["critic_updates_per_s"],
            round(sft_steps_per_s, 3),
            "updates/s",
        ),
    ]


if __name__ == "__main__":
    main()
