"""The OTLP/HTTP receiver and outcomes set later: a real opentelemetry-sdk exporter (protobuf) pointed
at a live `agentr serve`, OTLP/JSON over the same endpoint (spans split over requests, retries), 422s
that name the field, and PATCH /v1/traces(/{id}) all or nothing."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from api.routes.otlp import otlp_trace_id
from core.store.tables import events, traces
from tests.api.conftest import ADMIN_KEY, ApiHarness
from tests.support import free_port, start_http_process
from tests.unit.test_formats_otel import TRACE_A, agent_trace, export

ENDPOINT = "/v1/otlp/v1/traces"


async def _ingest_key(api: ApiHarness) -> tuple[str, dict[str, str]]:
    project = await api.project("otlp")
    return project, api.auth(await api.key(project, "ingest", "read"))


async def _trace_rows(api: ApiHarness) -> list[dict[str, Any]]:
    async with api.store.engine.connect() as conn:
        return [dict(r) for r in (await conn.execute(select(traces))).mappings().all()]


async def test_otlp_json_split_over_requests_is_ingested_once_its_root_arrives(api: ApiHarness) -> None:
    project, key = await _ingest_key(api)
    spans = agent_trace(TRACE_A)
    root, children = spans[0], spans[1:]
    first = await api.client.post(ENDPOINT, json=export(*children), headers=key)
    assert first.status_code == 200 and first.json() == {}, first.text
    assert await _trace_rows(api) == []  # buffered: the root span has not arrived
    second = await api.client.post(ENDPOINT, json=export(root), headers=key)
    assert second.status_code == 200, second.text
    (row,) = await _trace_rows(api)
    trace_id = otlp_trace_id(project, TRACE_A)
    assert (row["trace_id"], row["source_format"], row["outcome"], row["external_id"]) == (
        trace_id, "otlp", "failure", TRACE_A,
    )  # fmt: skip
    got = (await api.client.get(f"/v1/traces/{trace_id}", headers=key)).json()
    steps = got["trajectory"]["steps"]
    assert [s["kind"] for s in steps] == ["tool", "tool", "answer"]
    assert steps[0]["tool_results"][0]["is_error"] is True
    # an exporter's retry of the whole trace adds nothing and says so
    again = await api.client.post(ENDPOINT, json=export(*spans), headers=key)
    assert again.status_code == 200
    assert again.json()["partialSuccess"]["rejectedSpans"] == str(len(spans))
    assert "already ingested" in again.json()["partialSuccess"]["errorMessage"]
    assert len(await _trace_rows(api)) == 1


async def test_a_trace_it_cannot_read_is_reported_and_the_rest_of_the_export_stored(api: ApiHarness) -> None:
    project, key = await _ingest_key(api)
    good = agent_trace(TRACE_A)
    broken = agent_trace("0af7651916cd43dd8448eb211c80319c")
    broken[1]["attributes"][3]["value"] = {"stringValue": '[{"role": "user", "parts": [{"type": "text"'}
    response = await api.client.post(ENDPOINT, json=export(*good, *broken), headers=key)
    assert response.status_code == 200, response.text
    partial = response.json()["partialSuccess"]  # OTLP/HTTP partial success: count + why
    assert partial["rejectedSpans"] == str(len(broken))
    assert (
        "trace 0af7651916cd43dd8448eb211c80319c: 6 span(s) not stored: "
        "body.resourceSpans[0].scopeSpans[0].spans[7].attributes.gen_ai.input.messages: not valid JSON"
    ) in partial["errorMessage"]
    assert [r["trace_id"] for r in await _trace_rows(api)] == [otlp_trace_id(project, TRACE_A)]
    async with api.store.engine.connect() as conn:
        before = len((await conn.execute(select(events.c.position))).all())
    # what is not an OTLP export at all is still refused whole
    not_otlp = await api.client.post(ENDPOINT, json={"spans": []}, headers=key)
    assert not_otlp.status_code == 422 and "resourceSpans" in not_otlp.text, not_otlp.text
    wrong_type = await api.client.post(ENDPOINT, content=b"x", headers={**key, "Content-Type": "text/plain"})
    assert wrong_type.status_code == 415 and "application/x-protobuf" in wrong_type.text
    garbage = await api.client.post(
        ENDPOINT, content=b"\xff\xff\xff", headers={**key, "Content-Type": "application/x-protobuf"}
    )
    assert garbage.status_code == 422 and "ExportTraceServiceRequest" in garbage.text
    async with api.store.engine.connect() as conn:
        assert len((await conn.execute(select(events.c.position))).all()) == before


async def test_outcome_set_later_by_patch_single_and_batch(api: ApiHarness) -> None:
    _, key = await _ingest_key(api)
    trace = {
        "messages": [{"role": "user", "content": "Goal: x"}, {"role": "assistant", "content": "Action: look"}]
    }
    accepted = await api.client.post(
        "/v1/traces", json={"format": "openai", "traces": [trace, trace]}, headers=key
    )
    first, second = accepted.json()["trace_ids"]
    assert accepted.json()["waiting_for_outcome"] == [first, second]
    assert "2 without an outcome wait for one: PATCH /v1/traces/{id}" in accepted.json()["message"]
    waiting = (await api.client.get(f"/v1/traces/{first}", headers=key)).json()
    assert (waiting["outcome"], waiting["status"]) == ("unknown", "waiting_for_outcome")

    patched = await api.client.patch(
        f"/v1/traces/{first}", json={"outcome": {"success": False, "reward": 0.1}}, headers=key
    )
    assert patched.status_code == 200, patched.text
    assert patched.json() == {"trace_id": first, "outcome": "failure", "reward": 0.1, "changed": True}
    same = await api.client.patch(f"/v1/traces/{first}", json={"outcome": "failure"}, headers=key)
    assert same.status_code == 200 and same.json()["changed"] is False
    conflict = await api.client.patch(f"/v1/traces/{first}", json={"outcome": "success"}, headers=key)
    assert conflict.status_code == 409 and "already has outcome 'failure'" in conflict.text
    bad = await api.client.patch(f"/v1/traces/{second}", json={"outcome": "meh"}, headers=key)
    assert bad.status_code == 422 and bad.json()["fields"][0]["field"].startswith("body.outcome")

    # batch: one unknown trace id -> 404 and the other trace keeps waiting
    batch = {"outcomes": [{"trace_id": second, "outcome": 1}, {"trace_id": "nope", "outcome": 0.0}]}
    missing = await api.client.patch("/v1/traces", json=batch, headers=key)
    assert missing.status_code == 404
    assert (await api.client.get(f"/v1/traces/{second}", headers=key)).json()[
        "status"
    ] == "waiting_for_outcome"
    batch["outcomes"] = batch["outcomes"][:1]
    done = await api.client.patch("/v1/traces", json=batch, headers=key)
    assert done.status_code == 200 and done.json()["items"][0]["outcome"] == "success"
    row = (await api.client.get(f"/v1/traces/{second}", headers=key)).json()
    assert (row["outcome"], row["status"]) == ("success", "ingested")


# --------------------------------------------------------------------------------------------
# A real OpenTelemetry exporter against a live `agentr serve`
# --------------------------------------------------------------------------------------------


@pytest.fixture
def served(pg_url: str, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    env = {**os.environ, "AGENTR_DATABASE_URL": pg_url, "AGENTR_ADMIN_KEY": ADMIN_KEY}
    env.pop("AGENTR_REDIS_URL", None)
    agentr = Path(sys.executable).with_name("agentr")
    base = f"http://127.0.0.1:{port}"
    with start_http_process(
        [str(agentr), "serve", "--port", str(port), "--create-tables"],
        f"{base}/readyz",
        what="agentr serve",
        env=env,
        log_path=tmp_path / "serve.log",
    ):
        yield base


def test_opentelemetry_sdk_exporter_protobuf_to_live_serve(served: str) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
    from opentelemetry.trace import (
        NonRecordingSpan,
        SpanContext,
        Status,
        StatusCode,
        TraceFlags,
        set_span_in_context,
    )

    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    project = httpx.post(f"{served}/v1/projects", json={"name": "otel-sdk"}, headers=admin).json()[
        "project_id"
    ]
    key = httpx.post(
        f"{served}/v1/projects/{project}/keys", json={"scopes": ["ingest", "read"]}, headers=admin
    ).json()["key"]

    results: list[SpanExportResult] = []

    class Recording(OTLPSpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            result = super().export(spans)
            results.append(result)
            return result

    exporter = Recording(endpoint=f"{served}{ENDPOINT}", headers={"Authorization": f"Bearer {key}"})
    provider = TracerProvider(resource=Resource.create({"service.name": "refund-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))  # one request per ended span
    tracer = provider.get_tracer("refund-agent")
    user = {"role": "user", "parts": [{"type": "text", "content": "Refund order 7."}]}
    call = {
        "role": "assistant",
        "parts": [{"type": "tool_call", "id": "c1", "name": "refund", "arguments": {"order": 7}}],
    }
    with tracer.start_as_current_span("invoke_agent refund-agent") as root:
        root.set_attribute("gen_ai.operation.name", "invoke_agent")
        root.set_attribute("agentr.task_key", "refund-7")
        with tracer.start_as_current_span("chat m") as chat:
            chat.set_attribute("gen_ai.operation.name", "chat")
            chat.set_attribute(
                "gen_ai.system_instructions", json.dumps([{"type": "text", "content": "Be brief."}])
            )
            chat.set_attribute("gen_ai.input.messages", json.dumps([user]))
            chat.set_attribute("gen_ai.output.messages", json.dumps([call]))
        with tracer.start_as_current_span("execute_tool refund") as tool:
            tool.set_attribute("gen_ai.operation.name", "execute_tool")
            tool.set_attribute("gen_ai.tool.name", "refund")
            tool.set_attribute("gen_ai.tool.call.id", "c1")
            tool.record_exception(PermissionError("refunds above $50 need approval"))
            tool.set_status(Status(StatusCode.ERROR, "refunds above $50 need approval"))
        with tracer.start_as_current_span("chat m") as chat:
            chat.set_attribute("gen_ai.operation.name", "chat")
            chat.set_attribute("gen_ai.input.messages", json.dumps([user, call]))
            answer = {"role": "assistant", "parts": [{"type": "text", "content": "Refund failed."}]}
            chat.set_attribute("gen_ai.output.messages", json.dumps([answer]))
        root.set_status(Status(StatusCode.ERROR, "task failed"))
        trace_hex = format(root.get_span_context().trace_id, "032x")
    # an agent called by another service: its local root has a REMOTE parent (W3C traceparent)
    upstream = SpanContext(
        trace_id=0x4BF92F3577B34DA6A3CE929D0E0E4736,
        span_id=0x00F067AA0BA902B7,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    with tracer.start_as_current_span(
        "invoke_agent", context=set_span_in_context(NonRecordingSpan(upstream))
    ) as agent:
        agent.set_attribute("agentr.outcome", "success")
        with tracer.start_as_current_span("chat m") as chat:
            chat.set_attribute("gen_ai.input.messages", json.dumps([user]))
            chat.set_attribute("gen_ai.output.messages", json.dumps([answer]))
    provider.shutdown()
    assert results == [SpanExportResult.SUCCESS] * 6  # children buffered, then each local root
    remote_parent = httpx.get(
        f"{served}/v1/traces/{otlp_trace_id(project, '4bf92f3577b34da6a3ce929d0e0e4736')}",
        headers={"Authorization": f"Bearer {key}"},
    )
    assert remote_parent.status_code == 200 and remote_parent.json()["outcome"] == "success", (
        remote_parent.text
    )

    trace_id = otlp_trace_id(project, trace_hex)
    got = httpx.get(f"{served}/v1/traces/{trace_id}", headers={"Authorization": f"Bearer {key}"})
    assert got.status_code == 200, got.text
    body = got.json()
    assert (body["task_key"], body["outcome"], body["source_format"], body["external_id"]) == (
        "refund-7", "failure", "otlp", trace_hex,
    )  # fmt: skip
    trajectory = body["trajectory"]
    assert (trajectory["instruction"], trajectory["task"]) == ("Be brief.", "Refund order 7.")
    tool_step, final = trajectory["steps"]
    assert tool_step["tool_calls"][0] == {"call_id": "c1", "name": "refund", "arguments": '{"order": 7}'}
    (result,) = tool_step["tool_results"]
    assert (
        result["is_error"] is True and "PermissionError: refunds above $50 need approval" in result["content"]
    )
    assert final["kind"] == "answer" and final["action"] == "Refund failed."


def test_sdk_batch_of_an_http_server_trace_and_an_agent_trace_stores_the_agent_trace(served: str) -> None:
    """The same SDK's BatchSpanProcessor sends an HTTP server trace (no GenAI content) and a GenAI agent
    trace in ONE export: the agent trace is stored, the HTTP one reported in partialSuccess."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult
    from opentelemetry.trace import SpanKind, Status, StatusCode

    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    project = httpx.post(f"{served}/v1/projects", json={"name": "mixed"}, headers=admin).json()["project_id"]
    key = httpx.post(
        f"{served}/v1/projects/{project}/keys", json={"scopes": ["ingest", "read"]}, headers=admin
    ).json()["key"]
    auth = {"Authorization": f"Bearer {key}"}
    results: list[tuple[int, SpanExportResult]] = []

    class Recording(OTLPSpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            result = super().export(spans)
            results.append((len(spans), result))
            return result

    provider = TracerProvider(resource=Resource.create({"service.name": "shop"}))
    provider.add_span_processor(
        BatchSpanProcessor(
            Recording(endpoint=f"{served}{ENDPOINT}", headers=auth), schedule_delay_millis=60_000
        )
    )
    tracer = provider.get_tracer("shop")
    with tracer.start_as_current_span("GET /orders/{id}", kind=SpanKind.SERVER) as http:
        http.set_attribute("http.request.method", "GET")
        http.set_attribute("url.path", "/orders/7")
        http.set_attribute("http.response.status_code", 200)
        http_hex = format(http.get_span_context().trace_id, "032x")
    with tracer.start_as_current_span("invoke_agent support") as root:
        root.set_attribute("gen_ai.operation.name", "invoke_agent")
        with tracer.start_as_current_span("chat m", kind=SpanKind.CLIENT) as chat:
            chat.set_attribute("gen_ai.operation.name", "chat")
            user = {"role": "user", "parts": [{"type": "text", "content": "Where is order 7?"}]}
            answer = {"role": "assistant", "parts": [{"type": "text", "content": "It ships today."}]}
            chat.set_attribute("gen_ai.input.messages", json.dumps([user]))
            chat.set_attribute("gen_ai.output.messages", json.dumps([answer]))
        root.set_status(Status(StatusCode.OK))
        agent_hex = format(root.get_span_context().trace_id, "032x")
    provider.shutdown()  # flushes the batch: one export with both traces
    assert results == [(3, SpanExportResult.SUCCESS)]
    stored = httpx.get(f"{served}/v1/traces/{otlp_trace_id(project, agent_hex)}", headers=auth)
    assert stored.status_code == 200, stored.text
    assert (stored.json()["outcome"], stored.json()["trajectory"]["task"]) == ("success", "Where is order 7?")
    assert (
        httpx.get(f"{served}/v1/traces/{otlp_trace_id(project, http_hex)}", headers=auth).status_code == 404
    )
    listed = httpx.get(f"{served}/v1/traces", headers=auth).json()["items"]
    assert [t["external_id"] for t in listed] == [agent_hex]


async def test_upload_naming_the_model_critic_needs_the_model(api: ApiHarness) -> None:
    _, key = await _ingest_key(api)
    trace = {
        "messages": [{"role": "user", "content": "Goal: x"}, {"role": "assistant", "content": "Action: y"}]
    }
    body = {"format": "openai", "traces": [trace], "critic": {"strategy": "model"}}
    refused = await api.client.post("/v1/traces", json=body, headers=key)
    assert refused.status_code == 422 and refused.json()["fields"][0]["field"] == "body.critic.model"
    body["critic"] = {"strategy": "model", "model": "http://127.0.0.1:9/v1#critic"}
    accepted = await api.client.post("/v1/traces", json=body, headers=key)
    assert accepted.status_code == 202, accepted.text


async def test_gzip_bodies_are_inflated_within_the_body_limit(api: ApiHarness) -> None:
    import gzip

    project, key = await _ingest_key(api)
    packed = gzip.compress(json.dumps(export(*agent_trace(TRACE_A))).encode())
    headers = {**key, "Content-Type": "application/json", "Content-Encoding": "gzip"}
    ok = await api.client.post(ENDPOINT, content=packed, headers=headers)
    assert ok.status_code == 200, ok.text
    assert [r["trace_id"] for r in await _trace_rows(api)] == [otlp_trace_id(project, TRACE_A)]
    limit = api.app.state.services.settings.max_body_bytes
    bomb = gzip.compress(b" " * (limit + 10))  # small on the wire, too big once inflated
    too_big = await api.client.post(ENDPOINT, content=bomb, headers=headers)
    assert too_big.status_code == 413 and "once decompressed" in too_big.text
    broken = await api.client.post(ENDPOINT, content=b"not gzip", headers=headers)
    assert broken.status_code == 400 and "not valid gzip" in broken.text


async def test_a_malformed_span_is_reported_when_it_arrives_not_when_its_root_does(api: ApiHarness) -> None:
    _, key = await _ingest_key(api)
    children = agent_trace(TRACE_A)[1:]
    children[0]["attributes"][3]["value"] = {"stringValue": "[{"}
    answer = await api.client.post(ENDPOINT, json=export(*children), headers=key)
    assert answer.status_code == 200, answer.text
    partial = answer.json()["partialSuccess"]
    assert partial["rejectedSpans"] == str(len(children))
    assert "spans[0].attributes.gen_ai.input.messages: not valid JSON" in partial["errorMessage"]
    async with api.store.engine.connect() as conn:
        assert not (
            await conn.execute(select(events.c.position).where(events.c.event_type == "OtlpSpansBuffered"))
        ).all()


async def test_concurrent_requests_for_one_trace_lose_no_span(api: ApiHarness) -> None:
    import asyncio

    _, key = await _ingest_key(api)
    spans = agent_trace(TRACE_A)
    # two exporters send children of one trace at once: both buffer into the same stream
    bodies = [export(*spans[1:3]), export(*spans[3:])]
    for _ in range(5):
        answers = await asyncio.gather(*(api.client.post(ENDPOINT, json=b, headers=key) for b in bodies))
        assert {a.status_code for a in answers} <= {200, 503}, [a.text for a in answers]
        assert all(a.headers.get("retry-after") == "1" for a in answers if a.status_code == 503)
        bodies = [
            b for b, a in zip(bodies, answers, strict=True) if a.status_code == 503
        ]  # an exporter retries
        if not bodies:
            break
    assert not bodies
    root = await api.client.post(ENDPOINT, json=export(spans[0]), headers=key)
    assert root.status_code == 200, root.text
    (row,) = await _trace_rows(api)
    steps = (await api.client.get(f"/v1/traces/{row['trace_id']}", headers=key)).json()["trajectory"]["steps"]
    assert steps[0]["tool_results"][0]["is_error"] is True  # known only from the execute_tool span t1
    assert json.loads(steps[1]["tool_results"][0]["content"]) == {
        "status": "error",
        "code": 503,
    }  # only on t2


async def test_a_project_can_name_its_trace_critic(api: ApiHarness) -> None:
    from core.domain.events import ProjectCreated
    from core.domain.ids import project_stream

    body: dict[str, Any] = {"name": "judged", "critic": {"strategy": "model"}}
    refused = await api.client.post("/v1/projects", json=body, headers=api.admin)
    assert refused.status_code == 422 and refused.json()["fields"][0]["field"] == "body.critic.model"
    # a served critic must be on the operator's allow-list (the test apps allow http://m:8000/v1)
    body["critic"]["model"] = "http://m:8000/v1#critic"
    created = await api.client.post("/v1/projects", json=body, headers=api.admin)
    assert created.status_code == 201, created.text
    (event,) = [r.event for r in await api.store.read_stream(project_stream(created.json()["project_id"]))]
    assert isinstance(event, ProjectCreated)
    assert (event.critic_strategy, event.critic_model) == ("model", "http://m:8000/v1#critic")


def test_cli_uploads_an_otlp_file_and_sets_an_outcome(served: str, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from agentr.cli import app as cli_app

    def run(*args: str) -> str:
        result = CliRunner().invoke(cli_app, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.stdout.strip()

    api = ["--api", served]
    project = run("projects", "create", "cli-otlp", *api, "--key", ADMIN_KEY)
    key = run("keys", "create", project, "--scope", "ingest", "--scope", "read", *api, "--key", ADMIN_KEY)
    auth = [*api, "--key", key]
    spans = agent_trace(TRACE_A, root_status=0)  # unset root status, no outcome attribute: unknown
    lines = tmp_path / "otel-collector-export.jsonl"
    lines.write_text(json.dumps(export(*spans[:3])) + "\n" + json.dumps(export(*spans[3:])) + "\n")
    (trace_id,) = run("traces", "upload", str(lines), "--format", "otlp", *auth).splitlines()
    got = httpx.get(f"{served}/v1/traces/{trace_id}", headers={"Authorization": f"Bearer {key}"}).json()
    assert (got["status"], got["external_id"]) == ("waiting_for_outcome", TRACE_A)
    assert run("traces", "set-outcome", trace_id, "0.25", *auth) == f"{trace_id}: failure (reward 0.25) set"
    assert "unchanged" in run("traces", "set-outcome", trace_id, "failure", *auth)


async def test_legacy_function_calls_over_the_api(api: ApiHarness) -> None:
    from tests.unit.test_formats_otel import LEGACY

    _, key = await _ingest_key(api)
    no_functions = {k: v for k, v in LEGACY.items() if k != "functions"}
    refused = await api.client.post(
        "/v1/traces", json={"format": "openai", "traces": [no_functions]}, headers=key
    )
    assert refused.status_code == 422, refused.text
    (field,) = refused.json()["fields"]
    assert field["field"] == "body.traces[0].messages[1].function_call"
    assert "send tool_calls" in field["message"] and "format=openai-legacy" in field["message"]
    accepted = await api.client.post(
        "/v1/traces", json={"format": "openai-legacy", "traces": [LEGACY]}, headers=key
    )
    assert accepted.status_code == 202, accepted.text
    (trace_id,) = accepted.json()["trace_ids"]
    got = (await api.client.get(f"/v1/traces/{trace_id}", headers=key)).json()
    call = got["trajectory"]["steps"][0]
    assert call["kind"] == "tool" and call["tool_results"][0]["content"] == "500 Internal Server Error"
    # the same batch as OTLP/JSON inside format otel, with the outcome as {success, reward}
    otel = {"outcome": {"success": False, "reward": 0.0}, **export(*agent_trace())}
    accepted = await api.client.post("/v1/traces", json={"format": "otel", "traces": [otel]}, headers=key)
    assert accepted.status_code == 202, accepted.text


async def test_a_trace_without_an_outcome_is_stored_with_a_warning(api: ApiHarness) -> None:
    project, key = await _ingest_key(api)
    answer = await api.client.post(ENDPOINT, json=export(*agent_trace(TRACE_A, root_status=0)), headers=key)
    assert answer.status_code == 200, answer.text
    warning = answer.json()["partialSuccess"]  # 0 rejected + a message: an OTLP partial-success warning
    trace_id = otlp_trace_id(project, TRACE_A)
    assert (
        warning["rejectedSpans"] == "0"
        and f"waits for PATCH /v1/traces/{trace_id}" in warning["errorMessage"]
    )
    assert (await _trace_rows(api))[0]["status"] == "waiting_for_outcome"
