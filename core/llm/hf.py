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

Prefix cache: prompts prefilled one at a time (every prompt when ``batch_invariant``) go through
a cache of KV blocks kept across calls (``core.llm.kv_prefix``): an episode's next turn, a search
node's child or the critic's next judged step prefills only its new tokens. It is exact - a prompt
is always prefilled at the same block boundaries, cached or not - so it changes no sample and no
score. ``prefix_cache_mb`` sets its budget (default ``$AGENTR_HF_PREFIX_CACHE_MB`` or 512; 0 turns
it off), ``prefix_block_tokens`` the block size (default 64). Shared padded passes (the CUDA
default) do not use it; a served model (vLLM, SGLang) has its own prefix caching.

All torch work runs in a worker thread (``asyncio.to_thread``), so the event loop stays responsive.
Concurrent calls: with ``batch_invariant`` every prompt runs its own forward passes over a cache of
its own (prefix-cache blocks are copied into it, never changed in place), so calls share nothing
mutable but the thread-safe prefix cache, and up to ``concurrent_calls`` of them run at once
(default 2): one model copy shared by a worker's search and critic serves a decode and a scoring
pass together instead of queueing them (docs/results.md measured the queueing at +13% wall on
SmolLM2-135M). With shared padded passes (the CUDA default) one call runs at a time, so a padded
batch's memory is bounded by ``max_batch_rows``. Either way a call's samples and scores are the
same as alone.

Decode threads: on CPU (``batch_invariant``) a call's prompts are decoded independently, so
``decode_threads`` > 1 decodes several of them at once in Python threads (torch releases the GIL
inside its kernels). Each prompt still runs its own forward passes with its own generator, and the
prefix cache is exact, so the samples are the same as one at a time. Default 1
(``$AGENTR_HF_DECODE_THREADS`` sets it): on the demo's tiny model the decoding is bound by HF's
per-op Python, i.e. by the GIL, so two threads gain nothing there; models with longer kernels
(SmolLM2-135M and up) do gain, with identical samples (bench/decode_threads.py --model; figures
in docs/results.md). Set it for a model of that size or larger.

