"""Owns the ``openai`` Policy backend: any OpenAI-compatible server (vLLM, SGLang, OpenAI, agentr).

Sampling uses ``POST {base_url}/chat/completions`` with ``n``, ``seed``, ``stop``, ``logprobs``; one
request per conversation, at most ``max_concurrency`` in flight, each carrying its conversation's own
seed (``core.llm.ports.conversation_seeds``). Transient failures (connection
errors, timeouts, 429, 5xx) are retried with exponential backoff and jitter; anything else becomes a
:class:`PolicyError` that names the server and quotes what came back.

Label scoring (``score_mode``: ``tokenize``, ``echo`` or ``top_logprobs``) is
``core.llm.openai_scoring``'s; requests, retries and errors are ``core.llm.openai_http``'s.

Constrained actions (``sample_actions``, the ActionConstrained capability of core.llm.ports): vLLM's
structured outputs. A choice list (``{"structured_outputs": {"choice": [...]}}``) must cover the
WHOLE completion, which would drop the Thought, so the list is sent as a regex over the whole
answer instead - the Thought free on its line, the Action one of the actions (alternation of the
escaped actions): ``Thought: [^\n]*\nAction: (?:a1|a2|...)``, in ONE request with ``n`` samples
(the alternative, a free Thought request then a ``choice`` request continuing each sample's
assistant message, costs n + 1 requests per conversation). Field names, from vLLM's structured
outputs documentation (docs.vllm.ai/en/latest/features/structured_outputs/): since v0.12.0 the
request carries ``"structured_outputs": {"regex": ...}`` (``"choice"``, ``"json"``, ``"grammar"``
alike); before, the same constraint was the top-level ``"guided_regex"`` (``"guided_choice"``,
...), removed in v0.12.0. ``structured_field`` picks one: ``"structured_outputs"`` (default) or
``"guided"`` (older servers; URL option ``?structured=guided``). A server that refuses the field
(HTTP 400 / 422 / 501) or IGNORES it (vLLM silently drops unknown fields, so an old server given the
new field answers unconstrained) raises CannotConstrain naming the server: every answer that did
not run out of tokens is checked against the regex, and one that does not match means the server
did not constrain.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import Any

import httpx

from core.llm.openai_http import RETRY_STATUS, UNSUPPORTED_STATUS, OpenAIHttp, ServerRefused
from core.llm.openai_scoring import SCORE_MODES, TOP_LOGPROBS, OpenAILabelScoring
from core.llm.ports import (
    ActionSpec,
    CannotConstrain,
    Completion,
    Conversation,
    PolicyError,
    SamplingParams,
    Seeds,
    conversation_seeds,
)
from core.llm.tool_grammar import ToolCalls

__all__ = [
    "RETRY_STATUS",
    "SCORE_MODES",
    "TOP_LOGPROBS",
    "UNSUPPORTED_STATUS",
    "OpenAIHttp",
    "OpenAIPolicy",
    "ServerRefused",
]

STRUCTURED_FIELDS = ("structured_outputs", "guided")  # vLLM >= 0.12 | older vLLM (module docstring)


class OpenAIPolicy(OpenAILabelScoring):
    """Policy over an OpenAI-compatible HTTP server.

    ``base_url`` is the API root including ``/v1`` (e.g. ``http://127.0.0.1:8000/v1``). ``model``
    None means: ask ``GET /models`` once and use the only model served (error if several).
    ``template_from``: a local tokenizer folder whose chat template renders prompts for exact
    ``echo`` label scoring; without it ``score_labels`` uses the server's ``/tokenize`` (exact) when
    it has one, else ``top_logprobs`` (approximate). ``score_mode`` forces one ("tokenize", "echo",
    "top_logprobs"); None = decide (attribute ``score_mode`` then says which, once decided).
    ``max_context_tokens``: the served model's context length, when known (ContextWindow); None =
    unknown, and callers do not truncate.
    """

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        api_key: str | None = None,
        *,
        max_concurrency: int = 8,
        timeout: float = 60.0,
        retries: int = 4,
        backoff: float = 0.5,
        template_from: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        max_context_tokens: int | None = None,
        score_mode: str | None = None,
        structured_field: str = "structured_outputs",
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise PolicyError(f"OpenAI base URL must start with http:// or https://, got {base_url!r}")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.retries = retries
        self.backoff = backoff
        self._semaphore = asyncio.Semaphore(max_concurrency)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            base_url=self.base_url, headers=headers, timeout=timeout, transport=transport
        )
        self._template_from = template_from
        self._tokenizer: Any = None
        self._model_lock = asyncio.Lock()
        self._score_lock = asyncio.Lock()
        self._label_ids: dict[str, list[int]] = {}  # label -> the served tokenizer's ids
        # "echo" with a local template; else decided on first use: "tokenize" or "top_logprobs"
        if score_mode not in (None, *SCORE_MODES):
            raise ValueError(f"score_mode must be one of {SCORE_MODES} or None, got {score_mode!r}")
        if score_mode == "echo" and template_from is None:
            raise ValueError("score_mode='echo' needs template_from (a local tokenizer folder)")
        if template_from is not None and score_mode is None:
            score_mode = "echo"
        self.score_mode: str | None = score_mode
        if structured_field not in STRUCTURED_FIELDS:
            raise ValueError(f"structured_field must be one of {STRUCTURED_FIELDS}, got {structured_field!r}")
        self.structured_field = structured_field
        self.root_url = self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else self.base_url
        self.model_version = f"{self.base_url}#{model or '?'}"  # the server's model name
        if max_context_tokens is not None and max_context_tokens < 1:
            raise ValueError(f"max_context_tokens must be >= 1, got {max_context_tokens}")
        # ContextWindow (core.llm.ports): unknown unless configured
        self.max_context_tokens = max_context_tokens

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
        return await self._chat(conversations, None, n, temperature, max_tokens, seed, stop, logprobs)

    async def sample_actions(
        self,
        conversations: Sequence[Conversation],
        actions: Sequence[ActionSpec],
        params: SamplingParams = SamplingParams(),
    ) -> list[list[Completion]]:
        """``sample`` with each conversation's Action line one of ``actions[i]`` (None or empty:
        free): vLLM's structured outputs, a regex over the whole answer (module docstring); a
        ``ToolCalls`` action space is refused (CannotConstrain)."""
        if len(actions) != len(conversations):
            raise ValueError(f"{len(actions)} action lists for {len(conversations)} conversations")
        if any(isinstance(a, ToolCalls) for a in actions):
            raise CannotConstrain(
                f"{self.model_version}: constrained tool calls (a tool-calling environment's JSON "
                "schemas) are the hf backend's only; set search.constrain_tool_calls and "
                "evaluation.constrain_tool_calls to false for a served model"
            )
        lists = [a for a in actions if not isinstance(a, ToolCalls)]
        return await self._chat(
            conversations,
            lists,
            params.n,
            params.temperature,
            params.max_tokens,
            params.seed,
            None,
            params.logprobs,
        )

    async def _chat(
        self,
        conversations: Sequence[Conversation],
        actions: Sequence[Sequence[str] | None] | None,
        n: int,
        temperature: float,
        max_tokens: int,
        seed: Seeds,
        stop: Sequence[str] | None,
        logprobs: bool,
    ) -> list[list[Completion]]:
        """One chat request per conversation, with its own seed; constrained where ``actions``
        lists actions for it."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        seeds = conversation_seeds(seed, len(conversations))  # one request per conversation, its own seed
        model = await self._model_name()

        async def one(index: int, conversation: Conversation) -> list[Completion]:
            payload: dict[str, Any] = {
                "model": model,
                "messages": [{"role": m.role, "content": m.content} for m in conversation],
                "n": n,
                "temperature": temperature,
                "max_tokens": max_tokens,
            }
            if seeds is not None:
                payload["seed"] = seeds[index]
            if stop:
                payload["stop"] = list(stop)
            if logprobs:
                payload["logprobs"] = True
            listed = [a for a in ((actions[index] if actions else None) or ()) if a.strip()]
            pattern = action_regex(listed) if listed else None
            if pattern is not None:
                payload.update(self.structured_request(pattern))
            try:
                body = await self._request("POST", "/chat/completions", payload)
            except ServerRefused as exc:
                if pattern is None or exc.status not in UNSUPPORTED_STATUS:
                    raise
                raise CannotConstrain(
                    f"model server {self.base_url} cannot constrain actions: it refused "
                    f"{self._field_name()} ({exc}); serve with vLLM (>= 0.12 for structured_outputs, "
                    "?structured=guided for older) or set constrain_actions to false"
                ) from exc
            completions = self._parse_chat(body, n, logprobs)
            if pattern is not None:
                self._check_constrained(pattern, completions, len(listed))
            return completions

        return list(await asyncio.gather(*(one(i, c) for i, c in enumerate(conversations))))

    def _field_name(self) -> str:
        return "structured_outputs.regex" if self.structured_field == "structured_outputs" else "guided_regex"

    def structured_request(self, pattern: str) -> dict[str, Any]:
        """The request fields that constrain the answer to ``pattern`` (module docstring)."""
        if self.structured_field == "structured_outputs":
            return {"structured_outputs": {"regex": pattern}}
        return {"guided_regex": pattern}

    def _check_constrained(self, pattern: str, completions: Sequence[Completion], count: int) -> None:
        compiled = re.compile(pattern)
        for completion in completions:
            if completion.finish_reason == "length":
                continue  # cut short: a prefix of a constrained answer need not match
            if compiled.fullmatch(completion.text) is None:
                raise CannotConstrain(
                    f"model server {self.base_url} did not constrain its answer to the {count} valid "
                    f"actions (it ignores {self._field_name()}; vLLM drops unknown fields): "
                    f"{completion.text[:200]!r}. Serve with vLLM >= 0.12 (or ?structured=guided for an "
                    "older vLLM), or set constrain_actions to false"
                )

    def _parse_chat(self, body: Any, n: int, logprobs: bool) -> list[Completion]:
        try:
            choices = sorted(body["choices"], key=lambda c: c.get("index", 0))
            usage_tokens = int((body.get("usage") or {}).get("completion_tokens", 0))
            prompt_tokens = int((body.get("usage") or {}).get("prompt_tokens", 0) or 0)
            out = []
            for choice in choices:
                content = choice["message"]["content"]
                if not isinstance(content, str):
                    raise TypeError("message.content is not a string")
                token_lps: tuple[float, ...] | None = None
                if logprobs:
                    entries = (choice.get("logprobs") or {}).get("content") or []
                    token_lps = tuple(float(e["logprob"]) for e in entries)
                tokens = len(token_lps) if token_lps is not None else usage_tokens // max(1, len(choices))
                finish = choice.get("finish_reason") or "stop"
                out.append(Completion(content, tokens, finish, token_lps, prompt_tokens))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise self._malformed(f"chat completion ({exc})", body) from exc
        if len(out) != n:
            raise self._malformed(f"chat completion ({len(out)} choices for n={n})", body)
        return out


def action_regex(actions: Sequence[str]) -> str:
    """The whole-answer regex of constrained decoding: a free one-line Thought, then the Action
    line as one of ``actions`` (each escaped; whitespace collapsed as ``format_assistant`` does)."""
    choices = "|".join(_escape(" ".join(a.split())) for a in dict.fromkeys(actions) if a.strip())
    return f"Thought: [^\\n]*\\nAction: (?:{choices})"


_REGEX_SPECIAL = frozenset("\\.^$*+?()[]{}|/")


def _escape(text: str) -> str:
    """``text`` as a regex literal: only metacharacters escaped (spaces stay plain, which every
    structured-output backend's regex dialect reads alike)."""
    return "".join(f"\\{c}" if c in _REGEX_SPECIAL else c for c in text)
