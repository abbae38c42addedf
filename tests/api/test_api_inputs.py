"""Hostile and careless inputs answer 4xx naming the field, never 500 (issue 18, points 1 and 6).

Each case is a reproduction from the issue: lone surrogates in trace content, an over-long trace
id, JSON nested ~1,000 deep inside string fields and in a run's ``train`` object, cursors that
decode but would break the query, NaN numbers, and RunConfig values without bounds. Every test also
checks that nothing was written.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from sqlalchemy import func, select

from core.store.tables import events
from tests.api.conftest import ApiHarness


async def _setup(api: ApiHarness) -> tuple[str, dict[str, str], str]:
    project = await api.project()
    key = api.auth(await api.key(project, "read", "run", "ingest"))
    run = (await api.client.post("/v1/runs", json={"model": "m"}, headers=key)).json()["run_id"]
    return project, key, run


async def _event_count(api: ApiHarness) -> int:
    async with api.store.engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(events))).scalar_one())


def _raw_json(value: Any) -> str:
    """JSON text with non-ASCII escaped, so a lone surrogate travels as the escape ``\\ud800``."""
    return json.dumps(value, ensure_ascii=True)


def _nested(depth: int) -> str:
    """JSON text of arrays nested ``depth`` deep (built as text: json.dumps itself would recurse)."""
    return "[" * depth + "1" + "]" * depth


def _trace(**extra: Any) -> dict[str, Any]:
    return {
        "messages": [
            {"role": "user", "content": "Goal: x"},
            {"role": "assistant", "content": "Action: look"},
        ],
        **extra,
    }


async def _post_traces(api: ApiHarness, key: dict[str, str], body_text: str) -> Any:
    return await api.client.post(
        "/v1/traces", content=body_text, headers={**key, "content-type": "application/json"}
    )


async def test_lone_surrogate_in_trace_content_is_422_naming_the_field(api: ApiHarness) -> None:
    _project, key, _run = await _setup(api)
    before = await _event_count(api)
    trace = _trace()
    trace["messages"][1]["content"] = "x\ud800"
    response = await _post_traces(api, key, _raw_json({"format": "openai", "traces": [trace]}))
    assert response.status_code == 422, response.text
    assert response.json()["fields"][0]["field"] == "body.traces[0].messages[1].content"
    assert "surrogate" in response.json()["detail"]
    # in an object key, too
    keyed = _trace(metadata={"k\udfff": 1})
    response = await _post_traces(api, key, _raw_json({"format": "openai", "traces": [keyed]}))
    assert response.status_code == 422 and response.json()["fields"][0]["field"] == "body.traces[0].metadata"
    assert await _event_count(api) == before


async def test_trace_id_longer_than_its_column_is_422(api: ApiHarness) -> None:
    _project, key, _run = await _setup(api)
    before = await _event_count(api)
    body = {"format": "openai", "traces": [_trace(), _trace(id="x" * 201)]}
    response = await api.client.post("/v1/traces", json=body, headers=key)
    assert response.status_code == 422, response.text
    assert response.json()["fields"][0]["field"] == "body.traces[1].id"
    ok = await api.client.post(
        "/v1/traces", json={"format": "openai", "traces": [_trace(id="x" * 200)]}, headers=key
    )
    assert ok.status_code == 202, ok.text
    assert await _event_count(api) == before + 1


@pytest.mark.parametrize("depth", [100, 1_000, 5_000])
async def test_json_nested_deep_inside_string_fields_is_422(api: ApiHarness, depth: int) -> None:
    _project, key, _run = await _setup(api)
    before = await _event_count(api)
    arguments = '{"a": ' + _nested(depth) + "}"
    trace = {
        "messages": [
            {"role": "user", "content": "Goal: x"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ]
    }
    response = await api.client.post("/v1/traces", json={"format": "openai", "traces": [trace]}, headers=key)
    assert response.status_code == 422, response.text
    assert response.json()["fields"][0]["field"].startswith(
        "body.traces[0].messages[1].tool_calls[0].function"
    )
    assert "nested deeper" in response.json()["detail"]

    span = {
        "name": "chat",
        "attributes": {"gen_ai.input.messages": _nested(depth)},
    }
    response = await api.client.post(
        "/v1/traces", json={"format": "otel", "traces": [{"spans": [span]}]}, headers=key
    )
    assert response.status_code == 422, response.text
    assert "gen_ai.input.messages" in response.json()["fields"][0]["field"]
    assert await _event_count(api) == before


@pytest.mark.parametrize("depth", [500, 1_000, 100_000])
async def test_run_train_nested_deep_is_422(api: ApiHarness, depth: int) -> None:
    _project, key, _run = await _setup(api)
    before = await _event_count(api)
    text = '{"model": "m", "train": {"x": ' + _nested(depth) + "}}"
    response = await api.client.post(
        "/v1/runs", content=text, headers={**key, "content-type": "application/json"}
    )
    assert response.status_code == 422, response.text
    assert response.json()["fields"][0]["field"].startswith("body")
    assert await _event_count(api) == before


async def test_nan_and_infinity_are_422(api: ApiHarness) -> None:
    _project, key, _run = await _setup(api)
    trace = '{"messages": [{"role": "user", "content": "x"}], "metadata": {"v": NaN}}'
    text = '{"format": "openai", "traces": [' + trace + "]}"
    response = await _post_traces(api, key, text)
    assert response.status_code == 422, response.text
    assert response.json()["fields"][0]["field"] == "body.traces[0].metadata.v"
    response = await api.client.post(
        "/v1/runs",
        content='{"model": "m", "beta": Infinity}',
        headers={**key, "content-type": "application/json"},
    )
    assert response.status_code == 422 and response.json()["fields"][0]["field"] == "body.beta"


def _cursor(values: list[Any]) -> str:
    raw = json.dumps(values, ensure_ascii=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize("route", ["trees", "pairs", "samples"])
@pytest.mark.parametrize(
    "values",
    [[2**63, "x"], [0, "x\ud800"], [0, "a\u0000"], ["0", "x"], [0], [True, "x"]],
    ids=["int64+1", "surrogate", "nul", "string-for-int", "short", "bool"],
)
async def test_cursors_that_decode_but_break_the_query_are_422(
    api: ApiHarness, route: str, values: list[Any]
) -> None:
    _project, key, run = await _setup(api)
    response = await api.client.get(
        f"/v1/runs/{run}/{route}", params={"cursor": _cursor(values)}, headers=key
    )
    assert response.status_code == 422, response.text
    assert response.json()["fields"][0]["field"] == "query.cursor"


@pytest.mark.parametrize("route", ["trees", "pairs"])  # keyed by a 32-bit integer column
@pytest.mark.parametrize("value", [2**31, -(2**31) - 1, 2**40])
async def test_cursors_past_an_int32_column_are_422(api: ApiHarness, route: str, value: int) -> None:
    _project, key, run = await _setup(api)
    response = await api.client.get(
        f"/v1/runs/{run}/{route}", params={"cursor": _cursor([value, "x"])}, headers=key
    )
    assert response.status_code == 422, response.text
    assert response.json()["fields"][0]["field"] == "query.cursor"


@pytest.mark.parametrize(
    "stamp",
    [
        "9999-12-31T23:59:59-05:00",
        "0001-01-01T00:00:00+05:00",
        "not-a-time",
        "10000-01-01T00:00:00+00:00",
    ],
)
async def test_run_cursor_timestamps_out_of_range_are_422(api: ApiHarness, stamp: str) -> None:
    _project, key, _run = await _setup(api)
    response = await api.client.get("/v1/runs", params={"cursor": _cursor([stamp, "r"])}, headers=key)
    assert response.status_code == 422, response.text
    assert response.json()["fields"][0]["field"] == "query.cursor"


async def test_run_cursor_at_the_edges_of_time_is_a_page(api: ApiHarness) -> None:
    _project, key, _run = await _setup(api)
    for stamp in ("9999-12-31T23:59:59+00:00", "0001-01-01T00:00:00+00:00"):
        response = await api.client.get("/v1/runs", params={"cursor": _cursor([stamp, "r"])}, headers=key)
        assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"max_tasks": 10**30}, "body.max_tasks"),
        ({"train": {"epochs": "lots"}}, "body.train.epochs"),
        ({"train": {"learning_rate": -1}}, "body.train.learning_rate"),
        ({"train": {"no_such_knob": 1}}, "body.train.no_such_knob"),
        ({"train": {"lora": {"r": 0}}}, "body.train.lora.r"),
        ({"evaluation": {"max_steps": 10**9}}, "body.evaluation.max_steps"),
        ({"evaluation": {"unknown": True}}, "body.evaluation.unknown"),
        ({"tasks": ["t" * 1_000_000]}, "body.tasks[0]"),
        ({"eval_tasks": ["ok", "t" * 1001]}, "body.eval_tasks[1]"),
        ({"alpha_schedule": [0.5, 1.5]}, "body.alpha_schedule[1]"),
        ({"critic": {"strategy": "vibes"}}, "body.critic.strategy"),
        ({"critic": {"plan": "random"}}, "body.critic.plan"),
        ({"splice": {"reflection": "llm"}}, "body.splice.reflection"),
        ({"search": {"n_candidates": 10**6}}, "body.search.n_candidates"),
    ],
)
async def test_every_run_config_field_is_typed_and_bounded(
    api: ApiHarness, body: dict[str, Any], field: str
) -> None:
    _project, key, _run = await _setup(api)
    before = await _event_count(api)
    response = await api.client.post("/v1/runs", json={"model": "m", **body}, headers=key)
    assert response.status_code == 422, response.text
    assert response.json()["fields"][0]["field"] == field
    assert await _event_count(api) == before


async def test_typed_train_and_evaluation_reach_the_run_as_sent(api: ApiHarness) -> None:
    _project, key, _run = await _setup(api)
    body = {
        "model": "m",
        "train": {"epochs": 2, "lora": {"r": 4}},
        "evaluation": {"prompt_budget": None, "max_steps": 5},
        "critic": {"strategy": "rules"},
    }
    response = await api.client.post("/v1/runs", json=body, headers=key)
    assert response.status_code == 202, response.text
    run = (await api.client.get(f"/v1/runs/{response.json()['run_id']}", headers=key)).json()
    assert run["config"]["train"] == {"epochs": 2.0, "lora": {"r": 4}}
    assert run["config"]["evaluation"] == {"prompt_budget": None, "max_steps": 5}
    assert run["config"]["critic"] == {"strategy": "rules"}


@pytest.mark.parametrize("value", ["0.5", "1700000000", "9999-12-31T23:59:59-05:00", "yesterday"])
async def test_timestamps_are_rfc3339_text_in_range(api: ApiHarness, value: str) -> None:
    _project, key, _run = await _setup(api)
    response = await api.client.get("/v1/traces", params={"until": value}, headers=key)
    assert response.status_code == 422, response.text
    assert response.json()["fields"][0]["field"] == "query.until"
    ok = await api.client.get("/v1/traces", params={"since": "2026-01-01T00:00:00+14:00"}, headers=key)
    assert ok.status_code == 200, ok.text


async def test_otlp_bodies_gzip_and_protobuf_pass_the_same_sanitiser(api: ApiHarness) -> None:
    import gzip

    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from tests.unit.test_formats_otel import TRACE_A, agent_trace, export

    project = await api.project()
    key = api.auth(await api.key(project, "ingest"))
    before = await _event_count(api)
    spans = agent_trace(TRACE_A)
    spans[1]["attributes"][3]["value"] = {"stringValue": _nested(2_000)}  # deep JSON inside a string
    body = export(*spans)
    deep_gzip = await api.client.post(
        "/v1/otlp/v1/traces",
        content=gzip.compress(json.dumps(body).encode()),
        headers={**key, "content-type": "application/json", "content-encoding": "gzip"},
    )
    assert deep_gzip.status_code == 422, deep_gzip.text
    assert "nested deeper" in deep_gzip.json()["detail"]
    # OTLP/JSON writes ids in hex, protobuf's JSON mapping reads bytes as base64: re-encode them so
    # the protobuf body carries the same 16-byte trace id (not 24 bytes of decoded hex text)
    for span in body["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        for field in ("traceId", "spanId", "parentSpanId"):
            if span.get(field):
                span[field] = base64.b64encode(bytes.fromhex(span[field])).decode()
    protobuf = ParseDict(body, ExportTraceServiceRequest()).SerializeToString()
    deep_protobuf = await api.client.post(
        "/v1/otlp/v1/traces", content=protobuf, headers={**key, "content-type": "application/x-protobuf"}
    )
    assert deep_protobuf.status_code == 422, deep_protobuf.text
    assert "nested deeper" in deep_protobuf.text
    spans = agent_trace(TRACE_A)
    spans[1]["attributes"][3]["value"] = {"stringValue": "x\ud800"}
    surrogate_gzip = await api.client.post(
        "/v1/otlp/v1/traces",
        content=gzip.compress(json.dumps(export(*spans)).encode()),
        headers={**key, "content-type": "application/json", "content-encoding": "gzip"},
    )
    assert surrogate_gzip.status_code == 422 and "surrogate" in surrogate_gzip.json()["detail"]
    assert await _event_count(api) == before


def test_api_settings_models_cover_every_worker_knob() -> None:
    """Each worker config's fields can be set at the API (and are typed there): a knob added to a
    worker without its API field would be refused at submission, one removed would be accepted
    and then fail an iteration."""
    import dataclasses

    from api import schemas
    from core.domain.mcts import SearchConfig
    from critic_service.critic import CriticConfig
    from splice_service.service import SpliceConfig
    from train_service.evaluation import EvalConfig
    from train_service.sft import LoraSettings, SFTConfig

    set_by_the_run = {"alpha", "beta", "seed"}  # SearchConfig fields RunConfig fills in itself
    for config, model, skip in (
        (SearchConfig, schemas.SearchSettings, set_by_the_run),
        (CriticConfig, schemas.CriticSettings, set()),
        (SpliceConfig, schemas.SpliceSettings, set()),
        (SFTConfig, schemas.TrainSettings, set()),
        (LoraSettings, schemas.LoraIn, set()),
        (EvalConfig, schemas.EvaluationSettings, set()),
    ):
        missing = {f.name for f in dataclasses.fields(config)} - skip - set(model.model_fields)
        assert not missing, f"{config.__name__} fields without an API field in {model.__name__}: {missing}"
        assert model.model_config.get("extra") == "forbid", model.__name__


@pytest.mark.parametrize(
    ("url", "field"),
    [
        ("/v1/traces?task_key=a%00b", "query.task_key"),
        ("/v1/traces?task_key=%ED%A0%80", "query.task_key"),  # UTF-8 of a lone surrogate
        ("/v1/pairs?task_key=x%00", "query.task_key"),
        ("/v1/runs/run%00x", "path"),
    ],
)
async def test_nul_or_surrogate_in_the_url_is_422_before_any_query(
    api: ApiHarness, url: str, field: str
) -> None:
    """Found by the schemathesis fuzz run: a NUL in a query parameter reached PostgreSQL (500)."""
    _project, key, _run = await _setup(api)
    response = await api.client.get(url, headers=key)
    assert response.status_code == 422, response.text
    assert response.json()["fields"][0]["field"] == field
