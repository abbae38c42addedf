"""The OpenAPI document says what the server does (issue 18, point 7).

Cursor format and bounds, RunConfig bounds, the per-format trace shapes as a discriminated union,
the SSE route as text/event-stream only, and 405 answers whose ``Allow`` lists every documented
method of the path (Starlette named only the first matching route's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from core.runtime.settings import Settings


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return create_app(Settings(admin_key="unused-admin-key-0123456789")).openapi()


def _schema(document: dict[str, Any], ref_or_schema: dict[str, Any]) -> dict[str, Any]:
    ref = ref_or_schema.get("$ref")
    if ref is None:
        return ref_or_schema
    return dict(document["components"]["schemas"][ref.rsplit("/", 1)[1]])


def test_cursors_and_run_bounds_are_described(document: dict[str, Any]) -> None:
    for path in (
        "/v1/runs",
        "/v1/runs/{run_id}/trees",
        "/v1/runs/{run_id}/pairs",
        "/v1/runs/{run_id}/samples",
    ):
        cursor = next(p for p in document["paths"][path]["get"]["parameters"] if p["name"] == "cursor")
        string = next(s for s in cursor["schema"]["anyOf"] if s.get("type") == "string")
        assert string["pattern"] == "^[A-Za-z0-9_-]{1,500}$" and string["maxLength"] == 500, path
        assert "base64" in cursor["description"]
    run = document["components"]["schemas"]["RunConfigIn"]["properties"]
    assert run["alpha_schedule"]["items"] == {"type": "number", "minimum": 0.0, "maximum": 1.0}
    max_tasks = next(s for s in run["max_tasks"]["anyOf"] if s.get("type") == "integer")
    assert max_tasks["maximum"] == 1_000_000
    for name in ("train", "evaluation", "search", "critic", "splice"):
        sub = _schema(document, run[name])
        assert sub.get("additionalProperties") is False, name


def test_trace_batches_are_a_discriminated_union_of_format_shapes(document: dict[str, Any]) -> None:
    body = document["paths"]["/v1/traces"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["discriminator"]["propertyName"] == "format"
    mapping = body["discriminator"]["mapping"]
    assert {"openai", "otel", "sharegpt"} <= set(mapping)
    openai = document["components"]["schemas"][mapping["openai"].rsplit("/", 1)[1]]
    trace = _schema(document, openai["properties"]["traces"]["items"])
    assert "messages" in trace["required"]
    trace_id = next(s for s in trace["properties"]["id"]["anyOf"] if s.get("type") == "string")
    assert trace_id["maxLength"] == 200


def test_event_stream_is_documented_as_text_event_stream(document: dict[str, Any]) -> None:
    content = document["paths"]["/v1/events"]["get"]["responses"]["200"]["content"]
    assert list(content) == ["text/event-stream"]


def test_405_allow_lists_every_documented_method(document: dict[str, Any], tmp_path: Path) -> None:
    app = create_app(Settings(admin_key="unused-admin-key-0123456789", home=tmp_path))
    with TestClient(app) as client:
        for path, concrete in (
            ("/v1/runs", "/v1/runs"),
            ("/v1/traces", "/v1/traces"),
            ("/v1/traces/{trace_id}", "/v1/traces/t1"),
            ("/v1/projects/{project_id}/keys", "/v1/projects/p1/keys"),
        ):
            documented = {m.upper() for m in document["paths"][path]}
            for method in ("OPTIONS", "PUT", "DELETE"):
                if method in documented:
                    continue
                response = client.request(method, concrete)
                assert response.status_code == 405, (method, concrete)
                allowed = {m.strip() for m in response.headers["allow"].split(",")}
                assert allowed - {"HEAD"} == documented, (method, concrete, allowed)
