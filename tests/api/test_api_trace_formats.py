"""The formats teams already emit, each on a payload built from its published specification or docs
(the source is named on each test), through the real API over PostgreSQL: POST /v1/traces answers 202
and GET /v1/traces/{id} shows the trajectory the payload describes."""

from __future__ import annotations

import gzip
import json
from typing import Any

from tests.api.conftest import ApiHarness


async def _ingest(api: ApiHarness, fmt: str, trace: dict[str, Any], **headers: str) -> dict[str, Any]:
    project = await api.project(fmt)
    key = api.auth(await api.key(project, "ingest", "read"))
    response = await api.client.post("/v1/traces", json={"format": fmt, "traces": [trace]}, headers=key)
    assert response.status_code == 202, response.text
    (trace_id,) = response.json()["trace_ids"]
    got = await api.client.get(f"/v1/traces/{trace_id}", headers=key)
    assert got.status_code == 200, got.text
    return dict(got.json())


async def test_phoenix_openinference_span_json_with_nested_message_lists(api: ApiHarness) -> None:
    """Source: OpenInference semantic conventions, "LLM Spans" example of a tool call with OpenAI
    (github.com/Arize-ai/openinference, spec/semantic_conventions.md and spec/llm_spans.md): Phoenix's
    span JSON keeps ``llm.input_messages`` / ``llm.output_messages`` as lists of objects keyed
    ``message.role`` / ``message.content`` / ``message.tool_calls`` with ``tool_call.function.*``."""
    llm_span = {
        "name": "llm",
        "context": {"trace_id": "409df945-e058-4829-b240-cfbdd2ff4488", "span_id": "01fa9612"},
        "span_kind": "LLM",
        "parent_id": "2fe8a793",
        "status_code": "OK",
        "attributes": {
            "openinference.span.kind": "LLM",
            "llm.system": "openai",
            "llm.input_messages": [
                {"message.role": "system", "message.content": "You are a weather assistant."},
                {"message.role": "user", "message.content": "What's the weather in Boston?"},
            ],
            "llm.output_messages": [
                {
                    "message.role": "assistant",
                    "message.tool_calls": [
                        {
                            "tool_call.id": "call_62136355",
                            "tool_call.function.name": "get_current_weather",
                            "tool_call.function.arguments": '{"location": "Boston, MA"}',
                        }
                    ],
                }
            ],
            "llm.tools": [
                {
                    "tool.json_schema": json.dumps(
                        {"type": "function", "function": {"name": "get_current_weather", "parameters": {}}}
                    )
                }
            ],
        },
    }
    got = await _ingest(api, "otel", {"spans": [llm_span], "outcome": "failure"})
    trajectory = got["trajectory"]
    assert (trajectory["instruction"], trajectory["task"]) == (
        "You are a weather assistant.",
        "What's the weather in Boston?",
    )
    (step,) = trajectory["steps"]
    assert step["tool_calls"] == [
        {"call_id": "call_62136355", "name": "get_current_weather", "arguments": '{"location": "Boston, MA"}'}
    ]
    assert [t["function"]["name"] for t in trajectory["tools"]] == ["get_current_weather"]


def _text(content: str) -> dict[str, Any]:
    return {"type": "text", "content": content}


async def test_genai_content_on_the_inference_operation_details_event(api: ApiHarness) -> None:
    """Source: OpenTelemetry semantic conventions for Generative AI events (docs/gen-ai/gen-ai-events.md,
    event ``gen_ai.client.inference.operation.details``, which carries the inference span's
    ``gen_ai.input.messages`` / ``gen_ai.output.messages`` / ``gen_ai.system_instructions``), with the
    span's ``gen_ai.conversation.id`` as the default task key (docs/gen-ai/gen-ai-spans.md)."""
    inputs = [{"role": "user", "parts": [_text("Book a table for two at 7pm.")]}]
    outputs = [
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "call_1", "name": "book", "arguments": {"people": 2}}],
            "finish_reason": "tool_call",
        }
    ]
    span = {
        "name": "chat gpt-4o",
        "attributes": {
            "gen_ai.operation.name": "chat",
            "gen_ai.conversation.id": "conv_5j66UpCpwteGg4YSxUnt7lPY",
        },
        "events": [
            {
                "name": "gen_ai.client.inference.operation.details",
                "attributes": {
                    "gen_ai.system_instructions": json.dumps([_text("You book restaurants.")]),
                    "gen_ai.input.messages": json.dumps(inputs),
                    "gen_ai.output.messages": json.dumps(outputs),
                },
            }
        ],
    }
    got = await _ingest(api, "otel", {"spans": [span]})
    assert got["task_key"] == "conv_5j66UpCpwteGg4YSxUnt7lPY"
    trajectory = got["trajectory"]
    assert (trajectory["instruction"], trajectory["task"]) == (
        "You book restaurants.",
        "Book a table for two at 7pm.",
    )
    assert trajectory["steps"][0]["tool_calls"][0]["name"] == "book"


