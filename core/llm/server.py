"""Owns ``agentr model serve``: a small OpenAI-compatible HTTP server over the hf backend.

Endpoints (OpenAI wire format): ``GET /v1/models``, ``POST /v1/chat/completions`` (n, seed,
temperature, max_tokens, stop, logprobs, top_logprobs; ``stream`` answers Server-Sent Events, one
``chat.completion.chunk`` per token after the whole completion is generated, then ``data: [DONE]``,
with a final usage chunk under ``stream_options.include_usage``; vLLM's ``return_token_ids`` adds
``prompt_token_ids`` and each choice's ``token_ids``; messages may be tool calls and tool
results, rendered through the chat template, and ``tools`` / ``tool_choice`` are accepted: the model
answers text, this server parses no tool calls out of it) and ``POST /v1/completions`` (prompt as text,
texts, token ids or lists of token ids; n, seed, temperature, max_tokens, stop, echo, logprobs: with
``echo`` it returns the prompt's token log-probabilities, which exact label scoring uses), plus vLLM's
``POST /tokenize`` (``prompt`` or chat ``messages`` with ``add_generation_prompt``; answers
``{"tokens", "count", "max_model_len"}``) so a client without the tokenizer can score labels
exactly. Errors come back as ``{"error": {"message", "type", "code"}}``: 404 for an unknown model,
400 for bad parameters.
Requests run one at a time on the model (HFPolicy's lock); the event loop stays free meanwhile.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, Field

from core.domain.trajectory import Message, ToolCall
from core.llm.hf import HFPolicy, Sample
from core.llm.ports import PolicyError


class ApiError(Exception):
    def __init__(self, status: int, message: str, code: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.kind = status, message, code, kind


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: str


class ChatToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: dict[str, Any]


class ChatTurn(BaseModel):
    """A chat-completions message: text, an assistant's tool calls, or a tool result."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[ChatToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    def to_message(self) -> Message:
        content = self.content
        if isinstance(content, list):
            content = "".join(str(part.get("text", "")) for part in content)
        calls = tuple(
            ToolCall(
                call_id=call.id,
                name=str(call.function.get("name", "")),
                arguments=str(call.function.get("arguments") or "{}"),
            )
            for call in self.tool_calls or ()
        )
        role = "system" if self.role == "developer" else self.role
        return Message(role, content or "", tool_calls=calls, tool_call_id=self.tool_call_id, name=self.name)


class TokenizeRequest(BaseModel):
    """vLLM's ``/tokenize`` body: ``prompt`` (text) or ``messages`` (rendered with the chat template)."""

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_generation_prompt: bool = True
    add_special_tokens: bool = False


class ChatRequest(BaseModel):
    model: str
    messages: list[ChatTurn] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    return_token_ids: bool = False  # vLLM's extension: prompt_token_ids + each choice's token_ids
    n: int = Field(1, ge=1, le=64)
    temperature: float = Field(1.0, ge=0.0, le=10.0)
    max_tokens: int | None = Field(None, ge=1, le=8192)
    max_completion_tokens: int | None = Field(None, ge=1, le=8192)
    seed: int | None = None
    stop: str | list[str] | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)


class CompletionRequest(BaseModel):
    model: str
    prompt: str | list[str] | list[int] | list[list[int]]
    n: int = Field(1, ge=1, le=64)
    temperature: float = Field(1.0, ge=0.0, le=10.0)
    max_tokens: int = Field(16, ge=0, le=8192)
    seed: int | None = None
    stop: str | list[str] | None = None
    echo: bool = False
    logprobs: int | None = Field(None, ge=0, le=20)


