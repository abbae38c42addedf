"""Owns supervised fine-tuning: the transformers Trainer run and ``train_sft`` (its config,
``SFTConfig`` with ``LoraSettings``, is declared in ``core.domain.trainer_config`` and re-exported).

``train_sft(job, samples, cfg)`` (``job``: a ``TrainJob``, the model and checkpoint folder)
tokenises samples with the model's chat template (labels only on weight-1 assistant turns, see
``train_service.tokenize``), optionally packs them, trains with the stock ``transformers.Trainer``
and our data collator (so accelerate / torchrun DDP, FSDP and DeepSpeed work unchanged for multi-GPU
users), and writes a checkpoint (weights + tokenizer + meta.json, see ``train_service.checkpoint``).
LoRA adapters (peft) are merged into the saved weights, so every checkpoint loads with plain
``from_pretrained``.

A time budget (``SFTConfig.time_budget_s``) stops training when the time is up and, with
``lr_scheduler="time_cosine"``, decays the learning rate on WALL-CLOCK progress through that budget
(so a CPU run of a fixed number of minutes ends at a small learning rate whatever its speed).

Under torchrun (``train_service.launcher``) every rank runs ``train_sft``: the Trainer does DDP
(gloo on CPU), stop decisions (time budget, cancel) and the time-based learning rate are the
maximum over ranks (so all ranks stop at the same step and keep identical weights), and rank 0
alone writes the checkpoint. The Trainer plumbing (tokenizer and model loading, arguments, the
control callback, metrics, rank-0 saving) is ``train_service.hf_trainer``'s, shared with DPO.
"""

from __future__ import annotations

import logging
import math
import shutil
import tempfile
import time
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from core.domain.datasets import EmptyDatasetError
from core.domain.trainer_config import LoraSettings, SFTConfig
from core.domain.trajectory import TrainingSample
from train_service.checkpoint import CheckpointMeta, existing_checkpoint
from train_service.hf_trainer import (
    ListDataset,
    TrainingCancelled,
    TrainJob,
    TrainReport,
    control_callbacks,
    fit,
    load_tokenizer,
    max_over_ranks,
    run_metrics,
    save_on_rank_zero,
    training_arguments,
)
from train_service.packing_check import check_packing
from train_service.precision import load_for_training
from train_service.tokenize import DataCollator, TokenizedSample, pack, tokenize_samples

log = logging.getLogger(__name__)

__all__ = [
    "LoraSettings",
    "SFTConfig",
    "TrainJob",
    "TrainReport",
    "TrainingCancelled",
    "prepare_examples",
    "train_sft",
]


def prepare_examples(
    tokenizer: Any, samples: Iterable[TrainingSample], cfg: SFTConfig
) -> tuple[list[TokenizedSample], dict[str, int]]:
    """Tokenise (and pack) ``samples``; drops samples left with no trained token after truncation.

    Raises ``EmptyDatasetError`` when nothing trainable remains.
    """
    kept: list[TokenizedSample] = []
    total = dropped = 0
    for tok in tokenize_samples(tokenizer, samples, cfg.max_length):
        total += 1
        if tok.trained_tokens == 0:
            dropped += 1
            continue
        kept.append(tok)
    if not kept:
        why = (
            "the dataset is empty"
            if total == 0
            else f"all {total} samples lost their trained tokens to max_length={cfg.max_length}"
        )
        raise EmptyDatasetError(f"nothing to train on: {why}")
    if dropped:
        log.warning(
            "dropped %d of %d samples with no trained token after truncation to %d",
            dropped,
            total,
            cfg.max_length,
        )
    stats = {
        "samples": len(kept),
        "samples_dropped": dropped,
        "tokens": sum(len(t) for t in kept),
        "trained_tokens": sum(t.trained_tokens for t in kept),
    }
    if cfg.packing:
        kept = pack(kept, cfg.pack_length or cfg.max_length, tokenizer.pad_token_id)
        stats["blocks"] = len(kept)
    return kept, stats


