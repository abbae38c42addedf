"""Reasoning parts of production traces: kept, and trained on only when a dataset asks.

Over the real API (PostgreSQL) with the real relay, critic and splice workers (Redis Streams): a
successful tool-calling trace whose assistant turns carry ``reasoning_content`` becomes a good
sample. A dataset built without ``include_reasoning`` downloads without any ``<think>`` block; one
built with it puts ``<think>\\n{reasoning}\\n</think>\\n\\n`` before each such assistant content in
every format (openai, sharegpt, parquet, samples), and its stored query rebuilds identically.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pyarrow.parquet as pq

from tests.api.conftest import ApiHarness
from tests.api.test_api_tool_traces import _download, settle  # noqa: F401  (settle is a fixture)
from tests.tool_traces import successful_trace

FINAL_REASONING = "The refund went through, so I tell the customer."
CALL_REASONING = "Order 1234 belongs to this customer."
FORMATS = ("openai", "sharegpt", "parquet", "samples")


def _trace_with_reasoning() -> dict[str, Any]:
    trace = successful_trace()
    messages = trace["messages"]
    messages[-1]["reasoning_content"] = FINAL_REASONING
    refund = next(m for m in messages if m.get("tool_calls") and "refunding" in (m.get("content") or ""))
    refund["reasoning_content"] = CALL_REASONING
    return trace


async def test_reasoning_is_trained_only_in_a_dataset_built_with_include_reasoning(
    api: ApiHarness,
    settle: Any,  # noqa: F811
) -> None:
    project = await api.project("thinking")
    key = api.auth(await api.key(project, "read", "ingest", "run"))
    accepted = await api.client.post(
        "/v1/traces", json={"format": "openai", "traces": [_trace_with_reasoning()]}, headers=key
    )
    assert accepted.status_code == 202, accepted.text
    (trace_id,) = accepted.json()["trace_ids"]
    await settle()

    query: dict[str, Any] = {"outcome": "success", "trace_ids": [trace_id]}
    plain = await api.client.post("/v1/datasets", json={"name": "plain", "query": query}, headers=key)
    assert plain.status_code == 201, plain.text
    assert plain.json()["goods"] == 1 and plain.json()["query"]["include_reasoning"] is False
    for fmt in FORMATS:
        body = await _download(api, key, plain.json()["dataset_id"], fmt)
        assert b"<think>\n" not in body, fmt
    # the reasoning is still kept on the sample (the internal format carries it, untrained)
    kept = json.loads(await _download(api, key, plain.json()["dataset_id"], "samples"))
    assert [m["reasoning"] for m in kept["messages"] if m["reasoning"]] == [CALL_REASONING, FINAL_REASONING]

    thinking = await api.client.post(
        "/v1/datasets",
        json={"name": "thinking", "query": {**query, "include_reasoning": True}},
        headers=key,
    )
    assert thinking.status_code == 201, thinking.text
    dataset = thinking.json()
    assert dataset["query"]["include_reasoning"] is True
    first = {fmt: await _download(api, key, dataset["dataset_id"], fmt) for fmt in FORMATS}

    record = json.loads(first["openai"])
    assistants = [m for m in record["messages"] if m["role"] == "assistant"]
    final = assistants[-1]
    assert final["content"] == f"<think>\n{FINAL_REASONING}\n</think>\n\nDone: order 1234 has been refunded."
    assert final["weight"] == 1  # the reasoning is trained exactly with its message
    refund = next(m for m in assistants if CALL_REASONING in (m.get("content") or ""))
    assert refund["content"] == f"<think>\n{CALL_REASONING}\n</think>\n\nOrder 1234 is theirs; refunding it."
    assert sum("<think>" in (m.get("content") or "") for m in assistants) == 2

    shared = json.loads(first["sharegpt"])
    turns = shared["conversations"]
    assert turns[-1]["from"] == "gpt" and turns[-1]["value"].startswith(
        f"<think>\n{FINAL_REASONING}\n</think>\n\n"
    )
    call_turn = next(t for t in turns if t["from"] == "function_call" and CALL_REASONING in t["value"])
    assert (
        call_turn["value"].startswith(f"<think>\n{CALL_REASONING}\n</think>")
        and "<think><think>" not in call_turn["value"]
    )

    table = pq.read_table(io.BytesIO(first["parquet"]))
    rows = table.column("messages")[0].as_py()
    last = [m for m in rows if m["role"] == "assistant"][-1]
    assert last["content"].startswith(f"<think>\n{FINAL_REASONING}\n</think>\n\n") and last["reasoning"] == ""

    samples = json.loads(first["samples"])
    last_sample = [m for m in samples["messages"] if m["role"] == "assistant"][-1]
    assert last_sample["content"].startswith("<think>\n") and last_sample["reasoning"] == ""

    check = await api.client.post(f"/v1/datasets/{dataset['dataset_id']}/rebuild", headers=key)
    assert check.status_code == 200 and check.json()["identical"] is True, check.text
    again = {fmt: await _download(api, key, dataset["dataset_id"], fmt) for fmt in FORMATS}
    assert again == first
