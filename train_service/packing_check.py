"""Owns the packing safety check: packed blocks must give the same logits as separate samples.

Packing (``train_service.tokenize.pack``) relies on transformers turning position ids that restart
at 0 into a block-diagonal causal mask when no attention mask is passed. That is a behaviour of
the model class, its attention implementation (eager, sdpa, flash-attention...) and the
transformers version, not a documented contract, so before a packed training
``check_packing(model, pad_token_id)`` runs two short token sequences packed into one block and
alone, and raises ``PackingUnsafe`` when any logit differs by more than ``TOLERANCE``; the
trainer then refuses to train (set ``packing: false``). The result is remembered per (model
class, attention implementation, transformers version) for the life of the process.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

TOLERANCE = 1e-3  # float32 logits (half precision: 5e-2); measured when packing works: ~1e-6
HALF_TOLERANCE = 5e-2
_checked: dict[tuple[str, str, str], float] = {}


class PackingUnsafe(ValueError):
    """Packed samples attend to each other (or otherwise differ from separate ones) in this model."""


def _key(model: Any) -> tuple[str, str, str]:
    import transformers

    attention = str(getattr(model.config, "_attn_implementation", None) or "default")
    return (type(model).__name__, attention, transformers.__version__)


def packed_difference(model: Any, pad_token_id: int) -> float:
    """Max |logit difference| between two sequences packed into one block and run alone."""
    import torch

    vocab = int(model.config.vocab_size)
    generator = torch.Generator().manual_seed(0)
    first = torch.randint(0, vocab, (7,), generator=generator)
    second = torch.randint(0, vocab, (5,), generator=generator)
    block = torch.cat([first, second, torch.full((2,), pad_token_id)])[None, :]
    positions = torch.tensor([list(range(7)) + list(range(5)) + [0, 1]])
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            packed = model(
                input_ids=block.to(device), position_ids=positions.to(device), use_cache=False
            ).logits
            alone_first = model(input_ids=first[None, :].to(device), use_cache=False).logits
            alone_second = model(input_ids=second[None, :].to(device), use_cache=False).logits
    finally:
        model.train(was_training)
    diff_first = (packed[0, :7].float() - alone_first[0].float()).abs().max()
    diff_second = (packed[0, 7:12].float() - alone_second[0].float()).abs().max()
    return float(torch.maximum(diff_first, diff_second))


def check_packing(model: Any, pad_token_id: int, tolerance: float | None = None) -> float:
    """Raise ``PackingUnsafe`` unless packing is exact for this model (see the module docstring)."""
    import torch

    if tolerance is None:
        half = next(model.parameters()).dtype in (torch.bfloat16, torch.float16)
        tolerance = HALF_TOLERANCE if half else TOLERANCE
    key = _key(model)
    if key not in _checked:
        _checked[key] = packed_difference(model, pad_token_id)
        log.info("packing check %s: max logit difference %.2e", key, _checked[key])
    difference = _checked[key]
    if difference > tolerance:
        cls, attention, version = key
        raise PackingUnsafe(
            f"packing is unsafe for {cls} with attention {attention!r} under transformers {version}: packed "
            f"samples' logits differ from separate ones by {difference:.3g} (> {tolerance}), i.e. samples "
            "would attend to each other; set train.packing false (or another attn_implementation)"
        )
    return difference
