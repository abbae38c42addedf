"""Export formats: OpenAI weight flags, ShareGPT loss flags, Parquet in row groups, general-data reader."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from core.domain.trajectory import Message, TrainingSample
from core.formats.export import (
    FormatError,
    aiter_lines,
    file_fingerprint,
    iter_lines,
    iter_parquet,
    read_general_chat,
    read_samples_jsonl,
    write_jsonl,
    write_parquet,
)


def make(i: int) -> TrainingSample:
    return TrainingSample(
        sample_id=f"s{i}",
        kind="revision" if i % 2 else "good",
        messages=(
            Message("system", "You craft things."),
            Message("user", f"Goal: craft item {i}."),
            Message("assistant", f"Thought: bad\nAction: get {i} dirt", 0),
            Message("user", "Could not find dirt."),
            Message("assistant", f"Thought: I was wrong.\nAction: get {i} oak logs", 1),
        ),
        reward=1.0 if i % 3 else None,
        provenance={"tree": f"t{i}", "depth": i},
    )


class CountingSource:
    """An iterator of samples that records how far the consumer has pulled (to prove streaming)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.pulled = 0

    def __iter__(self) -> Iterator[TrainingSample]:
        for i in range(self.n):
            self.pulled += 1
            yield make(i)


def test_openai_lines_carry_assistant_weights() -> None:
    (line,) = list(iter_lines([make(1)], "openai"))
    rec = json.loads(line)
    assert set(rec) == {"messages"}
    assert [m.get("weight") for m in rec["messages"]] == [None, None, 0, None, 1]
    assert rec["messages"][4]["content"].endswith("oak logs")


def test_sharegpt_lines_carry_loss_flags() -> None:
    (line,) = list(iter_lines([make(1)], "sharegpt"))
    rec = json.loads(line)
    assert rec["id"] == "s1"
    assert [t["from"] for t in rec["conversations"]] == ["system", "human", "gpt", "human", "gpt"]
    assert [t["loss"] for t in rec["conversations"]] == [None, None, False, None, True]


def test_lines_are_produced_lazily() -> None:
    src = CountingSource(10_000)
    lines = iter_lines(src, "openai")
    next(lines)
    next(lines)
    assert src.pulled == 2


async def test_async_lines() -> None:
    async def gen() -> AsyncIterator[TrainingSample]:
        for i in range(5):
            yield make(i)

    out = [json.loads(x) async for x in aiter_lines(gen(), "sharegpt")]
    assert [r["id"] for r in out] == [f"s{i}" for i in range(5)]


def test_unknown_format() -> None:
    with pytest.raises(FormatError, match="unknown export format 'csv'"):
        list(iter_lines([make(0)], "csv"))


def test_samples_jsonl_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "ds" / "samples.jsonl"
    n = write_jsonl(path, CountingSource(2500), "samples")
    assert n == 2500
    back = list(read_samples_jsonl(path))
    assert back == [make(i) for i in range(2500)]


def test_failed_write_leaves_no_file(tmp_path: Path) -> None:
    def broken() -> Iterator[TrainingSample]:
        yield make(0)
        raise RuntimeError("source died")

    path = tmp_path / "out.jsonl"
    with pytest.raises(RuntimeError):
        write_jsonl(path, broken(), "openai")
    assert list(tmp_path.iterdir()) == []


def test_parquet_written_in_row_groups_and_readable(tmp_path: Path) -> None:
    src = CountingSource(2345)
    path = tmp_path / "ds.parquet"
    assert write_parquet(path, src, row_group_size=500) == 2345
    meta = pq.ParquetFile(path).metadata
    assert meta.num_rows == 2345
    assert meta.num_row_groups == 5  # more than one chunk: never the whole dataset at once
    assert list(iter_parquet(path, batch_size=300)) == [make(i) for i in range(2345)]

    from datasets import Dataset

    ds = Dataset.from_parquet(str(path))
    assert len(ds) == 2345
    row = ds[7]
    assert row["sample_id"] == "s7"
    assert [m["weight"] for m in row["messages"]] == [0, 0, 0, 0, 1]


def test_general_reader_accepts_both_formats(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    records = [
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]},
        {"conversations": [{"from": "human", "value": "2+2?"}, {"from": "gpt", "value": "4"}]},
        {
            "conversations": [
                {"from": "human", "value": "a"},
                {"from": "gpt", "value": "b", "loss": False},
                {"from": "human", "value": "c"},
                {"from": "gpt", "value": "d", "loss": True},
            ]
        },
    ]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n\n")
    got = list(read_general_chat(path))
    assert [s.kind for s in got] == ["general"] * 3
    assert [m.weight for m in got[0].messages] == [0, 1]
    assert [(m.role, m.content) for m in got[1].messages] == [("user", "2+2?"), ("assistant", "4")]
    assert [m.weight for m in got[2].messages] == [0, 0, 0, 1]
    assert [s.sample_id for s in read_general_chat(path)] == [s.sample_id for s in got]

    arr = tmp_path / "chat.json"
    arr.write_text(json.dumps(records))
    assert [s.sample_id for s in read_general_chat(arr)] == [s.sample_id for s in got]
    assert "sha256=" in file_fingerprint(path)


def test_general_reader_errors_name_the_problem(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        list(read_general_chat(missing))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}\n{oops\n'
    )
    with pytest.raises(FormatError, match=r"bad.jsonl:2: invalid JSON"):
        list(read_general_chat(bad))
    other = tmp_path / "other.jsonl"
    other.write_text('{"text": "plain"}\n')
    with pytest.raises(FormatError, match=r"other.jsonl:1: neither 'messages'"):
        list(read_general_chat(other))
    noasst = tmp_path / "noasst.jsonl"
    noasst.write_text('{"messages": [{"role": "user", "content": "x"}]}\n')
    with pytest.raises(FormatError, match="no assistant turn"):
        list(read_general_chat(noasst))


