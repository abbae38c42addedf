"""Owns DPO at the divergence node: the loss, the Trainer run, and ``train_dpo`` (its config,
``DPOConfig``, is declared in ``core.domain.trainer_config`` and re-exported).

Data: ``core.domain.preferences.PreferencePair`` (prompt = the shared history at the divergence
node, chosen = the good continuation, rejected = the bad one). Each side is tokenised as prompt +
continuation with the model's chat template by ``train_service.tokenize``: labels only on the
continuation's assistant turns; the prompt, every observation / tool result and the template's
role markup are -100 (the same exact masking SFT uses, so multi-turn continuations are scored on
the policy's own tokens only).

Loss (Rafailov et al. 2023): with ``logp(y|x)`` the SUM of the labelled tokens' log-probabilities,
``L = -log sigmoid(beta * ((logp_pi(c) - logp_ref(c)) - (logp_pi(r) - logp_ref(r))))``.
``reference = "frozen"``: the reference is the starting model, frozen; its log-probabilities are
computed once before training (exact, since it never changes; no second model in memory while
training). ``reference = "none"``: reference-free (the reference terms are 0).

Why not TRL's DPOTrainer: it tokenises (prompt, chosen, rejected) as strings or single-turn
messages and trains on every completion token, so a multi-turn continuation's observations would be
scored as the policy's; our own loss on the stock transformers ``Trainer`` keeps the masks exact
and the same Trainer machinery (accelerate / torchrun, time budget, cancel, checkpoints) as SFT:
``train_service.hf_trainer``.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.domain.datasets import EmptyDatasetError
from core.domain.preferences import PreferencePair
from core.domain.trainer_config import DPOConfig
from train_service.checkpoint import CheckpointMeta, existing_checkpoint
from train_service.hf_trainer import (
    ListDataset,
    TrainJob,
    TrainReport,
    control_callbacks,
    fit,
    load_tokenizer,
    run_metrics,
    save_on_rank_zero,
    training_arguments,
)
from train_service.precision import load_for_training
from train_service.tokenize import IGNORE_INDEX, TokenizedSample, collate, tokenize_sample

log = logging.getLogger(__name__)


def token_logps(logits: Any, labels: Any) -> Any:
    """[B, T-1] log p(label_t | tokens < t), 0 where the label is -100 (not trained).

    ``logits`` [B, T, V] predict the NEXT token: position t's logits score label t + 1.
    """
    import torch

    shifted = labels[:, 1:].clone()
    mask = shifted != IGNORE_INDEX
    shifted[~mask] = 0
    logps = torch.log_softmax(logits[:, :-1, :].float(), dim=-1)
    picked = torch.gather(logps, 2, shifted.unsqueeze(-1)).squeeze(-1)
    return picked * mask


def sequence_logps(logits: Any, labels: Any) -> Any:
    """Per-row SUM of ``token_logps``: log p of every labelled token of the row."""
    return token_logps(logits, labels).sum(-1)


def dpo_loss(
    policy_chosen: Any, policy_rejected: Any, ref_chosen: Any, ref_rejected: Any, beta: float
) -> tuple[Any, Any, Any]:
    """(mean loss, chosen rewards, rejected rewards); rewards = beta * (logp_pi - logp_ref)."""
    import torch.nn.functional as F

    chosen_rewards = beta * (policy_chosen - ref_chosen)
    rejected_rewards = beta * (policy_rejected - ref_rejected)
    loss = -F.logsigmoid(chosen_rewards - rejected_rewards)
    return loss.mean(), chosen_rewards.detach(), rejected_rewards.detach()


@dataclass(frozen=True)
class PreferenceExample:
    pair_id: str
    chosen: TokenizedSample
    rejected: TokenizedSample
    ref_chosen: float = 0.0
    ref_rejected: float = 0.0


def tokenize_pairs(
    tokenizer: Any, pairs: Sequence[PreferencePair], max_length: int
) -> tuple[list[PreferenceExample], dict[str, int]]:
    kept: list[PreferenceExample] = []
    dropped = 0
    for pair in pairs:
        chosen = tokenize_sample(tokenizer, pair.chosen_sample(), max_length)
        rejected = tokenize_sample(tokenizer, pair.rejected_sample(), max_length)
        if chosen.trained_tokens == 0 or rejected.trained_tokens == 0:
            dropped += 1
            continue
        kept.append(PreferenceExample(pair.pair_id, chosen, rejected))
    if not kept:
        why = "no pairs" if not pairs else f"all {len(pairs)} pairs lost their trained tokens to max_length"
        raise EmptyDatasetError(f"nothing to train DPO on: {why}")
    stats = {
        "pairs": len(kept),
        "pairs_dropped": dropped,
        "tokens": sum(len(e.chosen) + len(e.rejected) for e in kept),
        "trained_tokens": sum(e.chosen.trained_tokens + e.rejected.trained_tokens for e in kept),
    }
    return kept, stats


class PreferenceCollator:
    """Batches pairs as 2B rows (chosen first, then rejected) + the reference log-probs."""

    def __init__(self, pad_token_id: int) -> None:
        self.pad_token_id = pad_token_id

    def __call__(self, batch: Sequence[PreferenceExample]) -> dict[str, Any]:
        import torch

        rows = [e.chosen for e in batch] + [e.rejected for e in batch]
        out = collate(rows, self.pad_token_id)
        out["ref_logps"] = torch.tensor(
            [e.ref_chosen for e in batch] + [e.ref_rejected for e in batch], dtype=torch.float32
        )
        return out


def reference_logps(
    model: Any, examples: list[PreferenceExample], pad_token_id: int, batch_size: int
) -> list[PreferenceExample]:
    """The frozen reference's log-probabilities of every side (computed once, inference mode)."""
    import torch

    out: list[PreferenceExample] = []
    collator = PreferenceCollator(pad_token_id)
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(examples), batch_size):
            chunk = examples[start : start + batch_size]
            batch = collator(chunk)
            logits = model(
                input_ids=batch["input_ids"].to(model.device),
                attention_mask=batch["attention_mask"].to(model.device),
            ).logits
            logps = sequence_logps(logits, batch["labels"].to(model.device)).tolist()
            n = len(chunk)
            out.extend(
                PreferenceExample(e.pair_id, e.chosen, e.rejected, logps[i], logps[n + i])
                for i, e in enumerate(chunk)
            )
    model.train()
    return out


