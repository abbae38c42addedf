"""Owns tokenisation for training: per-message weights -> token labels, packing, collation.

A sample is rendered with the MODEL'S OWN chat template (tools and tool calls included), and
``core.llm.chat_template.conversation_spans`` reports one character span per assistant message:
from ``{% generation %}`` blocks when the template has them, otherwise by incremental rendering with
a prefix-stability check (stock templates such as Llama-3.x, Qwen2.5 and SmolLM2's ChatML). A token
is trained on (label = its id) exactly when it overlaps the span of an assistant message with weight
1; every other token gets label -100. When the template cannot mark one span per assistant message,
or a span does not contain its message's text, ``TemplateError`` says so: silently training on
everything (or nothing) is the defect this module exists to prevent.

Packing (optional) concatenates tokenised samples into fixed-length blocks. Each block carries
``position_ids`` that restart at 0 for every sample; with no 2-D attention mask, transformers turns
those into a block-diagonal causal mask, so packed samples never attend to each other (only when
the model runs WITHOUT a KV cache, ``use_cache=False``, as in training). The first
token of every sample in a block is never a target, so no loss crosses a sample boundary.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from core.domain.trajectory import TrainingSample
from core.llm.chat_template import TemplateError, conversation_spans, hf_messages, hf_tools

log = logging.getLogger(__name__)

IGNORE_INDEX = -100
__all__ = [
    "IGNORE_INDEX",
    "DataCollator",
    "TemplateError",
    "TokenizedSample",
    "collate",
    "pack",
    "tokenize_sample",
]


@dataclass(frozen=True)
class TokenizedSample:
    """Token ids and labels of one sample (or one packed block); ``position_ids`` only when packed."""

    input_ids: list[int]
    labels: list[int]
    position_ids: list[int] | None = None
    sample_ids: tuple[str, ...] = ()

    @property
    def trained_tokens(self) -> int:
        return sum(1 for x in self.labels if x != IGNORE_INDEX)

    def __len__(self) -> int:
        return len(self.input_ids)


def tokenize_sample(tokenizer: Any, sample: TrainingSample, max_length: int | None = None) -> TokenizedSample:
    """Render ``sample`` with the chat template and label the tokens of weight-1 assistant messages.

    ``max_length`` truncates from the right (the trained tokens of a too-long sample may vanish;
    ``TokenizedSample.trained_tokens`` tells). Raises ``TemplateError`` (see the module docstring).
    """
    if not getattr(tokenizer, "is_fast", False):
        raise TemplateError("token labels need a fast tokenizer (character offsets)")
    messages = hf_messages(sample.messages)
    assistant = [m for m in sample.messages if m.role == "assistant"]
    try:
        text, spans = conversation_spans(tokenizer, messages, hf_tools(getattr(sample, "tools", None)))
    except TemplateError as exc:
        raise TemplateError(f"sample {sample.sample_id}: {exc}") from exc
    if len(spans) != len(assistant):
        raise TemplateError(
            f"sample {sample.sample_id}: the chat template marked {len(spans)} assistant span(s) for "
            f"{len(assistant)} assistant message(s); each assistant message needs its own "
            "{% generation %} block"
        )
    trained_spans: list[tuple[int, int]] = []
    for (start, end), msg in zip(spans, assistant, strict=True):
        if msg.content.strip() and msg.content.strip() not in text[start:end]:
            raise TemplateError(
                f"sample {sample.sample_id}: an assistant span does not contain its assistant "
                f"message ({msg.content[:40]!r}...)"
            )
        if msg.weight:
            trained_spans.append((start, end))

    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids: list[int] = list(enc["input_ids"])
    offsets: list[tuple[int, int]] = list(enc["offset_mapping"])
    labels = [IGNORE_INDEX] * len(ids)
    span_i = 0
    for t, (tok_start, tok_end) in enumerate(offsets):
        while span_i < len(trained_spans) and tok_start >= trained_spans[span_i][1]:
            span_i += 1
        if span_i == len(trained_spans):
            break
        if tok_end > trained_spans[span_i][0] and tok_end > tok_start:
            labels[t] = ids[t]
    if max_length is not None and len(ids) > max_length:
        ids, labels = ids[:max_length], labels[:max_length]
    return TokenizedSample(ids, labels, None, (sample.sample_id,))


def tokenize_samples(
    tokenizer: Any, samples: Iterable[TrainingSample], max_length: int | None = None
) -> Iterator[TokenizedSample]:
    for s in samples:
        yield tokenize_sample(tokenizer, s, max_length)


def pack(samples: Iterable[TokenizedSample], block_size: int, pad_token_id: int) -> list[TokenizedSample]:
    """Greedily pack samples (first fit, in order) into blocks of exactly ``block_size`` tokens.

    A sample longer than a block is cut to ``block_size``. The tail of each block is padding
    (labels -100, its own position run). Samples are never split across blocks.
    """
    if block_size < 2:
        raise ValueError(f"block_size must be >= 2, got {block_size}")
    blocks: list[TokenizedSample] = []
    ids: list[int] = []
    labels: list[int] = []
    positions: list[int] = []
    members: list[str] = []

    def flush() -> None:
        if not ids:
            return
        pad = block_size - len(ids)
        blocks.append(
            TokenizedSample(
                ids + [pad_token_id] * pad,
                labels + [IGNORE_INDEX] * pad,
                positions + list(range(pad)),
                tuple(members),
            )
        )
        ids.clear()
        labels.clear()
        positions.clear()
        members.clear()

    for s in samples:
        s_ids, s_labels = s.input_ids[:block_size], s.labels[:block_size]
        if not s_ids:
            continue
        if len(ids) + len(s_ids) > block_size:
            flush()
        ids.extend(s_ids)
        labels.append(IGNORE_INDEX)  # never a target across (or at) a sample boundary
        labels.extend(s_labels[1:])
        positions.extend(range(len(s_ids)))
        members.extend(s.sample_ids)
    flush()
    return blocks


def collate(batch: Sequence[TokenizedSample], pad_token_id: int) -> dict[str, Any]:
    """Batch tokenised samples into tensors (right padding, labels -100 on padding).

    Unpacked samples get an ``attention_mask``; packed blocks (equal length, with position ids) get
    ``position_ids`` and NO attention mask, which makes transformers build the per-sample mask.
    """
    import torch

    if not batch:
        raise ValueError("cannot collate an empty batch")
    if all(s.position_ids is not None for s in batch):
        return {
            "input_ids": torch.tensor([s.input_ids for s in batch], dtype=torch.long),
            "labels": torch.tensor([s.labels for s in batch], dtype=torch.long),
            "position_ids": torch.tensor([s.position_ids for s in batch], dtype=torch.long),
        }
    width = max(len(s) for s in batch)
    input_ids = torch.full((len(batch), width), pad_token_id, dtype=torch.long)
    labels = torch.full((len(batch), width), IGNORE_INDEX, dtype=torch.long)
    attention = torch.zeros((len(batch), width), dtype=torch.long)
    for row, s in enumerate(batch):
        n = len(s)
        input_ids[row, :n] = torch.tensor(s.input_ids, dtype=torch.long)
        labels[row, :n] = torch.tensor(s.labels, dtype=torch.long)
        attention[row, :n] = 1
    return {"input_ids": input_ids, "labels": labels, "attention_mask": attention}


class DataCollator:
    """The Trainer's data collator: ``collate`` with the tokenizer's pad id (picklable for workers)."""

    def __init__(self, pad_token_id: int) -> None:
        self.pad_token_id = pad_token_id

    def __call__(self, batch: Sequence[TokenizedSample]) -> dict[str, Any]:
        return collate(batch, self.pad_token_id)
