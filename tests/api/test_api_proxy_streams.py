"""The capture proxy over real HTTP (issue #48 items 6 and 7): a streamed call is recorded even when the
agent closes the connection at ``[DONE]`` (the official ``openai`` client does), and a call whose
conversation the importer cannot read is refused before forwarding, so no trace id is ever handed
out for a trace that will not exist.

The API runs under uvicorn on 127.0.0.1 over a fresh PostgreSQL database; the agent is the official
``openai`` client; the upstream is the real HTTP server of tests/api/proxy_upstream.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import uvicorn

from api.app import create_app
from api.proxy.recorder import CallRecord, Recorder, StoreSink
from api.proxy.routes import ProxyRuntime, load_proxy_settings
from core.domain.events import ModelCallRecorded
from core.domain.ids import new_id, trace_stream
from core.store.ports import EventStore
from tests.api.conftest import ADMIN_KEY, make_settings, running
from tests.api.proxy_upstream import Upstream, upstream
from tests.support import free_port

CHAT = "/v1/proxy/openai/v1/chat/completions"


@asynccontextmanager
async def served(app: Any) -> AsyncIterator[str]:
    """``app`` under uvicorn on a free local port (its lifespan run by the server)."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False)
    )
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


async def _key(base: str) -> str:
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    async with httpx.AsyncClient(base_url=base, headers=admin) as client:
        project = await client.post("/v1/projects", json={"name": "streams"})
        key = await client.post(
            f"/v1/projects/{project.json()['project_id']}/keys", json={"scopes": ["ingest", "read"]}
        )
        return str(key.json()["key"])


@pytest.fixture
def up() -> Any:
    with upstream("streamed\nanswer") as serving:
        yield serving


@asynccontextmanager
async def proxy_over_http(pg_url: str, spool: Path, up: Upstream) -> AsyncIterator[tuple[str, str, Any]]:
    settings = load_proxy_settings(upstream_url=up.url, spool_dir=spool)
    app = create_app(make_settings(pg_url), create_tables=True, proxy_settings=settings)
    async with served(app) as base:
        yield base, await _key(base), app


async def _calls(app: Any, trace_id: str) -> list[ModelCallRecorded]:
    store = app.state.services.store
    return [
        r.event
        for r in await store.read_stream(trace_stream(trace_id))
        if isinstance(r.event, ModelCallRecorded)
    ]


# ---------------------------------------------------------------------------- item 6


async def test_streams_the_client_closes_at_done_are_all_recorded(
    pg_url: str, tmp_path: Path, up: Upstream
) -> None:
    up.linger_s = 3.0  # the upstream ends its response well after [DONE]: the agent leaves first
    async with proxy_over_http(pg_url, tmp_path / "spool", up) as (base, key, app):
        agent = openai.AsyncOpenAI(base_url=f"{base}/v1/proxy/openai/v1", api_key=key, max_retries=0)

        async def one(index: int, stream: bool) -> tuple[str, str]:
            started = asyncio.get_running_loop().time()
            trace_id, text = await made(index, stream)
            # the client closed at [DONE], long before the upstream ended the stream
            assert asyncio.get_running_loop().time() - started < up.linger_s
            return trace_id, text

        async def made(index: int, stream: bool) -> tuple[str, str]:
            messages = [{"role": "user", "content": f"Goal: craft item {index} ({stream})."}]
            if not stream:
                raw = await agent.chat.completions.with_raw_response.create(model="fake", messages=messages)
                return raw.headers["x-agentr-trace-id"], raw.parse().choices[0].message.content or ""
            raw = await agent.chat.completions.with_raw_response.create(
                model="fake", messages=messages, stream=True
            )
            pieces = [c.choices[0].delta.content or "" async for c in raw.parse() if c.choices]
            return raw.headers["x-agentr-trace-id"], "".join(pieces)

        answers = [await made(0, stream=False)]  # the key verified and cached, the connections open
        answers += await asyncio.gather(*(one(i, stream=i % 3 != 0) for i in range(1, 13)))
        await agent.close()
        assert all(text == "streamed\nanswer" for _trace, text in answers)
        runtime: ProxyRuntime = app.state.proxy
        await asyncio.sleep(up.linger_s + 0.5)  # what is recorded at all has been handed over by now
        await runtime.recorder.flush()
        for index, (trace_id, _text) in enumerate(answers):
            calls = await _calls(app, trace_id)
            assert len(calls) == 1, f"call {index}: {len(calls)} recorded"
            (call,) = calls
            assert call.stream is (index % 3 != 0)
            assert call.response["choices"][0]["message"]["content"] == "streamed\nanswer"
            assert call.response["choices"][0]["finish_reason"] == "stop"
        assert runtime.recorder.set_aside == 0


