"""The capture proxy under hostile or unlucky input (issue #44): no call stops recording for anyone,
no lone surrogate makes a 500, every call spends its key's rate budget and is logged with its
project, a 502 reveals nothing of the upstream's URL, and the routes document what they answer.

The API (and the standalone proxy app) run in-process over a fresh PostgreSQL database; the upstream
is a real HTTP server on 127.0.0.1 answering OpenAI-shaped responses (tests/api/proxy_upstream.py).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from api.app import create_app
from api.proxy.app import create_proxy_app
from api.proxy.recorder import CallRecord, Recorder, RecorderMetrics, StoreSink
from api.proxy.routes import ProxyRuntime, load_proxy_settings
from api.sanitize import NUL_REPLACEMENT
from core.domain.events import ModelCallRecorded, TraceIngested
from core.domain.ids import new_id, trace_stream
from core.store.sql import SqlEventStore
from tests.api.conftest import ApiHarness, make_settings
from tests.api.proxy_upstream import Upstream, upstream
from tests.support import free_port

CHAT = "/v1/proxy/openai/v1/chat/completions"
MODELS = "/v1/proxy/openai/v1/models"


@asynccontextmanager
async def proxied_api(
    pg_url: str, spool: Path, upstream_url: str, **settings: Any
) -> AsyncIterator[ApiHarness]:
    """The API with the capture proxy in front of ``upstream_url``, lifespan started."""
    app = create_app(
        make_settings(pg_url, **settings),
        create_tables=True,
        proxy_settings=load_proxy_settings(upstream_url=upstream_url, spool_dir=spool),
    )
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://agentr.test", timeout=30) as client,
    ):
        yield ApiHarness(client=client, store=app.state.services.store, app=app)


@pytest.fixture
def up() -> Any:
    with upstream() as served:
        yield served


async def _ingest_key(api: ApiHarness, name: str) -> str:
    return await api.key(await api.project(name), "ingest", "read")


def _runtime(api: ApiHarness) -> ProxyRuntime:
    return api.app.state.proxy  # type: ignore[no-any-return]


async def _calls(store: SqlEventStore, trace_id: str) -> list[ModelCallRecorded]:
    return [
        r.event
        for r in await store.read_stream(trace_stream(trace_id))
        if isinstance(r.event, ModelCallRecorded)
    ]


def _metric(text: str, name: str, labels: str = "") -> float:
    """A sample's value in Prometheus text (0 when absent)."""
    for line in text.splitlines():
        if line.startswith(f"{name}{labels} ") or (not labels and line.startswith(f"{name} ")):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


# ---------------------------------------------------------------------------- item 2: poisoned calls


async def test_calls_holding_nul_or_nan_are_stored_cleaned_and_others_keep_being_recorded(
    pg_url: str, tmp_path: Path, up: Upstream
) -> None:
    async with proxied_api(pg_url, tmp_path / "spool", up.url) as api:
        a = api.auth(await _ingest_key(api, "a"))
        b = api.auth(await _ingest_key(api, "b"))
        # a NUL and a NaN in a body sent as text/plain: no sanitiser reads it, the upstream does
        poisoned = (
            b'{"model": "m", "temperature": NaN, "messages": [{"role": "user", "content": "a\\u0000b"}]}'
        )
        first = await api.client.post(CHAT, content=poisoned, headers=a | {"content-type": "text/plain"})
        assert first.status_code == 200, first.text
        # an upstream answer holding a NUL, plain and streamed
        up.answer = "bad\x00answer"
        second = await api.client.post(CHAT, json={"messages": [{"role": "user", "content": "x"}]}, headers=a)
        streamed = await api.client.post(
            CHAT, json={"messages": [{"role": "user", "content": "y"}], "stream": True}, headers=a
        )
        assert second.status_code == streamed.status_code == 200
        assert "data: [DONE]" in streamed.text
        up.answer = "fine"
        later = [
            await api.client.post(CHAT, json={"messages": [{"role": "user", "content": f"b{i}"}]}, headers=b)
            for i in range(3)
        ]
        assert [r.status_code for r in later] == [200, 200, 200]
        recorder = _runtime(api).recorder
        await recorder.flush(timeout_s=30)  # before the fix: TimeoutError, the first record retried forever
        assert recorder.set_aside == 0

        for response in later:  # the other project's calls are stored
            assert len(await _calls(api.store, response.headers["x-agentr-trace-id"])) == 1
        (call,) = await _calls(api.store, first.headers["x-agentr-trace-id"])
        assert call.request["messages"][0]["content"] == f"a{NUL_REPLACEMENT}b"
        assert call.request["temperature"] is None
        assert call.trajectory is not None
        notes = call.trajectory.provenance["notes"]
        assert any("request.messages[0].content" in n and "request.temperature" in n for n in notes), notes
        for response in (second, streamed):
            (call,) = await _calls(api.store, response.headers["x-agentr-trace-id"])
            assert call.response["choices"][0]["message"]["content"] == f"bad{NUL_REPLACEMENT}answer"
            ingested = [
                r.event
                for r in await api.store.read_stream(trace_stream(response.headers["x-agentr-trace-id"]))
                if isinstance(r.event, TraceIngested)
            ]
            assert ingested and "response.choices[0].message.content" in " ".join(
                ingested[0].trajectory.provenance["notes"]
            )
        # the trace reads back through the API with the replacement in it
        trace = await api.client.get(f"/v1/traces/{first.headers['x-agentr-trace-id']}", headers=a)
        assert trace.status_code == 200 and NUL_REPLACEMENT in trace.text
        metrics = (await api.client.get("/metrics")).text
        assert _metric(metrics, "agentr_proxy_calls_cleaned_total") == 3


