"""Owns label scoring of the ``openai`` Policy backend (``score_labels``; the transport is
``core.llm.openai_http``).

Label scoring, three documented approaches, chosen once per policy and cached (``score_mode``):

* ``"tokenize"`` (exact, needs no local tokenizer; the default when the server offers it): vLLM's
  ``POST {root}/tokenize`` (``root`` = the base URL without ``/v1``) renders the conversation with
  the SERVED model's chat template + generation prompt (``messages``, ``add_generation_prompt=true``,
  ``add_special_tokens=false``) and tokenizes each label alone; then ONE ``POST {base_url}/completions``
  per conversation sends every ``prompt ids + label ids`` as a token-id prompt with ``echo=true,
  logprobs=0, max_tokens=1, temperature=0`` (vLLM rejects ``max_tokens=0``). A label's score is the
  sum of the echoed log-probabilities at the label's positions: exactly what the hf backend computes
  (same ids, same forward pass). Detected on first use: a server that answers the probe with 404 /
  405 / 400 / 422 / 501 (no ``/tokenize``, or no token-id prompts) falls back to ``top_logprobs``
  for the life of the policy, logged once. ``agentr model serve`` implements both endpoints.
* ``"echo"`` (exact; used when ``template_from`` names a local tokenizer folder holding the served
  model's chat template): the client renders the conversation with that template plus the
  generation prompt, then sends ``prompt + label`` to ``POST {base_url}/completions`` with
  ``echo=true, max_tokens=0, logprobs=0`` (supported by vLLM and ``agentr model serve``). The label's
  score is the sum of the echoed token log-probabilities whose text offset is at or after the
  label's start: the same quantity the hf backend computes.
* ``"top_logprobs"`` (portable, approximate; the fallback for servers without ``/tokenize``, e.g.
  OpenAI itself): one chat request per conversation with ``max_tokens=1,
  logprobs=true, top_logprobs=20``; a label scores the log-probability of the top token that is the
  longest prefix of the label (its first token), or ``-inf`` when none of the top 20 is. Exact when
  labels are single tokens; a ranking signal otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Sequence
from typing import Any

from core.llm.openai_http import UNSUPPORTED_STATUS, OpenAIHttp, ServerRefused
from core.llm.ports import Conversation, PolicyError

log = logging.getLogger("core.llm.openai_compat")  # the backend's one logger name, as before the split

TOP_LOGPROBS = 20
SCORE_MODES = ("tokenize", "echo", "top_logprobs")


class OpenAILabelScoring(OpenAIHttp):
    """``score_labels`` and the token counts of ``ContextWindow``; ``OpenAIPolicy.__init__`` sets the
    attributes below."""

    score_mode: str | None
    max_context_tokens: int | None
    _template_from: str | None
    _tokenizer: Any
    _score_lock: asyncio.Lock
    _label_ids: dict[str, list[int]]

    async def score_labels(
        self, conversations: Sequence[Conversation], labels: Sequence[str]
    ) -> list[dict[str, float]]:
        if not labels:
            raise ValueError("score_labels needs at least one label")
        model = await self._model_name()
        if self.score_mode == "echo":
            return await self._score_echo(model, conversations, labels)
        if not conversations:
            return []
        if self.score_mode is None:
            async with self._score_lock:
                if self.score_mode is None:
                    # probe with the first conversation: its answer is kept, the mode is cached
                    try:
                        first = await self._score_tokenized(model, conversations[:1], labels)
                    except ServerRefused as exc:
                        if exc.status not in UNSUPPORTED_STATUS:
                            raise
                        self.score_mode = "top_logprobs"
                        log.warning(
                            "model server %s offers no exact label scoring (/tokenize + token-id echo: %s); "
                            "label scores are approximate (first token among the top %d)",
                            self.base_url,
                            exc,
                            TOP_LOGPROBS,
                        )
                    else:
                        self.score_mode = "tokenize"
                        log.info("model server %s: exact label scoring over /tokenize", self.base_url)
                        return first + await self._score_tokenized(model, conversations[1:], labels)
        if self.score_mode == "tokenize":
            return await self._score_tokenized(model, conversations, labels)
        return await self._score_top_logprobs(model, conversations, labels)

    async def _tokenize(self, payload: dict[str, Any]) -> list[int]:
        body = await self._request("POST", f"{self.root_url}/tokenize", payload)
        try:
            tokens = body["tokens"]
            if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
                raise TypeError("tokens is not a list of ints")
        except (KeyError, TypeError) as exc:
            raise self._malformed(f"/tokenize answer ({exc})", body) from exc
        return [int(t) for t in tokens]

    async def _score_tokenized(
        self, model: str, conversations: Sequence[Conversation], labels: Sequence[str]
    ) -> list[dict[str, float]]:
        if not conversations:
            return []
        for label in labels:  # few labels, asked once each (sequential: a refusal stops at the first)
            if label not in self._label_ids:
                self._label_ids[label] = await self._tokenize(
                    {"model": model, "prompt": label, "add_special_tokens": False}
                )
        label_ids = [self._label_ids[label] for label in labels]
        for label, ids in zip(labels, label_ids, strict=True):
            if not ids:
                raise ValueError(f"label {label!r} encodes to no tokens")

        async def one(conversation: Conversation) -> dict[str, float]:
            prompt = await self._tokenize(
                {
                    "model": model,
                    "messages": [{"role": m.role, "content": m.content} for m in conversation],
                    "add_generation_prompt": True,
                    "add_special_tokens": False,
                }
            )
            payload = {
                "model": model,
                "prompt": [prompt + ids for ids in label_ids],
                "max_tokens": 1,
                "temperature": 0,
                "echo": True,
                "logprobs": 0,
            }
            body = await self._request("POST", "/completions", payload)
            try:
                choices = sorted(body["choices"], key=lambda c: c.get("index", 0))
                if len(choices) != len(labels):
                    raise ValueError(f"{len(choices)} choices for {len(labels)} prompts")
                scores = {}
                for label, ids, choice in zip(labels, label_ids, choices, strict=True):
                    values = choice["logprobs"]["token_logprobs"][len(prompt) : len(prompt) + len(ids)]
                    if len(values) != len(ids) or any(v is None for v in values):
                        raise ValueError(f"no echoed log-probabilities for label {label!r}")
                    scores[label] = float(sum(float(v) for v in values))
            except (KeyError, TypeError, IndexError, ValueError, AttributeError) as exc:
                raise self._malformed(f"echo logprobs answer ({exc})", body) from exc
            return scores

        return list(await asyncio.gather(*(one(c) for c in conversations)))

    async def _score_top_logprobs(
        self, model: str, conversations: Sequence[Conversation], labels: Sequence[str]
    ) -> list[dict[str, float]]:
        async def one(conversation: Conversation) -> dict[str, float]:
            payload = {
                "model": model,
                "messages": [{"role": m.role, "content": m.content} for m in conversation],
                "max_tokens": 1,
                "temperature": 0,
                "logprobs": True,
                "top_logprobs": TOP_LOGPROBS,
            }
            body = await self._request("POST", "/chat/completions", payload)
            try:
                top = body["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
                candidates = {str(e["token"]): float(e["logprob"]) for e in top}
            except (KeyError, TypeError, IndexError, ValueError) as exc:
                raise self._malformed(f"top_logprobs answer ({exc})", body) from exc
            scores = {}
            for label in labels:
                prefixes = [tok for tok in candidates if tok and label.startswith(tok)]
                scores[label] = candidates[max(prefixes, key=len)] if prefixes else -math.inf
            return scores

        return list(await asyncio.gather(*(one(c) for c in conversations)))

    def label_token_counts(self, labels: Sequence[str]) -> dict[str, int] | None:
        """Tokens each label's score sums over (the critic's length normalisation): exact after
        /tokenize scoring or with ``template_from`` (echo), 1 in ``top_logprobs`` mode (first token
        only), None while unknown (before the first ``score_labels`` call)."""
        if self.score_mode == "top_logprobs":
            return {label: 1 for label in labels}
        if self.score_mode == "echo" and self._template_from:
            return {label: max(1, self.count_tokens(label)) for label in labels}
        if self.score_mode == "tokenize" and all(label in self._label_ids for label in labels):
            return {label: max(1, len(self._label_ids[label])) for label in labels}
        return None

    # ----------------------------------------------------------------------------- ContextWindow
    def count_tokens(self, text: str) -> int:
        """Tokens of ``text``: exact with ``template_from``'s tokenizer, else a conservative estimate
        (UTF-8 bytes / 3, rounded up)."""
        if self._template_from:
            self._load_tokenizer()
            return len(self._tokenizer(text, add_special_tokens=False)["input_ids"])
        return -(-len(text.encode("utf-8")) // 3)

    def prompt_tokens(self, conversation: Conversation) -> int:
        """The rendered prompt's tokens with ``template_from``, else the estimate + 4 per message."""
        if self._template_from:
            return self.count_tokens(self._render(conversation))
        return sum(self.count_tokens(m.content) + 4 for m in conversation) + 4

    def _load_tokenizer(self) -> None:
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            try:
                self._tokenizer = AutoTokenizer.from_pretrained(self._template_from)
            except (OSError, ValueError) as exc:
                raise PolicyError(f"cannot load the chat template from {self._template_from}: {exc}") from exc

    def _render(self, conversation: Conversation) -> str:
        self._load_tokenizer()
        messages = [{"role": m.role, "content": m.content} for m in conversation]
        return str(self._tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))

    async def _score_echo(
        self, model: str, conversations: Sequence[Conversation], labels: Sequence[str]
    ) -> list[dict[str, float]]:
        async def one(prompt: str, label: str) -> float:
            payload = {"model": model, "prompt": prompt + label, "max_tokens": 0, "echo": True, "logprobs": 0}
            body = await self._request("POST", "/completions", payload)
            try:
                info = body["choices"][0]["logprobs"]
                offsets, values = info["text_offset"], info["token_logprobs"]
                total = 0.0
                for offset, value in zip(offsets, values, strict=True):
                    if offset >= len(prompt):
                        total += float(value)
            except (KeyError, TypeError, IndexError, ValueError) as exc:
                raise self._malformed(f"echo logprobs answer ({exc})", body) from exc
            return total

        prompts = [self._render(c) for c in conversations]
        results = []
        for prompt in prompts:
            values = await asyncio.gather(*(one(prompt, label) for label in labels))
            results.append(dict(zip(labels, values, strict=True)))
        return results
