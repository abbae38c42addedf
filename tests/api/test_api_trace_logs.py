"""Production logs as they arrive (issue 27), through the real API over PostgreSQL and the real critic
and splice workers over Redis: pairing by task key, why a trace did not pair, the good sample of a
successful trace."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import select

from api.routes.otlp import otlp_trace_id
from core.store.tables import traces
from tests.api.conftest import ApiHarness
from tests.api.logs_stack import LogsStack, logs_stack
from tests.unit.test_formats_otel import TRACE_A, TRACE_B, agent_trace, export


@pytest.fixture
async def logs(pg_url: str, redis_url: str, redis_prefix: str) -> AsyncIterator[LogsStack]:
    async with logs_stack(pg_url, redis_url, redis_prefix) as stack:
        yield stack


def _balance(
    task: str, final: str, result: str, key: str = "balance-7", args: str = '{"account": 7}', **extra: Any
) -> dict[str, Any]:
    call = {"id": "c1", "type": "function", "function": {"name": "balance", "arguments": args}}
    return {
        "task_key": key,
        "messages": [
            {"role": "system", "content": "You are a bank agent."},
            {"role": "user", "content": task},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": result},
            {"role": "assistant", "content": final},
        ],
        **extra,
    }


async def test_traces_of_one_task_key_pair_although_their_task_texts_differ(logs: LogsStack) -> None:
    failed_text, good_text = "Hi, what is the balance of account 7?", "Hi! What's the balance of account 7?"
    bad = _balance(failed_text, "Sorry, I cannot tell.", '{"error": "timeout"}', outcome="failure")
    good = _balance(
        good_text, "It is 3.", '{"balance": 3}', args='{"account": 7, "fresh": true}', outcome="success"
    )
    (failed,) = (await logs.post("openai", bad))["trace_ids"]
    (succeeded,) = (await logs.post("openai", good))["trace_ids"]
    await logs.settle()
    view = await logs.trace(failed)
    assert (view["status"], view["reason"]) == ("revised", None), view
    assert view["pair_id"] is not None and view["transition_index"] == 0
    messages = view["sample"]["messages"]
    # the documented rule: the failed trace's own task text (and instruction) stay in the sample
    assert [m["content"] for m in messages[:2]] == ["You are a bank agent.", failed_text]
    assert view["sample"]["provenance"]["good_task"] == good_text
    # a success trace shows its good sample
    good_view = await logs.trace(succeeded)
    assert good_view["sample_id"] is not None and good_view["sample"]["sample_id"] == good_view["sample_id"]


async def test_a_failed_trace_that_cannot_pair_says_why(logs: LogsStack) -> None:
    bad = _balance("Balance of 7?", "Sorry.", '{"error": "timeout"}', key="k-alone", outcome="failure")
    (failed,) = (await logs.post("openai", bad))["trace_ids"]
    await logs.settle()
    view = await logs.trace(failed)
    assert view["status"] == "unpaired"
    assert "no successful trace with task key 'k-alone'" in view["reason"]
    # a success with the very same actions: still nothing to revise, and the reason says so
    same = _balance("Balance of 7?", "Sorry.", '{"balance": 3}', key="k-alone", outcome="success")
    await logs.post("openai", same)
    await logs.settle()
    view = await logs.trace(failed)
    assert view["status"] == "unpaired" and "1 successful trace(s)" in view["reason"]
    assert "no step after the divergence" in view["reason"]
    listed = (await logs.api.client.get("/v1/traces?status=unpaired", headers=logs.key)).json()["items"]
    assert [(t["trace_id"], t["reason"]) for t in listed] == [(failed, view["reason"])]
    # then a success that diverges pairs it, and the reason is gone
    fresh = '{"account": 7, "fresh": true}'
    other = _balance(
        "Balance of 7?", "It is 3.", '{"balance": 3}', key="k-alone", args=fresh, outcome="success"
    )
    await logs.post("openai", other)
    await logs.settle()
    view = await logs.trace(failed)
    assert (view["status"], view["reason"]) == ("revised", None), view


def _tool_trace(task: str, name: str, args: str, result: str, final: str, outcome: str) -> dict[str, Any]:
    """One conversation whose only call has the id ``call_1`` (ids restart in every conversation)."""
    call = {"id": "call_1", "type": "function", "function": {"name": name, "arguments": args}}
    return {
        "task_key": "order-7",
        "outcome": outcome,
        "messages": [
            {"role": "user", "content": task},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": result},
            {"role": "assistant", "content": final},
        ],
    }


async def test_spliced_traces_from_separate_conversations_get_unique_tool_call_ids(logs: LogsStack) -> None:
    bad = _tool_trace(
        "Where is order 7?",
        "lookup_customer",
        '{"name": "Ann"}',
        '{"error": "unknown customer"}',
        "Sorry.",
        "failure",
    )
    good = _tool_trace(
        "Where is order 7?", "get_order", '{"id": 7}', '{"status": "shipped"}', "Shipped.", "success"
    )
    (failed,) = (await logs.post("openai", bad))["trace_ids"]
    await logs.post("openai", good)
    await logs.settle()
    view = await logs.trace(failed)
    assert view["status"] == "revised", view
    messages = view["sample"]["messages"]
    calls = [(c["call_id"], c["name"]) for m in messages for c in m.get("tool_calls") or []]
    assert calls == [("call_1", "lookup_customer"), ("call_1_2", "get_order")]
    answers = [(m["tool_call_id"], m["content"]) for m in messages if m["role"] == "tool"]
    assert answers == [("call_1", '{"error": "unknown customer"}'), ("call_1_2", '{"status": "shipped"}')]


# --------------------------------------------------------------------------------------------
# The producer's id is a key (no Redis workers needed: the plain API over PostgreSQL)
# --------------------------------------------------------------------------------------------


async def _key(api: ApiHarness) -> tuple[str, dict[str, str]]:
    project = await api.project("ids")
    return project, api.auth(await api.key(project, "ingest", "read"))


async def test_a_resent_producer_id_is_a_replay_not_a_copy(api: ApiHarness) -> None:
    _, key = await _key(api)
    trace = {"id": "prod-trace-42", **_balance("Balance of 7?", "It is 3.", '{"balance": 3}')}
    answers = [await api.client.post("/v1/traces", json={"format": "openai", "traces": [trace]}, headers=key)]
    answers += [
        await api.client.post("/v1/traces", json={"format": "openai", "traces": [trace]}, headers=key)
    ]
    answers += [
        await api.client.post("/v1/traces", json={"format": "openai", "traces": [trace]}, headers=key)
    ]
    assert {a.status_code for a in answers} == {202}
    ids = {a.json()["trace_ids"][0] for a in answers}
    assert len(ids) == 1 and answers[0].json()["replayed"] == []
    assert (
        answers[2].json()["replayed"] == list(ids) and "replayed, not copied" in answers[2].json()["message"]
    )
    listed = (await api.client.get("/v1/traces", headers=key)).json()["items"]
    assert [t["external_id"] for t in listed] == ["prod-trace-42"]
    # the same id twice in one batch names the second
    twice = await api.client.post(
        "/v1/traces",
        json={"format": "openai", "traces": [{**trace, "id": "x"}, {**trace, "id": "x"}]},
        headers=key,
    )
    assert twice.status_code == 422 and twice.json()["fields"][0]["field"] == "body.traces[1].id"
    assert "appears twice" in twice.text
    # the database holds the rule too: one row per (project, external id)
    async with api.store.engine.connect() as conn:
        rows = (await conn.execute(select(traces).where(traces.c.external_id == "prod-trace-42"))).all()
    assert len(rows) == 1


async def test_one_otlp_trace_through_both_doors_is_one_trace(api: ApiHarness) -> None:
    project, key = await _key(api)
    body = export(*agent_trace(TRACE_A))
    first = await api.client.post("/v1/traces", json={"format": "otlp", "traces": [body]}, headers=key)
    assert first.status_code == 202, first.text
    (trace_id,) = first.json()["trace_ids"]
    assert trace_id == otlp_trace_id(project, TRACE_A)
    again = await api.client.post("/v1/otlp/v1/traces", json=body, headers=key)
    assert again.status_code == 200 and "already ingested" in again.json()["partialSuccess"]["errorMessage"]
    # and the other way round: receiver first, then the upload replays it
    body_b = export(*agent_trace(TRACE_B))
    assert (await api.client.post("/v1/otlp/v1/traces", json=body_b, headers=key)).status_code == 200
    replay = await api.client.post("/v1/traces", json={"format": "otlp", "traces": [body_b]}, headers=key)
    assert replay.json()["replayed"] == [otlp_trace_id(project, TRACE_B)]
    listed = (await api.client.get("/v1/traces", headers=key)).json()["items"]
    assert sorted(t["external_id"] for t in listed) == sorted([TRACE_A, TRACE_B])


async def test_lookup_and_outcome_by_the_producer_id(api: ApiHarness) -> None:
    project, key = await _key(api)
    waiting = {"id": "order-run-9", **_balance("Balance of 7?", "It is 3.", '{"balance": 3}')}
    other = {"id": "order-run-10", **_balance("Balance of 8?", "It is 4.", '{"balance": 4}')}
    accepted = await api.client.post(
        "/v1/traces", json={"format": "openai", "traces": [waiting, other]}, headers=key
    )
    first, second = accepted.json()["trace_ids"]
    found = (await api.client.get("/v1/traces?external_id=order-run-9", headers=key)).json()["items"]
    assert [t["trace_id"] for t in found] == [first]
    unknown = await api.client.get("/v1/traces?externalid=order-run-9&limit=5", headers=key)
    assert unknown.status_code == 422 and unknown.json()["fields"][0]["field"] == "query.externalid", (
        unknown.text
    )
    assert (await api.client.get("/v1/pairs?bogus=1", headers=key)).status_code == 422
    assert (await api.client.get("/v1/runs?bogus=1", headers=key)).status_code == 422
    # PATCH by the producer's id, single and batch
    patched = await api.client.patch("/v1/traces/order-run-9", json={"outcome": "failure"}, headers=key)
    assert patched.status_code == 200 and patched.json()["trace_id"] == first, patched.text
    batch = {"outcomes": [{"external_id": "order-run-10", "outcome": "success"}]}
    done = await api.client.patch("/v1/traces", json=batch, headers=key)
    assert done.status_code == 200 and done.json()["items"][0]["trace_id"] == second, done.text
    both = {"outcomes": [{"external_id": "order-run-10", "trace_id": second, "outcome": "success"}]}
    assert (await api.client.patch("/v1/traces", json=both, headers=key)).status_code == 422
    # and by the OTLP trace id of an instrumented trace
    body = export(*agent_trace(TRACE_A, root_status=0))
    assert (await api.client.post("/v1/otlp/v1/traces", json=body, headers=key)).status_code == 200
    by_hex = await api.client.patch(f"/v1/traces/{TRACE_A}", json={"outcome": 0.2}, headers=key)
    assert by_hex.status_code == 200, by_hex.text
    assert by_hex.json() == {
        "trace_id": otlp_trace_id(project, TRACE_A), "outcome": "failure", "reward": 0.2, "changed": True,
    }  # fmt: skip
    missing = await api.client.patch("/v1/traces/nothing-like-it", json={"outcome": "failure"}, headers=key)
    assert missing.status_code == 404 and "external id" in missing.text


# --------------------------------------------------------------------------------------------
# Malformed content is kept, not refused
# --------------------------------------------------------------------------------------------


async def test_malformed_arguments_images_and_nul_are_kept_and_the_critic_reads_the_arguments(
    logs: LogsStack,
) -> None:
    broken_call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "balance", "arguments": '{"account": 7, "currency": '},  # the model's own output
    }
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    trace = {
        "outcome": "failure",
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "Balance of the account in the\x00 photo?"}, image],
            },
            {"role": "assistant", "content": "", "tool_calls": [broken_call]},
            {"role": "tool", "tool_call_id": "c1", "content": "bad request"},
            {"role": "assistant", "content": "Sorry."},
        ],
    }
    (trace_id,) = (await logs.post("openai", trace))["trace_ids"]
    await logs.settle()
    view = await logs.trace(trace_id)
    trajectory = view["trajectory"]
    assert trajectory["task"] == "Balance of the account in the\ufffd photo?\n[image part: image/png]"
    assert trajectory["steps"][0]["tool_calls"][0]["arguments"] == '{"account": 7, "currency": '  # verbatim
    (note,) = trajectory["provenance"]["notes"]
    assert note == (
        "NUL characters (which the database cannot store) replaced by U+FFFD at "
        "traces[0].messages[0].content[0].text"
    )
    critique = view["critique"]
    assert critique["transition_index"] == 0
    assert "arguments that are not a JSON object" in critique["verdicts"][0]["reason"]
    # what is not a trace at all is still refused whole, naming the field
    refused = await logs.api.client.post(
        "/v1/traces", json={"format": "openai", "traces": [trace, {"messages": "no"}]}, headers=logs.key
    )
    assert refused.status_code == 422 and "traces.1.messages" in refused.text.replace("[", ".").replace(
        "]", ""
    )


async def test_otlp_receiver_keeps_media_parts_and_nul_characters(logs: LogsStack) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

    user = {
        "role": "user",
        "parts": [
            {"type": "text", "content": "What is in\x00 this receipt?"},
            {"type": "uri", "modality": "image", "mime_type": "image/jpeg", "uri": "https://x.test/r.jpg"},
        ],
    }
    answer = {"role": "assistant", "parts": [{"type": "text", "content": "A refund of $5."}]}
    attrs = {"gen_ai.input.messages": json.dumps([user]), "gen_ai.output.messages": json.dumps([answer])}
    span = Span(
        trace_id=bytes.fromhex(TRACE_A),
        span_id=b"\x02" * 8,
        name="chat m",
        attributes=[KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in attrs.items()],
        status=Status(code=Status.STATUS_CODE_OK),
    )
    body = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])]
    ).SerializeToString()
    headers = {**logs.key, "Content-Type": "application/x-protobuf"}
    answer_ = await logs.api.client.post("/v1/otlp/v1/traces", content=body, headers=headers)
    assert answer_.status_code == 200, answer_.text
    (row,) = (await logs.api.client.get(f"/v1/traces?external_id={TRACE_A}", headers=logs.key)).json()[
        "items"
    ]
    trajectory = (await logs.trace(row["trace_id"]))["trajectory"]
    assert trajectory["task"] == "What is in\ufffd this receipt?\n[image part: image/jpeg]"
    assert "attributes.gen_ai.input.messages" in trajectory["provenance"]["notes"][0]


# --------------------------------------------------------------------------------------------
# Export fidelity
# --------------------------------------------------------------------------------------------


async def test_exports_warn_about_missing_definitions_invent_no_results_and_keep_the_openai_tool_shape(
    logs: LogsStack,
) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}
    no_definitions = {
        "task_key": "export-a",
        "outcome": "success",
        "messages": [
            {"role": "user", "content": "Look x up."},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "found"},
            {"role": "assistant", "content": "Found it."},
        ],
    }
    flat_tool = {
        "type": "function",
        "name": "lookup",
        "description": "Find.",
        "parameters": {"type": "object"},
    }
    unanswered = {
        "task_key": "export-b",
        "outcome": "success",
        "tools": [flat_tool],  # the flattened (Responses-style) definition
        "messages": [
            {"role": "user", "content": "Look y up."},
            {"role": "assistant", "content": "", "tool_calls": [{**call, "id": "c2"}]},  # never answered
        ],
    }
    first, second = (await logs.post("openai", no_definitions, unanswered))["trace_ids"]
    await logs.settle()
    views = [await logs.trace(first), await logs.trace(second)]
    assert all(v["sample_id"] for v in views), views  # success traces show their good sample
    body = {"name": "exports", "query": {"sources": ["traces"], "kinds": ["good"]}}
    created = await logs.api.client.post("/v1/datasets", json=body, headers=logs.key)
    assert created.status_code == 201, created.text
    (warning,) = created.json()["warnings"]
    assert (
        warning.startswith("1 sample(s) call tools but carry no tool definitions")
        and views[0]["sample_id"] in warning
    )
    assert views[1]["sample_id"] not in warning
    got = await logs.api.client.get(f"/v1/datasets/{created.json()['dataset_id']}", headers=logs.key)
    assert got.json()["warnings"] == [warning]
    download = await logs.api.client.get(
        f"/v1/datasets/{created.json()['dataset_id']}/download", params={"format": "openai"}, headers=logs.key
    )
    records = {
        r["messages"][0]["content"]: r for r in (json.loads(line) for line in download.text.splitlines())
    }
    ends_on_call = records["Look y up."]
    assert [m["role"] for m in ends_on_call["messages"]] == ["user", "assistant"]  # no invented tool result
    assert ends_on_call["tools"] == [
        {
            "type": "function",
            "function": {"name": "lookup", "description": "Find.", "parameters": {"type": "object"}},
        }
    ]
    assert "tools" not in records["Look x up."]
