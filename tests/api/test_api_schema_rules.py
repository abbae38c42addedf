"""The OpenAPI document states the rules the server enforces (issue 26, point 6): for each rule, a
request the document refuses is a 422 naming a field, and one it admits is accepted.

Each case is checked twice: against /openapi.json itself (jsonschema, Draft 2020-12, the dialect of
OpenAPI 3.1) and against the served app."""

from __future__ import annotations

import re
import sys
from typing import Any

import jsonschema
import pytest

from api.sanitize import NUL_FREE_PATTERN, text_problem
from api.schemas.common import NON_BLANK_PATTERN
from api.schemas.run_rules import SERVED_MODEL_PATTERN
from core.domain.config import is_served_model
from tests.api.conftest import ApiHarness


def _validator(document: dict[str, Any], component: str) -> jsonschema.Draft202012Validator:
    schema = {"$ref": f"#/components/schemas/{component}", "components": document["components"]}
    return jsonschema.Draft202012Validator(schema)


def _admits(document: dict[str, Any], component: str, body: Any) -> bool:
    return _validator(document, component).is_valid(body)


RUN_CASES: list[tuple[dict[str, Any], bool]] = [
    ({"train": {"accelerate_config": "ds.yaml"}}, False),
    ({"train": {"accelerate_config": "ds.yaml", "launcher": "torchrun"}}, True),
    ({"train": {"accelerate_config": " \u3000", "launcher": "torchrun"}}, False),
    ({"train": {"nproc_per_node": 2}}, False),
    ({"train": {"nproc_per_node": 2, "launcher": "torchrun"}}, True),
    ({"train": {"launcher": "torchrun", "method": "dpo"}}, False),
    ({"train": {"launcher": "torchrun", "method": ["sft", "archer"]}}, False),
    ({"train": {"launcher": "torchrun", "method": ["sft"]}}, True),
    ({"train": {"bf16": True, "mixed_bf16": True}}, False),
    ({"train": {"bf16": True, "mixed_bf16": False}}, True),
    ({"train": {"mode": "offline"}}, False),
    ({"train": {"mode": None}}, False),
    ({"train": {"mode": "offline", "method": "archer"}}, True),
    ({"train": {"lora": None, "method": "dpo"}}, False),
    ({"train": {"beta": 0.5, "method": ["sft", "dpo"]}}, True),
    ({"train": {"transitions": {}}}, False),
    ({"train": {"transitions": {}, "method": ["sft", "archer"]}}, True),
    ({"train": {"launcher": None, "nproc_per_node": None, "method": None}}, True),  # null = default
    ({"model": "http://host:8000/v1"}, False),
    ({"model": " HTTPS://host/v1", "data_only": True}, True),
    ({"model": "http://host:8000/v1", "train": {"model_path": "weights"}}, True),
    ({"model": "http://host:8000/v1", "train": {"model_path": "\t"}}, False),
    ({"train": {"model_path": "weights"}}, False),
    ({"train": {"model_path": None}}, True),
    ({"env": "gym://x"}, False),
    ({"env": "agentgym+http://127.0.0.1:1/webshop"}, True),
    ({"tasks": ["t1", " \n"]}, False),
    ({"tasks": ["t1"]}, True),
    ({"split": "tr\u0000ain"}, False),
    ({"runtime": {"thr\u0000eads": 1}}, False),
    ({"runtime": {"torch": {"threads": [1, "x\u0000"]}}}, False),
    ({"runtime": {"torch": {"threads": [1, "x"]}, "cpu": None}}, True),
]


@pytest.mark.parametrize(("change", "admitted"), RUN_CASES, ids=[str(c) for c, _ in RUN_CASES])
async def test_run_rules_are_in_the_document(api: ApiHarness, change: dict[str, Any], admitted: bool) -> None:
    body = {"model": "m", **change}
    assert _admits(api.app.openapi(), "RunConfigIn", body) is admitted
    key = api.auth(await api.key(await api.project(), "run"))
    response = await api.client.post("/v1/runs", json=body, headers=key)
    if admitted:
        assert response.status_code == 202, response.text
    else:
        assert response.status_code == 422, response.text
        assert response.json()["fields"], response.text


async def test_a_patch_item_names_exactly_one_trace(api: ApiHarness) -> None:
    document = api.app.openapi()
    both = {"outcomes": [{"trace_id": "t1", "external_id": "e1", "outcome": "success"}]}
    neither = {"outcomes": [{"trace_id": None, "outcome": "success"}]}
    one = {"outcomes": [{"external_id": "e1", "trace_id": None, "outcome": "success"}]}
    assert not _admits(document, "TraceOutcomeBatchIn", both)
    assert not _admits(document, "TraceOutcomeBatchIn", neither)
    assert _admits(document, "TraceOutcomeBatchIn", one)
    key = api.auth(await api.key(await api.project(), "ingest"))
    for body in (both, neither):
        response = await api.client.patch("/v1/traces", json=body, headers=key)
        assert response.status_code == 422 and response.json()["fields"], response.text
    response = await api.client.patch("/v1/traces", json=one, headers=key)
    assert response.status_code == 404, response.text  # admitted: no such trace


