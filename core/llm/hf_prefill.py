"""Owns the hf backend's prefill: left padding, the cached forward pass, and the prefill of prompts,
each alone through the cross-call prefix cache (``core.llm.kv_prefix``) and merged into one
left-padded batch, or all in one padded pass without it. ``HFDecoding`` inherits it; nothing else
should.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from core.llm.kv_prefix import ROOT, PrefixCache, layer_tensors

log = logging.getLogger(__name__)


class HFPrefill:
    """The passes before decoding (mixin: needs the attributes HFPolicy sets)."""

    # set by HFPolicy.__init__
    _torch: Any
    model: Any
    device: Any
    pad_id: int
    _cache_kw: str
    prefix_cache: PrefixCache | None

    def _left_pad(self, sequences: Sequence[Sequence[int]]) -> tuple[Any, Any, Any]:
        torch = self._torch
        width = max(len(s) for s in sequences)
        ids = torch.full((len(sequences), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(sequences), width), dtype=torch.long)
        for row, seq in enumerate(sequences):
            if seq:
                ids[row, width - len(seq) :] = torch.tensor(list(seq), dtype=torch.long)
                mask[row, width - len(seq) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        return ids.to(self.device), mask.to(self.device), positions.to(self.device)

    def _forward(self, ids: Any, mask: Any, positions: Any, cache: Any, keep: int) -> tuple[Any, Any]:
        kwargs = {self._cache_kw: cache}
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=keep,
            **kwargs,
        )
        new_cache = getattr(out, "cache", None)
        if new_cache is None:
            new_cache = getattr(out, "past_key_values", None)
        return out.logits, new_cache

    def _prefill(self, prompts: list[list[int]]) -> tuple[Any, Any, Any, Any]:
        """Prefill ``prompts``: (last-position logits, cache, mask, positions), left-padded.

        With the prefix cache on, every prompt is prefilled alone through it (exact: see
        core.llm.kv_prefix) and several prompts' caches are then left-padded into one batch for the
        shared decoding steps; without it, all prompts share one left-padded pass."""
        store = self.prefix_cache
        if store is not None:
            parts = []
            for prompt in prompts:
                parts.append(self._prefill_cached(prompt, store))
                if self.prefix_cache is None:  # the model's cache cannot be cut into blocks
                    break
            else:
                return parts[0] if len(parts) == 1 else self._merge_prefills(parts)
        from transformers import DynamicCache

        ids, mask, positions = self._left_pad(prompts)
        logits, cache = self._forward(ids, mask, positions, DynamicCache(), keep=1)
        return logits, cache, mask, positions

    def _merge_prefills(self, parts: list[tuple[Any, Any, Any, Any]]) -> tuple[Any, Any, Any, Any]:
        """One left-padded batch from single-prompt prefills: keys and values padded with zeros
        on the left (masked out, as ``_left_pad``'s pad tokens are), positions continuing per row."""
        torch = self._torch
        from transformers import DynamicCache

        lengths = [int(mask.shape[-1]) for _, _, mask, _ in parts]
        width = max(lengths)
        tensors = [layer_tensors(cache) or [] for _, cache, _, _ in parts]
        merged = DynamicCache()
        for layer in range(len(tensors[0])):
            keys, values = [], []
            for layers, length in zip(tensors, lengths, strict=True):
                k, v = layers[layer]
                pad = (0, 0, width - length, 0)  # (dim: none, sequence: on the left)
                keys.append(torch.nn.functional.pad(k, pad))
                values.append(torch.nn.functional.pad(v, pad))
            merged.update(torch.cat(keys), torch.cat(values), layer)
        mask = torch.zeros((len(parts), width), dtype=torch.long, device=self.device)
        for row, length in enumerate(lengths):
            mask[row, width - length :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = torch.cat([logits for logits, _, _, _ in parts])
        return logits, merged, mask, positions

    def _prefill_cached(self, prompt: list[int], store: PrefixCache) -> tuple[Any, Any, Any, Any]:
        torch = self._torch
        from transformers import DynamicCache

        size = store.block_tokens
        full = store.full_blocks(len(prompt))
        chain = store.lookup(prompt)
        cache = DynamicCache()
        if chain:
            for layer in range(len(chain[0].layers)):
                keys = torch.cat([block.layers[layer][0] for block in chain], dim=-2)
                values = torch.cat([block.layers[layer][1] for block in chain], dim=-2)
                cache.update(keys, values, layer)
        parent = chain[-1].id if chain else ROOT
        logits: Any = None
        start = len(chain) * size
        for index in range(len(chain), full + 1):  # the missing full blocks, then the tail
            end = len(prompt) if index == full else start + size
            piece = prompt[start:end]
            ids = torch.tensor([piece], dtype=torch.long, device=self.device)
            mask = torch.ones((1, end), dtype=torch.long, device=self.device)
            positions = torch.arange(start, end, device=self.device)[None, :]
            logits, cache = self._forward(ids, mask, positions, cache, keep=1)
            if len(piece) == size:
                if not PrefixCache.supports(cache, end):
                    log.info("this model's KV cache cannot be cut into blocks: prefix cache off")
                    self.prefix_cache = None
                    return self._prefill([prompt])
                parent = store.store(parent, piece, cache, start)
            store.count_computed(len(piece))
            start = end
        mask = torch.ones((1, len(prompt)), dtype=torch.long, device=self.device)
        positions = torch.arange(len(prompt), device=self.device)[None, :]
        return logits, cache, mask, positions