def _stops(stop: str | list[str] | None) -> list[str]:
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else list(stop)


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """OpenAI's ``usage`` object: prompt tokens counted once per prompt, completions over all choices."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def create_app(policy: HFPolicy, model_name: str) -> FastAPI:
    """The FastAPI app serving ``policy`` under the model id ``model_name``."""
    app = FastAPI(title="agentr model server", description=f"OpenAI-compatible API over {model_name}")
    tokenizer = policy.tokenizer

    def token_text(token_id: int) -> str:
        return str(tokenizer.decode([token_id]))

    def check_model(name: str) -> None:
        if name != model_name:
            raise ApiError(
                404,
                f"The model `{name}` does not exist; this server serves `{model_name}`.",
                "model_not_found",
            )

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(
            {"error": {"message": exc.message, "type": exc.kind, "code": exc.code}}, status_code=exc.status
        )

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'][1:])}: {err['msg']}" for err in exc.errors()
        )
        return JSONResponse(
            {
                "error": {
                    "message": f"invalid request: {problems}",
                    "type": "invalid_request_error",
                    "code": "invalid_request",
                }
            },
            status_code=400,
        )

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": model_name,
                    "object": "model",
                    "created": 0,
                    "owned_by": "agentr",
                    "root": policy.model_version,
                }
            ],
        }

    @app.post("/v1/chat/completions")
    async def chat(body: ChatRequest) -> Any:
        check_model(body.model)
        conversation = [m.to_message() for m in body.messages]
        max_tokens = body.max_completion_tokens or body.max_tokens or 64
        top = body.top_logprobs or 0
        prompt_ids = policy.encode(policy.render(conversation))
        try:
            samples = await policy.generate(
                [prompt_ids],
                n=body.n,
                temperature=body.temperature,
                max_tokens=max_tokens,
                seed=body.seed,
                stop=_stops(body.stop),
                logprobs=body.logprobs,
                top_logprobs=top if body.logprobs else 0,
            )
        except (PolicyError, ValueError) as exc:
            raise ApiError(400, str(exc), "invalid_request") from exc
        choices = []
        for index, sample in enumerate(samples[0]):
            choice: dict[str, Any] = {
                "index": index,
                "message": {"role": "assistant", "content": sample.completion.text},
                "finish_reason": sample.completion.finish_reason,
                "logprobs": None,
            }
            if body.logprobs:
                choice["logprobs"] = {"content": _chat_logprobs(sample, token_text)}
            if body.return_token_ids:
                choice["token_ids"] = list(sample.token_ids)
            choices.append(choice)
        generated = sum(s.completion.tokens for s in samples[0])
        answer = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model_name,
            "choices": choices,
            "usage": _usage(len(prompt_ids), generated),
        }
        if body.return_token_ids:
            answer["prompt_token_ids"] = list(prompt_ids)
        if not body.stream:
            return answer
        include_usage = bool((body.stream_options or {}).get("include_usage"))
        return StreamingResponse(
            _sse(_chunks(answer, samples[0], token_text, include_usage)), media_type="text/event-stream"
        )

    vocab = len(tokenizer)

    @app.post("/tokenize")
    async def tokenize(body: TokenizeRequest) -> dict[str, Any]:
        if body.model is not None:
            check_model(body.model)
        if (body.prompt is None) == (body.messages is None):
            raise ApiError(400, "give exactly one of prompt or messages", "invalid_request")
        if body.messages is not None:
            messages = [{"role": m.role, "content": m.content} for m in body.messages]
            text = str(
                tokenizer.apply_chat_template(
                    messages, tokenize=False, add_generation_prompt=body.add_generation_prompt
                )
            )
        else:
            text = body.prompt or ""
        ids = [int(t) for t in tokenizer(text, add_special_tokens=body.add_special_tokens)["input_ids"]]
        return {"tokens": ids, "count": len(ids), "max_model_len": policy.max_positions}

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest) -> dict[str, Any]:
        check_model(body.model)
        raw = body.prompt
        prompts: list[str | list[int]]
        if isinstance(raw, str):
            prompts = [raw]
        elif raw and all(isinstance(item, int) for item in raw):
            prompts = [[int(item) for item in raw]]  # type: ignore[arg-type]
        else:
            prompts = list(raw)  # type: ignore[arg-type]
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ApiError(400, "prompt must not be empty", "invalid_request")
        for prompt in prompts:
            if not isinstance(prompt, str) and any(not 0 <= t < vocab for t in prompt):
                raise ApiError(400, f"prompt token ids must lie in 0..{vocab - 1}", "invalid_request")
        if body.max_tokens == 0 and not body.echo:
            raise ApiError(400, "max_tokens=0 only makes sense with echo=true", "invalid_request")
        want_lp = body.logprobs is not None
        try:
            echoed = await policy.prompt_logprobs(prompts) if body.echo else None
            generated: list[list[Sample]] | None = None
            if body.max_tokens > 0:
                generated = await policy.generate(
                    prompts,
                    n=body.n,
                    temperature=body.temperature,
                    max_tokens=body.max_tokens,
                    seed=body.seed,
                    stop=_stops(body.stop),
                    logprobs=want_lp,
                    top_logprobs=body.logprobs or 0,
                )
        except (PolicyError, ValueError) as exc:
            raise ApiError(400, str(exc), "invalid_request") from exc
        choices: list[dict[str, Any]] = []
        total = 0
        for p_index, prompt in enumerate(prompts):
            rows = generated[p_index] if generated is not None else [None] * body.n
            for sample in rows:
                prompt_text = prompt if isinstance(prompt, str) else tokenizer.decode(prompt)
                text = prompt_text if body.echo else ""
                tokens: list[str] = []
                token_lps: list[float | None] = []
                offsets: list[int] = []
                if echoed is not None:
                    tokens += echoed[p_index].tokens
                    token_lps += echoed[p_index].token_logprobs
                    offsets += echoed[p_index].text_offsets
                finish = "length"
                if sample is not None:
                    total += sample.completion.tokens
                    start = len(text)
                    text += sample.completion.text
                    finish = sample.completion.finish_reason
                    cursor = start
                    for token_id, lp in zip(sample.token_ids, sample.completion.logprobs or (), strict=False):
                        piece = token_text(token_id)
                        tokens.append(piece)
                        token_lps.append(lp)
                        offsets.append(cursor)
                        cursor += len(piece)
                choices.append(
                    {
                        "index": len(choices),
                        "text": text,
                        "finish_reason": finish,
                        "logprobs": {
                            "tokens": tokens,
                            "token_logprobs": token_lps,
                            "text_offset": offsets,
                            "top_logprobs": None,
                        }
                        if want_lp
                        else None,
                    }
                )
        return {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": model_name,
            "choices": choices,
            "usage": _usage(
                sum(len(policy.encode(p)) if isinstance(p, str) else len(p) for p in prompts), total
            ),
        }

    return app


def _chunks(
    answer: dict[str, Any], samples: list[Sample], token_text: Any, include_usage: bool
) -> list[dict[str, Any]]:
    """``answer`` as OpenAI ``chat.completion.chunk`` objects: per choice a role chunk, one chunk per
    generated token (its text, and its logprobs entry when asked), a finish chunk; then usage."""
    head = {key: answer[key] for key in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    chunks: list[dict[str, Any]] = []
    for choice, sample in zip(answer["choices"], samples, strict=True):
        index = choice["index"]
        chunks.append(
            head
            | {
                "choices": [
                    {
                        "index": index,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ]
            }
        )
        lp_entries = (choice.get("logprobs") or {}).get("content") or []
        for piece, positions in _token_pieces(sample, token_text):
            entries = [lp_entries[p] for p in positions if p < len(lp_entries)]
            lp = {"content": entries} if entries else None
            chunks.append(
                head
                | {
                    "choices": [
                        {"index": index, "delta": {"content": piece}, "logprobs": lp, "finish_reason": None}
                    ]
                }
            )
        chunks.append(
            head
            | {
                "choices": [
                    {"index": index, "delta": {}, "logprobs": None, "finish_reason": choice["finish_reason"]}
                ]
            }
        )
    if include_usage:
        chunks.append(head | {"choices": [], "usage": answer["usage"]})
    return chunks


def _token_pieces(sample: Sample, token_text: Any) -> list[tuple[str, list[int]]]:
    """The completion's text cut at token boundaries (pieces join to exactly the text), each with the
    positions of its tokens; a token whose bytes end mid-character joins the next one, as a streaming
    detokeniser does."""
    text = sample.completion.text
    pieces: list[tuple[str, list[int]]] = []
    consumed = 0
    pending, positions = "", []
    for position, token_id in enumerate(sample.token_ids):
        pending += token_text(token_id)
        positions.append(position)
        if "\ufffd" in pending[-1:]:
            continue
        if text.startswith(pending, consumed):
            pieces.append((pending, positions))
            consumed += len(pending)
            pending, positions = "", []
    if consumed < len(text) or positions:  # stop strings, special tokens: the rest in one piece
        if pieces and consumed >= len(text):
            pieces[-1] = (pieces[-1][0], pieces[-1][1] + positions)
        else:
            pieces.append((text[consumed:], positions))
    return pieces


async def _sse(chunks: list[dict[str, Any]]) -> Any:
    for chunk in chunks:
        yield f"data: {json.dumps(chunk)}\n\n"
    yield "data: [DONE]\n\n"


def _chat_logprobs(sample: Sample, token_text: Any) -> list[dict[str, Any]]:
    content = []
    logprobs = sample.completion.logprobs or ()
    for position, (token_id, lp) in enumerate(zip(sample.token_ids, logprobs, strict=False)):
        text = token_text(token_id)
        alternatives = sample.top[position] if position < len(sample.top) else []
        content.append(
            {
                "token": text,
                "logprob": lp,
                "bytes": list(text.encode()),
                "top_logprobs": [
                    {"token": token_text(alt), "logprob": alt_lp, "bytes": list(token_text(alt).encode())}
                    for alt, alt_lp in alternatives
                ],
            }
        )
    if sample.end is not None and not content:  # the answer ended at once: report that position
        token_id, lp, alternatives = sample.end
        text = token_text(token_id)
        content.append(
            {
                "token": text,
                "logprob": lp,
                "bytes": list(text.encode()),
                "top_logprobs": [
                    {"token": token_text(alt), "logprob": alt_lp, "bytes": list(token_text(alt).encode())}
                    for alt, alt_lp in alternatives
                ],
            }
        )
    return content
