"""Tool-call ids are unique within every conversation (core.domain.splice.unique_tool_call_ids): a
deterministic remap of the ids separate conversations reuse, the answers following their calls."""

from __future__ import annotations

from core.domain.splice import unique_tool_call_ids
from core.domain.trajectory import Message, ToolCall


def _call(call_id: str, name: str) -> Message:
    return Message("assistant", "", 0, tool_calls=(ToolCall(call_id, name, "{}"),))


def _answer(call_id: str, text: str) -> Message:
    return Message("tool", text, 0, tool_call_id=call_id)


def test_reused_ids_get_the_smallest_free_suffix_and_answers_follow() -> None:
    messages = [
        Message("user", "task", 0),
        _call("call_1", "lookup_customer"),
        _answer("call_1", "a"),
        _call("call_1", "get_order"),
        _answer("call_1", "b"),
        _call("call_1_2", "other"),  # already a name the remap would pick: the next free one is used
        _answer("call_1_2", "c"),
        _call("call_1", "third"),
        _answer("call_1", "d"),
    ]
    out = unique_tool_call_ids(messages)
    calls = [(m.tool_calls[0].call_id, m.tool_calls[0].name) for m in out if m.tool_calls]
    assert calls == [
        ("call_1", "lookup_customer"),
        ("call_1_2", "get_order"),
        ("call_1_2_2", "other"),
        ("call_1_3", "third"),
    ]
    assert [(m.tool_call_id, m.content) for m in out if m.role == "tool"] == [
        ("call_1", "a"), ("call_1_2", "b"), ("call_1_2_2", "c"), ("call_1_3", "d"),
    ]  # fmt: skip
    assert unique_tool_call_ids(messages) == out  # deterministic
    clean = [Message("user", "t", 0), _call("a", "x"), _answer("a", "1"), _call("b", "y"), _answer("b", "2")]
    assert unique_tool_call_ids(clean) == tuple(clean)  # nothing reused: unchanged
