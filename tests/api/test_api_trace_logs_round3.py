"""Production logs, round three (issue 48), through the real API over PostgreSQL (and the real critic
and splice workers where samples are needed): speaker names, metadata, text kept byte for byte, empty
turns, partial batches, task-key normalisation, status that never goes backwards, contradictions and
ids, the rules critic on real terminal logs, and more span/Langfuse shapes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.api.conftest import ApiHarness
from tests.api.logs_stack import LogsStack, logs_stack

CODE = "Here is the script:\n\n```python\ndef add(a, b):\n    return a + b\n\nprint(add(2, 3))\n```\n"


@pytest.fixture
async def logs(pg_url: str, redis_url: str, redis_prefix: str) -> AsyncIterator[LogsStack]:
    async with logs_stack(pg_url, redis_url, redis_prefix) as stack:
        yield stack


async def _key(api: ApiHarness) -> dict[str, str]:
    project = await api.project("round3")
    return api.auth(await api.key(project, "ingest", "read"))


def _group_chat(**extra: Any) -> dict[str, Any]:
    """An AutoGen-style group chat: a human admin, a planner and a coder (both assistants, one after
    the other), an executor answering as a user, an empty assistant turn, then the coder's answer."""
    return {
        "task_key": "add-numbers",
        "outcome": "success",
        "metadata": {"team": "billing", "run": 7, "agents": ["planner", "coder"]},
        "messages": [
            {"role": "system", "content": "You are a team of agents."},
            {"role": "user", "name": "admin", "content": "Write a script adding 2 and 3.\n"},
            {"role": "assistant", "name": "planner", "content": "Plan:\n1. write it\n2.  run it"},
            {"role": "assistant", "name": "coder", "content": CODE},
            {
                "role": "user",
                "name": "executor",
                "content": "exitcode: 0 (execution succeeded)\nCode output: 5",
            },
            {"role": "assistant", "name": "coder", "content": ""},
            {"role": "user", "name": "admin", "content": "Go on."},
            {"role": "assistant", "name": "coder", "content": "  The answer is 5.\n\nTERMINATE  "},
        ],
        **extra,
    }


async def test_speaker_names_metadata_and_text_are_kept_in_the_trace_samples_and_exports(
    logs: LogsStack,
) -> None:
    (trace_id,) = (await logs.post("openai", _group_chat()))["trace_ids"]
    view = await logs.trace(trace_id)
    trajectory = view["trajectory"]
    assert view["metadata"] == {"team": "billing", "run": 7, "agents": ["planner", "coder"]}
    assert trajectory["task_name"] == "admin" and trajectory["task"] == "Write a script adding 2 and 3.\n"
    steps = trajectory["steps"]
    assert [s["name"] for s in steps] == ["planner", "coder", "coder", "coder"]
    # byte for byte: line breaks, double spaces, leading/trailing whitespace
    assert [s["action"] for s in steps] == [
        "Plan:\n1. write it\n2.  run it",
        CODE,
        "",  # the empty turn is kept as an empty step, not a refusal
        "  The answer is 5.\n\nTERMINATE  ",
    ]
    assert steps[0]["replies"] == []  # the planner was answered by the coder, not by a user
    assert steps[1]["replies"] == [
        {"content": "exitcode: 0 (execution succeeded)\nCode output: 5", "name": "executor"}
    ]
    assert steps[2]["replies"] == [{"content": "Go on.", "name": "admin"}]
    # the listing shows the metadata and filters by it
    listed = await logs.api.client.get("/v1/traces?metadata.team=billing&metadata.run=7", headers=logs.key)
    assert listed.status_code == 200, listed.text
    assert [(t["trace_id"], t["metadata"]["team"]) for t in listed.json()["items"]] == [(trace_id, "billing")]
    none = await logs.api.client.get("/v1/traces?metadata.team=sales", headers=logs.key)
    assert none.json()["items"] == []
    bad = await logs.api.client.get("/v1/traces?metadata.te%20am=x", headers=logs.key)
    assert bad.status_code == 422 and "metadata.te am" in bad.text
    await logs.settle()
    view = await logs.trace(trace_id)
    assert view["sample"]["provenance"]["metadata"]["team"] == "billing"
    body = {"name": "group-chat", "query": {"sources": ["traces"], "kinds": ["good"]}}
    created = await logs.api.client.post("/v1/datasets", json=body, headers=logs.key)
    assert created.status_code == 201, created.text
    url = f"/v1/datasets/{created.json()['dataset_id']}/download"
    openai = (await logs.api.client.get(url, params={"format": "openai"}, headers=logs.key)).text
    (record,) = [json.loads(line) for line in openai.splitlines()]
    assert [(m["role"], m.get("name")) for m in record["messages"]] == [
        ("system", None),
        ("user", "admin"),
        ("assistant", "planner"),
        ("assistant", "coder"),  # no empty user turn invented between the two assistants
        ("user", "executor"),
        ("assistant", "coder"),
        ("user", "admin"),
        ("assistant", "coder"),
    ]
    assert record["messages"][3]["content"] == CODE
    assert record["messages"][7]["content"] == "  The answer is 5.\n\nTERMINATE  "
    sharegpt = (await logs.api.client.get(url, params={"format": "sharegpt"}, headers=logs.key)).text
    (record,) = [json.loads(line) for line in sharegpt.splitlines()]
    turns = record["conversations"]
    assert [(t["from"], t.get("name")) for t in turns] == [
        ("system", None),
        ("human", "admin"),
        ("gpt", "planner"),
        ("gpt", "coder"),
        ("human", "executor"),
        ("gpt", "coder"),
        ("human", "admin"),
        ("gpt", "coder"),
    ]
    assert all(t["value"] for t in turns if t["from"] == "human")  # no empty human turn
    samples = (await logs.api.client.get(url, params={"format": "samples"}, headers=logs.key)).text
    assert json.loads(samples.splitlines()[0])["provenance"]["metadata"]["run"] == 7


