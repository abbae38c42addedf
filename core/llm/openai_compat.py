"""Owns the ``openai`` Policy backend: any OpenAI-compatible server (vLLM, SGLang, OpenAI, agentr).

Sampling uses ``POST {base_url}/chat/completions`` with ``n``, ``seed``, ``stop``, ``logprobs``; one
request per conversation, at most ``max_concurrency`` in flight, each carrying its conversation's own
seed (``core.llm.ports.conversation_seeds``). Transient failures (connection
errors, timeouts, 429, 5xx) are retried with exponential backoff and jitter; anything else becomes a
:class:`PolicyError` that names the server and quotes what came back.

Label scoring (``score_mode``: ``tokenize``, ``echo`` or ``top_logprobs``) is
``core.llm.openai_scoring``'s; requests, retries and errors are ``core.llm.openai_http``'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import httpx

from core.llm.openai_http import RETRY_STATUS, UNSUPPORTED_STATUS, OpenAIHttp, ServerRefused
from core.llm.openai_scoring import SCORE_MODES, TOP_LOGPROBS, OpenAILabelScoring
from core.llm.ports import Completion, Conversation, PolicyError, Seeds, conversation_seeds

__all__ = [
    "RETRY_STATUS",
    "SCORE_MODES",
    "TOP_LOGPROBS",
    "UNSUPPORTED_STATUS",
    "OpenAIHttp",
    "OpenAIPolicy",
    "ServerRefused",
]


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
            body = await self._request("POST", "/chat/completions", payload)
            return self._parse_chat(body, n, logprobs)

        return list(await asyncio.gather(*(one(i, c) for i, c in enumerate(conversations))))

    def _parse_chat(self, body: Any, n: int, logprobs: bool) -> list[Completion]:
        try:
            choices = sorted(body["choices"], key=lambda c: c.get("index", 0))
            usage_tokens = int((body.get("usage") or {}).get("completion_tokens", 0))
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
                out.append(Completion(content, tokens, choice.get("finish_reason") or "stop", token_lps))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise self._malformed(f"chat completion ({exc})", body) from exc
        if len(out) != n:
            raise self._malformed(f"chat completion ({len(out)} choices for n={n})", body)
        return out