def _time_cosine(optimizer: Any, budget_s: float, warmup_s: float) -> Any:
    import torch

    start = time.monotonic()

    def factor(_step: int) -> float:
        (elapsed,) = max_over_ranks([time.monotonic() - start])  # one schedule for all ranks
        if warmup_s > 0 and elapsed < warmup_s:
            return max(elapsed / warmup_s, 0.01)
        progress = min(1.0, (elapsed - warmup_s) / max(budget_s - warmup_s, 1e-9))
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def train_sft(job: TrainJob, samples: Iterable[TrainingSample], cfg: SFTConfig | None = None) -> TrainReport:
    """Fine-tune the model at ``job.model_path`` on ``samples``; the checkpoint goes to ``job.out_dir``.

    ``job.should_stop`` is polled after every optimizer step (cancellation: raises ``TrainingCancelled``
    and writes nothing); ``job.on_step(step, max_steps, last_loss)`` reports progress. A retry that
    finds a complete checkpoint of the same ``job.dataset_id`` in ``job.out_dir`` returns it without
    training.
    Raises ``EmptyDatasetError`` for an empty dataset (before any model is loaded).
    """
    from transformers import Trainer

    cfg = cfg or SFTConfig()
    out = Path(job.out_dir)
    if job.dataset_id and (found := existing_checkpoint(out, job.dataset_id)) is not None:
        log.info("checkpoint of dataset %s already at %s: reusing it", job.dataset_id, found)
        return TrainReport(found, {}, reused=True)
    tokenizer = load_tokenizer(job.model_path)
    examples, stats = prepare_examples(tokenizer, samples, cfg)

    model, prec = load_for_training(job.model_path, cfg)  # no KV cache: packed blocks rely on it (tokenize)
    if cfg.packing:
        check_packing(model, tokenizer.pad_token_id)  # refuses models whose packed logits differ
    if cfg.lora is not None:
        from peft import LoraConfig, get_peft_model

        lora_cfg = LoraConfig(
            r=cfg.lora.r,
            lora_alpha=cfg.lora.alpha,
            lora_dropout=cfg.lora.dropout,
            target_modules=list(cfg.lora.target_modules) if cfg.lora.target_modules else None,
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(model, lora_cfg)

    time_cosine = cfg.lr_scheduler == "time_cosine"
    scratch = Path(tempfile.mkdtemp(prefix="agentr-sft-"))
    try:
        args = training_arguments(
            cfg,
            scratch,
            examples=len(examples),
            bf16=prec.autocast,
            lr_scheduler="constant" if time_cosine else cfg.lr_scheduler,
            warmup=0 if time_cosine else cfg.warmup,
            weight_decay=cfg.weight_decay,
        )
        callbacks = control_callbacks(cfg.time_budget_s, job.should_stop, job.on_step)
        trainer = Trainer(
            model=model,
            args=args,
            train_dataset=ListDataset(examples),  # type: ignore[arg-type]
            data_collator=DataCollator(tokenizer.pad_token_id),
            callbacks=callbacks,
        )
        if time_cosine:
            assert cfg.time_budget_s is not None
            trainer.create_optimizer()
            trainer.lr_scheduler = _time_cosine(
                trainer.optimizer, cfg.time_budget_s, cfg.warmup * cfg.time_budget_s
            )
        result, seconds = fit(trainer, callbacks[0], f"training of dataset {job.dataset_id or '?'}")
        trained_model = model.merge_and_unload() if cfg.lora is not None else model  # type: ignore[operator]
        trained_model.config.use_cache = True
        metrics = {
            **stats,
            **run_metrics(trainer, result, seconds, stats["tokens"], callbacks[0]),
            **prec.metrics(),
        }
        meta = CheckpointMeta(
            iteration=job.iteration,
            dataset_id=job.dataset_id,
            base_model=str(job.model_path),
            config=cfg.to_dict(),
            run_id=job.run_id,
            metrics=metrics,
            lora=asdict(cfg.lora) if cfg.lora is not None else None,
        )
        path = save_on_rank_zero(trainer, trained_model, tokenizer, out, meta)
        log.info(
            "trained %d steps in %.1fs (loss %.4f): checkpoint %s",
            metrics["steps"],
            seconds,
            metrics["train_loss"],
            path,
        )
        return TrainReport(path, metrics)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
