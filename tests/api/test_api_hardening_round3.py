"""Hardening, round three (issue 44), the API items: integers too long for Python inside JSON text,
UI asset names too long for the file system, follow streams of revoked keys and their cost, the
failed-auth limit behind one NAT address, client text in the log, and what the OpenAPI schema and
the 422s tell.

In-process tests use the real app over PostgreSQL (``api`` fixture); the log tests serve it with
the very uvicorn configuration ``agentr serve`` runs over TCP.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import jsonschema
import sqlalchemy as sa
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from api.keys import generate_key
from api.routes.events import ADMIN_ONLY
from core.runtime.logging import configure_logging
from core.store import migrate
from core.store.factory import open_store
from core.store.queries.events import page_query
from tests.api.conftest import ADMIN_KEY, ApiHarness, make_settings, running
from tests.api.seed import mark_dataset_ready, seed_search
from tests.api.test_api_hardening_round2 import server_log, serving
from tests.conftest import pg_database

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


async def test_a_declared_length_of_more_digits_than_int_reads_is_a_413(api: ApiHarness) -> None:
    key = api.auth(await api.key(await api.project(), "ingest"))
    response = await api.client.post(
        "/v1/traces",
        content=b"{}",
        headers={**key, "Content-Type": "application/json", "Content-Length": HUGE},
    )
    assert response.status_code == 413, response.text


async def test_ui_asset_name_too_long_for_the_file_system_is_a_404(api: ApiHarness) -> None:
    for name in ("a" * 256 + ".js", "b" * 5000 + ".css", "pages/" + "c" * 300 + ".js"):
        response = await api.client.get(f"/ui/static/{name}")
        assert response.status_code == 404, (name[:20], response.text)
        assert len(response.json()["detail"]) < 120
    assert (await api.client.get("/ui/static/pages/runs.js")).status_code == 200


# ------------------------------------------------------------------ 5. revoked keys' open streams


def _admin() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_KEY}"}


def _setup_over_http(client: httpx.Client, *scopes: tuple[str, ...]) -> tuple[str, list[dict[str, Any]]]:
    project = client.post("/v1/projects", json={"name": "p"}, headers=_admin()).json()["project_id"]
    keys = [
        client.post(f"/v1/projects/{project}/keys", json={"scopes": list(s)}, headers=_admin()).json()
        for s in scopes
    ]
    return project, keys


def _ingest(client: httpx.Client, key: str, name: str) -> str:
    trace = {
        "id": name,
        "outcome": "success",
        "messages": [{"role": "user", "content": f"Goal: {name}"}, {"role": "assistant", "content": "ok"}],
    }
    response = client.post(
        "/v1/traces", json={"format": "openai", "traces": [trace]}, headers={"Authorization": f"Bearer {key}"}
    )
    assert response.status_code == 202, response.text
    return str(response.json()["trace_ids"][0])


class _Follower:
    """A client holding GET /v1/events?follow=true open on its own socket, read in a thread (a
    socket, not httpx, so ``close`` ends the connection at once, even while a read waits)."""

    def __init__(self, base: str, key: str) -> None:
        host, port = base.removeprefix("http://").split(":")
        self._sock = socket.create_connection((host, int(port)), timeout=60)
        request = (
            f"GET /v1/events?follow=true HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
            "Connection: close\r\n\r\n"
        )
        self._sock.sendall(request.encode())
        self._raw = b""
        self.opened = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with contextlib.suppress(OSError):
            while chunk := self._sock.recv(65536):
                self._raw += chunk
                if b"\r\n\r\n" in self._raw:
                    self.opened.set()
        self.opened.set()

    @property
    def status(self) -> int:
        return int(self._raw.split(b" ", 2)[1])

    @property
    def lines(self) -> list[str]:
        """The body read so far (chunked transfer decoded), line by line."""
        body, out = self._raw.partition(b"\r\n\r\n")[2], b""
        while b"\r\n" in body:
            size_text, _, rest = body.partition(b"\r\n")
            size = int(size_text, 16)
            if size == 0 or len(rest) < size + 2:
                break
            out, body = out + rest[:size], rest[size + 2 :]
        return out.decode().split("\n")

    def wait_for(self, text: str) -> None:
        deadline = time.monotonic() + 30
        while not any(text in line for line in self.lines):
            assert time.monotonic() < deadline, f"{text!r} never arrived: {self.lines[-5:]}"
            time.sleep(0.05)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self.thread.join(timeout=30)


@contextmanager
def _following(base: str, *keys: str) -> Iterator[list[_Follower]]:
    """Followers for ``keys``, each closed at the end however the test ends."""
    followers = [_Follower(base, key) for key in keys]
    try:
        yield followers
    finally:
        for follower in followers:
            follower.close()


def test_a_revoked_keys_open_follow_stream_ends_and_gets_no_later_event(pg_url: str) -> None:
    with serving(make_settings(pg_url)) as base, httpx.Client(base_url=base) as client:
        project, (reader, ingester) = _setup_over_http(client, ("read",), ("ingest",))
        with _following(base, reader["key"]) as (follower,):
            before = _ingest(client, ingester["key"], "before")
            follower.wait_for(before)
            revoked = client.post(f"/v1/projects/{project}/keys/{reader['key_id']}/revoke", headers=_admin())
            assert revoked.status_code == 200, revoked.text
            after = [_ingest(client, ingester["key"], f"after-{n}") for n in range(3)]
            follower.thread.join(timeout=30)
            assert not follower.thread.is_alive(), "the stream of a revoked key stayed open"
            assert follower.lines[-3:] == [": key revoked", "", ""], follower.lines[-4:]
            assert not [t for t in after if any(t in line for line in follower.lines)]
        # and the key opens no new stream
        again = client.get(
            "/v1/events", params={"follow": "true"}, headers={"Authorization": f"Bearer {reader['key']}"}
        )
        assert again.status_code == 401


# --------------------------------------------- 6. the event stream's index; follow streams per key


async def _seed_other_projects(url: str, rows: int) -> None:
    store = await open_store(url, create_tables=False)
    try:
        async with store.engine.begin() as conn:
            await conn.execute(
                sa.text(
                    "INSERT INTO events (event_id, stream_id, stream_version, event_type, event_version, "
                    "data, metadata, recorded_at) SELECT 'e-' || g, 'trace-' || g, 0, 'TraceIngested', 1, "
                    "'{}'::jsonb, jsonb_build_object('project_id', 'other-' || (g % 40)), now() "
                    "FROM generate_series(1, :rows) g"
                ),
                {"rows": rows},
            )
            await conn.execute(
                sa.text(
                    "INSERT INTO events (event_id, stream_id, stream_version, event_type, event_version, "
                    "data, metadata, recorded_at) SELECT 'm-' || g, 'mine-' || g, 0, 'TraceIngested', 1, "
                    "'{}'::jsonb, jsonb_build_object('project_id', 'small'), now() "
                    "FROM generate_series(1, 5) g"
                )
            )
            await conn.execute(sa.text("ANALYZE events"))
    finally:
        await store.close()


async def _plans(url: str, query: Any) -> dict[str, str]:
    """EXPLAIN of ``query`` as a prepared statement: the plan PostgreSQL picks for its values, and
    the generic plan a cached statement may use (``plan_cache_mode = force_generic_plan``)."""
    store = await open_store(url, create_tables=False)
    plans = {}
    try:
        async with store.engine.connect() as conn:
            driver: Any = (await conn.get_raw_connection()).driver_connection
            compiled = query.compile(dialect=conn.dialect, compile_kwargs={"render_postcompile": True})
            values = ", ".join(
                f"'{value}'" if isinstance(value, str) else str(value)
                for value in (compiled.params[name] for name in compiled.positiontup)
            )
            for mode in ("auto", "force_generic_plan"):
                name = "page_" + uuid.uuid4().hex[:8]
                await driver.execute(f"SET plan_cache_mode = {mode}")
                await driver.execute(f"PREPARE {name} AS {compiled}")
                rows = await driver.fetch(f"EXPLAIN EXECUTE {name}({values})")
                plans[mode] = "\n".join(row[0] for row in rows)
            await driver.execute("RESET plan_cache_mode")
    finally:
        await store.close()
    return plans


def test_a_small_projects_poll_reads_its_events_through_the_project_index() -> None:
    """Migrated as `agentr db upgrade` does, 40 other projects' 40,000 events in the table: the page
    query of the event stream is an index range scan on (project, position) under every plan, never
    a walk of every later event filtered by project (what it was: 485 ms a poll at 1.04M events)."""
    with pg_database() as url:
        migrate.upgrade(url)
        asyncio.run(_seed_other_projects(url, 40_000))
        for admin in (False, True):
            plans = asyncio.run(_plans(url, page_query("small", 10, None, () if admin else ADMIN_ONLY)))
            for mode, plan in plans.items():
                assert "ix_events_project_position" in plan, (mode, plan)
                assert "Seq Scan" not in plan and "pk_events" not in plan, (mode, plan)


def test_the_project_index_is_the_same_from_migrations_and_create_all() -> None:
    async def indexdef(url: str, create_tables: bool) -> str:
        store = await open_store(url, create_tables=create_tables)
        try:
            async with store.engine.connect() as conn:
                found = await conn.scalar(
                    sa.text("SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_events_project_position'")
                )
                return str(found)
        finally:
            await store.close()

    definitions = []
    for migrated in (True, False):
        with pg_database() as url:
            if migrated:
                migrate.upgrade(url)
            definitions.append(asyncio.run(indexdef(url, create_tables=not migrated)))
    assert definitions[0] == definitions[1] and "project_id" in definitions[0], definitions


def test_follow_streams_per_key_are_bounded_and_freed_when_one_closes(pg_url: str) -> None:
    settings = make_settings(pg_url, max_follow_streams_per_key=2)
    with serving(settings) as base, httpx.Client(base_url=base, timeout=30) as client:
        _, (key, other) = _setup_over_http(client, ("read",), ("read",))
        headers = {"Authorization": f"Bearer {key['key']}"}
        with _following(base, key["key"], key["key"], other["key"]) as (first, second, third):
            for follower in (first, second, third):
                assert follower.opened.wait(30) and follower.status == 200  # another key has its own
            with client.stream("GET", "/v1/events", params={"follow": "true"}, headers=headers) as refused:
                assert refused.status_code == 429  # (an open stream here would be closed on leaving)
                refused.read()
                assert "AGENTR_MAX_FOLLOW_STREAMS_PER_KEY" in refused.json()["detail"]
                assert "Retry-After" in refused.headers
            # streams that end on their own are not bounded
            assert client.get("/v1/events", params={"follow": "false"}, headers=headers).status_code == 200
            # a client that goes away frees its slot
            first.close()
            deadline = time.monotonic() + 30
            while True:
                with _following(base, key["key"]) as (again,):
                    assert again.opened.wait(30)
                    if again.status == 200:
                        break
                assert time.monotonic() < deadline, "the closed stream's slot was never freed"
                time.sleep(0.2)


# ------------------------------------------------------ 7. failed authentications behind one NAT


async def test_others_wrong_keys_from_one_address_do_not_lock_out_a_valid_key(pg_url: str) -> None:
    settings = make_settings(pg_url, auth_failures_per_min=0.001, auth_failure_burst=3)
    async with running(settings) as api:
        project = await api.project()
        valid, also_valid = await api.key(project, "read"), await api.key(project, "read")
        transport = httpx.ASGITransport(app=api.app, client=("127.0.0.2", 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://agentr.test") as nat:

            async def status(key: str) -> int:
                return (await nat.get("/v1/runs", headers=api.auth(key))).status_code

            # 20 made-up keys from the shared address: the address's budget runs out
            made_up = [await status(generate_key().key) for _ in range(20)]
            assert made_up[:3] == [401] * 3 and set(made_up[3:]) == {429}, made_up
            assert await status("not-a-key") == 429
            # ... and a valid key behind the same address still works
            assert await status(valid) == 200
            # guessing one key's secret is limited per address and prefix
            prefix = valid.split("_")[1]
            guesses = [await status(f"agr_{prefix}_{'g' * 43}") for _ in range(5)]
            assert guesses == [401] * 3 + [429] * 2, guesses
            # the key's own holder, already verified here, is not locked out by the guessing either
            assert await status(valid) == 200
            # nor is another valid key of the same address
            assert await status(also_valid) == 200
        # another address has its own budget for that prefix
        assert (
            await api.client.get("/v1/runs", headers=api.auth(f"agr_{prefix}_{'h' * 43}"))
        ).status_code == 401


# ------------------------------------------------------------------------- 8. client text in logs


def test_client_text_cannot_forge_a_log_line(pg_url: str) -> None:
    settings = make_settings(pg_url)
    forged = "abc 200 in 1.0 ms request_id=FORGED key_prefix=admin"
    with server_log(settings) as log, serving(settings) as base, httpx.Client(base_url=base) as client:
        _, (key,) = _setup_over_http(client, ("ingest",))
        auth = {"Authorization": f"Bearer {key['key']}"}
        replaced = client.get("/v1/runs", headers={**auth, "X-Request-ID": forged})
        assert re.fullmatch(r"[0-9a-f]{32}", replaced.headers["x-request-id"]), replaced.headers
        for unsafe in ("a\tb", "x" * 129, "é"):
            header = client.get("/healthz", headers={b"X-Request-ID": unsafe.encode()})
            assert re.fullmatch(r"[0-9a-f]{32}", header.headers["x-request-id"])
        kept = client.get("/healthz", headers={"X-Request-ID": "trace-42.a_B"})
        assert kept.headers["x-request-id"] == "trace-42.a_B"
        # client values quoted in 4xx messages (which the capture proxy's recorder logs) are escaped
        # and cut: no newline, and not 5,000 characters
        call_id = "c1\n2026-01-01 00:00:00,000 ERROR   agentr.api: FORGED " + "y" * 140
        trace = {
            "outcome": "success",
            "messages": [
                {"role": "user", "content": "Goal: x"},
                {"role": "tool", "tool_call_id": call_id, "content": "r"},
                {"role": "assistant", "content": "done"},
            ],
        }
        refused = client.post("/v1/traces", json={"format": "openai", "traces": [trace]}, headers=auth)
        assert refused.status_code == 422, refused.text
        [field] = refused.json()["fields"]
        assert "'c1\\n2026-01-01" in field["message"] and f"({len(call_id)} characters)" in field["message"]
        assert "\n" not in field["message"] and len(field["message"]) < 300, field["message"]
        role = "robot\nFORGED " + "z" * 5000
        messages = json.dumps([{"role": role, "parts": [{"type": "text", "content": "x"}]}])
        otlp = {
            "resourceSpans": [
                {"scopeSpans": [{"spans": [_otlp_span(7, {"gen_ai.input.messages": messages})]}]}
            ]
        }
        reported = client.post("/v1/otlp/v1/traces", json=otlp, headers=auth).json()["partialSuccess"]
        assert "unknown role 'robot\\nFORGED zzz" in reported["errorMessage"]
        assert "\n" not in reported["errorMessage"] and len(reported["errorMessage"]) < 400
    text = log.getvalue()
    assert "FORGED" not in text, text[-2000:]
    assert "request_id=trace-42.a_B" in text


def test_text_log_fields_are_quoted_unless_plain_tokens() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        configure_logging("INFO", False, stream)
        logging.getLogger("agentr.test").info(
            "served", extra={"route": "/v1/runs", "key_prefix": 'a b=c"\nd status=200'}
        )
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    [line] = stream.getvalue().splitlines()
    assert line.endswith(' key_prefix="a b=c\\"\\nd status=200" route=/v1/runs'), line


# -------------------------------------------------- 10. the download schema; 422s without paths


DOWNLOADS = ("/v1/runs/{run_id}/iterations/{iteration}/dataset", "/v1/datasets/{dataset_id}/download")


async def test_download_model_schema_refuses_the_urls_the_server_refuses(api: ApiHarness) -> None:
    document = (await api.client.get("/openapi.json")).json()
    for path in DOWNLOADS:
        [model] = [p for p in document["paths"][path]["get"]["parameters"] if p["name"] == "model"]
        schema = jsonschema.Draft202012Validator(model["schema"])
        for url in ("http://vllm:8000/v1#agent", " HTTPS://h/v1", "https://169.254.169.254/"):
            assert not schema.is_valid(url), (path, url)
        for folder in ("tiny", "models/tiny", "/srv/models/tiny", "http:/not-a-url"):
            assert schema.is_valid(folder), (path, folder)
        assert "URL" in model["description"]
    project = await api.project()
    key = api.auth(await api.key(project, "read", "run"))
    run = await api.client.post("/v1/runs", json={"model": "m"}, headers=key)
    seeded = await seed_search(api.store, project, run.json()["run_id"])
    await mark_dataset_ready(api.store, project, seeded.run_id, 0, 1)
    url = f"/v1/runs/{seeded.run_id}/iterations/0/dataset"
    for sent in ("http://h/v1", " HTTPS://h/v1"):
        response = await api.client.get(url, params={"format": "tokenized", "model": sent}, headers=key)
        assert response.status_code == 422, response.text
        [field] = response.json()["fields"]
        assert field["field"] == "query.model" and "URL holds no tokenizer" in field["message"]


async def test_422s_name_the_model_as_sent_never_the_server_path(pg_url: str, tmp_path: Any) -> None:
    roots = tmp_path / "model-roots"
    (roots / "empty").mkdir(parents=True)  # inside the roots, but no tokenizer in it
    async with running(make_settings(pg_url, model_roots=str(roots))) as api:
        project = await api.project()
        key = api.auth(await api.key(project, "read", "run"))
        # a folder without a chat template is refused at submission, named as it was sent
        refused = await api.client.post("/v1/runs", json={"model": "empty"}, headers=key)
        assert refused.status_code == 422, refused.text
        [field] = refused.json()["fields"]
        assert field["field"] == "body.model" and field["message"].startswith("model folder 'empty' has no")
        assert str(tmp_path) not in refused.text
        (roots / "empty" / "chat_template.jinja").write_text("{{ messages }}")  # a template, no tokenizer
        submitted = await api.client.post("/v1/runs", json={"model": "empty", "data_only": True}, headers=key)
        assert submitted.status_code == 202, submitted.text
        seeded = await seed_search(api.store, project, submitted.json()["run_id"])
        await mark_dataset_ready(api.store, project, seeded.run_id, 0, 1)
        url = f"/v1/runs/{seeded.run_id}/iterations/0/dataset"
        for params, named in (
            ({"format": "tokenized", "model": "empty"}, "'empty'"),
            ({"format": "hf", "model": "missing"}, "'missing'"),
            ({"format": "tokenized"}, "the default model"),
        ):
            response = await api.client.get(url, params=params, headers=key)
            assert response.status_code == 422, (params, response.text)
            [field] = response.json()["fields"]
            expected = f"cannot load the tokenizer of {named}: it is not a model folder with tokenizer files"
            assert field == {"field": "query.model", "message": expected}, field
            assert str(tmp_path) not in response.text
        # pydantic's words stay out of 422s: no "Value error," prefix, no class names of our models
        bad = await api.client.post("/v1/runs", json={"model": "empty", "search": []}, headers=key)
        assert bad.status_code == 422
        assert "instance of" not in bad.text and "Value error" not in bad.text, bad.text
