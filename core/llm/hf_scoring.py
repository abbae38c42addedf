"""Owns the hf backend's scoring: label log-probabilities over one shared prefill (the KV cache
repeated per label) and per-token prompt log-probabilities (echo). ``HFPolicy`` inherits it."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core.llm.hf_decoding import HFDecoding
from core.llm.ports import PolicyError


@dataclass(frozen=True)
class PromptLogprobs:
    """Per-token log-probabilities of a text under the model (first token has none)."""

    tokens: list[str]
    token_logprobs: list[float | None]
    text_offsets: list[int]


class HFScoring(HFDecoding):
    """The torch side of ``HFPolicy.score_labels`` / ``prompt_logprobs`` (over HFDecoding's passes)."""

    def _score_all(self, prompts: list[list[int]], label_ids: list[list[int]]) -> list[list[float]]:
        if not self.batch_invariant:
            return self._score_blocking(prompts, label_ids)
        return [row for prompt in prompts for row in self._score_blocking([prompt], label_ids)]

    def _score_blocking(self, prompts: list[list[int]], label_ids: list[list[int]]) -> list[list[float]]:
        torch = self._torch
        n_labels = len(label_ids)
        longest = max(len(label) for label in label_ids)
        with self._calls, torch.inference_mode():  # core/llm/hf.py: concurrent calls
            # 1. prefill every conversation once (one alone: through the prefix cache); its last
            # position predicts each label's first token
            last_logits, cache, mask, positions = self._prefill(prompts)
            first = torch.log_softmax(last_logits[:, -1, :].float(), dim=-1).repeat_interleave(
                n_labels, dim=0
            )
            rows = len(prompts) * n_labels
            label_tokens = [label_ids[row % n_labels] for row in range(rows)]
            rest: Any = None
            if longest > 1:
                # 2. the cache repeated once per label; all labels' tokens (right-padded) in one more pass
                cache.batch_repeat_interleave(n_labels)
                feed = torch.full((rows, longest), self.pad_id, dtype=torch.long, device=self.device)
                feed_mask = torch.zeros((rows, longest), dtype=mask.dtype, device=self.device)
                for row, label in enumerate(label_tokens):
                    feed[row, : len(label)] = torch.tensor(label, device=self.device)
                    feed_mask[row, : len(label)] = 1
                full_mask = torch.cat([mask.repeat_interleave(n_labels, dim=0), feed_mask], dim=1)
                steps = torch.arange(1, longest + 1, device=self.device)[None, :]
                label_positions = positions[:, -1:].repeat_interleave(n_labels, dim=0) + steps
                logits, _ = self._forward(feed, full_mask, label_positions, cache, keep=0)
                rest = torch.log_softmax(logits.float(), dim=-1)  # (rows, longest, vocab)
            flat: list[float] = []
            for row, label in enumerate(label_tokens):
                total = first[row, label[0]]
                if len(label) > 1:
                    targets = torch.tensor(label[1:], device=self.device)
                    total = total + rest[row, : len(label) - 1, :].gather(-1, targets[:, None]).sum()
                flat.append(float(total))
        return [flat[p * n_labels : (p + 1) * n_labels] for p in range(len(prompts))]

    def _prompt_logprobs_blocking(self, texts: list[str | Sequence[int]]) -> list[PromptLogprobs]:
        torch = self._torch
        results: list[PromptLogprobs] = []
        with self._calls, torch.inference_mode():  # core/llm/hf.py: concurrent calls
            for text in texts:
                if isinstance(text, str):
                    enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
                    ids = list(enc["input_ids"])
                    offsets = [int(start) for start, _ in enc["offset_mapping"]]
                    tokens = [self.tokenizer.decode([t]) for t in ids]
                else:
                    ids = [int(t) for t in text]
                    tokens = [self.tokenizer.decode([t]) for t in ids]
                    offsets = [0, *itertools.accumulate(len(piece) for piece in tokens)][: len(tokens)]
                if any(not 0 <= t < self.model.config.vocab_size for t in ids):
                    top = self.model.config.vocab_size - 1
                    raise PolicyError(f"token ids outside the vocabulary (0..{top})")
                if not ids:
                    results.append(PromptLogprobs([], [], []))
                    continue
                tensor = torch.tensor([ids], device=self.device)
                logits = self.model(input_ids=tensor, use_cache=False).logits.float()
                lps = torch.log_softmax(logits[0, :-1], dim=-1).gather(-1, tensor[0, 1:, None]).squeeze(-1)
                token_lps: list[float | None] = [None, *[float(x) for x in lps.tolist()]]
                results.append(PromptLogprobs(tokens, token_lps, offsets))
        return results
