"""Ingest of what exporters send: OTLP/JSON resourceSpans (GenAI conventions), execute_tool spans and
their ERROR status, n>1 choices, reasoning parts, OpenInference attributes, legacy function calls,
tool results without ids, and outcomes in every accepted shape. Payloads are written for this project
following the published conventions (OTLP/JSON encoding, GenAI semconv, OpenInference)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from core.formats.importing import TraceFormatError, parse_outcome, parse_traces

TRACE_A = "5b8efff798038103d269b633813fc60c"
TRACE_B = "0af7651916cd43dd8448eb211c80319c"
SYSTEM = "You are the billing agent of Acme. Use the tools; never guess an invoice number."
TASK = "Refund the duplicate charge on invoice INV-2231."
TOOLS = [
    {
        "type": "function",
        "name": "get_invoice",
        "description": "Look an invoice up",
        "parameters": {"type": "object", "properties": {"invoice_id": {"type": "string"}}},
    }
]


def kv(attrs: dict[str, Any]) -> list[dict[str, Any]]:
    """A dict -> an OTLP/JSON KeyValue list (strings, ints as strings, doubles, bools)."""
    out = []
    for key, value in attrs.items():
        if isinstance(value, bool):
            encoded: dict[str, Any] = {"boolValue": value}
        elif isinstance(value, int):
            encoded = {"intValue": str(value)}
        elif isinstance(value, float):
            encoded = {"doubleValue": value}
        elif isinstance(value, list | dict):
            encoded = {"stringValue": json.dumps(value)}
        else:
            encoded = {"stringValue": value}
        out.append({"key": key, "value": encoded})
    return out


def sid(name: str) -> str:
    """A readable test name -> a 16-hex-digit OTLP span id."""
    return name.encode().hex().rjust(16, "0")


def span(
    trace: str, span_id: str, parent: str, name: str, start: int | None, attrs: dict[str, Any], **kw: Any
):
    out: dict[str, Any] = {
        "traceId": trace,
        "spanId": sid(span_id),
        "parentSpanId": sid(parent) if parent else "",
        "name": name,
        "kind": 1,
        "attributes": kv(attrs),
    }
    if start is not None:
        out["startTimeUnixNano"] = str(1_700_000_000_000_000_000 + start)
        out["endTimeUnixNano"] = str(1_700_000_000_000_000_000 + start + 5)
    out.update(kw)
    return out


def msg(role: str, *parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": role, "parts": list(parts)}


def text(content: str) -> dict[str, Any]:
    return {"type": "text", "content": content}


USER = msg("user", text(TASK))
CALL_1 = msg(
    "assistant",
    {"type": "reasoning", "content": "The invoice id is given; look it up first."},
    {"type": "tool_call", "id": "call_1", "name": "get_invoice", "arguments": {"invoice_id": "INV-2231"}},
)
RESULT_1 = msg(
    "tool", {"type": "tool_call_response", "id": "call_1", "response": {"error": "upstream timeout"}}
)
CALL_2 = msg(
    "assistant",
    text("Retrying the lookup."),
    {"type": "tool_call", "id": "call_2", "name": "get_invoice", "arguments": {"invoice_id": "INV-2231"}},
)
FINAL = msg("assistant", text("Sorry, I could not reach the billing system."))


def agent_trace(trace: str = TRACE_A, root_status: int = 2) -> list[dict[str, Any]]:
    """invoke_agent root -> chat, execute_tool (ERROR), chat, execute_tool (ok, result only on the
    span), chat. Each chat span replays the history in its input."""
    system = [text(SYSTEM)]
    return [
        span(
            trace,
            "a1",
            "",
            "invoke_agent billing",
            0,
            {"gen_ai.operation.name": "invoke_agent"},
            status={"code": root_status, "message": "agent gave up"},
        ),  # fmt: skip
        span(
            trace,
            "c1",
            "a1",
            "chat gpt-x",
            10,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.system_instructions": system,
                "gen_ai.tool.definitions": TOOLS,
                "gen_ai.input.messages": [USER],
                "gen_ai.output.messages": [{**CALL_1, "finish_reason": "tool_call"}],
            },
        ),  # fmt: skip
        span(
            trace,
            "t1",
            "a1",
            "execute_tool get_invoice",
            20,
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "get_invoice",
                "gen_ai.tool.call.id": "call_1",
                "error.type": "TimeoutError",
            },
            status={"code": 2, "message": "upstream timeout"},
        ),  # fmt: skip
        span(
            trace,
            "c2",
            "a1",
            "chat gpt-x",
            30,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.system_instructions": system,
                "gen_ai.input.messages": [USER, CALL_1, RESULT_1],
                "gen_ai.output.messages": [CALL_2],
            },
        ),  # fmt: skip
        span(
            trace,
            "t2",
            "a1",
            "execute_tool get_invoice",
            40,
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "get_invoice",
                "gen_ai.tool.call.id": "call_2",
                "gen_ai.tool.call.result": {"status": "error", "code": 503},
            },
        ),  # fmt: skip
        span(
            trace,
            "c3",
            "a1",
            "chat gpt-x",
            50,
            {
                "gen_ai.operation.name": "chat",
                # this span dropped the system instructions and one history message: still de-duplicated
                "gen_ai.input.messages": [USER, CALL_1, RESULT_1, CALL_2],
                "gen_ai.output.messages": [FINAL],
            },
        ),  # fmt: skip
    ]


def export(*spans: dict[str, Any], resource: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": kv(resource or {"service.name": "billing-agent"})},
                "scopeSpans": [{"scope": {"name": "agent"}, "spans": list(spans)}],
            }
        ]
    }


def test_otlp_json_resource_spans_become_one_tool_trajectory() -> None:
    spans = agent_trace()
    shuffled = [spans[4], spans[0], spans[5], spans[2], spans[1], spans[3]]  # export order is not time order
    (trace,) = parse_traces(export(*shuffled), "otlp")
    t = trace.trajectory
    assert (t.instruction, t.task) == (SYSTEM, TASK)
    assert [tool["function"]["name"] for tool in t.tools] == ["get_invoice"]
    assert [s.kind for s in t.steps] == ["tool", "tool", "answer"]
    first, second, answer = t.steps
    assert first.reasoning == "The invoice id is given; look it up first." and first.thought == ""
    assert first.tool_calls[0].call_id == "call_1"
    assert json.loads(first.tool_calls[0].arguments) == {"invoice_id": "INV-2231"}
    (r1,) = first.tool_results
    assert (r1.call_id, r1.is_error, json.loads(r1.content)) == (
        "call_1",
        True,
        {"error": "upstream timeout"},
    )
    (r2,) = second.tool_results  # no chat span replayed it: taken from the execute_tool span
    assert (r2.is_error, json.loads(r2.content)) == (False, {"status": "error", "code": 503})
    assert second.thought == "Retrying the lookup."
    assert answer.action == "Sorry, I could not reach the billing system."
    # outcome from the root span's ERROR status; the OTLP trace id is the external id
    assert (trace.outcome, t.reward, trace.external_id) == ("failure", 0.0, TRACE_A)


def test_spans_without_timestamps_follow_parent_then_sent_order() -> None:
    spans = agent_trace()
    for s in spans:
        s.pop("startTimeUnixNano")
        s.pop("endTimeUnixNano")
    (trace,) = parse_traces(export(*spans), "otlp")
    assert [s.kind for s in trace.trajectory.steps] == ["tool", "tool", "answer"]


def test_export_with_two_traces_is_split_by_trace_id_and_reads_outcome_attributes() -> None:
    a = agent_trace(TRACE_A, root_status=0)
    a[0]["attributes"] += kv({"agentr.outcome": {"success": False, "reward": 0.2}, "agentr.task_key": "inv"})
    b = agent_trace(TRACE_B, root_status=1)  # root status OK -> success
    interleaved = [x for pair in zip(a, b, strict=True) for x in pair]
    first, second = parse_traces([export(*interleaved[:5]), export(*interleaved[5:])], "otlp")
    assert (first.external_id, first.outcome, first.trajectory.reward, first.task_key) == (
        TRACE_A, "failure", 0.2, "inv",
    )  # fmt: skip
    assert (second.external_id, second.outcome, second.trajectory.reward) == (TRACE_B, "success", 1.0)
    c = agent_trace(TRACE_A, root_status=0)
    (unknown,) = parse_traces(export(*c), "otlp")
    assert (unknown.outcome, unknown.trajectory.reward) == ("unknown", None)


def test_otel_format_accepts_one_resource_spans_export_per_item_and_refuses_mixed_traces() -> None:
    (one,) = parse_traces([{"task_key": "inv", "outcome": 0.5, **export(*agent_trace())}], "otel")
    assert (one.task_key, one.outcome, one.trajectory.reward) == ("inv", "failure", 0.5)
    mixed = export(*agent_trace(TRACE_A), *agent_trace(TRACE_B))
    with pytest.raises(
        TraceFormatError, match=r"traces\[0\].resourceSpans: holds 2 trace ids; .*format=otlp"
    ):
        parse_traces([mixed], "otel")


def test_n_choices_keep_the_continued_one_as_the_step_and_the_rest_as_alternatives() -> None:
    choice_a = msg("assistant", text("Refunded."))
    choice_b = msg(
        "assistant",
        {"type": "tool_call", "id": "k2", "name": "get_invoice", "arguments": {"invoice_id": "X"}},
    )
    spans = [
        span(TRACE_A, "c1", "", "chat", 1,
             {"gen_ai.input.messages": [USER], "gen_ai.output.messages": [choice_a, choice_b]}),
        span(TRACE_A, "c2", "", "chat", 2, {
            "gen_ai.input.messages": [
                USER, choice_b, msg("tool", {"type": "tool_call_response", "id": "k2", "response": "paid"})
            ],
            "gen_ai.output.messages": [msg("assistant", text("Done."))],
        }),
    ]  # fmt: skip
    (trace,) = parse_traces(export(*spans), "otlp")
    first, last = trace.trajectory.steps
    assert first.kind == "tool" and first.tool_calls[0].call_id == "k2"
    assert first.alternatives == ("Refunded.",)
    assert last.action == "Done." and last.alternatives == ()
    # with no later span to tell, the first choice is the step
    (alone,) = parse_traces(export(spans[0]), "otlp")
    assert alone.trajectory.steps[0].action == "Refunded."
    assert alone.trajectory.steps[0].alternatives == ('get_invoice({"invoice_id": "X"})',)


def _oi_messages(direction: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, m in enumerate(messages):
        base = f"llm.{direction}_messages.{i}.message"
        for key, value in m.items():
            if key == "tool_calls":
                for k, call in enumerate(value):
                    out[f"{base}.tool_calls.{k}.tool_call.function.name"] = call["name"]
                    out[f"{base}.tool_calls.{k}.tool_call.function.arguments"] = json.dumps(call["args"])
                    if "id" in call:
                        out[f"{base}.tool_calls.{k}.tool_call.id"] = call["id"]
            else:
                out[f"{base}.{key}"] = value
    return out


def test_openinference_llm_and_tool_spans() -> None:
    history = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": TASK},
        {"role": "assistant", "tool_calls": [{"name": "get_invoice", "args": {"invoice_id": "INV-2231"}}]},
        {"role": "tool", "content": '{"detail": "Not Found"}'},  # OpenInference: no tool_call_id
    ]
    tool_schema = json.dumps({"type": "function", "function": {"name": "get_invoice", "parameters": {}}})
    llm1 = {"openinference.span.kind": "LLM", "llm.tools.0.tool.json_schema": tool_schema}
    llm1 |= _oi_messages("input", history[:2]) | _oi_messages("output", [history[2]])
    llm2 = {"openinference.span.kind": "LLM"} | _oi_messages("input", history)
    llm2 |= _oi_messages("output", [{"role": "assistant", "content": "I could not find that invoice."}])
    tool = {
        "openinference.span.kind": "TOOL",
        "tool.name": "get_invoice",
        "input.value": '{"invoice_id": "INV-2231"}',
        "output.value": '{"detail": "Not Found"}',
    }
    spans = [
        span(TRACE_A, "r", "", "agent", 0, {"openinference.span.kind": "AGENT"}),
        span(TRACE_A, "l1", "r", "ChatCompletion", 1, llm1),
        span(TRACE_A, "t1", "r", "get_invoice", 2, tool, status={"code": 2}),
        span(TRACE_A, "l2", "r", "ChatCompletion", 3, llm2),
    ]
    (trace,) = parse_traces(export(*spans), "otlp")
    t = trace.trajectory
    assert (t.instruction, t.task, [x["function"]["name"] for x in t.tools]) == (
        SYSTEM,
        TASK,
        ["get_invoice"],
    )
    call_step, answer = t.steps
    (result,) = call_step.tool_results
    assert result.call_id == call_step.tool_calls[0].call_id  # paired by order
    assert (result.content, result.is_error) == ('{"detail": "Not Found"}', True)
    assert answer.kind == "answer"


LEGACY = {
    "outcome": "failure",
    "functions": [{"name": "get_invoice", "parameters": {"type": "object"}}],
    "messages": [
        {"role": "user", "content": TASK},
        {"role": "assistant", "content": None, "function_call": {"name": "get_invoice", "arguments": "{}"}},
        {"role": "function", "name": "get_invoice", "content": "500 Internal Server Error"},
        {"role": "assistant", "content": "The billing system is down."},
    ],
}


def test_legacy_function_calls_need_the_legacy_format_and_say_so() -> None:
    with pytest.raises(TraceFormatError) as info:
        parse_traces([LEGACY], "openai")
    assert str(info.value) == (
        "traces[0].functions: legacy function definitions: send tools, or set format=openai-legacy"
    )
    no_functions = {k: v for k, v in LEGACY.items() if k != "functions"}
    with pytest.raises(TraceFormatError, match=r"messages\[1\].function_call: legacy function_call: send "
                       r"tool_calls .*format=openai-legacy"):  # fmt: skip
        parse_traces([no_functions], "openai")
    (trace,) = parse_traces([LEGACY], "openai-legacy")
    call, answer = trace.trajectory.steps
    assert call.tool_calls[0].name == "get_invoice" and call.tool_results[0].name == "get_invoice"
    assert call.tool_results[0].content == "500 Internal Server Error"
    assert trace.trajectory.tools[0]["function"]["name"] == "get_invoice"
    assert answer.kind == "answer"


def test_openai_tool_messages_without_ids_are_paired_by_order() -> None:
    calls = [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}},
        {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}},
    ]
    item = {
        "messages": [
            {"role": "user", "content": TASK},
            {"role": "assistant", "content": "two at once", "tool_calls": calls},
            {"role": "tool", "content": "from f"},
            {"role": "tool", "content": "from g"},
            {"role": "assistant", "content": "done"},
        ]
    }
    (trace,) = parse_traces([item], "openai")
    step = trace.trajectory.steps[0]
    assert [(r.call_id, r.content) for r in step.tool_results] == [("a", "from f"), ("b", "from g")]
    assert step.observation == "from f\nfrom g"


def test_outcome_shapes() -> None:
    assert parse_outcome("success", None, "t") == ("success", 1.0)
    assert parse_outcome(1, None, "t") == ("success", 1.0)
    assert parse_outcome(0.4, None, "t") == ("failure", 0.4)
    assert parse_outcome(True, None, "t") == ("success", 1.0)
    assert parse_outcome({"success": False, "reward": 0}, None, "t") == ("failure", 0.0)
    assert parse_outcome({"success": True}, None, "t") == ("success", 1.0)
    assert parse_outcome(None, 0.3, "t") == ("failure", 0.3)
    assert parse_outcome(None, None, "t") == ("unknown", None)
    for bad, where in [
        ("meh", "t.outcome"),
        ({"success": "yes"}, "t.outcome.success"),
        ({"success": True, "score": 1}, "t.outcome.score"),
        (1.5, "t.outcome"),
        ([1], "t.outcome"),
    ]:
        with pytest.raises(TraceFormatError) as info:
            parse_outcome(bad, None, "t")
        assert info.value.path == where and ("send" in info.value.problem or "[0, 1]" in info.value.problem)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (
            {"resourceSpans": [{"instrumentationLibrarySpans": []}]},
            "traces[0].resourceSpans[0].instrumentationLibrarySpans: the pre-1.0 OTLP field is not "
            "supported: send scopeSpans",
        ),
        (
            export(
                {
                    **span(TRACE_A, "c1", "", "chat", 1, {}),
                    "attributes": [{"key": "k", "value": {"fooValue": 1}}],
                }
            ),
            "traces[0].resourceSpans[0].scopeSpans[0].spans[0].attributes[0].value.fooValue: "
            "unknown AnyValue field",
        ),
        (
            export(span("not-hex!", "c1", "", "chat", 1, {})),
            "traces[0].resourceSpans[0].scopeSpans[0].spans[0].traceId: expected a hex string",
        ),
        (
            export(span(TRACE_A, "c1", "", "GET /orders", 1, {"http.request.method": "GET"})),
            "traces[0].resourceSpans[0].scopeSpans[0].spans[0].attributes.gen_ai.input.messages: missing: no "
            "span carries model messages, so this is not an agent trace",
        ),
        (
            export(
                span(
                    TRACE_A,
                    "c1",
                    "",
                    "chat",
                    1,
                    {"gen_ai.input.messages": [msg("user", {"type": "hologram"})]},
                )
            ),
            "traces[0].resourceSpans[0].scopeSpans[0].spans[0].attributes.gen_ai.input.messages[0]"
            ".parts[0].type: unsupported part type 'hologram' "
            "(send text, tool_call, tool_call_response, reasoning, blob, file or uri parts)",
        ),
        (
            export(
                span(
                    TRACE_A,
                    "c1",
                    "",
                    "chat",
                    1,
                    {"gen_ai.input.messages": [USER], "gen_ai.output.messages": [FINAL]},
                ),
                span(
                    TRACE_A,
                    "t9",
                    "",
                    "execute_tool",
                    2,
                    {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "refund"},
                ),
            ),
            "traces[0].resourceSpans[0].scopeSpans[0].spans[1]: an execute_tool span (refund, call id None) "
            "for a call no chat span made",
        ),
    ],
)
def test_unsupported_otlp_shapes_name_the_field_and_what_to_send(
    payload: dict[str, Any], message: str
) -> None:
    with pytest.raises(TraceFormatError) as info:
        parse_traces([payload], "otlp")
    assert str(info.value).startswith(message)


def test_protobuf_export_decodes_to_the_same_spans_as_otlp_json() -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

    from core.formats.otlp import spans_from_otlp_json, spans_from_protobuf

    def proto_value(value: Any) -> AnyValue:
        if isinstance(value, bool):
            return AnyValue(bool_value=value)
        if isinstance(value, int):
            return AnyValue(int_value=value)
        if isinstance(value, float):
            return AnyValue(double_value=value)
        return AnyValue(string_value=value if isinstance(value, str) else json.dumps(value))

    proto_spans = []
    for s in agent_trace():
        attrs = {a["key"]: next(iter(a["value"].values())) for a in s["attributes"]}
        decoded = {k: json.loads(v) if isinstance(v, str) and v[:1] in "[{" else v for k, v in attrs.items()}
        proto_spans.append(
            Span(
                trace_id=bytes.fromhex(s["traceId"]),
                span_id=bytes.fromhex(s["spanId"]),
                parent_span_id=bytes.fromhex(s["parentSpanId"]) if s["parentSpanId"] else b"",
                name=s["name"],
                start_time_unix_nano=int(s["startTimeUnixNano"]),
                end_time_unix_nano=int(s["endTimeUnixNano"]),
                attributes=[KeyValue(key=k, value=proto_value(v)) for k, v in decoded.items()],
                status=Status(
                    code=s.get("status", {}).get("code", 0), message=s.get("status", {}).get("message", "")
                ),
            )
        )
    request = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=proto_spans)])]
    )
    from_proto = spans_from_protobuf(request.SerializeToString())
    from_json = spans_from_otlp_json(export(*agent_trace()))
    strip = [("path", ""), ("resource", {})]
    assert [replace(s, **dict(strip)) for s in from_proto] == [replace(s, **dict(strip)) for s in from_json]


def test_non_json_values_are_made_json_ready_or_refused() -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

    from core.formats.otlp import spans_from_protobuf

    def request(value: AnyValue) -> bytes:
        one = Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, attributes=[KeyValue(key="k", value=value)])
        return ExportTraceServiceRequest(
            resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[one])])]
        ).SerializeToString()

    (decoded,) = spans_from_protobuf(request(AnyValue(bytes_value=b"\xff\x00")))
    assert decoded.attributes["k"] == "/wA=" and json.dumps(decoded.to_data())  # base64, as OTLP/JSON has it
    # a NUL is decoded as sent: the receiver replaces it by U+FFFD and records where (api/routes/otlp.py)
    (kept,) = spans_from_protobuf(request(AnyValue(string_value="a\x00b")))
    assert kept.attributes["k"] == "a\x00b"
    with pytest.raises(TraceFormatError, match=r"attributes\.k\.doubleValue: not a finite number"):
        spans_from_protobuf(request(AnyValue(double_value=float("nan"))))
    with pytest.raises(TraceFormatError, match="doubleValue: not a finite number"):
        parse_traces(export(span(TRACE_A, "c1", "", "chat", 1, {"x": float("inf")})), "otlp")


def test_sharegpt_llama_factory_function_calls_and_tools() -> None:
    item = {
        "system": SYSTEM,
        "tools": json.dumps([{"name": "get_invoice", "description": "d", "parameters": {"type": "object"}}]),
        "conversations": [
            {"from": "human", "value": TASK},
            {
                "from": "function_call",
                "value": json.dumps({"name": "get_invoice", "arguments": {"invoice_id": "1"}}),
            },
            {"from": "observation", "value": '{"error": "not found"}'},
            {"from": "gpt", "value": "No such invoice."},
        ],
    }
    (trace,) = parse_traces([item], "sharegpt")
    t = trace.trajectory
    assert (t.instruction, t.task, t.tools[0]["function"]["name"]) == (SYSTEM, TASK, "get_invoice")
    call, answer = t.steps
    assert call.kind == "tool" and call.tool_results[0].content == '{"error": "not found"}'
    assert answer.kind == "answer" and answer.action == "No such invoice."
    bad = {
        **item,
        "conversations": [item["conversations"][0], {"from": "function_call", "value": "get_invoice(1)"}],
    }
    with pytest.raises(TraceFormatError, match=r"conversations\[1\].value: not valid JSON .*send \{\"name\""):
        parse_traces([bad], "sharegpt")


def test_local_roots_and_parent_cycles() -> None:
    from core.formats.import_otel import ordered
    from core.formats.otlp import spans_from_otlp_json

    remote = span(TRACE_A, "a1", "up", "invoke_agent", 0, {}, flags=0x300)  # parent in another service
    local_child = span(TRACE_A, "c1", "a1", "chat", 1, {})
    unknown_flag = span(TRACE_A, "c2", "zz", "chat", 2, {}, flags=0x100)  # is-remote known, not set
    marked = span(TRACE_A, "c3", "zz", "chat", 3, {"agentr.trace.complete": True})
    records = spans_from_otlp_json(export(remote, local_child, unknown_flag, marked))
    assert [r.is_local_root for r in records] == [True, False, False, True]
    # a parent cycle (a corrupt export) still yields every span, in the order sent
    x = span(TRACE_A, "x", "y", "chat", None, {})
    y = span(TRACE_A, "y", "x", "chat", None, {})
    cyc = spans_from_otlp_json(export(x, y))
    assert [s.span_id for s in ordered(cyc)] == [s.span_id for s in cyc]


def test_system_instructions_in_either_spelling_and_as_plain_text() -> None:
    for key, value in [
        ("gen_ai.system.instructions", [text(SYSTEM)]),
        ("gen_ai.system_instructions", SYSTEM),  # plain text, not a parts list
    ]:
        attrs = {key: value, "gen_ai.input.messages": [USER], "gen_ai.output.messages": [FINAL]}
        (trace,) = parse_traces(export(span(TRACE_A, "c1", "", "chat", 1, attrs)), "otlp")
        assert trace.trajectory.instruction == SYSTEM, key
