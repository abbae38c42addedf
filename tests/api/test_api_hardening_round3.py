"""Hardening, round three (issue 44), the API items: integers too long for Python inside JSON text,
UI asset names too long for the file system, follow streams of revoked keys and their cost, the
failed-auth limit behind one NAT address, client text in the log, and what the OpenAPI schema and
the 422s tell.

In-process tests use the real app over PostgreSQL (``api`` fixture); the log tests serve it with
the very uvicorn configuration ``agentr serve`` runs over TCP.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from tests.api.conftest import ApiHarness

HUGE = "9" * 5000  # past Python's 4,300-digit int-string limit


# ----------------------------------------------------------------- 3. integers inside JSON text


def _openai_trace(arguments: str) -> dict[str, Any]:
    return {
        "outcome": "failure",
        "messages": [
            {"role": "user", "content": "Goal: balance of account 7"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "balance", "arguments": arguments}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "timeout"},
            {"role": "assistant", "content": "Sorry."},
        ],
    }


async def test_tool_call_arguments_with_an_overlong_integer_are_stored_verbatim(api: ApiHarness) -> None:
    """Tool-call arguments are kept as the model wrote them, malformed ones included (an error signal
    for the rules critic): JSON text holding an integer Python cannot read is such text, not a 500."""
    key = api.auth(await api.key(await api.project(), "ingest", "read"))
    for arguments in ('{"account": ' + HUGE + "}", HUGE):
        body = {"format": "openai", "traces": [_openai_trace(arguments)]}
        response = await api.client.post("/v1/traces", json=body, headers=key)
        assert response.status_code == 202, response.text
        [trace_id] = response.json()["trace_ids"]
        trace = (await api.client.get(f"/v1/traces/{trace_id}", headers=key)).json()
        calls = [c for step in trace["trajectory"]["steps"] for c in step.get("tool_calls", [])]
        assert [c["arguments"] for c in calls] == [arguments]


async def test_json_text_with_an_overlong_integer_is_a_422_naming_the_field(api: ApiHarness) -> None:
    """Where a format requires JSON text (ShareGPT ``tools``, GenAI ``gen_ai.input.messages``) or reads
    a list index from an attribute key, the field is named and the key's digits abbreviated."""
    key = api.auth(await api.key(await api.project(), "ingest"))
    conversations = [{"from": "human", "value": "Goal: x"}, {"from": "gpt", "value": "done"}]
    genai_messages = '[{"role": "user", "parts": [{"type": "text", "content": "x"}], "n": ' + HUGE + "}]"
    cases = [
        (
            {"format": "sharegpt", "traces": [{"conversations": conversations, "tools": "[" + HUGE + "]"}]},
            "body.traces[0].tools",
            "not valid JSON (an integer of more than 4300 digits)",
        ),
        (
            {
                "format": "sharegpt",
                "traces": [
                    {
                        "conversations": [
                            {"from": "human", "value": "Goal: x"},
                            {"from": "function_call", "value": '{"name": "f", "arguments": ' + HUGE + "}"},
                            {"from": "observation", "value": "r"},
                            {"from": "gpt", "value": "done"},
                        ]
                    }
                ],
            },
            "body.traces[0].conversations[1].value",
            "not valid JSON (an integer of more than 4300 digits)",
        ),
        (
            {
                "format": "otel",
                "traces": [
                    {"spans": [{"name": "chat", "attributes": {"gen_ai.input.messages": genai_messages}}]}
                ],
            },
            "body.traces[0].spans[0].attributes.gen_ai.input.messages",
            "not valid JSON (an integer of more than 4300 digits)",
        ),
    ]
    for prefix, suffix in (
        ("gen_ai.prompt.", ".content"),
        ("llm.input_messages.", ".message.content"),
        ("llm.tools.", ".tool.json_schema"),
        ("llm.request.functions.", ".name"),
        ("gen_ai.completion.0.tool_calls.", ".name"),
    ):
        attributes = {
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": "x",
            prefix + HUGE + suffix: "{}",
        }
        cases.append(
            (
                {"format": "otel", "traces": [{"spans": [{"name": "chat", "attributes": attributes}]}]},
                f"body.traces[0].spans[0].attributes.{prefix}999...(5000 digits){suffix}",
                "a list index of more than 9 digits in the attribute key",
            )
        )
    for body, field, message in cases:
        response = await api.client.post("/v1/traces", json=body, headers=key)
        assert response.status_code == 422, (field, response.text)
        [error] = response.json()["fields"]
        assert error["field"] == field and error["message"].startswith(message), response.text
        assert HUGE not in response.text


def _otlp_span(trace: int, attributes: dict[str, str]) -> dict[str, Any]:
    return {
        "traceId": f"{trace:032x}",
        "spanId": f"{trace:016x}",
        "name": "chat",
        "startTimeUnixNano": "1",
        "endTimeUnixNano": "2",
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attributes.items()],
    }


async def test_otlp_reports_a_trace_with_an_overlong_integer_and_keeps_the_rest(api: ApiHarness) -> None:
    """The OTLP receiver, JSON and protobuf: the trace is rejected in ``partialSuccess`` naming the
    attribute; the other trace of the same export is stored."""
    key = api.auth(await api.key(await api.project(), "ingest", "read"))
    good = {
        "gen_ai.prompt.0.role": "user",
        "gen_ai.prompt.0.content": "Goal: x",
        "gen_ai.completion.0.content": "ok",
    }
    bad_key = {**good, "gen_ai.prompt." + HUGE + ".content": "x"}
    bad_value = {"gen_ai.input.messages": '[{"role": "user", "n": ' + HUGE + "}]"}
    json_body = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {"spans": [_otlp_span(1, bad_key), _otlp_span(2, bad_value), _otlp_span(3, good)]}
                ]
            }
        ]
    }
    response = await api.client.post("/v1/otlp/v1/traces", json=json_body, headers=key)
    assert response.status_code == 200, response.text
    partial = response.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "2"
    assert (
        "gen_ai.prompt.999...(5000 digits).content: a list index of more than 9 digits"
        in partial["errorMessage"]
    )
    assert (
        "gen_ai.input.messages: not valid JSON (an integer of more than 4300 digits)"
        in partial["errorMessage"]
    )

    export = ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                scope_spans=[
                    ScopeSpans(
                        spans=[
                            Span(
                                trace_id=(trace).to_bytes(16, "big"),
                                span_id=(trace).to_bytes(8, "big"),
                                name="chat",
                                start_time_unix_nano=1,
                                end_time_unix_nano=2,
                                attributes=[
                                    KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in attrs.items()
                                ],
                            )
                            for trace, attrs in ((4, bad_key), (5, good))
                        ]
                    )
                ]
            )
        ]
    )
    response = await api.client.post(
        "/v1/otlp/v1/traces",
        content=export.SerializeToString(),
        headers={**key, "Content-Type": "application/x-protobuf"},
    )
    assert response.status_code == 200, response.text
    listed = (await api.client.get("/v1/traces", headers=key)).json()["items"]
    assert sorted(t["external_id"] for t in listed) == [f"{3:032x}", f"{5:032x}"]


async def test_ui_asset_name_too_long_for_the_file_system_is_a_404(api: ApiHarness) -> None:
    for name in ("a" * 256 + ".js", "b" * 5000 + ".css", "pages/" + "c" * 300 + ".js"):
        response = await api.client.get(f"/ui/static/{name}")
        assert response.status_code == 404, (name[:20], response.text)
        assert len(response.json()["detail"]) < 120
    assert (await api.client.get("/ui/static/pages/runs.js")).status_code == 200