def _record(project_id: str, content: str, external_id: str | None = None) -> CallRecord:
    return CallRecord(
        project_id=project_id,
        trace_id=new_id(),
        call_id=new_id(),
        external_id=external_id,
        task_key=None,
        body={"model": "m", "messages": [{"role": "user", "content": content}]},
        response={
            "object": "chat.completion",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
            ],
        },
        stream=False,
        latency_ms=1.0,
        messages_from=0,
        extends=True,
    )


async def test_an_unstorable_record_is_set_aside_counted_and_not_retried_after_a_restart(
    pg_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with proxied_api(pg_url, tmp_path / "api-spool", "http://127.0.0.1:9/v1") as api:
        store = api.store
        spool = tmp_path / "spool"
        # What processes left in the spool while the store was down, in order: a file no version can
        # read; a record the database refuses for its data (whatever its origin; here a project id
        # longer than its column: SQLSTATE 22001); a call an earlier version spooled uncleaned (a NUL);
        # then good calls of another project.
        (spool / "0000-not-a-record.json").parent.mkdir(parents=True)
        (spool / "0000-not-a-record.json").write_text("{not json")
        earlier = Recorder(StoreSink(store), spool)  # never started: close() spools its queue
        earlier.submit(_record("p" * 40, "poison"))
        await earlier.close()
        old = _record("project-a", "nul \x00 here")
        (spool / f"00000000000000000001-000000000001-{old.call_id}.json").write_text(
            json.dumps(dataclasses.asdict(old), ensure_ascii=False)
        )
        later = Recorder(StoreSink(store), spool)
        good = [_record("project-b", f"good {i}") for i in range(3)]
        for record in good:
            later.submit(record)
        await later.close()
        assert len(list(spool.glob("*.json"))) == 6

        registry = CollectorRegistry()
        caplog.set_level(logging.ERROR, logger="agentr.proxy")
        restarted = Recorder(StoreSink(store), spool, metrics=RecorderMetrics.on(registry), retry_s=0.05)
        assert restarted.pending == 6
        restarted.start()
        try:
            await restarted.flush(timeout_s=30)  # before the fix: TimeoutError, the poison retried forever
        finally:
            await restarted.close()
        for record in good:
            assert len(await _calls(store, record.trace_id)) == 1
        (cleaned,) = await _calls(store, old.trace_id)
        assert cleaned.request["messages"][0]["content"] == f"nul {NUL_REPLACEMENT} here"
        assert restarted.stored == 4 and restarted.set_aside == 2
        aside = sorted(p.name for p in (spool / "unstorable").glob("*.json"))
        assert len(aside) == 2 and aside[0] == "0000-not-a-record.json"
        assert registry.get_sample_value("agentr_proxy_calls_set_aside_total", {"reason": "unstorable"}) == 1
        assert registry.get_sample_value("agentr_proxy_calls_set_aside_total", {"reason": "unreadable"}) == 1
        logged = [r.getMessage() for r in caplog.records if "set aside" in r.getMessage()]
        assert any("SQLSTATE 22001" in line for line in logged), logged
        # the set-aside file is the record as spooled: fixable, then movable back into the spool
        kept = json.loads((spool / "unstorable" / aside[1]).read_text())
        assert kept["project_id"] == "p" * 40

        again = Recorder(StoreSink(store), spool)  # another restart: nothing left to retry
        assert again.pending == 0 and not list(spool.glob("*.json"))
        await again.close()


async def test_an_over_long_trace_header_is_refused_before_forwarding(
    pg_url: str, tmp_path: Path, up: Upstream
) -> None:
    async with proxied_api(pg_url, tmp_path / "spool", up.url) as api:
        a = api.auth(await _ingest_key(api, "a"))
        body = {"messages": [{"role": "user", "content": "hi"}]}
        for header, value in (("X-Agentr-Trace-Id", "t" * 201), ("X-Agentr-Task", "k" * 1001)):
            refused = await api.client.post(CHAT, json=body, headers=a | {header: value})
            assert refused.status_code == 422, refused.text
            assert refused.json()["fields"][0]["field"] == f"header.{header}"
        assert up.calls == 0
        kept = await api.client.post(CHAT, json=body, headers=a | {"X-Agentr-Trace-Id": "t" * 200})
        assert kept.status_code == 200
        await _runtime(api).recorder.flush(timeout_s=30)
        assert len(await _calls(api.store, kept.headers["x-agentr-trace-id"])) == 1


# ---------------------------------------------------------------------------- item 3: lone surrogates


async def test_a_lone_surrogate_is_a_422_naming_the_field_never_a_500(
    pg_url: str, tmp_path: Path, up: Upstream
) -> None:
    deep = "[" * 100 + "]" * 100
    tool_call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": deep}}
    bodies = {
        b'{"messages": [{"role": "user", "content": "\\ud800"}]}': "body.messages[0].content",
        b'{"messages": [{"role": "user", "content": "ok", "\\udfff": 1}]}': "body.messages[0]",
        # nesting past the API's limit, inline or as JSON inside a string (tool-call arguments),
        # or past what the parser itself can take
        json.dumps({"messages": [{"role": "user", "content": json.loads(deep)}]}).encode(): (
            "body.messages[0].content" + "[0]" * 61
        ),
        json.dumps({"messages": [{"role": "assistant", "tool_calls": [tool_call]}]}).encode(): (
            "body.messages[0].tool_calls[0].function.arguments" + "[0]" * 58
        ),
        b'{"messages": ' + b"[" * 5000 + b"]" * 5000 + b"}": "body",
    }
    async with proxied_api(pg_url, tmp_path / "spool", up.url) as api:
        a = api.auth(await _ingest_key(api, "a"))
        for raw, field in bodies.items():
            answer = await api.client.post(CHAT, content=raw, headers=a | {"content-type": "text/plain"})
            assert answer.status_code == 422, answer.text
            assert answer.json()["fields"][0]["field"] == field
            assert any(w in answer.json()["fields"][0]["message"] for w in ("surrogate", "nested deeper"))
        # a surrogate PAIR written as two escapes is one character: forwarded and recorded
        pair = b'{"messages": [{"role": "user", "content": "\\ud83d\\ude00"}]}'
        kept = await api.client.post(CHAT, content=pair, headers=a | {"content-type": "text/plain"})
        assert kept.status_code == 200
        await _runtime(api).recorder.flush(timeout_s=30)
        (call,) = await _calls(api.store, kept.headers["x-agentr-trace-id"])
        assert call.request["messages"][0]["content"] == "\U0001f600"
        assert up.calls == 1

        # the standalone proxy (no JSON sanitiser at all) answers the same, for application/json too
        settings = make_settings(pg_url)
        app = create_proxy_app(settings, load_proxy_settings(upstream_url=up.url, spool_dir=tmp_path / "s2"))
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://proxy.test") as client,
        ):
            for raw, field in bodies.items():
                answer = await client.post(
                    CHAT, content=raw, headers=a | {"content-type": "application/json"}
                )
                assert answer.status_code == 422, answer.text
                assert answer.json()["fields"][0]["field"] == field
    assert up.calls == 1


