"""Tool-calling production traces end to end, and named trace datasets.

Over the real API (PostgreSQL) with the real critic and splice workers (Redis Streams): a failed
and a successful tool-calling trace of one task key become ONE revision sample whose OpenAI export
keeps native ``tool_calls``, ``tool`` messages and ``tools``, with weight 1 exactly on the
reflection turn and the good continuation, and which tokenises through a Qwen2.5-style tool-aware
chat template written into a tiny model's tokenizer. The successful trace also becomes a good
sample. A trace dataset built from a query is downloaded in three formats, rebuilt (every
projection replayed from the log, then the query re-run) and downloaded again: byte-identical.
"""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from core.bus.redis_streams import RedisStreamsBus
from core.domain.serde import from_dict
from core.domain.trajectory import TrainingSample
from core.runtime.settings import Settings
from core.store.projections import rebuild
from tests.api.conftest import ApiHarness
from tests.tool_traces import SYSTEM, TASK, TASK_KEY, TOOLS, failed_trace, successful_trace
from tests.trace_pipeline import settle_workers

TEMPLATES = Path(__file__).resolve().parents[1] / "ml" / "templates"


@pytest.fixture
async def settle(api: ApiHarness, redis_url: str, redis_prefix: str) -> AsyncIterator[Any]:
    """Run the relay, critic and splice workers until the log is quiet (burst mode)."""
    bus = RedisStreamsBus(redis_url, redis_prefix)
    settings = Settings(block_ms=50, critic_trace_strategy="rules")
    go = settle_workers(api.store, bus, settings)

    try:
        yield go
    finally:
        await bus.close()


async def _ingest(api: ApiHarness, settle: Any) -> tuple[str, dict[str, str], list[str]]:
    project = await api.project("support")
    key = api.auth(await api.key(project, "read", "ingest", "run"))
    accepted = await api.client.post(
        "/v1/traces", json={"format": "openai", "traces": [failed_trace(), successful_trace()]}, headers=key
    )
    assert accepted.status_code == 202, accepted.text
    trace_ids = accepted.json()["trace_ids"]
    await settle()
    return project, key, trace_ids


async def _download(api: ApiHarness, key: dict[str, str], dataset_id: str, fmt: str) -> bytes:
    response = await api.client.get(
        f"/v1/datasets/{dataset_id}/download", params={"format": fmt}, headers=key
    )
    assert response.status_code == 200, response.text
    return response.content


