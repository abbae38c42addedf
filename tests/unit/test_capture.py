"""The capture proxy's pure parts: streamed chunks folded back into the answer (tool-call argument
deltas included, in OpenAI's published chunk shape), conversation keys and trace grouping."""

from __future__ import annotations

from api.proxy.grouping import Conversations
from core.formats.capture import StreamAssembler, answer_message, call_trajectory, conversation_keys

HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def _chunk(delta: dict[str, object], finish: str | None = None, **extra: object) -> dict[str, object]:
    return (
        HEAD | {"choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]} | extra
    )


def test_tool_call_deltas_assemble_into_the_message() -> None:
    assembler = StreamAssembler()
    for chunk in (
        _chunk({"role": "assistant", "content": None}),
        _chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": ""},
                    }
                ]
            }
        ),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
        _chunk(
            {
                "tool_calls": [
                    {
                        "index": 1,
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "get_time", "arguments": "{}"},
                    }
                ]
            }
        ),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
        _chunk({}, "tool_calls"),
        HEAD | {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14}},
    ):
        assembler.feed(chunk)
    response = assembler.response()
    assert response["usage"]["total_tokens"] == 14 and response["id"] == "chatcmpl-1"
    (choice,) = response["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            },
            {"id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
        ],
    }
    answer = answer_message(response)
    assert answer is not None
    imported = call_trajectory(
        [{"role": "user", "content": "Weather and time in Paris?"}], None, answer, "t", None
    )
    (step,) = imported.trajectory.steps
    assert [c.name for c in step.tool_calls] == ["get_weather", "get_time"]


def test_content_and_logprob_deltas_concatenate() -> None:
    assembler = StreamAssembler()
    lp = [{"token": "Hel", "logprob": -0.1, "bytes": None, "top_logprobs": []}]
    assembler.feed(_chunk({"role": "assistant", "content": ""}))
    assembler.feed(
        HEAD
        | {
            "choices": [
                {"index": 0, "delta": {"content": "Hel"}, "logprobs": {"content": lp}, "finish_reason": None}
            ]
        }
    )
    assembler.feed(_chunk({"content": "lo"}, "stop"))
    (choice,) = assembler.response()["choices"]
    assert choice["message"]["content"] == "Hello" and choice["logprobs"] == {"content": lp}


def test_keys_ignore_spelling_but_not_content_and_are_scoped_by_project() -> None:
    a = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "1", "function": {"name": "f", "arguments": '{"x": 1, "y": 2}'}}],
        }
    ]
    b = [
        {
            "role": "assistant",
            "content": "",
            "refusal": None,
            "tool_calls": [
                {"id": "1", "type": "function", "function": {"name": "f", "arguments": '{"y": 2, "x": 1}'}}
            ],
        }
    ]
    assert conversation_keys(a, "p") == conversation_keys(b, "p")
    assert conversation_keys(a, "p") != conversation_keys(a, "q")
    assert conversation_keys([{"role": "user", "content": "x"}], "p") != conversation_keys(
        [{"role": "user", "content": "y"}], "p"
    )


def test_grouping_continuity_branches_and_headers() -> None:
    index = Conversations()
    first = [{"role": "user", "content": "go"}]
    one = index.place("p", first, None)
    answer = {"role": "assistant", "content": "ok"}
    index.answered(one, answer)
    follow = [*first, answer, {"role": "user", "content": "next"}]
    two = index.place("p", follow, None)
    assert (two.trace_id, two.extends, two.messages_from) == (one.trace_id, True, 2)
    index.answered(two, {"role": "assistant", "content": "done"})
    retry = index.place("p", follow, None)  # the same call again: same trace, not extending it
    assert retry.trace_id == one.trace_id and not retry.extends
    assert index.place("q", follow, None).trace_id != one.trace_id  # another project never joins
    headed = index.place("p", first, "order-1")
    assert headed.trace_id == index.place("p", follow, "order-1").trace_id != one.trace_id
