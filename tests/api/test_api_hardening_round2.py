"""Hardening, round two (issue 26): the last 500s, logs without request data, client addresses that
cannot be forged, model references held to the model roots, and the smaller headers.

In-process tests use the real app over PostgreSQL (``api`` fixture); the log and proxy tests serve
it with the very uvicorn configuration ``agentr serve`` runs (``api.server.uvicorn_config``) over TCP.
"""

from __future__ import annotations

import io
import logging
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from fastapi import Request

from api.app import create_app
from api.model_refs import OUTSIDE_ROOTS
from api.server import uvicorn_config
from core.runtime.logging import configure_logging
from core.runtime.settings import Settings
from tests.api.conftest import ADMIN_KEY, MODEL, ApiHarness, make_settings, running
from tests.api.test_api_idempotency import _stored
from tests.api.test_api_schemathesis_cli import _free_port

SECRET = "sk-live-TOPSECRET-4242"


# ------------------------------------------------------------------------------ 1. the last 500s


async def test_overlong_path_component_is_a_422_not_a_500(api: ApiHarness) -> None:
    key = api.auth(await api.key(await api.project(), "run"))
    for model in ("/tmp/" + "a" * 256, "b" * 300, "/x/" + "é" * 256):
        response = await api.client.post("/v1/runs", json={"model": model}, headers=key)
        assert response.status_code == 422, response.text
        assert response.json()["fields"][0]["field"] == "body.model"
        assert "255 characters" in response.json()["detail"]
    # 200 characters but 400 bytes: no file system holds the name; a folder that is not here
    # (refused naming it, issue 45), never `File name too long` in the handler
    response = await api.client.post("/v1/runs", json={"model": "é" * 200}, headers=key)
    assert response.status_code == 422, response.text
    assert "does not exist" in response.json()["detail"]


async def test_a_boolean_is_not_a_number(api: ApiHarness) -> None:
    """schemathesis (negative phase) sent ``"seed": false`` and got a 202: pydantic's lax mode reads
    a boolean as 0 / 1 for an integer field. A number field refuses booleans, nested ones too; a
    boolean field still takes them; nothing is stored for a refused run."""
    key = api.auth(await api.key(await api.project(), "run", "read"))
    for body, field in (
        ({"model": "m", "seed": False}, "body.seed"),
        ({"model": "m", "train": {"batch_size": True}}, "body.train.batch_size"),
        ({"model": "m", "search": {"temperature": True}}, "body.search.temperature"),
    ):
        response = await api.client.post("/v1/runs", json=body, headers=key)
        assert response.status_code == 422, (body, response.text)
        [error] = response.json()["fields"]
        assert error["field"] == field and "valid" in error["message"], error
    assert (await api.client.get("/v1/runs", headers=key)).json()["items"] == []
    accepted = await api.client.post(
        "/v1/runs", json={"model": "m", "seed": 0, "data_only": True}, headers=key
    )
    assert accepted.status_code == 202, accepted.text


async def test_integer_trace_id_is_bounded_like_its_column(api: ApiHarness) -> None:
    key = api.auth(await api.key(await api.project(), "ingest"))
    messages = [{"role": "user", "content": "Goal: x"}, {"role": "assistant", "content": "ok"}]
    for ident in (10**200, -(10**199)):  # 201 and 200+sign characters
        body = {"format": "openai", "traces": [{"id": ident, "messages": messages, "outcome": "success"}]}
        response = await api.client.post("/v1/traces", json=body, headers=key)
        assert response.status_code == 422, response.text
        assert response.json()["fields"][0]["field"].startswith("body.traces[0].id")
    fits = {"format": "openai", "traces": [{"id": 10**199, "messages": messages, "outcome": "success"}]}
    assert (await api.client.post("/v1/traces", json=fits, headers=key)).status_code == 202


