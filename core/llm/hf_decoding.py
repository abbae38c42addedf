"""Owns the hf backend's decoding loop: sampling over the KV cache with prefix reuse and per-prompt
generators, chunked and threaded over prompts (see core/llm/hf.py's docstring for the determinism
and batch-invariance rules). The prefill before it (left padding, the cached forward pass, the
prefix cache) is ``core.llm.hf_prefill``'s, the trie-guided steps of constrained rows
``core.llm.hf_constrained``'s; ``HFDecoding`` inherits both. ``HFPolicy`` inherits it; nothing else
should.

Constrained rows (a prompt given an ``ActionConstraint``, core.llm.action_trie, or a
``ToolCallConstraint``, core.llm.hf_tool_guide: the same rules over a tool-call grammar): the Thought is
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

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from core.llm.hf_constrained import Constraint, Guide, HFConstrained
from core.llm.hf_prefill import HFPrefill
from core.llm.kv_prefix import PrefixCache
from core.llm.ports import Completion


@dataclass(frozen=True)
class Sample:
    """One generated sample with the detail the HTTP server reports (token ids, top alternatives)."""

    completion: Completion
    token_ids: list[int]
    top: list[list[tuple[int, float]]]  # per generated token: (token id, raw log-prob), best first
    end: tuple[int, float, list[tuple[int, float]]] | None = None  # end-of-turn token, its log-prob, top


class HFDecoding(HFPrefill, HFConstrained):
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
    _calls: threading.BoundedSemaphore
    _pool_lock: threading.Lock
    concurrent_calls: int
    _cache_kw: str
    prefix_cache: PrefixCache | None
    _decode_threads: int
    _idle_pools: list[ThreadPoolExecutor]
    _closed: bool

    def decode_threads(self) -> int:
        """Prompts decoded at once by one call (core/llm/hf.py's docstring): 1 with shared padded
        passes."""
        return self._decode_threads if self.batch_invariant else 1

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
        constraints: Sequence[Constraint | None] | None = None,
    ) -> list[list[Sample]]:
        per_chunk = 1 if self.batch_invariant else max(1, self.max_batch_rows // n)
        every: list[Constraint | None] = (
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
            chunk: tuple[list[list[int]], list[int], list[Constraint | None]],
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

        with self._calls:  # core/llm/hf.py: concurrent calls
            if min(self.decode_threads(), len(chunks)) <= 1:
                parts = [decode(chunk) for chunk in chunks]
            else:  # independent prompts at once (core/llm/hf.py: decode threads); order kept
                parts = self._decode_at_once(decode, chunks)
        return [samples for part in parts for samples in part]

    def _decode_at_once(self, decode: Any, chunks: list[Any]) -> list[Any]:
        """``decode`` over ``chunks`` in ``decode_threads`` threads, order kept. A call takes a pool
        of its own from the idle ones (at most ``concurrent_calls`` pools ever exist) and gives it
        back, so concurrent calls never share or shut down each other's threads."""
        with self._pool_lock:
            pool = self._idle_pools.pop() if self._idle_pools else None
        if pool is None:
            pool = ThreadPoolExecutor(max_workers=self.decode_threads(), thread_name_prefix="hf-decode")
        try:
            return list(pool.map(decode, chunks))
        finally:
            with self._pool_lock:
                closed = self._closed
                if not closed:
                    self._idle_pools.append(pool)
            if closed:  # the policy was closed meanwhile: these threads end too
                pool.shutdown(wait=False)

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
        constraints: Sequence[Constraint | None] | None = None,
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
        guides: list[Guide | None] = [None] * rows
        if constraints is not None:
            for row in range(rows):
                constraint = constraints[row // n]
                if constraint is not None:
                    depth = constraint.forced_depth()
                    if constraint.open_ended:  # a grammar: keep at most half of the budget
                        depth = min(depth, max_tokens // 2)
                    guides[row] = Guide(constraint, depth)
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
                walk = guide is not None and guide.walk is not None  # this token follows the walk
                if guide is not None and guide.walk is None:  # free Thought: did it reach "Action:"?
                    picked, walk = self._guide_marker(
                        guide, token, generated[row], step_logits[row], temperature, generators[row // n]
                    )
                    if picked != token:  # re-picked under the walk: its own log-probability
                        token = chosen_list[row] = picked
                        lp_list[row] = float(all_logprobs[row, token])
                if guide is not None and walk and guide.walk is not None:
                    if not guide.walk.advance(token):  # an end-of-turn / newline token at an action's end
                        done[row], finish[row] = True, "stop"
                        if token in self.eos_ids:
                            ends[row] = (token, lp_list[row], step_top[row])
                        continue
                    generated[row].append(token)
                    token_logprobs[row].append(lp_list[row])
                    tops[row].append(step_top[row])
                    if guide.walk.closed():  # a whole action and nothing can follow
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
