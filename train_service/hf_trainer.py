"""Owns the transformers ``Trainer`` plumbing every learner built on it shares (SFT and DPO).

* ``TrainJob`` / ``TrainReport`` / ``TrainingCancelled``: what every training call takes beside its
  data and config (model, checkpoint folder, iteration / dataset / run, cancel and progress), what
  it returns, and what it raises when a cancel request stopped it (no checkpoint written). ArCHer's
  own loop takes, returns and raises the same.
* ``load_tokenizer`` (pad token, prefix-stable chat template checked) and ``load_causal_lm`` (fp32
  or bf16, KV cache off for training); ``use_bf16`` decides bf16 when the config leaves it open;
  ``train_service.precision`` turns a config's ``bf16`` / ``mixed_bf16`` into what to load and run.
* ``training_arguments``: one ``TrainingArguments`` for a config with the shared knobs
  (``TrainerKnobs``): epochs / max_steps (a time budget needs a step count, derived from the
  epochs), batch and accumulation, learning rate and schedule, clipping, seeds, no saving, no
  reporting, gloo inside a CPU torchrun rank.
* ``control_callbacks``: the time budget and cancel polling after every optimizer step, with
  progress reports; under torchrun the stop decisions are the maximum over ranks
  (``max_over_ranks``, also what SFT's wall-clock learning rate uses), so every rank stops at the
  same step and no rank waits forever in a collective.
* ``fit``: ``trainer.train()`` timed, raising ``TrainingCancelled`` on a cancel; ``run_metrics``:
  the metrics every learner reports (loss, steps, epochs, seconds, tokens/s, time-budget stop);
  ``save_on_rank_zero``: rank 0 alone writes the checkpoint, the others wait for it.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from core.llm.chat_template import check_template
from train_service.checkpoint import CheckpointMeta, write_checkpoint

log = logging.getLogger(__name__)

StepReport = Callable[[int, int, float | None], None]  # (step, max_steps, last loss)


class TrainingCancelled(Exception):
    """Training was stopped on request before it finished; no checkpoint was written."""


@dataclass(frozen=True)
class TrainJob:
    """What every learner's training call shares (``train_sft``, ``train_dpo``, ``train_archer``,
    online ArCHer), beside its data and its config: the model it starts from (``model_path``), the
    folder its checkpoint goes to (``out_dir``), what the checkpoint's meta records it was trained
    for (``iteration``, ``dataset_id``, ``run_id``; a non-empty ``dataset_id`` also lets a retry
    reuse a complete checkpoint of that dataset in ``out_dir``), and the controls polled while it
    trains: ``should_stop`` after every update (True: ``TrainingCancelled``, nothing written) and
    ``on_step(step, max_steps, last_loss)`` for progress."""

    model_path: str | Path
    out_dir: str | Path
    iteration: int = 0
    dataset_id: str = ""
    run_id: str | None = None
    should_stop: Callable[[], bool] | None = None
    on_step: StepReport | None = None


@dataclass
class TrainReport:
    checkpoint: Path
    metrics: dict[str, Any] = field(default_factory=dict)
    reused: bool = False  # a complete checkpoint of this dataset was already there (a retry)


class TrainerKnobs(Protocol):
    """The config fields ``training_arguments`` and ``control_callbacks`` read (SFTConfig, DPOConfig)."""

    @property
    def epochs(self) -> float: ...
    @property
    def max_steps(self) -> int: ...
    @property
    def learning_rate(self) -> float: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def grad_accumulation(self) -> int: ...
    @property
    def seed(self) -> int: ...
    @property
    def bf16(self) -> bool | None: ...
    @property
    def max_grad_norm(self) -> float: ...
    @property
    def time_budget_s(self) -> float | None: ...
    @property
    def logging_steps(self) -> int: ...


class ListDataset:
    """A map-style dataset over prepared examples (what the Trainer's DataLoader indexes)."""

    def __init__(self, items: Sequence[Any]) -> None:
        self.items = list(items)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Any:
        return self.items[i]


def load_tokenizer(model_path: str | Path) -> Any:
    """The model's tokenizer, with a pad token (EOS when it has none) and its chat template checked
    (a stock template must be prefix-stable) before any sample is tokenised."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    check_template(tokenizer)
    return tokenizer


def use_bf16(setting: bool | None) -> bool:
    """``setting``, or (None) whether a CUDA device with bf16 support is present."""
    if setting is not None:
        return setting
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())


def load_causal_lm(model_path: str | Path, bf16: bool) -> Any:
    """The causal LM at ``model_path`` for training (bf16 or fp32; KV cache off)."""
    import torch
    from transformers import AutoModelForCausalLM

    from core.llm.hf_folder import load_pretrained

    dtype = torch.bfloat16 if bf16 else torch.float32
    model = load_pretrained(AutoModelForCausalLM, model_path, dtype=dtype)
    model.config.use_cache = False
    return model


def training_arguments(
    cfg: TrainerKnobs,
    scratch: Path,
    *,
    examples: int,
    bf16: bool,
    lr_scheduler: str,
    warmup: float,
    weight_decay: float = 0.0,
) -> Any:
    """``TrainingArguments`` for ``cfg`` over ``examples`` items. With a time budget and no
    ``max_steps`` the step count is the epochs' (the Trainer needs one to stop on time)."""
    import torch
    from transformers import TrainingArguments

    max_steps = cfg.max_steps
    if cfg.time_budget_s is not None and max_steps <= 0:
        steps_per_epoch = math.ceil(examples / (cfg.batch_size * cfg.grad_accumulation))
        max_steps = max(1, math.ceil(cfg.epochs * steps_per_epoch))
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1  # a torchrun rank
    return TrainingArguments(
        output_dir=str(scratch),
        num_train_epochs=cfg.epochs,
        max_steps=max_steps,
        per_device_train_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.grad_accumulation,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type=lr_scheduler,
        warmup_steps=warmup,
        weight_decay=weight_decay,
        max_grad_norm=cfg.max_grad_norm,
        logging_steps=cfg.logging_steps,
        save_strategy="no",
        report_to="none",
        seed=cfg.seed,
        data_seed=cfg.seed,
        bf16=bf16,
        # bf16 autocast on a machine without CUDA: transformers asks for use_cpu to allow it
        use_cpu=bool(bf16 and not torch.cuda.is_available()),
        remove_unused_columns=False,
        dataloader_num_workers=0,
        dataloader_pin_memory=torch.cuda.is_available(),
        disable_tqdm=True,
        # under torchrun on CPU: gloo (NCCL needs CUDA); None in a single process
        ddp_backend="gloo" if distributed and not torch.cuda.is_available() else None,
    )


def _distributed() -> Any:
    """``torch.distributed`` when this process is one rank of several, else None."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist
    return None


def max_over_ranks(values: list[float]) -> list[float]:
    """Element-wise maximum over all ranks (identity in a single process): every rank then takes
    the same stop / learning-rate decision, so no rank waits forever in a collective."""
    dist = _distributed()
    if dist is None:
        return values
    import torch

    device = "cpu"
    if dist.get_backend() == "nccl":
        device = f"cuda:{torch.cuda.current_device()}"
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return [float(x) for x in tensor.tolist()]


def control_callbacks(
    time_budget_s: float | None, should_stop: Callable[[], bool] | None, on_step: StepReport | None
) -> list[Any]:
    """[the control callback]: stops on the time budget or a cancel request; reports progress."""
    from transformers import TrainerCallback

    class Control(TrainerCallback):  # type: ignore[misc]
        """Stops on the time budget or a cancel request; reports progress."""

        def __init__(self) -> None:
            self.start = time.monotonic()
            self.cancelled = False
            self.out_of_time = False
            self.last_loss: float | None = None

        def on_log(
            self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **kw: Any
        ) -> None:
            if logs and "loss" in logs:
                self.last_loss = float(logs["loss"])
                log.info("step %d/%d loss %.4f", state.global_step, state.max_steps, self.last_loss)

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if on_step is not None:
                on_step(state.global_step, state.max_steps, self.last_loss)
            out_of_time = time_budget_s is not None and time.monotonic() - self.start >= time_budget_s
            cancelled = should_stop is not None and should_stop()
            out_of_time, cancelled = (bool(x) for x in max_over_ranks([float(out_of_time), float(cancelled)]))
            if out_of_time:
                self.out_of_time = True
                control.should_training_stop = True
            if cancelled:
                self.cancelled = True
                control.should_training_stop = True

    return [Control()]


def fit(trainer: Any, control: Any, what: str) -> tuple[Any, float]:
    """(``trainer.train()``'s result, seconds); ``TrainingCancelled`` naming ``what`` and the step
    when ``control`` saw a cancel request. Our callback logs, so the printer is removed."""
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    started = time.monotonic()
    result = trainer.train()
    seconds = time.monotonic() - started
    if control.cancelled:
        raise TrainingCancelled(f"{what} was cancelled at step {trainer.state.global_step}")
    return result, seconds


def run_metrics(trainer: Any, result: Any, seconds: float, tokens: int, control: Any) -> dict[str, Any]:
    """Loss, steps, epochs, seconds, tokens/s (``tokens`` x epochs done / seconds), time-budget stop."""
    epochs_done = trainer.state.epoch or 0.0
    return {
        "train_loss": float(result.training_loss),
        "steps": int(trainer.state.global_step),
        "epochs": float(epochs_done),
        "seconds": round(seconds, 3),
        "tokens_per_s": round(tokens * max(epochs_done, 1e-9) / max(seconds, 1e-9), 1),
        "stopped_by_time_budget": bool(control.out_of_time),
    }


def save_on_rank_zero(trainer: Any, model: Any, tokenizer: Any, out: Path, meta: CheckpointMeta) -> Path:
    """Rank 0 writes the checkpoint (every rank holds the same weights); all ranks wait for it."""
    path = out
    if trainer.is_world_process_zero():
        path = write_checkpoint(model, tokenizer, out, meta)
    trainer.accelerator.wait_for_everyone()
    return path
