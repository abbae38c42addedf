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
Requests share the model as HFPolicy allows (its concurrent calls); the event loop stays free meanwhile.
This module owns the app and its routes; the request bodies are in ``core.llm.server_schemas`` and
the token-by-token answer (logprobs entries, stream chunks) in ``core.llm.server_stream``.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse

from core.llm.hf import HFPolicy, Sample
from core.llm.ports import PolicyError
from core.llm.server_schemas import (
    ApiError,
    ChatMessage,
    ChatRequest,
    ChatToolCall,
    ChatTurn,
    CompletionRequest,
    TokenizeRequest,
    stop_list,
    usage_counts,
)
from core.llm.server_stream import chat_chunks, chat_logprobs, sse

__all__ = [
    "ApiError",
    "ChatMessage",
    "ChatRequest",
    "ChatToolCall",
    "ChatTurn",
    "CompletionRequest",
    "TokenizeRequest",
    "create_app",
]


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
                stop=stop_list(body.stop),
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
                choice["logprobs"] = {"content": chat_logprobs(sample, token_text)}
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
            "usage": usage_counts(len(prompt_ids), generated),
        }
        if body.return_token_ids:
            answer["prompt_token_ids"] = list(prompt_ids)
        if not body.stream:
            return answer
        include_usage = bool((body.stream_options or {}).get("include_usage"))
        return StreamingResponse(
            sse(chat_chunks(answer, samples[0], token_text, include_usage)), media_type="text/event-stream"
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
                    stop=stop_list(body.stop),
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
            "usage": usage_counts(
                sum(len(policy.encode(p)) if isinstance(p, str) else len(p) for p in prompts), total
            ),
        }

    return app