async def test_legacy_genai_per_message_events(api: ApiHarness) -> None:
    """Source: OpenTelemetry semantic conventions v1.36.0, docs/gen-ai/gen-ai-events.md: events
    ``gen_ai.system.message``, ``gen_ai.user.message``, ``gen_ai.assistant.message`` (``tool_calls``),
    ``gen_ai.tool.message`` (``id``) and ``gen_ai.choice`` (``index``, ``finish_reason``, ``message``)."""
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    span = {
        "name": "chat gpt-4o",
        "attributes": {"gen_ai.operation.name": "chat"},
        "events": [
            {"name": "gen_ai.system.message", "attributes": {"content": "You answer weather questions."}},
            {"name": "gen_ai.user.message", "attributes": {"content": "Weather in Paris?"}},
            {"name": "gen_ai.assistant.message", "attributes": {"tool_calls": json.dumps([call])}},
            {"name": "gen_ai.tool.message", "attributes": {"id": "call_1", "content": "rainy, 57F"}},
            {
                "name": "gen_ai.choice",
                "attributes": {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": json.dumps({"content": "It is rainy and 57F."}),
                },
            },
        ],
    }
    got = await _ingest(api, "otel", {"spans": [span]})
    steps = got["trajectory"]["steps"]
    assert [s["kind"] for s in steps] == ["tool", "answer"]
    assert steps[0]["tool_results"][0]["content"] == "rainy, 57F"
    assert steps[1]["action"] == "It is rainy and 57F."


async def test_openllmetry_indexed_prompt_and_completion_attributes(api: ApiHarness) -> None:
    """Source: OpenLLMetry (Traceloop) "GenAI Semantic Conventions" and its OpenAI instrumentation:
    ``gen_ai.prompt.N.role`` / ``.content``, ``gen_ai.completion.N.role`` / ``.content`` /
    ``.tool_calls.K.{id,name,arguments}``, ``gen_ai.prompt.N.tool_call_id``, ``llm.request.functions.N.*``."""
    first = {
        "gen_ai.system": "openai",
        "gen_ai.prompt.0.role": "user",
        "gen_ai.prompt.0.content": "What's 2 + 40?",
        "gen_ai.completion.0.role": "assistant",
        "gen_ai.completion.0.finish_reason": "tool_calls",
        "gen_ai.completion.0.tool_calls.0.id": "call_add",
        "gen_ai.completion.0.tool_calls.0.name": "add",
        "gen_ai.completion.0.tool_calls.0.arguments": '{"a": 2, "b": 40}',
        "llm.request.functions.0.name": "add",
        "llm.request.functions.0.parameters": json.dumps({"type": "object", "properties": {}}),
    }
    second = {
        "gen_ai.prompt.0.role": "user",
        "gen_ai.prompt.0.content": "What's 2 + 40?",
        "gen_ai.prompt.1.role": "assistant",
        "gen_ai.prompt.1.tool_calls.0.id": "call_add",
        "gen_ai.prompt.1.tool_calls.0.name": "add",
        "gen_ai.prompt.1.tool_calls.0.arguments": '{"a": 2, "b": 40}',
        "gen_ai.prompt.2.role": "tool",
        "gen_ai.prompt.2.tool_call_id": "call_add",
        "gen_ai.prompt.2.content": "42",
        "gen_ai.completion.0.role": "assistant",
        "gen_ai.completion.0.content": "42.",
    }
    spans = [
        {"name": "openai.chat", "start_time_unix_nano": 1, "attributes": first},
        {"name": "openai.chat", "start_time_unix_nano": 2, "attributes": second},
    ]
    got = await _ingest(api, "otel", {"spans": spans, "outcome": "success"})
    trajectory = got["trajectory"]
    assert trajectory["task"] == "What's 2 + 40?"
    tool, answer = trajectory["steps"]
    assert (
        tool["tool_calls"][0]["arguments"] == '{"a": 2, "b": 40}'
        and tool["tool_results"][0]["content"] == "42"
    )
    assert answer["action"] == "42."
    assert trajectory["tools"][0]["function"]["name"] == "add"