def _dpo_trainer_class(beta: float, stats: dict[str, list[float]]) -> Any:
    from transformers import Trainer

    class DPOLossTrainer(Trainer):  # type: ignore[misc]
        """The stock Trainer with the DPO loss over (chosen, rejected) rows."""

        def compute_loss(
            self,
            model: Any,
            inputs: dict[str, Any],
            return_outputs: bool = False,
            num_items_in_batch: Any = None,
        ) -> Any:
            labels = inputs["labels"]
            logits = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).logits
            logps = sequence_logps(logits, labels)
            n = labels.shape[0] // 2
            ref = inputs["ref_logps"].to(logps.device)
            loss, chosen_r, rejected_r = dpo_loss(logps[:n], logps[n:], ref[:n], ref[n:], beta)
            stats["loss"].append(float(loss.detach()))
            stats["accuracy"].append(float((chosen_r > rejected_r).float().mean()))
            stats["margin"].append(float((chosen_r - rejected_r).mean()))
            return (loss, {"logits": logits}) if return_outputs else loss

    return DPOLossTrainer


def train_dpo(job: TrainJob, pairs: Sequence[PreferencePair], cfg: DPOConfig | None = None) -> TrainReport:
    """DPO-train the model at ``job.model_path`` on ``pairs``; the checkpoint goes to ``job.out_dir``.

    Same contract as ``train_service.sft.train_sft`` (cancel, progress, retry reuse, empty data).
    """
    cfg = cfg or DPOConfig()
    out = Path(job.out_dir)
    if job.dataset_id and (found := existing_checkpoint(out, job.dataset_id)) is not None:
        return TrainReport(found, {}, reused=True)
    if not pairs:
        raise EmptyDatasetError("nothing to train DPO on: no preference pairs")
    tokenizer = load_tokenizer(job.model_path)
    examples, stats = tokenize_pairs(tokenizer, pairs, cfg.max_length)
    model, prec = load_for_training(job.model_path, cfg)
    reference_started = time.monotonic()
    if cfg.reference == "frozen":
        examples = reference_logps(model, examples, tokenizer.pad_token_id, cfg.batch_size)
    reference_seconds = time.monotonic() - reference_started

    scratch = Path(tempfile.mkdtemp(prefix="agentr-dpo-"))
    history: dict[str, list[float]] = {"loss": [], "accuracy": [], "margin": []}
    try:
        args = training_arguments(
            cfg,
            scratch,
            examples=len(examples),
            bf16=prec.autocast,
            lr_scheduler=cfg.lr_scheduler,
            warmup=cfg.warmup,
        )
        callbacks = control_callbacks(cfg.time_budget_s, job.should_stop, job.on_step)  # time budget + cancel
        trainer = _dpo_trainer_class(cfg.beta, history)(
            model=model,
            args=args,
            train_dataset=ListDataset(examples),
            data_collator=PreferenceCollator(tokenizer.pad_token_id),
            callbacks=callbacks,
        )
        result, seconds = fit(trainer, callbacks[0], f"DPO training of dataset {job.dataset_id or '?'}")
        model.config.use_cache = True
        metrics: dict[str, Any] = {
            **stats,
            "method": "dpo",
            "reference": cfg.reference,
            **prec.metrics(),
            **run_metrics(trainer, result, seconds, stats["tokens"], callbacks[0]),
            "first_loss": history["loss"][0] if history["loss"] else None,
            "last_loss": history["loss"][-1] if history["loss"] else None,
            "reward_accuracy": history["accuracy"][-1] if history["accuracy"] else None,
            "reward_margin": history["margin"][-1] if history["margin"] else None,
            "reference_seconds": round(reference_seconds, 3),  # the frozen reference's one pass
        }
        meta = CheckpointMeta(
            iteration=job.iteration,
            dataset_id=job.dataset_id,
            base_model=str(job.model_path),
            config={"method": "dpo", **cfg.to_dict()},
            run_id=job.run_id,
            metrics=metrics,
        )
        path = save_on_rank_zero(trainer, model, tokenizer, out, meta)
        log.info(
            "DPO: %d steps in %.1fs (loss %.4f): checkpoint %s",
            metrics["steps"],
            seconds,
            metrics["train_loss"],
            path,
        )
        return TrainReport(path, metrics)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


__all__ = ["DPOConfig", "PreferenceExample", "dpo_loss", "sequence_logps", "token_logps", "train_dpo"]
