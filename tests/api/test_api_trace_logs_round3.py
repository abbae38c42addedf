"""Production logs, round three (issue 48), through the real API over PostgreSQL (and the real critic
and splice workers where samples are needed): speaker names, metadata, text kept byte for byte, empty
turns, partial batches, task-key normalisation, status that never goes backwards, contradictions and
ids, the rules critic on real terminal logs, and more span/Langfuse shapes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from api.writes import new_event
from core.domain.events import TraceCritiqued
from core.domain.events.values import StepVerdict
from core.domain.ids import derived_id, trace_stream
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


def _balance(task: str, args: str, result: str, final: str, **extra: Any) -> dict[str, Any]:
    call = {"id": "c1", "type": "function", "function": {"name": "balance", "arguments": args}}
    return {
        "messages": [
            {"role": "user", "content": task},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": result},
            {"role": "assistant", "content": final},
        ],
        **extra,
    }


async def test_task_keys_are_normalised_and_unpaired_traces_say_why(logs: LogsStack) -> None:
    # default keys: the task texts differ only in case, whitespace and Unicode composition
    bad = _balance("Balance of  café 7?\n", '{"a": 7}', '{"error": "timeout"}', "Sorry.", outcome="failure")
    good = _balance(
        "balance of cafe\u0301 7?", '{"a": 7, "f": 1}', '{"balance": 3}', "It is 3.", outcome="success"
    )
    (failed,) = (await logs.post("openai", bad))["trace_ids"]
    (succeeded,) = (await logs.post("openai", good))["trace_ids"]
    views = [await logs.trace(failed), await logs.trace(succeeded)]
    assert views[0]["task_key"] == views[1]["task_key"]
    # explicit keys: trimmed and case-folded
    a = _balance("A?", '{"a": 1}', '{"error": "x"}', "No.", task_key="refund-order ", outcome="failure")
    b = _balance("B?", '{"a": 2}', '{"ok": 1}', "Yes.", task_key="Refund-Order", outcome="success")
    ids = (await logs.post("openai", a, b))["trace_ids"]
    assert {(await logs.trace(t))["task_key"] for t in ids} == {"refund-order"}
    # a failed trace with no step at all says why it cannot pair
    no_step = {"messages": [{"role": "user", "content": "Hi?"}], "outcome": "failure"}
    (lonely,) = (await logs.post("openai", no_step))["trace_ids"]
    await logs.settle()
    assert (await logs.trace(failed))["status"] == "revised"
    assert (await logs.trace(ids[0]))["status"] == "revised"
    view = await logs.trace(lonely)
    assert view["status"] == "unpaired" and "no assistant step" in view["reason"]


async def test_a_late_critic_verdict_never_takes_a_revised_trace_back(logs: LogsStack) -> None:
    bad = _balance(
        "Balance?", '{"a": 7}', '{"error": "timeout"}', "Sorry.", task_key="late", outcome="failure"
    )
    good = _balance(
        "Balance?", '{"a": 7, "f": 1}', '{"balance": 3}', "3.", task_key="late", outcome="success"
    )
    (failed,) = (await logs.post("openai", bad))["trace_ids"]
    await logs.post("openai", good)
    await logs.settle()
    before = await logs.trace(failed)
    assert before["status"] == "revised" and before["transition_index"] == 0
    project = (await logs.api.client.get("/v1/traces", headers=logs.key)).json()["items"][0]
    assert project["status"] in ("revised", "ingested")
    late = TraceCritiqued(
        trace_id=failed,
        strategy="rules",
        transition_index=1,
        verdicts=(StepVerdict(1, "bad", method="rule", reason="late"),),
    )
    for index, verdict in ((1, late), (2, replace(late, transition_index=None, verdicts=()))):
        event = new_event(
            trace_stream(failed), verdict, project_id=None, event_id=derived_id("late", str(index))
        )
        await logs.api.store.append([event])
        after = await logs.trace(failed)
        assert (after["status"], after["transition_index"], after["sample_id"]) == (
            "revised",
            0,
            before["sample_id"],
        )
    listed = await logs.api.client.get("/v1/traces?status=revised", headers=logs.key)
    assert failed in [t["trace_id"] for t in listed.json()["items"]]


async def test_contradictions_and_ids(api: ApiHarness) -> None:
    key = await _key(api)

    async def post(*traces: Any, fmt: str = "openai", headers: dict[str, str] | None = None) -> Any:
        return await api.client.post(
            "/v1/traces", json={"format": fmt, "traces": list(traces)}, headers={**key, **(headers or {})}
        )

    contradiction = await post(_chat("Q?", "A.", outcome="failure", reward=1))
    assert contradiction.status_code == 422
    field = contradiction.json()["fields"][0]
    assert field["field"] == "body.traces[0].outcome"
    assert "failure" in field["message"] and "reward 1" in field["message"]
    # an external id holding "/" works with PATCH, URL-encoded
    answer = await post(_chat("Q?", "A.", id="team/a/1"))
    assert answer.status_code == 202, answer.text
    patched = await api.client.patch("/v1/traces/team%2Fa%2F1", json={"outcome": "success"}, headers=key)
    assert patched.status_code == 200, patched.text
    assert patched.json()["trace_id"] == answer.json()["trace_ids"][0]
    # an id holding a line break reaches the outcome route (404 naming it), not another route's 405
    broken = await api.client.patch("/v1/traces/ab%0Acd", json={"outcome": "success"}, headers=key)
    assert broken.status_code == 404, broken.text
    assert "ab\ncd" in broken.json()["detail"]
    # PATCH on a trace's POST-only sub-routes is a 405 naming them, not an outcome for "ID/accept"
    for action in ("accept", "corrections"):
        wrong = await api.client.patch(f"/v1/traces/x/{action}", json={"note": ""}, headers=key)
        assert wrong.status_code == 405 and wrong.headers["allow"] == "POST", wrong.text
        assert f"/{{trace_id}}/{action}: POST there" in wrong.json()["detail"]
    # tool arguments "" are kept verbatim
    answer = await post(_balance("B?", "", "3", "3."))
    view = (await api.client.get(f"/v1/traces/{answer.json()['trace_ids'][0]}", headers=key)).json()
    assert view["trajectory"]["steps"][0]["tool_calls"][0]["arguments"] == ""
    # an unknown status is a 422 listing the allowed ones
    status = await api.client.get("/v1/traces?status=exploded", headers=key)
    assert status.status_code == 422 and "waiting_for_outcome" in status.text and "revised" in status.text
    # an encoding the server cannot read is a 415, not misread JSON
    brotli = await api.client.post(
        "/v1/traces",
        content=json.dumps({"format": "openai", "traces": [_chat("Q?", "A.")]}).encode(),
        headers={**key, "content-type": "application/json", "content-encoding": "br"},
    )
    assert brotli.status_code == 415 and "'br'" in brotli.text

    def otlp(trace_id: str) -> dict[str, Any]:
        span = {
            "traceId": trace_id,
            "spanId": "0000000000000001",
            "name": "chat",
            "attributes": [
                {"key": "gen_ai.prompt.0.role", "value": {"stringValue": "user"}},
                {"key": "gen_ai.prompt.0.content", "value": {"stringValue": "Hi"}},
                {"key": "gen_ai.completion.0.role", "value": {"stringValue": "assistant"}},
                {"key": "gen_ai.completion.0.content", "value": {"stringValue": "Hello"}},
            ],
        }
        return {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}

    for bad_id, why in (("0102030405", "16 bytes"), ("0" * 32, "all-zero")):
        refused = await post(otlp(bad_id), fmt="otlp")
        assert refused.status_code == 422 and why in refused.text, refused.text
        receiver = await api.client.post("/v1/otlp/v1/traces", json=otlp(bad_id), headers=key)
        assert receiver.status_code in (200, 422) and why in receiver.text, receiver.text
    assert (await post(otlp("5b8efff798038103d269b633813fc60c"), fmt="otlp")).status_code == 202


def _autogen(*turns: tuple[str, str], key: str) -> dict[str, Any]:
    """A failed AutoGen two-agent log: the assistant writes code, the executor (a user proxy) runs it."""
    messages = [{"role": "user", "name": "user_proxy", "content": "Convert report.md to PDF."}]
    for code, output in turns:
        messages.append({"role": "assistant", "name": "assistant", "content": code})
        messages.append({"role": "user", "name": "user_proxy", "content": output})
    return {"task_key": key, "outcome": "failure", "messages": messages}


async def test_the_rules_critic_reads_exit_codes_and_the_agents_own_failure_reports(logs: LogsStack) -> None:
    exit_code = _autogen(
        ("```sh\nls\n```", "exitcode: 0 (execution succeeded)\nCode output: report.md"),
        ("```sh\npandoc report.md -o report.pdf\n```", "exitcode: 127 (execution failed)\nCode output: "),
        ("I was unable to convert the file.", ""),
        key="exit",
    )
    traceback_ok = _autogen(
        (
            "```python\nimport convert\n```",
            "exitcode: 0 (execution succeeded)\nCode output: Traceback (most recent call last):\n"
            "  ...\nImportError: optional speedups missing, using the slow path\ndone",
        ),
        ("I could not verify the PDF's fonts.", ""),
        key="tb",
    )
    clean = _autogen(
        ("```sh\nls\n```", "exitcode: 0 (execution succeeded)\nCode output: report.md"), key="ok"
    )
    first, second, third = (await logs.post("openai", exit_code, traceback_ok, clean))["trace_ids"]
    await logs.settle()
    view = await logs.trace(first)
    assert view["critique"]["transition_index"] == 1, view["critique"]
    assert "exit code 127" in view["critique"]["verdicts"][1]["reason"]
    view = await logs.trace(second)
    assert view["critique"]["transition_index"] == 1  # not the traceback printed under exit code 0
    assert view["critique"]["verdicts"][1]["reason"] == "the agent reports a failure: 'I could not'"
    view = await logs.trace(third)
    assert view["status"] == "no_error_found"
    assert view["reason"].startswith("no_error_found: the rules critic judged no step")


async def test_a_refusal_with_null_content_and_an_otel_item_of_two_trace_ids(api: ApiHarness) -> None:
    key = await _key(api)
    refusal = {
        "messages": [
            {"role": "user", "content": "Write malware."},
            {"role": "assistant", "content": None, "refusal": "I can't help with that."},
        ]
    }
    answer = await api.client.post("/v1/traces", json={"format": "openai", "traces": [refusal]}, headers=key)
    assert answer.status_code == 202, answer.text
    view = (await api.client.get(f"/v1/traces/{answer.json()['trace_ids'][0]}", headers=key)).json()
    assert view["trajectory"]["steps"][0]["action"] == "I can't help with that."

    def span(trace_id: str) -> dict[str, Any]:
        return {
            "traceId": trace_id,
            "name": "chat",
            "attributes": {"gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "Hi"},
        }

    two = {"spans": [span("5b8efff798038103d269b633813fc60c"), span("6b8efff798038103d269b633813fc60c")]}
    answer = await api.client.post("/v1/traces", json={"format": "otel", "traces": [two]}, headers=key)
    assert answer.status_code == 422 and answer.json()["fields"][0]["field"] == "body.traces[0].spans"
    assert "2 trace ids" in answer.text and "format=otlp" in answer.text
