"""Owns the model server's wire types: the OpenAI-compatible request bodies
(``/v1/chat/completions``, ``/v1/completions``, vLLM's ``/tokenize``), the chat messages they carry
(text, tool calls, tool results, turned into domain ``Message``s), the ``ApiError`` the server
answers as ``{"error": {...}}``, and the small answer helpers (stop lists, ``usage``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from core.domain.trajectory import Message, ToolCall


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


def stop_list(stop: str | list[str] | None) -> list[str]:
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else list(stop)


def usage_counts(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """OpenAI's ``usage`` object: prompt tokens counted once per prompt, completions over all choices."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