async def test_langfuse_and_span_metadata_are_kept(api: ApiHarness) -> None:
    key = await _key(api)
    generation = {
        "type": "GENERATION",
        "startTime": "2026-11-30T10:00:00Z",
        "input": [{"role": "user", "content": "Cancel order 17."}],
        "output": {"role": "assistant", "content": "Done."},
    }
    # the body of Langfuse's GET /api/public/traces/{id}: the trace with its observations embedded
    langfuse = {
        "id": "lf-embedded-1",
        "sessionId": "s-17",
        "userId": "u-42",
        "tags": ["prod", "eu"],
        "metadata": {"tenant": "acme"},
        "observations": [generation],
    }
    answer = await api.client.post(
        "/v1/traces", json={"format": "langfuse", "traces": [langfuse]}, headers=key
    )
    assert answer.status_code == 202, answer.text
    view = (await api.client.get(f"/v1/traces/{answer.json()['trace_ids'][0]}", headers=key)).json()
    assert view["external_id"] == "lf-embedded-1" and view["task_key"] == "s-17"
    assert view["metadata"] == {
        "tenant": "acme",
        "userId": "u-42",
        "sessionId": "s-17",
        "tags": ["prod", "eu"],
    }
    span = {
        "name": "chat m",
        "attributes": {
            "user.id": "u-9",
            "agentr.metadata.customer": "c-1",
            "gen_ai.input.messages": json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": "Hi"}]}]
            ),
            "gen_ai.output.messages": json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": "Hello"}]}]
            ),
        },
    }
    answer = await api.client.post(
        "/v1/traces",
        json={"format": "otel", "traces": [{"spans": [span], "metadata": {"x": 1}}]},
        headers=key,
    )
    assert answer.status_code == 202, answer.text
    view = (await api.client.get(f"/v1/traces/{answer.json()['trace_ids'][0]}", headers=key)).json()
    assert view["metadata"] == {"user.id": "u-9", "customer": "c-1", "x": 1}


def _chat(task: str, answer: str, **extra: Any) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": task}, {"role": "assistant", "content": answer}],
        **extra,
    }


async def test_a_partial_batch_stores_the_readable_traces_and_names_each_refused_one(api: ApiHarness) -> None:
    key = await _key(api)
    unknown_call = {
        "messages": [
            {"role": "user", "content": "Balance?"},
            {"role": "tool", "tool_call_id": "nope", "content": "3"},
        ]
    }
    robot = {"messages": [{"role": "robot", "content": "beep"}]}
    batch = [_chat("One?", "1"), unknown_call, _chat("Two?", "2", id="p-2"), robot]
    # without partial: all or nothing (the first problem answers 422)
    whole = await api.client.post("/v1/traces", json={"format": "openai", "traces": batch}, headers=key)
    assert whole.status_code == 422
    assert (await api.client.get("/v1/traces", headers=key)).json()["items"] == []
    answer = await api.client.post(
        "/v1/traces", json={"format": "openai", "traces": batch, "partial": True}, headers=key
    )
    assert answer.status_code == 202, answer.text
    body = answer.json()
    assert len(body["trace_ids"]) == 2
    partial = body["partialSuccess"]
    assert partial["rejectedTraces"] == 2
    assert [(r["index"], r["field"]) for r in partial["refused"]] == [
        (1, "body.traces[1].messages[1]"),
        (3, "body.traces[3].messages[0].role"),
    ]
    assert "unknown or already answered call 'nope'" in partial["refused"][0]["message"]
    assert "body.traces[3].messages[0].role" in partial["errorMessage"]
    listed = (await api.client.get("/v1/traces", headers=key)).json()["items"]
    assert sorted(t["trace_id"] for t in listed) == sorted(body["trace_ids"])
    assert {t["external_id"] for t in listed} == {None, "p-2"}
    # nothing readable: a 422 naming every refused trace
    none = await api.client.post(
        "/v1/traces", json={"format": "openai", "traces": [unknown_call, robot], "partial": True}, headers=key
    )
    assert none.status_code == 422
    assert [f["field"] for f in none.json()["fields"]] == [
        "body.traces[0].messages[1]",
        "body.traces[1].messages[0].role",
    ]
    otlp = await api.client.post(
        "/v1/traces", json={"format": "otlp", "traces": [{"resourceSpans": []}], "partial": True}, headers=key
    )
    assert otlp.status_code == 422 and otlp.json()["fields"][0]["field"] == "body.partial"
