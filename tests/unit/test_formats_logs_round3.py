"""More span and Langfuse shapes from production logs (issue #48 item 9): the OpenTelemetry SDK's own
span JSON (``ReadableSpan.to_json()``, made here by the real SDK) read exactly as the same spans in
OTLP/JSON, or refused naming the field; tool definitions on the GenAI details event; the agent span's
ERROR under a web framework's server span; a Langfuse TOOL observation's ERROR level when a later
generation replays its output."""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from core.formats.importing import TraceFormatError, parse_traces
from core.formats.otlp import key_values
from tests.unit.test_formats_otel import CALL_1, FINAL, TOOLS, USER, agent_trace, export, span

T0 = 1_700_000_000_000_000_000


def _sdk_spans(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``spans`` (OTLP/JSON, one root first, its children after) recorded by the real OTel SDK with
    the same names, attributes, statuses and start times; their ``to_json()`` as sent by an exporter
    that writes the SDK's own JSON."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "billing-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("agent")

    def record(raw: dict[str, Any], context: Any = None) -> Any:
        attributes = {
            k: v if isinstance(v, str | bool | int | float) else json.dumps(v)
            for k, v in key_values(raw["attributes"], "attributes").items()
        }
        start = T0 + (int(raw["startTimeUnixNano"]) - T0) * 1000  # the SDK's JSON keeps microseconds
        made = tracer.start_span(raw["name"], context=context, attributes=attributes, start_time=start)
        status = raw.get("status") or {}
        if status.get("code") == 2:
            made.set_status(Status(StatusCode.ERROR, status.get("message")))
        elif status.get("code") == 1:
            made.set_status(Status(StatusCode.OK))
        return made

    root, *children = spans
    parent = record(root)
    context = otel_trace.set_span_in_context(parent)
    for child in children:
        record(child, context).end(end_time=T0 + (int(child["endTimeUnixNano"]) - T0) * 1000)
    parent.end(end_time=T0 + 100_000)
    provider.shutdown()
    return [json.loads(s.to_json()) for s in exporter.get_finished_spans()]


def _steps(trajectory: Any) -> list[tuple[Any, ...]]:
    return [
        (s.kind, s.action, s.observation, tuple((r.call_id, r.is_error) for r in s.tool_results))
        for s in trajectory.steps
    ]


@pytest.mark.parametrize("root_status", [2, 1, 0])
def test_the_sdk_span_json_reads_as_the_same_spans_in_otlp(root_status: int) -> None:
    spans = agent_trace(root_status=root_status)
    sdk = _sdk_spans(spans)
    assert "context" in sdk[0] and sdk[-1]["parent_id"] is None  # children finished first, root last
    (expected,) = parse_traces([export(*spans)], "otlp")
    (got,) = parse_traces([{"spans": list(reversed(sdk))}], "otel")
    assert _steps(got.trajectory) == _steps(expected.trajectory)
    assert len(got.trajectory.steps) == 3  # no step invented
    assert got.outcome == expected.outcome == {2: "failure", 1: "success", 0: "unknown"}[root_status]
    assert got.trajectory.tools == expected.trajectory.tools and got.trajectory.instruction
    assert got.metadata.get("service.name") == "billing-agent"  # the SDK's resource, kept


def test_sdk_span_json_it_cannot_read_is_refused_naming_the_field() -> None:
    sdk = _sdk_spans(agent_trace())
    bad_time = [dict(s) for s in sdk]
    bad_time[0]["start_time"] = "yesterday"
    with pytest.raises(TraceFormatError) as caught:
        parse_traces([{"spans": bad_time}], "otel")
    assert caught.value.path == "traces[0].spans[0].start_time"
    bad_status = [dict(s) for s in sdk]
    bad_status[1]["status"] = {"status_code": "BROKEN"}
    with pytest.raises(TraceFormatError) as caught:
        parse_traces([{"spans": bad_status}], "otel")
    assert caught.value.path == "traces[0].spans[1].status.status_code"
    other = _sdk_spans(agent_trace())  # another trace id: two traces in one otel item
    with pytest.raises(TraceFormatError) as caught:
        parse_traces([{"spans": [*sdk, *other]}], "otel")
    assert caught.value.path == "traces[0].spans" and "2 trace ids" in caught.value.problem


def _server_root(agent_status: dict[str, Any] | None) -> list[dict[str, Any]]:
    trace = "1b8efff798038103d269b633813fc60c"
    server = span(
        trace, "srv", "", "POST /run", 0, {"http.request.method": "POST", "http.response.status_code": 200}
    )
    agent = span(trace, "a1", "srv", "invoke_agent billing", 1, {"gen_ai.operation.name": "invoke_agent"})
    if agent_status is not None:
        agent["status"] = agent_status
    chat = span(
        trace,
        "c1",
        "a1",
        "chat gpt-x",
        2,
        {"gen_ai.operation.name": "chat", "gen_ai.input.messages": [USER], "gen_ai.output.messages": [FINAL]},
    )
    return [server, agent, chat]


def test_under_a_web_server_span_the_agent_span_status_decides() -> None:
    for status, outcome in (
        ({"code": 2, "message": "agent gave up"}, "failure"),
        ({"code": 1}, "success"),
        (None, "unknown"),
    ):
        (got,) = parse_traces([export(*_server_root(status))], "otlp")
        assert got.outcome == outcome, status


def test_tool_definitions_on_the_genai_details_event_are_kept() -> None:
    trace = "2b8efff798038103d269b633813fc60c"
    details = {
        "name": "gen_ai.client.inference.operation.details",
        "attributes": {
            "gen_ai.input.messages": json.dumps([USER]),
            "gen_ai.output.messages": json.dumps([CALL_1]),
            "gen_ai.tool.definitions": json.dumps(TOOLS),
        },
    }
    chat = span(trace, "c1", "", "chat gpt-x", 0, {"gen_ai.operation.name": "chat"}, events=[details])
    (got,) = parse_traces([export(chat)], "otlp")
    assert [t["function"]["name"] for t in got.trajectory.tools] == ["get_invoice"]
    assert got.trajectory.steps[0].tool_calls[0].name == "get_invoice"
    broken = json.loads(json.dumps(details))
    broken["attributes"]["gen_ai.tool.definitions"] = "[not json"
    chat = span(trace, "c1", "", "chat gpt-x", 0, {"gen_ai.operation.name": "chat"}, events=[broken])
    with pytest.raises(TraceFormatError) as caught:
        parse_traces([export(chat)], "otlp")
    assert caught.value.path.endswith(
        "events.gen_ai.client.inference.operation.details.attributes.gen_ai.tool.definitions"
    )


def test_a_langfuse_tool_error_is_kept_when_a_later_generation_replays_its_output() -> None:
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_invoice", "arguments": "{}"}}
        ],
    }
    replayed = {"role": "tool", "tool_call_id": "call_1", "content": "503 upstream unavailable"}
    user = {"role": "user", "content": "Refund INV-2231."}
    item = {
        "id": "lf-trace-1",
        "observations": [
            {"type": "GENERATION", "startTime": "2024-05-01T10:00:00Z", "input": [user], "output": call},
            {
                "type": "TOOL",
                "name": "get_invoice",
                "startTime": "2024-05-01T10:00:01Z",
                "output": "503 upstream unavailable",
                "level": "ERROR",
                "statusMessage": "upstream unavailable",
            },
            {
                "type": "GENERATION",
                "startTime": "2024-05-01T10:00:02Z",
                "input": [user, call, replayed],
                "output": "I could not reach billing.",
            },
        ],
    }
    (got,) = parse_traces([item], "langfuse")
    (result,) = got.trajectory.steps[0].tool_results
    assert result.is_error is True and result.content == "503 upstream unavailable"
    assert len(got.trajectory.steps) == 2
    item["observations"][1]["level"] = "DEFAULT"
    (got,) = parse_traces([item], "langfuse")
    assert got.trajectory.steps[0].tool_results[0].is_error is False


def test_phoenix_span_json_with_a_uuid_trace_id_and_a_flat_status_reads_its_status() -> None:
    sdk = _sdk_spans(agent_trace(root_status=0))
    phoenix = [dict(s) for s in sdk]
    for item in phoenix:
        item["context"] = {**item["context"], "trace_id": "409df945-e058-4829-b240-cfbdd2ff4488"}
        item.pop("status")
    phoenix[-1]["status_code"] = "ERROR"  # the root (finished last)
    (got,) = parse_traces([{"spans": phoenix}], "otel")
    assert got.outcome == "failure" and len(got.trajectory.steps) == 3
