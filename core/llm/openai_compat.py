"""Owns the ``openai`` Policy backend: any OpenAI-compatible server (vLLM, SGLang, OpenAI, agentr).

Sampling uses ``POST {base_url}/chat/completions`` with ``n``, ``seed``, ``stop``, ``logprobs``; one
request per conversation, at most ``max_concurrency`` in flight, each carrying its conversation's own
seed (``core.llm.ports.conversation_seeds``). Transient failures (connection
errors, timeouts, 429, 5xx) are retried with exponential backoff and jitter; anything else becomes a
:class:`PolicyError` that names the server and quotes what came back.

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
import logging
import math
import random
import re
from collections.abc import Sequence
from typing import Any

import httpx

from core.llm.ports import (
    CannotConstrain,
    Completion,
    Conversation,
    PolicyError,
    Seeds,
    conversation_seeds,
)

log = logging.getLogger(__name__)

RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}
TOP_LOGPROBS = 20


SCORE_MODES = ("tokenize", "echo", "top_logprobs")
STRUCTURED_FIELDS = ("structured_outputs", "guided")  # vLLM >= 0.12 | older vLLM (module docstring)
UNSUPPORTED_STATUS = {400, 404, 405, 422, 501}  # answers meaning "this server lacks that feature"


class ServerRefused(PolicyError):
    """The server answered a request with an HTTP error status (not retried); ``status`` says which."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class OpenAIPolicy:
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

    # ----------------------------------------------------------------------------- HTTP
    async def _request(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        attempt = 0
        while True:
            try:
                async with self._semaphore:
                    response = await self._client.request(method, path, json=payload)
            except (httpx.TimeoutException, httpx.TransportError) as exc:
                if attempt >= self.retries:
                    raise PolicyError(
                        f"cannot reach model server {self.base_url} ({method} {path}): "
                        f"{type(exc).__name__}: {exc} (after {attempt + 1} attempts)"
                    ) from exc
            else:
                if response.status_code < 400:
                    try:
                        return response.json()
                    except ValueError as exc:
                        raise PolicyError(
                            f"model server {self.base_url} answered {method} {path} with non-JSON: "
                            f"{response.text[:300]!r}"
                        ) from exc
                if response.status_code not in RETRY_STATUS or attempt >= self.retries:
                    raise self._http_error(method, path, response)
            delay = self.backoff * (2**attempt) * (0.5 + random.random())
            attempt += 1
            log.warning("retrying %s %s%s in %.2fs (attempt %d)", method, self.base_url, path, delay, attempt)
            await asyncio.sleep(delay)

    def _http_error(self, method: str, path: str, response: httpx.Response) -> PolicyError:
        body = response.text[:300]
        if response.status_code == 404:
            return ServerRefused(
                f"model server {self.base_url} answered 404 to {method} {path} "
                f"(model {self.model!r} unknown or wrong base URL; base URL should end in /v1): {body}",
                404,
            )
        return ServerRefused(
            f"model server {self.base_url} answered HTTP {response.status_code} to {method} {path}: {body}",
            response.status_code,
        )

    async def _model_name(self) -> str:
        if self.model:
            return self.model
        async with self._model_lock:
            if self.model:
                return self.model
            listing = await self._request("GET", "/models")
            try:
                names = [entry["id"] for entry in listing["data"]]
            except (KeyError, TypeError) as exc:
                raise PolicyError(
                    f"model server {self.base_url} sent a malformed /models list: {listing!r:.300}"
                ) from exc
            if len(names) != 1:
                raise PolicyError(
                    f"model server {self.base_url} serves {len(names)} models ({', '.join(names)}); "
                    "name one with URL#model"
                )
            self.model = names[0]
            self.model_version = f"{self.base_url}#{self.model}"
            return self.model

    async def list_models(self) -> list[str]:
        listing = await self._request("GET", "/models")
        try:
            return [entry["id"] for entry in listing["data"]]
        except (KeyError, TypeError) as exc:
            raise PolicyError(
                f"model server {self.base_url} sent a malformed /models list: {listing!r:.300}"
            ) from exc

    def _malformed(self, what: str, body: Any) -> PolicyError:
        return PolicyError(f"model server {self.base_url} sent a malformed {what}: {str(body)[:300]}")

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

    async def sample_actions(
        self,
        conversations: Sequence[Conversation],
        actions: Sequence[Sequence[str] | None],
        n: int = 1,
        temperature: float = 1.0,
        max_tokens: int = 64,
        seed: Seeds = None,
        logprobs: bool = False,
    ) -> list[list[Completion]]:
        """``sample`` with each conversation's Action line one of ``actions[i]`` (None or empty:
        free): vLLM's structured outputs, a regex over the whole answer (module docstring)."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if len(actions) != len(conversations):
            raise ValueError(f"{len(actions)} action lists for {len(conversations)} conversations")
        seeds = conversation_seeds(seed, len(conversations))
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
            if logprobs:
                payload["logprobs"] = True
            listed = [a for a in (actions[index] or ()) if a.strip()]
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

    async def close(self) -> None:
        await self._client.aclose()


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