# ---------------------------------------------------------------------------- item 4: rate limit, log


async def test_every_proxied_call_spends_the_key_budget_and_is_logged_with_its_project(
    pg_url: str, tmp_path: Path, up: Upstream, caplog: pytest.LogCaptureFixture
) -> None:
    # one token back per 1000 s: the budget is the burst, however long the test takes
    limits = {"key_requests_per_s": 0.001, "key_request_burst": 3}
    async with proxied_api(pg_url, tmp_path / "spool", up.url, **limits) as api:
        project = await api.project("a")
        key = await api.key(project, "ingest")
        caplog.set_level(logging.INFO, logger="agentr.api.access")
        statuses = []
        for i in range(6):  # after the first, the key comes from the proxy's auth cache
            answer = await api.client.post(
                CHAT, json={"messages": [{"role": "user", "content": f"hi {i}"}]}, headers=api.auth(key)
            )
            statuses.append(answer.status_code)
            if answer.status_code == 429:
                assert int(answer.headers["retry-after"]) >= 1
                assert answer.json()["error"] == "rate_limited"
        assert statuses == [200, 200, 200, 429, 429, 429]
        assert up.calls == 3
        models = await api.client.get(MODELS, headers=api.auth(key))
        assert models.status_code == 429
        served = [r for r in caplog.records if getattr(r, "route", "") == CHAT]
        assert len(served) == 6
        assert {getattr(r, "project_id", None) for r in served} == {project}


