"""Owns the training precision of the Trainer-based learners (SFT, DPO): fp32, bfloat16 weights, or
``mixed_bf16`` - fp32 weights whose MLP blocks compute in bfloat16.

``mixed_bf16`` runs training under bfloat16 autocast (``TrainingArguments(bf16=True)`` on an fp32
model, CPU or CUDA) with fp32 islands: every attention module and the LM head run with autocast
off, on fp32 inputs, so only the MLP blocks' matmuls are bfloat16. Weights and optimizer state
stay fp32, so a small learning rate's update is not lost to bfloat16's 8-bit mantissa.

Why islands: full autocast is the fastest but loses the most quality (the tied LM head /
embedding in bfloat16 costs the most); keeping attention and the LM head in fp32 keeps most of the
speed-up at a loss close to fp32's (bench/train.py --only precision; figures in docs/results.md).
On a CPU without
native bfloat16 matmuls (``core.runtime.cpu_features``) autocast emulates them and is slower than
fp32: a warning says so.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from train_service.hf_trainer import load_causal_lm, use_bf16

log = logging.getLogger(__name__)


class PrecisionKnobs(Protocol):
    @property
    def bf16(self) -> bool | None: ...
    @property
    def mixed_bf16(self) -> bool: ...


@dataclass(frozen=True)
class Precision:
    """How one training run computes: ``bf16_weights`` (load and train in bfloat16) or
    ``autocast`` alone (mixed_bf16: fp32 weights, the MLP blocks in bfloat16)."""

    bf16_weights: bool
    autocast: bool

    def metrics(self) -> dict[str, bool]:
        """What the learners record in their metrics (the report's precision column)."""
        return {"bf16": self.bf16_weights, "mixed_bf16": self.autocast and not self.bf16_weights}


def precision(cfg: PrecisionKnobs) -> Precision:
    """``cfg``'s precision: bf16 (None = when CUDA supports it) loads and trains in bfloat16;
    mixed_bf16 loads fp32 and autocasts (a warning where the CPU would emulate bfloat16)."""
    if cfg.mixed_bf16:
        import torch

        from core.runtime.cpu_features import native_bf16

        if not torch.cuda.is_available() and not native_bf16():
            log.warning(
                "mixed_bf16 on a CPU without native bfloat16 matmuls (AVX512-BF16 / AMX): autocast "
                "emulates them, which is slower than fp32 training"
            )
        return Precision(bf16_weights=False, autocast=True)
    bf16 = use_bf16(cfg.bf16)
    return Precision(bf16_weights=bf16, autocast=bf16)


def load_for_training(model_path: str | Path, cfg: PrecisionKnobs) -> tuple[Any, Precision]:
    """The causal LM at ``model_path`` loaded for ``cfg``'s precision (``load_causal_lm``), with
    its fp32 islands under mixed_bf16, and that precision (its ``autocast`` is the Trainer's bf16)."""
    chosen = precision(cfg)
    model = load_causal_lm(model_path, chosen.bf16_weights)
    if chosen.autocast and not chosen.bf16_weights:
        fp32_islands(model)  # only the MLP blocks compute in bfloat16
    return model, chosen


def _fp32(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.float()
    if isinstance(value, tuple):  # (cos, sin) position embeddings
        return tuple(_fp32(v) for v in value)
    return value


def _without_autocast(forward: Any) -> Any:
    import torch

    @functools.wraps(forward)
    def run(*args: Any, **kwargs: Any) -> Any:
        first = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
        device = first.device.type if first is not None else "cpu"
        with torch.autocast(device, enabled=False):
            return forward(*(_fp32(a) for a in args), **{k: _fp32(v) for k, v in kwargs.items()})

    return run


def fp32_islands(model: Any) -> int:
    """Make ``model``'s attention modules (class names ending in ``Attention``) and its LM head run
    in fp32 under autocast (see the module docstring); returns how many modules were wrapped."""
    wrapped = 0
    targets = [m for m in model.modules() if type(m).__name__.endswith("Attention")]
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None:
        targets.append(head)
    for module in targets:
        module.forward = _without_autocast(module.forward)
        wrapped += 1
    return wrapped
