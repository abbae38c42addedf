"""``api.proxy.recorder.storable`` skips its two walks only when a call surely holds nothing to
clean: a clean call comes back as the same object; one holding a NUL, a lone surrogate, NaN or
Infinity anywhere (keys, JSON inside a string) is still cleaned, and an emoji is kept as it is."""

from __future__ import annotations

from typing import Any

import pytest

from api.proxy.recorder import CallRecord, storable


def _record(request_text: Any, answer: Any = "ok") -> CallRecord:
    return CallRecord(
        project_id="p",
        trace_id="t",
        call_id="c",
        external_id=None,
        task_key=None,
        body={"messages": [{"role": "user", "content": request_text}]},
        response={"choices": [{"index": 0, "message": {"role": "assistant", "content": answer}}]},
        stream=False,
        latency_ms=1.0,
        messages_from=0,
        extends=True,
    )


def test_a_clean_call_is_the_same_record_and_an_emoji_is_kept() -> None:
    clean = _record("café, naïve, 日本")
    assert storable(clean) is clean
    emoji = _record("go 😀")
    kept = storable(emoji)
    assert kept.body == emoji.body and not kept.cleaned


@pytest.mark.parametrize(
    ("request_text", "answer", "where"),
    [
        ("a\x00b", "ok", "request.messages[0].content"),
        ("ok", "x\ud800", "response.choices[0].message.content"),
        ('{"args": "\\u0000"}', "ok", "request.messages[0].content"),
        ("ok", float("nan"), "response.choices[0].message.content"),
        (float("inf"), "ok", "request.messages[0].content"),
    ],
)
def test_what_jsonb_cannot_hold_is_still_cleaned(request_text: Any, answer: Any, where: str) -> None:
    cleaned = storable(_record(request_text, answer))
    assert where in cleaned.cleaned
    content = (
        cleaned.body["messages"][0]["content"]
        if where.startswith("request")
        else cleaned.response["choices"][0]["message"]["content"]
    )
    assert content is None or ("\x00" not in content and "\ud800" not in content)
