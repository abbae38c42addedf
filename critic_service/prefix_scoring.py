"""Owns prefix-reusing label scoring on a local transformers model (the critic's cheap plan).

The critic's prompts for consecutive steps of one path share everything up to the previous
observation. ``PrefixScorer`` keeps ONE KV cache: for each prompt it crops the cache to the longest
common token prefix with what is cached, runs the model only over the new tokens, then scores each
label (its first token from the prompt's last logits; further label tokens on top of the cache,
cropped away afterwards). The scores equal a plain full forward pass up to float rounding;
``tokens_processed`` counts every token fed to the model.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Sequence
from typing import Any, cast


def crop_to(cache: Any, length: int) -> None:
    """Shorten a DynamicCache to ``length`` tokens (transformers 5 crops by a negative count)."""
    remove = cache.get_seq_length() - length
    if remove > 0:
        cache.crop(-remove)


class PrefixScorer:
    def __init__(self, policy: Any, reuse: bool = True) -> None:
        """``reuse=False`` runs every prompt from scratch (the naive baseline, same code path)."""
        import torch

        self._torch = torch
        self.policy = policy
        self.model = policy.model
        self.device = next(self.model.parameters()).device
        self.tokens_processed = 0
        self.reuse = reuse
        params = inspect.signature(self.model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"

    def _feed(self, ids: Sequence[int], cache: Any) -> Any:
        torch = self._torch
        tensor = torch.tensor([list(ids)], dtype=torch.long, device=self.device)
        past = cache.get_seq_length()
        positions = torch.arange(past, past + len(ids), device=self.device)[None, :]
        kwargs = {self._cache_kw: cache}
        out = self.model(input_ids=tensor, position_ids=positions, use_cache=True, **kwargs)
        self.tokens_processed += len(ids)
        return out.logits[0].float()

    def score_in_order(
        self,
        prompts: Sequence[str],
        labels: Sequence[str] | Sequence[Sequence[str]],
        stop_when: Callable[[list[float]], bool] | None = None,
    ) -> list[list[float]]:
        """Summed label log-probabilities for each prompt, in order; stops after the first row for
        which ``stop_when(row)`` is true (early exit at the first "bad" verdict). ``labels`` is one
        list for every prompt, or one list per prompt (the reflect strategy's labels name the step's
        action)."""
        from transformers import DynamicCache

        torch = self._torch
        if labels and not isinstance(labels[0], str):
            per_prompt = [list(group) for group in labels]
            if len(per_prompt) != len(prompts):
                raise ValueError(f"{len(per_prompt)} label lists for {len(prompts)} prompts")
        else:
            per_prompt = [list(cast(Sequence[str], labels))] * len(prompts)
        encoded_labels: dict[str, list[int]] = {}
        for group in per_prompt:
            for label in group:
                if label not in encoded_labels:
                    encoded_labels[label] = list(self.policy.encode(label))
        if any(not ids for ids in encoded_labels.values()):
            raise ValueError("a label encodes to no tokens")
        cache = DynamicCache()
        cached: list[int] = []
        results: list[list[float]] = []
        slot = getattr(self.policy, "call_slot", None)  # HFPolicy: one of its concurrent calls
        with slot() if slot is not None else contextlib.nullcontext(), torch.inference_mode():
            for text, group in zip(prompts, per_prompt, strict=True):
                label_ids = [encoded_labels[label] for label in group]
                ids = self.policy.encode(text)
                shared = 0
                for a, b in zip(cached if self.reuse else [], ids, strict=False):
                    if a != b:
                        break
                    shared += 1
                shared = min(shared, len(ids) - 1)  # always feed at least the last token
                crop_to(cache, shared)
                logits = self._feed(ids[shared:], cache)
                cached = list(ids)
                first = torch.log_softmax(logits[-1], dim=-1)
                row = []
                for tokens in label_ids:
                    score = float(first[tokens[0]])
                    if len(tokens) > 1:
                        extra = self._feed(tokens[:-1], cache)
                        logprobs = torch.log_softmax(extra, dim=-1)
                        score += float(sum(logprobs[k, tokens[k + 1]] for k in range(len(tokens) - 1)))
                        crop_to(cache, len(ids))
                    row.append(score)
                results.append(row)
                if stop_when is not None and stop_when(row):
                    break
        return results