async def test_a_trace_named_twice_in_a_patch_batch_is_set_once_or_conflicts(api: ApiHarness) -> None:
    key = api.auth(await api.key(await api.project(), "ingest", "read"))
    trace = {"id": "ext-1", "messages": [{"role": "user", "content": "Do it."}]}
    stored = await api.client.post("/v1/traces", json={"format": "openai", "traces": [trace]}, headers=key)
    assert stored.status_code == 202, stored.text
    trace_id = stored.json()["trace_ids"][0]
    conflicting = {
        "outcomes": [
            {"trace_id": trace_id, "outcome": "success"},
            {"external_id": "ext-1", "outcome": "failure"},
        ]
    }
    response = await api.client.patch("/v1/traces", json=conflicting, headers=key)
    assert response.status_code == 409, response.text  # as a second PATCH with another outcome is
    same = {
        "outcomes": [
            {"trace_id": trace_id, "outcome": "success"},
            {"external_id": "ext-1", "outcome": True},
        ]
    }
    response = await api.client.patch("/v1/traces", json=same, headers=key)
    assert response.status_code == 200, response.text
    assert [item["changed"] for item in response.json()["items"]] == [True, False]
    again = await api.client.get(f"/v1/traces/{trace_id}", headers=key)
    assert again.json()["outcome"] == "success"


async def test_otlp_json_resource_spans_is_a_list_in_the_document(api: ApiHarness) -> None:
    operation = api.app.openapi()["paths"]["/v1/otlp/v1/traces"]["post"]
    schema = operation["requestBody"]["content"]["application/json"]["schema"]
    validator = jsonschema.Draft202012Validator(schema)
    key = api.auth(await api.key(await api.project(), "ingest"))
    for body, admitted in (({"resourceSpans": None}, False), ({"resourceSpans": []}, True)):
        assert validator.is_valid(body) is admitted
        response = await api.client.post("/v1/otlp/v1/traces", json=body, headers=key)
        assert (response.status_code == 200) is admitted, response.text
        assert (response.status_code == 422) is not admitted, response.text


async def test_every_refusing_string_states_the_nul_rule_and_uploads_do_not(api: ApiHarness) -> None:
    document = api.app.openapi()
    components = document["components"]["schemas"]
    assert _admits(document, "ProjectIn", {"name": "p"})
    assert not _admits(document, "ProjectIn", {"name": "p\u0000"})
    assert not _admits(document, "TraceCriticIn", {"model": "m\u0000"})
    assert _admits(document, "TraceCriticInUpload", {"model": "m\u0000"})  # an upload keeps it as U+FFFD
    critic = components["OpenAIBatchIn"]["properties"]["critic"]["anyOf"][0]["$ref"]
    assert critic.endswith("/TraceCriticInUpload")
    for parameter in document["paths"]["/v1/traces"]["get"]["parameters"]:
        schema = parameter["schema"]
        strings = [s for s in schema.get("anyOf", [schema]) if s.get("type") == "string"]
        for string in strings:
            if "format" not in string and "enum" not in string:
                validator = jsonschema.Draft202012Validator(string)
                assert not validator.is_valid("a\u0000"), parameter["name"]
    key = api.auth(await api.key(await api.project(), "admin"))
    response = await api.client.get("/v1/traces", params={"task_key": "a\u0000"}, headers=key)
    assert response.status_code == 422 and response.json()["fields"][0]["field"] == "query.task_key"


def test_the_stated_patterns_are_the_validators_rules() -> None:
    everything = [chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]
    blank = re.compile(NON_BLANK_PATTERN)
    assert all((blank.search(f" {c} ") is None) == (not f" {c} ".strip()) for c in everything)
    nul_free = re.compile(NUL_FREE_PATTERN)
    for text in ("", "a", "a\nb\n", "\u0000", "a\u0000", "\n\u0000\n"):
        assert (nul_free.search(text) is None) == (text_problem(text) is not None), repr(text)
    served = re.compile(SERVED_MODEL_PATTERN)
    for ref in ("http://h", " HTTPS://h", "\u2003hTtP://h", "https:/h", "xhttp://h", "models/m", "ftp://h"):
        assert (served.search(ref) is not None) == is_served_model(ref), ref