async def test_failed_and_successful_tool_traces_make_one_native_revision_sample(
    api: ApiHarness, settle: Any, tmp_path: Path
) -> None:
    _project, key, (failed_id, ok_id) = await _ingest(api, settle)

    failed = (await api.client.get(f"/v1/traces/{failed_id}", headers=key)).json()
    assert failed["status"] == "revised" and failed["critique"]["transition_index"] == 1
    assert [s["kind"] for s in failed["trajectory"]["steps"]] == ["tool", "tool", "answer"]
    listed = (await api.client.get("/v1/traces", params={"task_key": TASK_KEY}, headers=key)).json()
    assert {t["trace_id"] for t in listed["items"]} == {failed_id, ok_id}
    # both show their sample: the failure its revision, the success its good sample
    assert sorted(t["outcome"] for t in listed["items"] if t["sample_id"]) == ["failure", "success"]
    only_ok = (await api.client.get("/v1/traces", params={"outcome": "success"}, headers=key)).json()
    assert [t["trace_id"] for t in only_ok["items"]] == [ok_id]
    pairs = (await api.client.get("/v1/pairs", params={"source": "trace"}, headers=key)).json()["items"]
    assert len(pairs) == 1 and pairs[0]["status"] == "revised" and pairs[0]["shared_steps"] == 1

    created = await api.client.post(
        "/v1/datasets",
        json={
            "name": "refunds",
            "query": {"sources": ["traces"], "kinds": ["revision"], "task_keys": [TASK_KEY]},
        },
        headers=key,
    )
    assert created.status_code == 201, created.text
    dataset = created.json()
    assert dataset["samples"] == 1 and dataset["revisions"] == 1 and dataset["version"] == 1
    openai = await _download(api, key, dataset["dataset_id"], "openai")
    (line,) = openai.decode().splitlines()
    record = json.loads(line)
    assert record["tools"] == TOOLS
    messages = record["messages"]
    assert [m["role"] for m in messages] == [
        "system", "user",
        "assistant", "tool",  # shared prefix: lookup_customer and its result
        "assistant", "tool",  # the bad refund (t') and its error
        "assistant", "tool",  # reflection + the good refund
        "assistant",  # the good final answer
    ]  # fmt: skip
    assert messages[0]["content"] == SYSTEM and messages[1]["content"] == TASK
    assert [m.get("weight") for m in messages] == [None, None, 0, None, 0, None, 1, None, 1]
    lookup, bad, good, answer = messages[2], messages[4], messages[6], messages[8]
    assert lookup["tool_calls"][0]["function"]["name"] == "lookup_customer"
    assert json.loads(bad["tool_calls"][0]["function"]["arguments"]) == {"order_id": "1243"}
    assert messages[5] == {
        "role": "tool",
        "tool_call_id": bad["tool_calls"][0]["id"],
        "content": "Error: order 1243 not found for customer c-17",
    }
    call = good["tool_calls"][0]
    assert call["type"] == "function" and isinstance(call["function"]["arguments"], str)
    assert json.loads(call["function"]["arguments"]) == {"order_id": "1234"}
    assert messages[7]["tool_call_id"] == call["id"]
    # the reflection opens the first good assistant turn's content, before its own text; no fake call
    assert good["content"].endswith("Order 1234 is theirs; refunding it.")
    reflection = good["content"][: -len("Order 1234 is theirs; refunding it.")].strip()
    assert reflection and len(good["tool_calls"]) == 1
    assert answer == {"role": "assistant", "content": "Done: order 1234 has been refunded.", "weight": 1}

    # the same sample tokenises through a real tool-aware chat template (Qwen2.5's format)
    from transformers import AutoTokenizer

    from core.llm.tiny import build_tiny_model
    from train_service.tokenize import IGNORE_INDEX, tokenize_sample

    samples = await _download(api, key, dataset["dataset_id"], "samples")
    sample = from_dict(TrainingSample, json.loads(samples.decode()))
    corpus = [line, "<|im_start|>assistant\n<tool_call>\n</tool_call><|im_end|> <tool_response>"] * 10
    folder = build_tiny_model(tmp_path / "tiny", corpus, hidden=32, layers=1, heads=2, vocab_size=400)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = (TEMPLATES / "qwen2_5_tools.jinja").read_text()
    tokenized = tokenize_sample(tokenizer, sample)
    rendered = tokenizer.decode(tokenized.input_ids)
    assert "<tools>" in rendered and '"name": "refund_order"' in rendered
    conversation = rendered.split("<|im_end|>", 1)[1]  # after the system prompt with the tools
    assert conversation.count("<tool_call>") == 3 and conversation.count("<tool_response>") == 3
    trained = tokenizer.decode(
        [t for t, label in zip(tokenized.input_ids, tokenized.labels, strict=True) if label != IGNORE_INDEX]
    )
    assert reflection in trained and '"order_id": "1234"' in trained and "has been refunded" in trained
    rest = trained.replace(reflection, "")  # a reflection template may quote the wrong call
    assert '"order_id": "1243"' not in rest and "lookup_customer" not in rest
    assert "not found" not in rest  # tool results are context only