Constrained actions: ``sample_actions`` (the ActionConstrained capability, core.llm.ports) limits
each conversation's Action line to a list of valid actions by a token prefix-trie, or, given a
``ToolCalls`` action space, to a call of one of the tools whose arguments validate against its
JSON schema (or a message to the user) by llguidance (core.llm.hf_tool_guide); the Thought stays
free (core/llm/hf_decoding.py's docstring says how; docs/constrained-decoding.md why).

This module owns the policy itself (loading, rendering, the Policy port's argument checks); the
torch work lives in ``core.llm.hf_decoding`` (decoding loop) and ``core.llm.hf_scoring`` (label and
prompt log-probabilities), which ``HFPolicy`` inherits; ``Sample`` and ``PromptLogprobs`` are
re-exported here.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import random
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core.llm.action_trie import ActionConstraint
from core.llm.chat_template import hf_messages
from core.llm.hf_constrained import Constraint
from core.llm.hf_decoding import Sample
from core.llm.hf_folder import check_folder, load_pretrained, resolve_dtype, weights_fingerprint
from core.llm.hf_scoring import HFScoring, PromptLogprobs
from core.llm.hf_tool_guide import LLTokenizer, ToolCallConstraint
from core.llm.kv_prefix import PrefixCache
from core.llm.ports import (
    ActionSpec,
    Completion,
    Conversation,
    PolicyError,
    SamplingParams,
    Seeds,
    conversation_seeds,
)
from core.llm.tool_grammar import ToolCalls

__all__ = ["HFPolicy", "PromptLogprobs", "Sample"]
log = logging.getLogger(__name__)

DEFAULT_PREFIX_CACHE_MB = 512
DEFAULT_PREFIX_BLOCK_TOKENS = 64
PREFIX_CACHE_ENV = "AGENTR_HF_PREFIX_CACHE_MB"
DECODE_THREADS_ENV = "AGENTR_HF_DECODE_THREADS"


def default_prefix_cache_mb() -> int:
    """The prefix cache budget when none is given: ``$AGENTR_HF_PREFIX_CACHE_MB`` or 512."""
    raw = os.environ.get(PREFIX_CACHE_ENV, "").strip()
    if not raw:
        return DEFAULT_PREFIX_CACHE_MB
    try:
        return int(raw)
    except ValueError:
        raise PolicyError(f"{PREFIX_CACHE_ENV} must be a whole number of MiB, got {raw!r}") from None


def default_decode_threads() -> int | None:
    """``$AGENTR_HF_DECODE_THREADS`` as a number, or None when unset (module docstring)."""
    raw = os.environ.get(DECODE_THREADS_ENV, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise PolicyError(f"{DECODE_THREADS_ENV} must be a whole number >= 1, got {raw!r}")
    return int(raw)


class HFPolicy(HFScoring):
    """Policy over a local transformers model folder; build with :meth:`from_folder`."""

    constrains_tool_calls = True  # core.llm.ports.constrains_tool_calls: ToolCalls by llguidance

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        model_version: str,
        *,
        max_batch_rows: int = 64,
        batch_invariant: bool | None = None,
        prefix_cache_mb: int | None = None,
        prefix_block_tokens: int = DEFAULT_PREFIX_BLOCK_TOKENS,
        decode_threads: int | None = None,
        concurrent_calls: int | None = None,
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
        calls = (2 if self.batch_invariant else 1) if concurrent_calls is None else concurrent_calls
        if calls < 1:
            raise ValueError(f"concurrent_calls must be >= 1, got {calls}")
        if calls > 1 and not self.batch_invariant:
            raise ValueError("concurrent_calls > 1 needs batch_invariant (calls in their own passes)")
        self.concurrent_calls = calls
        self._calls = threading.BoundedSemaphore(calls)  # module docstring: concurrent calls
        self._pool_lock = threading.Lock()
        self._tool_constraints: dict[str, ToolCallConstraint] = {}  # per ToolCalls.key()
        self._idle_pools = []  # decode-thread pools not in use (core/llm/hf_decoding.py)
        self._closed = False
        budget_mb = default_prefix_cache_mb() if prefix_cache_mb is None else prefix_cache_mb
        if budget_mb < 0:
            raise ValueError(f"prefix_cache_mb must be >= 0, got {budget_mb}")
        self.prefix_cache = PrefixCache(prefix_block_tokens, budget_mb << 20) if budget_mb else None
        threads = default_decode_threads() if decode_threads is None else decode_threads
        if threads is not None and threads < 1:
            raise ValueError(f"decode_threads must be >= 1, got {threads}")
        self._decode_threads = 1 if threads is None else threads
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self.vocab_rows = int(model.get_input_embeddings().num_embeddings)
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
        prefix_cache_mb: int | None = None,
        prefix_block_tokens: int = DEFAULT_PREFIX_BLOCK_TOKENS,
        decode_threads: int | None = None,
        concurrent_calls: int | None = None,
    ) -> HFPolicy:
        """Load tokenizer and model from ``path`` (``save_pretrained`` layout).

        ``device``: "cuda", "cuda:1", "cpu"...; default CUDA when available. ``dtype``: torch dtype or
        "float32" / "bfloat16" / "float16"; default bfloat16 on CUDA, float32 on CPU.
        ``batch_invariant``: see the module docstring (default: on for CPU, off for CUDA). A folder missing
        its config, weights or tokenizer raises PolicyError naming what is missing.
        ``prefix_cache_mb`` / ``prefix_block_tokens``: the prefix cache; ``decode_threads``: prompts
        decoded at once on CPU; ``concurrent_calls``: calls served at once (all: module docstring)."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        folder = Path(path).expanduser()
        check_folder(folder)
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        torch_dtype = resolve_dtype(torch, dtype, device)
        try:
            tokenizer = AutoTokenizer.from_pretrained(folder)
            model = load_pretrained(AutoModelForCausalLM, folder, dtype=torch_dtype)
        except (OSError, ValueError, KeyError) as exc:
            raise PolicyError(f"cannot load model folder {folder}: {exc}") from exc
        if not getattr(tokenizer, "chat_template", None):
            raise PolicyError(f"tokenizer in {folder} has no chat template (chat_template.jinja)")
        model.to(device)  # type: ignore[arg-type]
        model.eval()
        version = f"{folder.resolve()}@{weights_fingerprint(folder)}"
        log.info("loaded %s on %s as %s", folder, device, torch_dtype)
        return cls(
            model,
            tokenizer,
            version,
            batch_invariant=batch_invariant,
            prefix_cache_mb=prefix_cache_mb,
            prefix_block_tokens=prefix_block_tokens,
            decode_threads=decode_threads,
            concurrent_calls=concurrent_calls,
        )

    # ----------------------------------------------------------------------------- rendering
    def render(self, conversation: Conversation) -> str:
        """The chat-template text for ``conversation`` followed by the assistant generation prompt."""
        messages = hf_messages(conversation)  # tool calls / tool messages in the template's own shape
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

    async def sample_actions(
        self,
        conversations: Sequence[Conversation],
        actions: Sequence[ActionSpec],
        params: SamplingParams = SamplingParams(),
    ) -> list[list[Completion]]:
        """``sample`` with each conversation's Action line constrained to ``actions[i]`` (None or
        empty: free) by a token prefix-trie, or to a tool call / message by a ``ToolCalls`` grammar
        (core/llm/hf_decoding.py's docstring; the ActionConstrained capability of core.llm.ports)."""
        if len(actions) != len(conversations):
            raise ValueError(f"{len(actions)} action lists for {len(conversations)} conversations")
        prompts = [self.render(c) for c in conversations]
        samples = await self.generate(
            prompts,
            params.n,
            params.temperature,
            params.max_tokens,
            params.seed,
            None,
            params.logprobs,
            actions=actions,
        )
        return [[s.completion for s in row] for row in samples]

    def encode_many(self, texts: list[str]) -> list[list[int]]:
        """Token ids of several texts (no special tokens), in one tokenizer call."""
        if not texts:
            return []
        return [list(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]

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
        actions: Sequence[ActionSpec] | None = None,
    ) -> list[list[Sample]]:
        """Samples with token ids and, when ``top_logprobs`` > 0, the best alternatives per token.
        A prompt is a text (encoded without special tokens) or a list of token ids. ``actions``: per
        prompt, the actions its Action line is constrained to, or a ``ToolCalls`` grammar (None or
        empty: free)."""
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
            bad = next(
                (t for t in (min(ids, default=0), max(ids, default=0)) if not 0 <= t < self.vocab_rows), None
            )
            if bad is not None:
                raise PolicyError(
                    f"prompt {index} has token id {bad}, outside the vocabulary (0..{self.vocab_rows - 1})"
                )
            if len(ids) + max_tokens > self.max_positions:
                raise PolicyError(
                    f"prompt {index} has {len(ids)} tokens; with max_tokens={max_tokens} it exceeds the "
                    f"model's context of {self.max_positions} "
                    "(truncate with core.llm.prompts.truncate_messages)"
                )
        constraints: list[Constraint | None] | None = None
        if actions is not None:
            if len(actions) != len(prompts):
                raise ValueError(f"{len(actions)} action lists for {len(prompts)} prompts")
            constraints = [self._constraint(listed) for listed in actions]
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
            constraints,
        )

    def _constraint(self, spec: ActionSpec) -> Constraint | None:
        """The decoding constraint of one prompt's action spec (None: free)."""
        if isinstance(spec, ToolCalls):
            key = spec.key()  # compiled grammars are kept per action space (called on the event loop)
            found = self._tool_constraints.get(key)
            if found is None:
                tokenizer = LLTokenizer.of(self, self.tokenizer)
                found = self._tool_constraints[key] = ToolCallConstraint(spec, tokenizer, self.encode_many)
            return found
        if spec and any(a.strip() for a in spec):
            return ActionConstraint(spec, self.encode_many)
        return None

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

    def call_slot(self) -> threading.BoundedSemaphore:
        """The slot a call holds while it runs torch work on this model (module docstring:
        concurrent calls); code that drives ``self.model`` directly takes one with ``with``."""
        return self._calls

    async def close(self) -> None:
        with self._pool_lock:  # idle decode threads end now, a call in flight's when it ends
            pools, self._idle_pools, self._closed = self._idle_pools, [], True
        for pool in pools:
            pool.shutdown(wait=False)