# ---------------------------------------------------------------------------- item 9: the 502


async def test_an_unreachable_upstream_is_a_502_that_reveals_nothing_of_its_url(
    pg_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()  # nothing listens there
    secret_url = f"http://agent:s3cret-pw@127.0.0.1:{port}/v1?api_key=s3cret-q"
    async with proxied_api(pg_url, tmp_path / "spool", secret_url) as api:
        a = api.auth(await _ingest_key(api, "a"))
        caplog.set_level(logging.WARNING, logger="agentr.proxy")
        answers = [
            await api.client.post(CHAT, json={"messages": [{"role": "user", "content": "hi"}]}, headers=a),
            await api.client.post(
                CHAT, json={"messages": [{"role": "user", "content": "hi"}], "stream": True}, headers=a
            ),
            await api.client.get(MODELS, headers=a),
        ]
        for answer in answers:
            assert answer.status_code == 502, answer.text
            body = answer.json()
            assert body["error"] == "bad_gateway"
            for secret in ("s3cret", str(port), "127.0.0.1", "agent:", "api_key", "Connect"):
                assert secret not in answer.text
            assert body["request_id"] == answer.headers["x-request-id"]
            assert body["request_id"] in body["detail"]
        logged = [r.getMessage() for r in caplog.records if "did not answer" in r.getMessage()]
        assert len(logged) == 3
        for line, answer in zip(logged, answers, strict=True):
            assert "s3cret" not in line
            assert f"***@127.0.0.1:{port}/v1" in line and answer.headers["x-request-id"] in line


# ---------------------------------------------------------------------------- item 10: the document


async def test_the_proxy_routes_document_what_they_answer(pg_url: str, tmp_path: Path, up: Upstream) -> None:
    async with proxied_api(pg_url, tmp_path / "spool", up.url) as api:
        document = (await api.client.get("/openapi.json")).json()
    chat = document["paths"][CHAT]["post"]
    models = document["paths"][MODELS]["get"]
    for operation in (chat, models):
        for status in ("200", "401", "403", "422", "429", "502", "4XX", "5XX"):
            assert status in operation["responses"], status
        assert "UpstreamBody" in json.dumps(operation["responses"]["429"])
        assert "ErrorBody" in json.dumps(operation["responses"]["429"])
    assert set(chat["responses"]["200"]["content"]) == {"application/json", "text/event-stream"}
    assert "X-Agentr-Trace-Id" in chat["responses"]["200"]["headers"]
    schema = chat["requestBody"]["content"]["application/json"]["schema"]
    assert schema["required"] == ["messages"]
    headers = {p["name"]: p for p in chat["parameters"] if p["in"] == "header"}
    assert headers["X-Agentr-Trace-Id"]["schema"]["anyOf"][0]["maxLength"] == 200
    assert headers["X-Agentr-Task"]["schema"]["anyOf"][0]["maxLength"] == 1000