async def test_trace_dataset_downloads_are_byte_identical_after_a_rebuild(
    api: ApiHarness, settle: Any
) -> None:
    _project, key, (_failed_id, ok_id) = await _ingest(api, settle)
    body = {"name": "support-v", "query": {"sources": ["traces"], "task_keys": [TASK_KEY]}}
    created = await api.client.post("/v1/datasets", json=body, headers=key)
    assert created.status_code == 201, created.text
    dataset = created.json()
    assert (dataset["revisions"], dataset["goods"]) == (1, 1)  # the successful trace is a good sample
    kinds = [e["kind"] for e in dataset["entries"]]
    assert sorted(kinds) == ["good", "revision"]
    assert dataset["code_version"].startswith("agentr") and dataset["template_ids"]

    first = {
        fmt: await _download(api, key, dataset["dataset_id"], fmt)
        for fmt in ("openai", "sharegpt", "parquet")
    }
    good = next(
        json.loads(x)
        for x in first["sharegpt"].decode().splitlines()
        if '"loss":true' in x and "1243" not in x
    )
    assert [t["from"] for t in good["conversations"]] == [
        "human", "function_call", "observation", "function_call", "observation", "gpt"
    ]  # fmt: skip
    table = pq.read_table(io.BytesIO(first["parquet"]))
    assert table.num_rows == 2 and json.loads(table.column("tools")[0].as_py()) == TOOLS

    # the read models are thrown away and replayed from the log; the query is re-run
    await rebuild(api.store)
    check = await api.client.post(f"/v1/datasets/{dataset['dataset_id']}/rebuild", headers=key)
    assert check.status_code == 200 and check.json()["identical"] is True, check.text
    again = {fmt: await _download(api, key, dataset["dataset_id"], fmt) for fmt in first}
    assert again == first

    # more traces later (another producer id: the same one again would be a replay, not a new trace):
    # the dataset does not change; the same name builds version 2 with them
    more = await api.client.post(
        "/v1/traces",
        json={"format": "openai", "traces": [{**successful_trace(), "id": "ext-ok-2"}]},
        headers=key,
    )
    assert more.status_code == 202
    await settle()
    assert await _download(api, key, dataset["dataset_id"], "openai") == first["openai"]
    check = await api.client.post(f"/v1/datasets/{dataset['dataset_id']}/rebuild", headers=key)
    assert check.json()["identical"] is True  # bounded by the manifest's log position
    second = (await api.client.post("/v1/datasets", json=body, headers=key)).json()
    assert second["version"] == 2 and second["goods"] == 2 and second["dataset_id"] != dataset["dataset_id"]
    listed = (await api.client.get("/v1/datasets", params={"name": "support-v"}, headers=key)).json()
    assert [d["version"] for d in listed["items"]] == [2, 1]
    shown = (await api.client.get(f"/v1/datasets/{dataset['dataset_id']}", headers=key)).json()
    assert shown["entries"] == dataset["entries"]

    # filters: outcome success -> only the good sample; a trace id filter; bad input names the field
    goods = await api.client.post(
        "/v1/datasets",
        json={"name": "goods", "query": {"outcome": "success", "trace_ids": [ok_id]}},
        headers=key,
    )
    assert goods.status_code == 201 and goods.json()["goods"] == 1 and goods.json()["revisions"] == 0
    none = await api.client.post(
        "/v1/datasets", json={"name": "none", "query": {"trace_ids": ["nope"]}}, headers=key
    )
    assert none.status_code == 422 and "allow_empty" in none.json()["detail"]
    bad = await api.client.post("/v1/datasets", json={"name": "x", "query": {"kinds": ["bad"]}}, headers=key)
    assert bad.status_code == 422 and bad.json()["fields"][0]["field"].startswith("body.query.kinds")
    wrong_time = await api.client.post(
        "/v1/datasets",
        json={"name": "t", "query": {"since": "2030-01-01T00:00:00Z", "until": "2029-01-01T00:00:00Z"}},
        headers=key,
    )
    detail = wrong_time.json()["detail"]  # names the field (api/schemas: body.query.since)
    assert wrong_time.status_code == 422 and "since" in detail and "must be before" in detail


async def test_a_trace_whose_success_is_reported_later_becomes_a_good_sample(
    api: ApiHarness, settle: Any
) -> None:
    project = await api.project("later")
    key = api.auth(await api.key(project, "read", "ingest", "run"))
    waiting = successful_trace() | {"outcome": "unknown"}
    accepted = await api.client.post(
        "/v1/traces", json={"format": "openai", "traces": [waiting]}, headers=key
    )
    (trace_id,) = accepted.json()["trace_ids"]
    await settle()
    empty = await api.client.post(
        "/v1/datasets", json={"name": "later", "query": {"kinds": ["good"]}}, headers=key
    )
    assert empty.status_code == 422  # nothing yet: the outcome is unknown
    patched = await api.client.patch(
        f"/v1/traces/{trace_id}", json={"outcome": {"success": True, "reward": 0.8}}, headers=key
    )
    assert patched.status_code == 200, patched.text
    await settle()
    made = await api.client.post(
        "/v1/datasets", json={"name": "later", "query": {"kinds": ["good"]}}, headers=key
    )
    assert made.status_code == 201, made.text
    samples = await _download(api, key, made.json()["dataset_id"], "samples")
    (sample,) = [json.loads(line) for line in samples.decode().splitlines()]
    assert sample["kind"] == "good" and sample["reward"] == 0.8
    assert sample["provenance"]["trace_id"] == trace_id and sample["provenance"]["source"] == "trace"
    assert [m["weight"] for m in sample["messages"] if m["role"] == "assistant"] == [1, 1, 1]
    assert sample["tools"] == TOOLS and sample["messages"][-1]["role"] == "assistant"