# ---------------------------------------------------------------------------- item 7


def _nested(depth: int) -> Any:
    value: Any = "deep"
    for _ in range(depth):
        value = [value]
    return value


async def test_a_call_no_trace_could_hold_is_refused_before_forwarding(
    pg_url: str, tmp_path: Path, up: Upstream
) -> None:
    user = {"role": "user", "content": "Goal: craft oak planks."}
    refused: list[tuple[dict[str, Any], dict[str, str], str, str]] = [
        ({"messages": [user, {"role": "robot", "content": "beep"}]}, {}, "body.messages[1].role", "robot"),
        ({"messages": [{"role": "user", "content": _nested(100)}]}, {}, "body.messages[0].content", "deeper"),
        (  # under the body's depth limit, still no text: a typed part whose text is an object
            {"messages": [{"role": "user", "content": [{"type": "text", "text": {"a": {"b": "c"}}}]}]},
            {},
            "body.messages[0].content[0].text",
            "string",
        ),
        (
            {"messages": [user, {"role": "user", "tool_calls": [{"id": "c1"}]}]},
            {},
            "body.messages[1].tool_calls",
            "only assistant",
        ),
        ({"messages": [user]}, {"X-Agentr-Trace-Id": "t" * 201}, "header.X-Agentr-Trace-Id", "200"),
    ]
    async with (
        proxy_over_http(pg_url, tmp_path / "spool", up) as (base, key, _app),
        httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {key}"}) as client,
    ):
        for body, headers, field, word in refused:
            answer = await client.post(CHAT, json={"model": "fake", **body}, headers=headers)
            assert answer.status_code == 422, (field, answer.text)
            assert "x-agentr-trace-id" not in answer.headers
            named = answer.json()["fields"][0]
            assert named["field"].lower().startswith(field.lower()), named
            assert word in named["message"] or word in answer.json()["detail"], named
        assert up.calls == 0  # nothing was forwarded
        # a legacy function-calling conversation is readable (openai-legacy): forwarded
        legacy = [
            user,
            {
                "role": "assistant",
                "content": None,
                "function_call": {"name": "inventory", "arguments": "{}"},
            },
            {"role": "function", "name": "inventory", "content": "1 oak log"},
        ]
        answer = await client.post(CHAT, json={"model": "fake", "messages": legacy})
        assert answer.status_code == 200, answer.text
        assert up.calls == 1


