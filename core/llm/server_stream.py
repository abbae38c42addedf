"""Owns how the model server writes a generated answer token by token: the chat
``logprobs.content`` entries, the completion's text cut at token boundaries, the
``chat.completion.chunk`` objects of a streamed answer and their Server-Sent Events framing.
"""

from __future__ import annotations

import json
from typing import Any

from core.llm.hf import Sample


def chat_chunks(
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


async def sse(chunks: list[dict[str, Any]]) -> Any:
    for chunk in chunks:
        yield f"data: {json.dumps(chunk)}\n\n"
    yield "data: [DONE]\n\n"


def chat_logprobs(sample: Sample, token_text: Any) -> list[dict[str, Any]]:
    """The chat answer's ``logprobs.content``: one entry per generated token with its top
    alternatives; an answer that ended at once reports its end-of-turn position instead."""
    logprobs = sample.completion.logprobs or ()
    content = [
        _logprob_entry(token_id, lp, sample.top[position] if position < len(sample.top) else [], token_text)
        for position, (token_id, lp) in enumerate(zip(sample.token_ids, logprobs, strict=False))
    ]
    if sample.end is not None and not content:  # the answer ended at once: report that position
        token_id, lp, alternatives = sample.end
        content.append(_logprob_entry(token_id, lp, alternatives, token_text))
    return content


def _logprob_entry(
    token_id: int, lp: float | None, alternatives: list[tuple[int, float]], token_text: Any
) -> dict[str, Any]:
    text = token_text(token_id)
    return {
        "token": text,
        "logprob": lp,
        "bytes": list(text.encode()),
        "top_logprobs": [
            {"token": token_text(alt), "logprob": alt_lp, "bytes": list(token_text(alt).encode())}
            for alt, alt_lp in alternatives
        ],
    }
