"""Owns the hf backend's decoding loop: left padding, the cached forward pass, the prefill of one
prompt through the cross-call prefix cache (``core.llm.kv_prefix``), and sampling over the KV cache
with prefix reuse and per-prompt generators (see core/llm/hf.py's docstring for the determinism and
batch-invariance rules). ``HFPolicy`` inherits it; nothing else should."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from core.llm.kv_prefix import ROOT, PrefixCache, layer_tensors
from core.llm.ports import Completion

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sample:
    """One generated sample with the detail the HTTP server reports (token ids, top alternatives)."""

    completion: Completion
    token_ids: list[int]
    top: list[list[tuple[int, float]]]  # per generated token: (token id, raw log-prob), best first
    end: tuple[int, float, list[tuple[int, float]]] | None = None  # end-of-turn token, its log-prob, top


class HFDecoding:
    """The torch side of ``HFPolicy.generate`` (mixin: needs the attributes HFPolicy sets)."""

    # set by HFPolicy.__init__
    _torch: Any
    model: Any
    tokenizer: Any
    device: Any
    pad_id: int
    eos_ids: set[int]
    batch_invariant: bool
    max_batch_rows: int
    _lock: threading.Lock
    _cache_kw: str
    prefix_cache: PrefixCache | None
    _decode_threads: int
    _decode_pool: ThreadPoolExecutor | None = None
    _decode_pool_size = 0

    def decode_threads(self) -> int:
        """Prompts decoded at once by one call (core/llm/hf.py's docstring): 1 with shared padded
        passes."""
        return self._decode_threads if self.batch_invariant else 1

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

    def _sample_blocking(
        self,
        encoded: list[list[int]],
        n: int,
        temperature: float,
        max_tokens: int,
        seeds: list[int],
        stop: tuple[str, ...],
        want_logprobs: bool,
        top_logprobs: int,
    ) -> list[list[Sample]]:
        per_chunk = 1 if self.batch_invariant else max(1, self.max_batch_rows // n)
        chunks = [
            (encoded[start : start + per_chunk], seeds[start : start + per_chunk])
            for start in range(0, len(encoded), per_chunk)
        ]

        def decode(chunk: tuple[list[list[int]], list[int]]) -> list[list[Sample]]:
            with self._torch.inference_mode():  # thread-local: entered in the thread that decodes
                return self._decode_chunk(
                    chunk[0], chunk[1], n, temperature, max_tokens, stop, want_logprobs, top_logprobs
                )

        with self._lock:
            workers = min(self.decode_threads(), len(chunks))
            if workers <= 1:
                parts = [decode(chunk) for chunk in chunks]
            else:  # independent prompts at once (core/llm/hf.py: decode threads); order kept
                parts = list(self._decode_executor(workers).map(decode, chunks))
        return [samples for part in parts for samples in part]

    def _decode_executor(self, workers: int) -> ThreadPoolExecutor:
        pool = self._decode_pool
        if pool is None or self._decode_pool_size != workers:
            if pool is not None:
                pool.shutdown(wait=False)
            pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="hf-decode")
            self._decode_pool, self._decode_pool_size = pool, workers
        return pool

    def _decode_chunk(
        self,
        prompts: list[list[int]],
        seeds: list[int],
        n: int,
        temperature: float,
        max_tokens: int,
        stop: tuple[str, ...],
        want_logprobs: bool,
        top_logprobs: int,
    ) -> list[list[Sample]]:
        torch = self._torch
        generators = []
        for s in seeds:
            gen = torch.Generator(device=self.device)
            gen.manual_seed(s)
            generators.append(gen)
        logits, cache, mask, positions = self._prefill(prompts)
        rows = len(prompts) * n
        if n > 1:  # prefix reuse: one prefill per prompt, its cache repeated for the n samples
            cache.batch_repeat_interleave(n)
            mask = mask.repeat_interleave(n, dim=0)
            positions = positions.repeat_interleave(n, dim=0)
            logits = logits.repeat_interleave(n, dim=0)
        next_position = positions[:, -1:] + 1
        generated: list[list[int]] = [[] for _ in range(rows)]
        token_logprobs: list[list[float]] = [[] for _ in range(rows)]
        tops: list[list[list[tuple[int, float]]]] = [[] for _ in range(rows)]
        ends: list[tuple[int, float, list[tuple[int, float]]] | None] = [None] * rows
        texts: list[str | None] = [None] * rows  # set when a stop string ended the row
        finish = ["length"] * rows
        done = [False] * rows
        for _ in range(max_tokens):
            step_logits = logits[:, -1, :].float()
            if temperature == 0:
                chosen = step_logits.argmax(dim=-1)
            else:
                probs = torch.softmax(step_logits / temperature, dim=-1)
                draws = [
                    torch.multinomial(probs[p * n : (p + 1) * n], 1, generator=generators[p]).squeeze(-1)
                    for p in range(len(prompts))
                ]
                chosen = torch.cat(draws)
            all_logprobs = torch.log_softmax(step_logits, dim=-1)
            raw_logprobs = all_logprobs.gather(-1, chosen[:, None]).squeeze(-1)
            chosen_list = chosen.tolist()
            lp_list = raw_logprobs.tolist()
            step_top: list[list[tuple[int, float]]] = [[] for _ in range(rows)]
            if top_logprobs > 0:
                values, indices = all_logprobs.topk(min(top_logprobs, all_logprobs.shape[-1]), dim=-1)
                step_top = [
                    list(zip(i_row, v_row, strict=True))
                    for i_row, v_row in zip(indices.tolist(), values.tolist(), strict=True)
                ]
            for row in range(rows):
                if done[row]:
                    continue
                token = chosen_list[row]
                if token in self.eos_ids:
                    done[row], finish[row] = True, "stop"
                    ends[row] = (token, lp_list[row], step_top[row])
                    continue
                generated[row].append(token)
                token_logprobs[row].append(lp_list[row])
                tops[row].append(step_top[row])
                if stop:
                    text = self.tokenizer.decode(generated[row], skip_special_tokens=True)
                    cut = min((text.find(s) for s in stop if s in text), default=-1)
                    if cut >= 0:
                        texts[row], done[row], finish[row] = text[:cut], True, "stop"
            if all(done):
                break
            feed = chosen.clone()
            for row in range(rows):
                if done[row]:
                    feed[row] = self.pad_id
            mask = torch.cat([mask, torch.ones((rows, 1), dtype=mask.dtype, device=mask.device)], dim=1)
            logits, cache = self._forward(feed[:, None], mask, next_position, cache, keep=1)
            next_position = next_position + 1
        out: list[list[Sample]] = []
        for p in range(len(prompts)):
            samples = []
            for row in range(p * n, (p + 1) * n):
                text = texts[row]
                if text is None:
                    text = self.tokenizer.decode(generated[row], skip_special_tokens=True)
                completion = Completion(
                    text=text,
                    tokens=len(generated[row]),
                    finish_reason=finish[row],
                    logprobs=tuple(token_logprobs[row]) if want_logprobs else None,
                )
                samples.append(Sample(completion, generated[row], tops[row], ends[row]))
            out.append(samples)
        return out
