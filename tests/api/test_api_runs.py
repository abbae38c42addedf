"""Health, projects and keys, runs (submit, read, list, cancel), idempotency, limits and errors."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest
from sqlalchemy import select, text

from api.app import create_app
from api.schemas import RunConfigIn
from core.domain.config import RunConfig
from core.store.tables import api_keys, runs
from tests.api.conftest import ADMIN_KEY, ApiHarness, make_settings, running


async def test_health_ready_metrics_openapi(api: ApiHarness) -> None:
    assert (await api.client.get("/healthz")).json()["status"] == "ok"
    ready = await api.client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["checks"] == {"database": "ok"}
    spec = (await api.client.get("/openapi.json")).json()
    assert "/v1/runs" in spec["paths"] and "/v1/events" in spec["paths"]
    metrics = await api.client.get("/metrics")
    assert metrics.status_code == 200
    assert 'agentr_api_requests_total{method="GET",route="/readyz",status="200"} 1.0' in metrics.text


async def test_readyz_checks_redis(pg_url: str, redis_url: str) -> None:
    for url, expected in ((redis_url, 200), ("redis://127.0.0.1:1/0", 503)):
        app = create_app(make_settings(pg_url, redis_url=url), create_tables=True)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client,
        ):
            response = await client.get("/readyz")
        assert response.status_code == expected, response.text
        assert response.json()["checks"]["database"] == "ok"
        assert (response.json()["checks"]["redis"] == "ok") == (expected == 200)


async def test_keys_are_shown_once_stored_hashed_and_revocable(api: ApiHarness) -> None:
    project = await api.project("alpha")
    issued = await api.client.post(
        f"/v1/projects/{project}/keys", json={"scopes": ["read", "run"], "label": "ci"}, headers=api.admin
    )
    assert issued.status_code == 201
    body = issued.json()
    key = body["key"]
    assert key.startswith(f"agr_{body['prefix']}_") and body["scopes"] == ["read", "run"]
    async with api.store.engine.connect() as conn:
        row = (
            (await conn.execute(select(api_keys).where(api_keys.c.key_id == body["key_id"]))).mappings().one()
        )
        everything = str((await conn.execute(text("SELECT data FROM events"))).all())
    secret = key.split("_", 2)[2]
    assert secret not in str(dict(row)) and secret not in everything
    assert len(row["salt"]) == 32 and len(row["key_hash"]) == 64
    listed = (await api.client.get(f"/v1/projects/{project}/keys", headers=api.admin)).json()
    assert [k["key_id"] for k in listed] == [body["key_id"]] and "key" not in listed[0]
    assert (await api.client.get("/v1/runs", headers=api.auth(key))).status_code == 200
    # the same prefix with another secret is rejected
    forged = f"agr_{body['prefix']}_{'A' * 43}"
    assert (await api.client.get("/v1/runs", headers=api.auth(forged))).status_code == 401
    revoked = await api.client.post(f"/v1/projects/{project}/keys/{body['key_id']}/revoke", headers=api.admin)
    assert revoked.status_code == 200 and revoked.json()["revoked"] is True
    assert (await api.client.get("/v1/runs", headers=api.auth(key))).status_code == 401
    # a project admin key manages its own project's keys, but creates no projects
    admin_key = await api.key(project, "admin")
    own = await api.client.post(
        f"/v1/projects/{project}/keys", json={"scopes": ["read"]}, headers=api.auth(admin_key)
    )
    assert own.status_code == 201
    assert (
        await api.client.post("/v1/projects", json={"name": "x"}, headers=api.auth(admin_key))
    ).status_code == 403
    assert (await api.client.get(f"/v1/projects/{project}", headers=api.auth(admin_key))).json()[
        "name"
    ] == "alpha"


async def test_submit_read_list_and_cancel_runs(api: ApiHarness) -> None:
    project = await api.project()
    key = api.auth(await api.key(project, "read", "run"))
    submitted = await api.client.post(
        "/v1/runs",
        json={"model": "tiny", "tasks": ["1", "2"], "iterations": 2, "search": {"n_candidates": 2}},
        headers=key,
    )
    assert submitted.status_code == 202, submitted.text
    run_id = submitted.json()["run_id"]
    run = (await api.client.get(f"/v1/runs/{run_id}", headers=key)).json()
    assert run["status"] == "requested" and run["project_id"] == project and run["iterations"] == []
    config = RunConfig.from_data(run["config"])
    assert config.tasks == ("1", "2") and config.iterations == 2 and config.search == {"n_candidates": 2}
    assert config.alpha_schedule == (0.5, 0.7, 1.0) and config.critic == {"strategy": "first"}

    cancelled = await api.client.post(f"/v1/runs/{run_id}/cancel", json={"reason": "enough"}, headers=key)
    assert cancelled.status_code == 202
    run = (await api.client.get(f"/v1/runs/{run_id}", headers=key)).json()
    assert run["status"] == "cancelled" and run["reason"] == "enough"
    again = await api.client.post(f"/v1/runs/{run_id}/cancel", headers=key)
    assert again.status_code == 409 and "already cancelled" in again.json()["detail"]


async def test_run_list_pagination_is_complete_and_ordered(api: ApiHarness) -> None:
    project = await api.project()
    key = api.auth(await api.key(project, "read", "run"))
    created = []
    for index in range(7):
        response = await api.client.post("/v1/runs", json={"model": f"m{index}"}, headers=key)
        created.append(response.json()["run_id"])
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params = {"limit": 3} | ({"cursor": cursor} if cursor else {})
        page = (await api.client.get("/v1/runs", params=params, headers=key)).json()
        seen.extend(item["run_id"] for item in page["items"])
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == 3
    assert seen == list(reversed(created))  # newest first, nothing twice, nothing lost
    bad = await api.client.get("/v1/runs", params={"cursor": "not-a-cursor"}, headers=key)
    assert bad.status_code == 422 and bad.json()["fields"][0]["field"] == "query.cursor"


async def test_validation_errors_name_the_field(api: ApiHarness) -> None:
    project = await api.project()
    key = api.auth(await api.key(project, "run"))
    cases = {
        "body.search.max_depth": {"model": "m", "search": {"max_depth": 0}},
        "body.alpha_schedule[1]": {"model": "m", "alpha_schedule": [0.5, 1.5]},
        "body.model": {},
        "body.colour": {"model": "m", "colour": "blue"},
        "body.critic.strategy": {"model": "m", "critic": {"strategy": "vibes"}},
    }
    for field, body in cases.items():
        response = await api.client.post("/v1/runs", json=body, headers=key)
        assert response.status_code == 422, (field, response.text)
        payload = response.json()
        assert payload["error"] == "validation_error"
        assert field in [f["field"] for f in payload["fields"]], (field, payload)
        assert field.removeprefix("body.").split(".")[0] in payload["detail"]
    not_json = await api.client.post(
        "/v1/runs", content=b"{nope", headers={**key, "content-type": "application/json"}
    )
    assert not_json.status_code == 422 and "Traceback" not in not_json.text


async def test_idempotency_key_replays_the_first_response(api: ApiHarness) -> None:
    project = await api.project()
    key = api.auth(await api.key(project, "read", "run", "admin"))
    headers = {**key, "Idempotency-Key": "submit-1"}
    body = {"model": "m", "tasks": ["5"]}
    first, second = await asyncio.gather(
        api.client.post("/v1/runs", json=body, headers=headers),
        api.client.post("/v1/runs", json=body, headers=headers),
    )
    third = await api.client.post("/v1/runs", json=body, headers=headers)
    assert first.status_code == second.status_code == third.status_code == 202
    assert first.json() == second.json() == third.json()
    assert third.headers.get("Idempotent-Replayed") == "true"
    async with api.store.engine.connect() as conn:
        count = await conn.scalar(select(text("count(*)")).select_from(runs))
    assert count == 1
    changed = await api.client.post("/v1/runs", json={"model": "other"}, headers=headers)
    assert changed.status_code == 422 and changed.json()["fields"][0]["field"] == "header.Idempotency-Key"
    # another project may use the same key text independently
    other = api.auth(await api.key(await api.project("b"), "run"))
    assert (
        await api.client.post("/v1/runs", json=body, headers={**other, "Idempotency-Key": "submit-1"})
    ).json()["run_id"] != first.json()["run_id"]
    # key issuance never stores the secret: a replay names the key instead
    issue_headers = {**key, "Idempotency-Key": "key-1"}
    issued = await api.client.post(
        f"/v1/projects/{project}/keys", json={"scopes": ["read"]}, headers=issue_headers
    )
    replay = await api.client.post(
        f"/v1/projects/{project}/keys", json={"scopes": ["read"]}, headers=issue_headers
    )
    assert issued.status_code == 201 and replay.status_code == 409
    assert issued.json()["key_id"] in replay.json()["detail"] and issued.json()["key"] not in replay.text


async def test_body_limit_answers_413(pg_url: str) -> None:
    async with running(make_settings(pg_url, max_body_bytes=2048)) as harness:
        client = harness.client
        headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
        big = await client.post("/v1/projects", json={"name": "x" * 5000}, headers=headers)
        assert big.status_code == 413 and big.json()["error"] == "payload_too_large"

        async def chunks():  # no Content-Length: the limit applies to what is actually sent
            for _ in range(10):
                yield b" " * 1024

        streamed = await client.post(
            "/v1/projects", content=chunks(), headers={**headers, "content-type": "application/json"}
        )
        assert streamed.status_code == 413
        small = await client.post("/v1/projects", json={"name": "ok"}, headers=headers)
        assert small.status_code == 201


async def test_unexpected_errors_are_500_without_stack_trace_and_logged(
    api: ApiHarness, caplog: pytest.LogCaptureFixture
) -> None:
    project = await api.project()
    key = await api.key(project, "read")
    async with api.store.engine.begin() as conn:  # a real failure: the read model vanished
        await conn.execute(text("DROP TABLE runs"))
    with caplog.at_level(logging.INFO):
        response = await api.client.get("/v1/runs", headers=api.auth(key))
    assert response.status_code == 500
    body = response.json()
    assert body["error"] == "internal_error" and body["request_id"] == response.headers["x-request-id"]
    assert "Traceback" not in response.text and "runs" not in body["detail"]
    # logged with where it happened and what type, but no message (it may quote SQL and content)
    errors = [r.getMessage() for r in caplog.records if r.name == "agentr.api" and r.levelno >= logging.ERROR]
    assert errors and "ProgrammingError" in errors[-1] and 'File "' in errors[-1]
    assert "DROP" not in errors[-1] and "SELECT" not in errors[-1]
    # the access log says what happened without the key
    access = [r for r in caplog.records if r.name == "agentr.api.access"]
    assert access and access[-1].status == 500 and access[-1].route == "/v1/runs"
    assert all(key not in r.getMessage() and key not in str(r.__dict__) for r in caplog.records)
    assert access[-1].key_prefix == key.split("_")[1]


def test_run_config_mirror_matches_the_domain_dataclass() -> None:
    import dataclasses

    domain = {f.name: f for f in dataclasses.fields(RunConfig)}
    assert set(RunConfigIn.model_fields) == set(domain)
    built = RunConfigIn(model="m").to_domain()
    for name, f in domain.items():
        if name == "model":  # required over HTTP
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        assert getattr(built, name) == default, name


async def test_embedded_sqlite_serves_the_same_api(sqlite_url: str) -> None:
    async with running(make_settings(sqlite_url)) as harness:
        project = await harness.project()
        key = harness.auth(await harness.key(project, "read", "run"))
        run_id = (await harness.client.post("/v1/runs", json={"model": "m"}, headers=key)).json()["run_id"]
        assert (await harness.client.get(f"/v1/runs/{run_id}", headers=key)).json()["status"] == "requested"
        newer = (await harness.client.post("/v1/runs", json={"model": "m2"}, headers=key)).json()["run_id"]
        page = (await harness.client.get("/v1/runs", params={"limit": 1}, headers=key)).json()
        assert [r["run_id"] for r in page["items"]] == [newer]
        params = {"limit": 1, "cursor": page["next_cursor"]}
        page = (await harness.client.get("/v1/runs", params=params, headers=key)).json()
        assert [r["run_id"] for r in page["items"]] == [run_id] and page["next_cursor"] is None
        stream = await harness.client.get("/v1/events", params={"follow": "false"}, headers=key)
        assert "RunRequested" in stream.text
        assert (await harness.client.get("/readyz")).json()["checks"] == {"database": "ok"}