async def test_a_conversation_the_importer_cannot_arrange_is_stored_as_far_as_it_can_be(
    pg_url: str, tmp_path: Path, up: Upstream
) -> None:
    # every message readable, their order not a trajectory: a system message mid-way, which an
    # upstream answers; the trace whose id the agent got exists, with its task and a note
    messages = [
        {"role": "system", "content": "You craft."},
        {"role": "user", "content": "Goal: craft a torch."},
        {"role": "assistant", "content": "Thought: coal first.\nAction: inventory"},
        {"role": "system", "content": "New rule: answer in one line."},
        {"role": "user", "content": "Inventory: 1 coal, 1 stick."},
    ]
    async with (
        proxy_over_http(pg_url, tmp_path / "spool", up) as (base, key, app),
        httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {key}"}) as client,
    ):
        answer = await client.post(CHAT, json={"model": "fake", "messages": messages})
        assert answer.status_code == 200, answer.text
        trace_id = answer.headers["x-agentr-trace-id"]
        await app.state.proxy.recorder.flush()
        assert app.state.proxy.recorder.set_aside == 0
        read = await client.get(f"/v1/traces/{trace_id}")
        assert read.status_code == 200, read.text
        trace = read.json()
        assert trace["trajectory"]["task"] == "Goal: craft a torch."
        notes = trace["trajectory"]["provenance"]["notes"]
        assert any("messages[3]" in note and "system message" in note for note in notes), notes
        patched = await client.patch(f"/v1/traces/{trace_id}", json={"outcome": "failure"})
        assert patched.status_code == 200, patched.text
        assert len(await _calls(app, trace_id)) == 1  # the call itself kept whole


# ---------------------------------------------------------------------------- issue #50: recording cost


def _call(project_id: str, content: str, trace_id: str | None = None, fresh: bool = True) -> CallRecord:
    return CallRecord(
        project_id=project_id,
        trace_id=trace_id or new_id(),
        call_id=new_id(),
        external_id=None,
        task_key=None,
        body={"model": "m", "messages": [{"role": "user", "content": content}]},
        response={"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}]},
        stream=False,
        latency_ms=1.0,
        messages_from=0,
        extends=True,
        fresh=fresh,
    )


async def test_queued_calls_are_stored_in_batches_and_a_bad_one_still_stands_alone(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running(make_settings(pg_url)) as api:
        store = api.store
        appends, reads = [], []
        append, read_stream = store.append, store.read_stream

        async def counted_append(events: Any, *args: Any, **kwargs: Any) -> Any:
            appends.append(len(events))
            return await append(events, *args, **kwargs)

        async def counted_read(stream_id: str, *args: Any, **kwargs: Any) -> Any:
            reads.append(stream_id)
            return await read_stream(stream_id, *args, **kwargs)

        monkeypatch.setattr(store, "append", counted_append)
        monkeypatch.setattr(store, "read_stream", counted_read)
        recorder = Recorder(StoreSink(store), tmp_path / "spool", max_batch=16)
        good = [_call("project-a", f"task {i}") for i in range(40)]
        poison = _call("p" * 40, "too long a project id for its column")  # SQLSTATE 22001
        later = [_call("project-a", f"later {i}") for i in range(10)]
        known = _call("project-a", "a trace id from a header", fresh=False)
        for record in [*good, poison, *later, known]:
            recorder.submit(record)
        recorder.start()
        try:
            await recorder.flush(timeout_s=60)
        finally:
            await recorder.close()
        read_back = list(reads)  # the recorder's own, not the checks' below
        assert recorder.stored == 51 and recorder.set_aside == 1
        for record in [*good, *later, known]:
            (call,) = await _calls_in(store, record.trace_id)
            assert call.request["messages"][0]["content"] == record.body["messages"][0]["content"]
        # batches of 16: [16] [16] [8 + poison + 7: refused whole, then one by one] [3 + the known trace]
        assert appends == [32, 32, 32, *[2] * 16, 8], appends
        # only the trace whose id was not minted by the proxy (and the poison's, once it failed in
        # its batch) is read back before writing
        assert trace_stream(known.trace_id) in read_back and len(read_back) <= 2 + 16, read_back
        assert not {trace_stream(r.trace_id) for r in good[:32]} & set(read_back)


async def _calls_in(store: EventStore, trace_id: str) -> list[ModelCallRecorded]:
    return [
        r.event
        for r in await store.read_stream(trace_stream(trace_id))
        if isinstance(r.event, ModelCallRecorded)
    ]
