"""Owns the hf backend's decoding loop: left padding, the cached forward pass, the prefill of one
prompt through the cross-call prefix cache (``core.llm.kv_prefix``), and sampling over the KV cache
with prefix reuse and per-prompt generators (see core/llm/hf.py's docstring for the determinism and
batch-invariance rules). ``HFPolicy`` inherits it; nothing else should.

Constrained rows (a prompt given an ``ActionConstraint``, core.llm.action_trie): the Thought is
sampled freely except that the end-of-turn token is masked (an answer must reach its Action line);
once the decoded text holds the ``Action:`` marker, every token is sampled from the model's
next-token distribution RENORMALISED over the tokens the trie allows at the row's node (logits of
the others set to -inf; greedy takes the best allowed token), an action's end node also allowing
end-of-turn and newline, and a node without children ending the answer. A token that completes the
marker AND carries text past it (``": get"`` in one token) is taken back and this step's token is
re-picked from the same logits under the trie of the marker's remainder + action. When the tokens
left are no more than the longest forced ``\nAction: <action>`` path, the marker is forced, so an
answer always ends in a valid action when ``max_tokens`` can hold one. Log-probabilities reported
are the model's raw ones (unmasked). Rows without a constraint decode exactly as before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from core.llm.action_trie import ActionConstraint, TokenTrie, marker_span
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


@dataclass
class _Guide:
    """One constrained row's place: free Thought (``trie`` None) or a node of a trie."""

    constraint: ActionConstraint
    forced_depth: int
    trie: TokenTrie | None = None
    node: int = 0

    def enter(self, trie: TokenTrie) -> None:
        self.trie, self.node = trie, 0


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
        constraints: Sequence[ActionConstraint | None] | None = None,
    ) -> list[list[Sample]]:
        per_chunk = 1 if self.batch_invariant else max(1, self.max_batch_rows // n)
        every: list[ActionConstraint | None] = (
            list(constraints) if constraints is not None else [None] * len(encoded)
        )
        chunks = [
            (
                encoded[start : start + per_chunk],
                seeds[start : start + per_chunk],
                every[start : start + per_chunk],
            )
            for start in range(0, len(encoded), per_chunk)
        ]

        def decode(
            chunk: tuple[list[list[int]], list[int], list[ActionConstraint | None]],
        ) -> list[list[Sample]]:
            with self._torch.inference_mode():  # thread-local: entered in the thread that decodes
                return self._decode_chunk(
                    chunk[0],
                    chunk[1],
                    n,
                    temperature,
                    max_tokens,
                    stop,
                    want_logprobs,
                    top_logprobs,
                    chunk[2] if any(c is not None for c in chunk[2]) else None,
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

    # ---- constrained rows (module docstring) -------------------------------------------------------
    def _terminators(self) -> set[int]:
        """Tokens that end an answer at an action's end: end-of-turn and the newline token."""
        found = getattr(self, "_terminator_ids", None)
        if found is None:
            newline = self.tokenizer("\n", add_special_tokens=False)["input_ids"]
            found = set(self.eos_ids) | ({int(newline[0])} if len(newline) == 1 else set())
            self._terminator_ids = found
        return found

    def _guide_mask(
        self, logits: Any, row: int, guide: _Guide, generated: list[int], max_tokens: int
    ) -> None:
        """Mask ``logits[row]`` to what the row may emit next; force the marker when the tokens
        left can only just hold an action line."""
        if guide.trie is None and max_tokens - len(generated) <= guide.forced_depth:
            text = self.tokenizer.decode(generated, skip_special_tokens=True)
            guide.enter(guide.constraint.trie(guide.constraint.forced_prefix(text)))
        if guide.trie is None:  # free Thought: it may not end the turn before its Action line
            logits[row, list(self.eos_ids)] = float("-inf")
            return
        allowed = guide.trie.allowed(guide.node)
        if guide.trie.ends[guide.node]:
            allowed = allowed + sorted(self._terminators() - set(allowed))
        self._restrict(logits, row, allowed)

    def _restrict(self, logits: Any, row: int, allowed: list[int]) -> None:
        index = self._torch.tensor(allowed, dtype=self._torch.long, device=logits.device)
        kept = logits[row, index].clone()
        logits[row] = float("-inf")
        logits[row, index] = kept

    def _guide_marker(
        self, guide: _Guide, token: int, generated: list[int], logits: Any, temperature: float, generator: Any
    ) -> tuple[int, bool]:
        """A free row sampled ``token``: enter the trie when the text now holds the marker. A token
        carrying text past the marker is taken back and re-picked from ``logits`` under the trie of
        the marker's remainder. Returns the token to emit and whether it is the trie's first token
        (False: free text, the marker's last token included)."""
        before = self.tokenizer.decode(generated, skip_special_tokens=True)
        text = self.tokenizer.decode([*generated, token], skip_special_tokens=True)
        span = marker_span(text)
        if span is None:
            return token, False
        if span[1] == len(text):  # the marker ends with this token: the trie starts at the next
            guide.enter(guide.constraint.trie(""))
            return token, False
        if text.startswith(before) and span[1] > len(before):
            remainder = text[len(before) : span[1]]
        else:  # the marker was complete before this token (cannot happen: checked every step)
            remainder = guide.constraint.forced_prefix(before)
        guide.enter(guide.constraint.trie(remainder))
        masked = logits[None, :].clone()
        self._restrict(masked, 0, guide.trie.allowed(0) if guide.trie is not None else [])
        if temperature == 0:
            return int(masked[0].argmax()), True
        probs = self._torch.softmax(masked[0] / temperature, dim=-1)
        return int(self._torch.multinomial(probs, 1, generator=generator)), True

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
        constraints: Sequence[ActionConstraint | None] | None = None,
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
        guides: list[_Guide | None] = [None] * rows
        if constraints is not None:
            for row in range(rows):
                constraint = constraints[row // n]
                if constraint is not None:
                    guides[row] = _Guide(constraint, constraint.forced_depth())
        for _ in range(max_tokens):
            step_logits = logits[:, -1, :].float()
            pick_logits = step_logits
            if constraints is not None:
                pick_logits = step_logits.clone()
                for row, guide in enumerate(guides):
                    if guide is not None and not done[row]:
                        self._guide_mask(pick_logits, row, guide, generated[row], max_tokens)
            if temperature == 0:
                chosen = pick_logits.argmax(dim=-1)
            else:
                probs = torch.softmax(pick_logits / temperature, dim=-1)
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
                guide = guides[row]
                walk = guide is not None and guide.trie is not None  # this token follows the trie
                if guide is not None and guide.trie is None:  # free Thought: did it reach "Action:"?
                    picked, walk = self._guide_marker(
                        guide, token, generated[row], step_logits[row], temperature, generators[row // n]
                    )
                    if picked != token:  # re-picked under the trie: its own log-probability
                        token = chosen_list[row] = picked
                        lp_list[row] = float(all_logprobs[row, token])
                if guide is not None and walk and guide.trie is not None:
                    node = guide.trie.step(guide.node, token)
                    if node is None:  # an end-of-turn / newline token at an action's end
                        done[row], finish[row] = True, "stop"
                        if token in self.eos_ids:
                            ends[row] = (token, lp_list[row], step_top[row])
                        continue
                    guide.node = node
                    generated[row].append(token)
                    token_logprobs[row].append(lp_list[row])
                    tops[row].append(step_top[row])
                    if not guide.trie.children[node]:  # a whole action and nothing can follow
                        done[row], finish[row] = True, "stop"
                    continue
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
            feed = torch.tensor(chosen_list, dtype=torch.long, device=chosen.device)
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
