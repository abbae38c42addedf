"""Owns the ``hf`` Policy backend: a local transformers causal LM loaded from a model folder.

Generation is a small decoding loop of our own over the model's KV cache (rather than
``model.generate``) so that it can (a) prefill each prompt ONCE and repeat its cache ``n`` times for
``n`` samples (prefix reuse), (b) draw every prompt's samples from its own explicit
``torch.Generator``, (c) stop on strings and report per-token log-probabilities.

Determinism: seeds are per prompt (``core.llm.ports.conversation_seeds``): prompt ``i`` samples from
its own generator seeded with ``seed[i]`` (a sequence) or ``seed + i`` (an int); one draw per step is
taken for all of its ``n`` rows, finished or not, so a prompt's samples depend only on its own seed
and its own tokens. ``seed=None`` draws a fresh seed. ``temperature=0`` decodes greedily.

Batch invariance: a forward pass over several prompts is NOT bit-identical to one over a prompt
alone - CPU kernels round differently with the batch's shape (measured: logits differ by ~2e-7 with
one more row), which now and then flips a sampled token or a near-tied label. With
``batch_invariant`` (the default on CPU, where reproducible runs and tests matter and the cost is
about 2x for a tiny model) every prompt runs its own forward passes (its ``n`` samples together),
so a prompt samples and scores exactly the same alone or with any neighbours, in any order. Off
(the default on CUDA, for throughput), prompts are left-padded into shared passes; padding is
masked out, so neighbours change nothing but float rounding. Same seed, same conversations and the
same neighbours => same samples (on the same device, dtype, thread count and torch build).

Label scoring: ``score_labels`` renders each conversation with the chat template and the generation
prompt and prefills all conversations in ONE batched forward pass (its last position scores every
label's first token); the KV cache is then repeated once per label and all labels' remaining tokens
go through one more small pass. A label's score is the sum of the log-probabilities of its tokens
(no end-of-turn token), i.e. log P(the answer starts with the label).

All torch work runs in a worker thread (``asyncio.to_thread``) under a lock, so the event loop stays
responsive and the model is used by one call at a time.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.llm.hf_folder import check_folder, resolve_dtype, weights_fingerprint
from core.llm.ports import Completion, Conversation, PolicyError, Seeds, conversation_seeds

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PromptLogprobs:
    """Per-token log-probabilities of a text under the model (first token has none)."""

    tokens: list[str]
    token_logprobs: list[float | None]
    text_offsets: list[int]


@dataclass(frozen=True)
class Sample:
    """One generated sample with the detail the HTTP server reports (token ids, top alternatives)."""

    completion: Completion
    token_ids: list[int]
    top: list[list[tuple[int, float]]]  # per generated token: (token id, raw log-prob), best first
    end: tuple[int, float, list[tuple[int, float]]] | None = None  # end-of-turn token, its log-prob, top


class HFPolicy:
    """Policy over a local transformers model folder; build with :meth:`from_folder`."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        model_version: str,
        *,
        max_batch_rows: int = 64,
        batch_invariant: bool | None = None,
    ) -> None:
        import torch

        self._torch = torch
        self.model = model
        self.tokenizer = tokenizer
        self.model_version = model_version
        self.max_batch_rows = max_batch_rows
        self.device = next(model.parameters()).device
        # module docstring: each prompt in its own forward passes (exact), default on CPU
        self.batch_invariant = self.device.type == "cpu" if batch_invariant is None else batch_invariant
        self._lock = threading.Lock()
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        configured = int(getattr(model.config, "max_position_embeddings", 0) or 0)
        self.max_positions = configured or 1 << 30
        # ContextWindow (core.llm.ports): None when the config does not say
        self.max_context_tokens: int | None = configured or None
        eos = tokenizer.eos_token_id
        if eos is None:
            raise PolicyError("the tokenizer has no eos token; the model cannot end a turn")
        self.eos_ids = {eos}
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        if isinstance(gen_eos, int):
            self.eos_ids.add(gen_eos)
        elif isinstance(gen_eos, list):
            self.eos_ids.update(int(t) for t in gen_eos)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos

    @classmethod
    def from_folder(
        cls,
        path: str | Path,
        device: str | None = None,
        dtype: Any = None,
        *,
        batch_invariant: bool | None = None,
    ) -> HFPolicy:
        """Load tokenizer and model from ``path`` (``save_pretrained`` layout).

        ``device``: "cuda", "cuda:1", "cpu"...; default CUDA when available. ``dtype``: torch dtype or
        "float32" / "bfloat16" / "float16"; default bfloat16 on CUDA, float32 on CPU.
        ``batch_invariant``: see the module docstring (default: on for CPU, off for CUDA). A folder missing
        its config, weights or tokenizer raises PolicyError naming what is missing.
        """
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        folder = Path(path).expanduser()
        check_folder(folder)
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        torch_dtype = resolve_dtype(torch, dtype, device)
        try:
            tokenizer = AutoTokenizer.from_pretrained(folder)
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype)
        except (OSError, ValueError, KeyError) as exc:
            raise PolicyError(f"cannot load model folder {folder}: {exc}") from exc
        if not getattr(tokenizer, "chat_template", None):
            raise PolicyError(f"tokenizer in {folder} has no chat template (chat_template.jinja)")
        model.to(device)  # type: ignore[arg-type]
        model.eval()
        version = f"{folder.resolve()}@{weights_fingerprint(folder)}"
        log.info("loaded %s on %s as %s", folder, device, torch_dtype)
        return cls(model, tokenizer, version, batch_invariant=batch_invariant)

    # ----------------------------------------------------------------------------- rendering
    def render(self, conversation: Conversation) -> str:
        """The chat-template text for ``conversation`` followed by the assistant generation prompt."""
        messages = [{"role": m.role, "content": m.content} for m in conversation]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return str(text)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def count_tokens(self, text: str) -> int:
        """Token length of ``text`` (a ``measure`` for :func:`core.llm.prompts.truncate_messages`)."""
        return len(self.encode(text))

    def prompt_tokens(self, conversation: Conversation) -> int:
        """Token length of ``conversation`` as :meth:`sample` renders it (ContextWindow)."""
        return len(self.encode(self.render(conversation)))

    # ----------------------------------------------------------------------------- Policy port
    async def sample(
        self,
        conversations: Sequence[Conversation],
        n: int = 1,
        temperature: float = 1.0,
        max_tokens: int = 64,
        seed: Seeds = None,
        stop: Sequence[str] | None = None,
        logprobs: bool = False,
    ) -> list[list[Completion]]:
        prompts = [self.render(c) for c in conversations]
        return await self.sample_texts(prompts, n, temperature, max_tokens, seed, stop, logprobs)

    async def sample_texts(
        self,
        prompts: Sequence[str],
        n: int = 1,
        temperature: float = 1.0,
        max_tokens: int = 64,
        seed: Seeds = None,
        stop: Sequence[str] | None = None,
        logprobs: bool = False,
    ) -> list[list[Completion]]:
        """Like :meth:`sample` on already-rendered prompt texts (the server's completions endpoint)."""
        samples = await self.generate(prompts, n, temperature, max_tokens, seed, stop, logprobs)
        return [[s.completion for s in row] for row in samples]

    async def generate(
        self,
        prompts: Sequence[str | Sequence[int]],
        n: int = 1,
        temperature: float = 1.0,
        max_tokens: int = 64,
        seed: Seeds = None,
        stop: Sequence[str] | None = None,
        logprobs: bool = False,
        top_logprobs: int = 0,
    ) -> list[list[Sample]]:
        """Samples with token ids and, when ``top_logprobs`` > 0, the best alternatives per token.
        A prompt is a text (encoded without special tokens) or a list of token ids."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if not prompts:
            return []
        if seed is None:
            seed = random.SystemRandom().randrange(1 << 62)
        seeds = conversation_seeds(seed, len(prompts))
        assert seeds is not None
        encoded = [self.encode(p) if isinstance(p, str) else [int(t) for t in p] for p in prompts]
        for index, ids in enumerate(encoded):
            if len(ids) + max_tokens > self.max_positions:
                raise PolicyError(
                    f"prompt {index} has {len(ids)} tokens; with max_tokens={max_tokens} it exceeds the "
                    f"model's context of {self.max_positions} "
                    "(truncate with core.llm.prompts.truncate_messages)"
                )
        return await asyncio.to_thread(
            self._sample_blocking,
            encoded,
            n,
            temperature,
            max_tokens,
            seeds,
            tuple(stop or ()),
            logprobs,
            top_logprobs,
        )

    async def score_labels(
        self, conversations: Sequence[Conversation], labels: Sequence[str]
    ) -> list[dict[str, float]]:
        if not labels:
            raise ValueError("score_labels needs at least one label")
        label_ids = [self.encode(label) for label in labels]
        for label, ids in zip(labels, label_ids, strict=True):
            if not ids:
                raise ValueError(f"label {label!r} encodes to no tokens")
        prompts = [self.encode(self.render(c)) for c in conversations]
        if not prompts:
            return []
        rows = await asyncio.to_thread(self._score_all, prompts, label_ids)
        return [dict(zip(labels, row, strict=True)) for row in rows]

    async def prompt_logprobs(self, texts: Sequence[str | Sequence[int]]) -> list[PromptLogprobs]:
        """Log-probability of every token of each text (or list of token ids) given the tokens
        before it (echo scoring); token ids are scored as given, their offsets are decoded lengths."""
        return await asyncio.to_thread(self._prompt_logprobs_blocking, list(texts))

    async def close(self) -> None:
        return None

    # ----------------------------------------------------------------------------- torch work
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
        results: list[list[Sample]] = []
        with self._lock, self._torch.inference_mode():
            for start in range(0, len(encoded), per_chunk):
                chunk = encoded[start : start + per_chunk]
                results.extend(
                    self._decode_chunk(
                        chunk,
                        seeds[start : start + per_chunk],
                        n,
                        temperature,
                        max_tokens,
                        stop,
                        want_logprobs,
                        top_logprobs,
                    )
                )
        return results

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
        from transformers import DynamicCache

        generators = []
        for s in seeds:
            gen = torch.Generator(device=self.device)
            gen.manual_seed(s)
            generators.append(gen)
        ids, mask, positions = self._left_pad(prompts)
        cache = DynamicCache()
        logits, cache = self._forward(ids, mask, positions, cache, keep=1)
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

    def _score_all(self, prompts: list[list[int]], label_ids: list[list[int]]) -> list[list[float]]:
        if not self.batch_invariant:
            return self._score_blocking(prompts, label_ids)
        return [row for prompt in prompts for row in self._score_blocking([prompt], label_ids)]

    def _score_blocking(self, prompts: list[list[int]], label_ids: list[list[int]]) -> list[list[float]]:
        torch = self._torch
        from transformers import DynamicCache

        n_labels = len(label_ids)
        longest = max(len(label) for label in label_ids)
        with self._lock, torch.inference_mode():
            # 1. prefill every conversation once; its last position predicts each label's first token
            ids, mask, positions = self._left_pad(prompts)
            last_logits, cache = self._forward(ids, mask, positions, DynamicCache(), keep=1)
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
        with self._lock, torch.inference_mode():
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