# ------------------------------------------------------------------------------ tool calls


def tool_sample() -> TrainingSample:
    from core.domain.trajectory import ToolCall

    tools = (
        {
            "type": "function",
            "function": {
                "name": "refund_order",
                "description": "Refund one order.",
                "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
            },
        },
    )
    return TrainingSample(
        sample_id="t1",
        kind="revision",
        messages=(
            Message("system", "You are a support agent."),
            Message("user", "Refund order 1234."),
            Message("assistant", "", 0, tool_calls=(ToolCall("c1", "refund_order", '{"order_id": "1243"}'),)),
            Message("tool", "Error: order 1243 not found", 0, tool_call_id="c1", name="refund_order"),
            Message(
                "assistant",
                "I used the wrong id.",
                1,
                tool_calls=(
                    ToolCall("c2", "refund_order", '{"order_id": "1234"}'),
                    ToolCall("c3", "refund_order", '{"order_id": "1299"}'),
                ),
            ),
            Message("tool", '{"status": "refunded"}', 0, tool_call_id="c2", name="refund_order"),
            Message("tool", '{"status": "refunded"}', 0, tool_call_id="c3", name="refund_order"),
            Message("assistant", "Both orders are refunded.", 1),
        ),
        reward=1.0,
        tools=tools,
    )


def test_openai_export_keeps_tool_calls_tool_messages_and_tools() -> None:
    (line,) = list(iter_lines([tool_sample()], "openai"))
    rec = json.loads(line)
    assert rec["tools"][0]["function"]["name"] == "refund_order"
    msgs = rec["messages"]
    assert [m["role"] for m in msgs] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    # the bad call: no content key, arguments as a JSON string, weight 0
    assert msgs[2] == {
        "role": "assistant",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "refund_order", "arguments": '{"order_id": "1243"}'},
            }
        ],
        "weight": 0,
    }
    assert msgs[3] == {"role": "tool", "tool_call_id": "c1", "content": "Error: order 1243 not found"}
    assert msgs[4]["content"] == "I used the wrong id." and msgs[4]["weight"] == 1
    assert [c["id"] for c in msgs[4]["tool_calls"]] == ["c2", "c3"]
    assert all(isinstance(c["function"]["arguments"], str) for c in msgs[4]["tool_calls"])
    assert [m.get("weight") for m in msgs] == [None, None, 0, None, 1, None, None, 1]
    assert msgs[-1]["role"] == "assistant"  # no empty trailing user turn


def test_sharegpt_export_follows_llama_factory_for_tools() -> None:
    (line,) = list(iter_lines([tool_sample()], "sharegpt"))
    rec = json.loads(line)
    assert rec["system"] == "You are a support agent."
    assert isinstance(rec["tools"], str)
    assert json.loads(rec["tools"])[0]["name"] == "refund_order"  # function objects, as a JSON string
    conv = rec["conversations"]
    assert [t["from"] for t in conv] == [
        "human",
        "function_call",
        "observation",
        "function_call",
        "observation",
        "gpt",
    ]
    assert json.loads(conv[1]["value"]) == {"name": "refund_order", "arguments": {"order_id": "1243"}}
    # human / observation on odd positions, gpt / function_call on even ones (1-based): LLaMA-Factory
    assert all((t["from"] in ("human", "observation")) == (i % 2 == 0) for i, t in enumerate(conv))
    # the assistant text beside a call travels as a <think> prefix; parallel calls as a JSON list
    assert conv[3]["value"].startswith("<think>I used the wrong id.</think>[")
    assert [c["arguments"]["order_id"] for c in json.loads(conv[3]["value"].split("</think>", 1)[1])] == [
        "1234",
        "1299",
    ]
    assert conv[4]["value"] == '{"status": "refunded"}\n{"status": "refunded"}'
    assert [t["loss"] for t in conv] == [None, False, None, True, None, True]


def test_tool_samples_round_trip_through_samples_parquet_and_general_reader(tmp_path: Path) -> None:
    sample = tool_sample()
    write_jsonl(tmp_path / "s.jsonl", [sample], "samples")
    assert list(read_samples_jsonl(tmp_path / "s.jsonl")) == [sample]
    write_parquet(tmp_path / "s.parquet", [sample])
    assert list(iter_parquet(tmp_path / "s.parquet")) == [sample]
    write_jsonl(tmp_path / "o.jsonl", [sample], "openai")
    (back,) = list(read_general_chat(tmp_path / "o.jsonl"))
    assert [m.role for m in back.messages] == [m.role for m in sample.messages]
    assert back.messages[4].tool_calls == sample.messages[4].tool_calls
    assert back.messages[3].tool_call_id == "c1" and back.tools == sample.tools
    write_jsonl(tmp_path / "g.jsonl", [sample], "sharegpt")
    (shared,) = list(read_general_chat(tmp_path / "g.jsonl"))
    assert [m.role for m in shared.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert shared.messages[4].content == "I used the wrong id."
    assert [c.name for c in shared.messages[4].tool_calls] == ["refund_order", "refund_order"]


def test_openai_export_refuses_tool_arguments_that_are_not_json_for_sharegpt() -> None:
    from core.domain.trajectory import ToolCall

    broken = TrainingSample(
        "b",
        "good",
        (Message("user", "x"), Message("assistant", "", 1, tool_calls=(ToolCall("c", "f", "{oops"),))),
    )
    with pytest.raises(FormatError, match=r"tool call 'c' \(f\): arguments are not valid JSON"):
        list(iter_lines([broken], "sharegpt"))