async def test_json_integer_past_the_digit_bound_is_a_422_on_every_route(api: ApiHarness) -> None:
    key = api.auth(await api.key(await api.project(), "ingest"))
    huge = "9" * 4301
    otlp = '{"resourceSpans": [{"scopeSpans": [{"spans": [{"startTimeUnixNano": ' + huge + "}]}]}]}"
    for path, text in (
        ("/v1/otlp/v1/traces", otlp),
        ("/v1/traces", '{"format": "openai", "traces": [{"id": ' + huge + "}]}"),
    ):
        response = await api.client.post(
            path, content=text, headers={**key, "Content-Type": "application/json"}
        )
        assert response.status_code == 422, (path, response.text)
        assert "more than 1000 digits" in response.json()["detail"]
    # gzip-compressed OTLP/JSON is decoded by the receiver itself: the same rule there
    import gzip

    response = await api.client.post(
        "/v1/otlp/v1/traces",
        content=gzip.compress(otlp.encode()),
        headers={**key, "Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    assert response.status_code == 422, response.text


# ------------------------------------------------------------------------- 4. model roots


async def test_model_outside_the_roots_is_refused_the_same_whether_or_not_it_exists(
    pg_url: str, tmp_path: Path, model_root: Path
) -> None:
    root = tmp_path / "models"
    root.mkdir()
    shutil.copytree(model_root / MODEL, root / "tiny")  # a model folder inside the roots (it must exist)
    exists = tmp_path / "private"  # a folder outside the roots, with no chat template: today's oracle
    exists.mkdir()
    (root / "escape").symlink_to(exists, target_is_directory=True)
    async with running(make_settings(pg_url, model_roots=str(root))) as api:
        key = api.auth(await api.key(await api.project(), "run", "ingest"))
        answers = []
        for model in (str(exists), str(tmp_path / "missing"), "/root/.ssh", f"{root}/../private", "escape"):
            response = await api.client.post("/v1/runs", json={"model": model}, headers=key)
            assert response.status_code == 422, response.text
            answers.append((response.json()["fields"], response.json()["detail"]))
        assert all(answer == answers[0] for answer in answers), answers
        assert answers[0][0] == [{"field": "body.model", "message": OUTSIDE_ROOTS}]
        for train in ({"model_path": str(exists)}, {"model_path": "/etc"}):
            body = {"model": "http://127.0.0.1:9/v1#m", "train": train}
            response = await api.client.post("/v1/runs", json=body, headers=key)
            assert (
                response.status_code == 422
                and response.json()["fields"][0]["field"] == "body.train.model_path"
            )
        critic = {"strategy": "model", "model": str(exists)}
        traces = [{"messages": [{"role": "user", "content": "Goal: x"}], "outcome": "failure"}]
        response = await api.client.post(
            "/v1/traces", json={"format": "openai", "traces": traces, "critic": critic}, headers=key
        )
        assert response.status_code == 422 and response.json()["fields"][0]["field"] == "body.critic.model"

        # inside the roots: a relative name is a folder of the first root, stored as that path
        accepted = await api.client.post("/v1/runs", json={"model": "tiny"}, headers=key)
        assert accepted.status_code == 202, accepted.text
        stored = await _stored(api, "RunRequested")
        assert [event["config"]["model"] for event in stored] == [str(root / "tiny")]
        served = await api.client.post(
            "/v1/runs", json={"model": "http://127.0.0.1:9/v1#m", "data_only": True}, headers=key
        )
        assert served.status_code == 202, served.text


# ------------------------------------------------------------------ 7. /docs, /ui headers


async def test_docs_are_served_locally_with_a_csp_and_ui_sends_no_referrer(api: ApiHarness) -> None:
    page = await api.client.get("/docs")
    assert page.status_code == 200
    assert "https://" not in page.text and "<script>" not in page.text  # no CDN, no inline script
    assert "script-src 'self'" in page.headers["content-security-policy"]
    for asset in ("/docs/init.js", "/docs/assets/swagger-ui-bundle.js", "/docs/assets/swagger-ui.css"):
        response = await api.client.get(asset)
        assert response.status_code == 200, (asset, response.text[:300])
        assert response.headers["content-security-policy"] == page.headers["content-security-policy"]
    assert (await api.client.get("/docs/assets/index.html")).status_code == 404  # only the named files
    for path in ("/ui/", "/ui/static/app.js"):
        assert (await api.client.get(path)).headers["referrer-policy"] == "no-referrer"
    assert (await api.client.get("/ui", follow_redirects=False)).headers["referrer-policy"] == "no-referrer"


# -------------------------------------------------------- real uvicorn, as `agentr serve` runs it


@contextmanager
def serving(settings: Settings, app: Any | None = None) -> Iterator[str]:
    """The app served by uvicorn with ``agentr serve``'s configuration, on a free port."""
    import uvicorn

    application = app if app is not None else create_app(settings, create_tables=True)
    server = uvicorn.Server(uvicorn_config(application, settings, "127.0.0.1", _free_port()))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@contextmanager
def server_log(settings: Settings) -> Iterator[io.StringIO]:
    """The process log as ``agentr serve`` configures it, captured; the root logger restored after."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    stream = io.StringIO()
    configure_logging(settings.log_level, settings.log_json, stream, redact_exceptions=True)
    try:
        yield stream
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


def test_no_request_data_reaches_the_server_log(pg_url: str) -> None:
    settings = make_settings(pg_url)
    app = create_app(settings, create_tables=True)

    async def failing(request: Request) -> None:  # an error path whose message quotes the request
        raise ValueError(f"cannot use {(await request.body()).decode()}")

    app.add_api_route("/v1/test-failure", failing, methods=["POST"])
    with server_log(settings) as log, serving(settings, app) as base, httpx.Client(base_url=base) as client:
        failed = client.post("/v1/test-failure", content=SECRET)
        assert failed.status_code == 500 and SECRET not in failed.text
        # the kept-alive connection survives the 500: the next request on it is answered
        assert client.get("/healthz").status_code == 200
        admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
        project = client.post("/v1/projects", json={"name": "p"}, headers=admin).json()["project_id"]
        key = client.post(f"/v1/projects/{project}/keys", json={"scopes": ["run"]}, headers=admin).json()
        for model in (f"/{SECRET}/" + "a" * 300, f"/root/{SECRET}"):  # the paths of today's 500 and oracle
            response = client.post(
                "/v1/runs", json={"model": model}, headers={"Authorization": f"Bearer {key['key']}"}
            )
            assert response.status_code == 422, response.text
    text = log.getvalue()
    assert "ValueError (message withheld)" in text and "failing" in text  # where it happened is kept
    assert SECRET not in text, text[-3000:]
    assert "Exception in ASGI application" not in text  # answered and logged once, by the API


def _bad_keys(base: str, forwarded_for: list[str]) -> list[int]:
    statuses = []
    with httpx.Client(base_url=base) as client:
        for address in forwarded_for:
            response = client.get(
                "/v1/runs",
                headers={"Authorization": "Bearer agr_nope_" + "x" * 43, "X-Forwarded-For": address},
            )
            statuses.append(response.status_code)
    return statuses


def test_forwarded_for_from_localhost_does_not_bypass_the_failed_auth_limit(pg_url: str) -> None:
    spoofed = [f"203.0.113.{index}" for index in range(12)]  # a new "client" per request
    limited = make_settings(pg_url, auth_failures_per_min=1, auth_failure_burst=5)
    with serving(limited) as base:
        statuses = _bad_keys(base, spoofed)
    assert statuses[:5] == [401] * 5 and set(statuses[5:]) == {429}, statuses
    # a proxy named in AGENTR_TRUSTED_PROXIES is believed: each forwarded client has its own budget
    trusting = make_settings(
        pg_url, auth_failures_per_min=1, auth_failure_burst=5, trusted_proxies="127.0.0.1"
    )
    with serving(trusting) as base:
        assert set(_bad_keys(base, spoofed)) == {401}


def test_forwarding_is_off_by_default_in_the_serve_configuration() -> None:
    config = uvicorn_config(object(), Settings(), "127.0.0.1", 8000)
    assert config.proxy_headers is False
    trusted = uvicorn_config(object(), Settings(trusted_proxies="10.0.0.0/8, 127.0.0.1"), "127.0.0.1", 8000)
    assert trusted.proxy_headers is True and trusted.forwarded_allow_ips == ["10.0.0.0/8", "127.0.0.1"]


# ------------------------------------------------------------------ 6. the document tells the truth


async def test_event_stream_body_matches_its_documented_grammar(api: ApiHarness) -> None:
    import re

    key = api.auth(await api.key(await api.project(), "read", "run"))
    assert (await api.client.post("/v1/runs", json={"model": "m"}, headers=key)).status_code == 202
    content = api.app.openapi()["paths"]["/v1/events"]["get"]["responses"]["200"]["content"]
    schema = content["text/event-stream"]["schema"]
    assert schema["type"] == "string" and "pattern" in schema  # the SSE grammar, not any string
    body = (await api.client.get("/v1/events", params={"follow": "false"}, headers=key)).text
    assert "event: RunRequested" in body
    assert re.fullmatch(schema["pattern"], body), body[:500]
    assert not re.fullmatch(schema["pattern"], '{"not": "a stream"}')


async def test_every_422_names_a_field(api: ApiHarness) -> None:
    document = api.app.openapi()
    response = document["paths"]["/v1/runs"]["post"]["responses"]["422"]["content"]["application/json"]
    name = response["schema"]["$ref"].rsplit("/", 1)[1]
    assert document["components"]["schemas"][name]["properties"]["fields"]["minItems"] == 1
    key = api.auth(await api.key(await api.project(), "run"))
    query = {"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}
    bad = await api.client.post("/v1/datasets", json={"name": "d", "query": query}, headers=key)
    assert bad.status_code == 422, bad.text  # was a 422 with an empty `fields` list
    assert bad.json()["fields"] == [{"field": "body.query.since", "message": "must be before query.until"}]
