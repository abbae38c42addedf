"""Owns the label scoring the model-based strategies share (``model``, ``reflect``): how many tokens
each label has for the policy (the divisor of length normalisation), a step's normalised verdict,
and whether a policy is a local HF model whose KV cache can be reused across steps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.domain.critic import normalise_label_scores, verdict_from_scores
from core.domain.events import StepVerdict


def label_token_counts(policy: object, labels: Sequence[str]) -> dict[str, int]:
    """Tokens of each label as the policy scores it (the divisor of length normalisation).

    A local HF policy encodes the label; a policy with ``label_token_counts`` (the OpenAI-compatible
    backend, exact over /tokenize, 1 in its first-token-only mode) tells it. Otherwise the scores are
    left as they are (count 1), which the label scores' method cannot then distinguish.
    """
    encode = getattr(policy, "encode", None)
    if callable(encode):
        return {label: len(encode(label)) for label in labels}
    tell = getattr(policy, "label_token_counts", None)
    if callable(tell):
        counts = tell(labels)
        if counts:
            return {label: int(counts.get(label) or 1) for label in labels}
    return {label: 1 for label in labels}


def normalised_verdict(step_index: int, summed: dict[str, float], counts: dict[str, int]) -> StepVerdict:
    return verdict_from_scores(step_index, normalise_label_scores(summed, counts))


def supports_prefix_reuse(policy: Any) -> bool:
    return all(hasattr(policy, name) for name in ("model", "tokenizer", "render", "encode"))