async def test_langfuse_trace_with_its_observations(api: ApiHarness) -> None:
    """Source: Langfuse public API (cloud.langfuse.com/generated/api/openapi.yml): ``GET
    /api/public/traces/{id}`` (Trace: id, name, sessionId, metadata) and ``GET /api/public/observations``
    (Observation: id, traceId, type GENERATION / TOOL, startTime, input, output, level,
    statusMessage)."""
    system = {"role": "system", "content": "You are a support agent."}
    user = {"role": "user", "content": "Cancel order 17."}
    call = {
        "id": "call_9",
        "type": "function",
        "function": {"name": "cancel_order", "arguments": '{"id": 17}'},
    }
    observations = [
        {
            "id": "obs-1",
            "traceId": "lf-trace-1",
            "type": "GENERATION",
            "name": "ChatOpenAI",
            "startTime": "2026-11-30T10:00:00.000Z",
            "input": [system, user],
            "output": {"role": "assistant", "content": "", "tool_calls": [call]},
        },
        {
            "id": "obs-2",
            "traceId": "lf-trace-1",
            "type": "TOOL",
            "name": "cancel_order",
            "startTime": "2026-11-30T10:00:01.000Z",
            "input": {"id": 17},
            "output": None,
            "level": "ERROR",
            "statusMessage": "order 17 already shipped",
        },
        {
            "id": "obs-3",
            "traceId": "lf-trace-1",
            "type": "GENERATION",
            "name": "ChatOpenAI",
            "startTime": "2026-11-30T10:00:02.000Z",
            "input": {"messages": [system, user, {"role": "assistant", "content": "", "tool_calls": [call]}]},
            "output": "I could not cancel it.",
        },
    ]
    trace = {
        "trace": {"id": "lf-trace-1", "name": "support", "sessionId": "session-17", "metadata": {}},
        "observations": observations,
        "outcome": "failure",
    }
    got = await _ingest(api, "langfuse", trace)
    assert (got["external_id"], got["task_key"]) == ("lf-trace-1", "session-17")
    tool, answer = got["trajectory"]["steps"]
    assert tool["tool_results"][0] == {
        "call_id": "call_9", "content": "order 17 already shipped", "is_error": True, "name": "cancel_order",
    }  # fmt: skip
    assert answer["action"] == "I could not cancel it."


async def test_openai_responses_api_items(api: ApiHarness) -> None:
    """Source: OpenAI API reference, Responses (``POST /v1/responses``): input items ``message``
    (``input_text`` parts), ``reasoning`` (``summary`` of ``summary_text``), ``function_call``
    (``call_id``, ``name``, ``arguments``), ``function_call_output`` (``call_id``, ``output``); output
    item ``message`` with ``output_text``; tools ``{"type": "function", "name", "parameters"}``."""
    trace = {
        "instructions": "You are a travel agent.",
        "tools": [
            {"type": "function", "name": "find_flight", "parameters": {"type": "object"}, "strict": True}
        ],
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Find me a flight to Oslo."}]},
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "Search first."}],
            },
            {
                "type": "function_call",
                "call_id": "call_f",
                "name": "find_flight",
                "arguments": '{"to": "OSL"}',
            },
            {"type": "function_call_output", "call_id": "call_f", "output": '{"flight": "SK4035"}'},
        ],
        "output": [
            {
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Flight SK4035 to Oslo.", "annotations": []}],
            }
        ],
        "outcome": "success",
    }
    got = await _ingest(api, "openai-responses", trace)
    trajectory = got["trajectory"]
    assert (trajectory["instruction"], trajectory["task"]) == (
        "You are a travel agent.",
        "Find me a flight to Oslo.",
    )
    tool, answer = trajectory["steps"]
    assert (tool["reasoning"], tool["tool_calls"][0]["call_id"]) == ("Search first.", "call_f")
    assert tool["tool_results"][0]["content"] == '{"flight": "SK4035"}'
    assert answer["action"] == "Flight SK4035 to Oslo."
    assert trajectory["tools"] == [
        {
            "type": "function",
            "function": {"name": "find_flight", "parameters": {"type": "object"}, "strict": True},
        }
    ]  # the chat shape; `strict` is a field of the OpenAI function object too


async def test_agentgym_item_id_is_the_task_key_and_gzip_bodies_are_read(api: ApiHarness) -> None:
    """Source: AgentGym's AgentTraj records (huggingface.co/datasets/AgentGym/AgentTraj-L): ``{"item_id":
    "webshop_4", "conversations": [{"from": "human", ...}, {"from": "gpt", ...}]}``; and RFC 9110
    Content-Encoding gzip on the upload."""
    project = await api.project("gz")
    key = api.auth(await api.key(project, "ingest", "read"))
    record = {
        "item_id": "webshop_4",
        "conversations": [
            {"from": "human", "loss": None, "value": "You are web shopping. Instruction: buy a red mug."},
            {"from": "gpt", "loss": True, "value": "Thought: search it.\nAction: search[red mug]"},
        ],
    }
    body = gzip.compress(json.dumps({"format": "sharegpt", "traces": [record]}).encode())
    headers = {**key, "Content-Type": "application/json", "Content-Encoding": "gzip"}
    response = await api.client.post("/v1/traces", content=body, headers=headers)
    assert response.status_code == 202, response.text
    (trace_id,) = response.json()["trace_ids"]
    got = (await api.client.get(f"/v1/traces/{trace_id}", headers=key)).json()
    assert got["task_key"] == "webshop_4" and got["trajectory"]["steps"][0]["action"] == "search[red mug]"
    broken = await api.client.post("/v1/traces", content=b"not gzip", headers=headers)
    assert broken.status_code == 400 and "not valid gzip" in broken.text
