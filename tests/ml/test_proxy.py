"""The capture proxy end to end: the official ``openai`` client -> the agentr API (uvicorn, real HTTP,
PostgreSQL) -> upstream `agentr model serve` on the tiny model (a subprocess).

Each test compares what the agent gets through the proxy with what the same request gets from the
upstream directly (seeded sampling: identical), then reads the recorded trace back through the API.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import openai
import pytest
import uvicorn

from api.app import create_app
from api.proxy.routes import ProxyRuntime, load_proxy_settings
from core.domain.events import ModelCallRecorded, TraceIngested
from core.domain.ids import trace_stream
from core.store.sql import SqlEventStore
from tests.api.conftest import ADMIN_KEY, make_settings
from tests.conftest import pg_admin_dsn
from tests.support import TinySpec, free_port

MODEL = "tiny-proxy"
SYSTEM = {"role": "system", "content": "You craft items."}
USER = {"role": "user", "content": "Goal: craft oak planks."}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_recipe",
            "description": "Look up a crafting recipe.",
            "parameters": {
                "type": "object",
                "properties": {"item": {"type": "string"}},
                "required": ["item"],
            },
        },
    }
]


@pytest.fixture(scope="module")
def tiny_spec() -> TinySpec:
    return TinySpec(name=MODEL, seed=3)


@dataclass
class Proxied:
    base: str  # the API's root URL
    upstream: str  # `agentr model serve`'s /v1 URL
    app: Any
    key: str  # project A, scopes ingest + read
    other_key: str  # project B, scopes ingest + read
    clients: list[openai.AsyncOpenAI] = field(default_factory=list)

    @property
    def runtime(self) -> ProxyRuntime:
        return self.app.state.proxy  # type: ignore[no-any-return]

    @property
    def store(self) -> SqlEventStore:
        return self.app.state.services.store  # type: ignore[no-any-return]

    def agent(self, key: str | None = None) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=f"{self.base}/v1/proxy/openai/v1", api_key=key or self.key, max_retries=0
        )

    def direct(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.upstream, api_key="unused", max_retries=0)

    async def trace(self, trace_id: str, key: str | None = None) -> httpx.Response:
        async with httpx.AsyncClient(base_url=self.base, timeout=120) as client:
            return await client.get(
                f"/v1/traces/{trace_id}", headers={"Authorization": f"Bearer {key or self.key}"}
            )

    async def calls(self, trace_id: str) -> list[ModelCallRecorded]:
        events = [r.event for r in await self.store.read_stream(trace_stream(trace_id))]
        return [e for e in events if isinstance(e, ModelCallRecorded)]


@asynccontextmanager
async def serve(app: Any) -> AsyncIterator[str]:
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


async def _key(client: httpx.AsyncClient, name: str) -> str:
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    project = await client.post("/v1/projects", json={"name": name}, headers=admin)
    assert project.status_code == 201, project.text
    key = await client.post(
        f"/v1/projects/{project.json()['project_id']}/keys",
        json={"scopes": ["ingest", "read"]},
        headers=admin,
    )
    assert key.status_code == 201, key.text
    return str(key.json()["key"])


@pytest.fixture
async def proxied(pg_url: str, server: str, tmp_path: Path) -> AsyncIterator[Proxied]:
    proxy_settings = load_proxy_settings(upstream_url=server, spool_dir=tmp_path / "spool")
    app = create_app(make_settings(pg_url), create_tables=True, proxy_settings=proxy_settings)
    async with serve(app) as base, httpx.AsyncClient(base_url=base, timeout=120) as client:
        proxied = Proxied(base, server, app, await _key(client, "a"), await _key(client, "b"))
        try:
            yield proxied
        finally:
            for agent in proxied.clients:
                await agent.close()


def _dump(message: Any) -> dict[str, Any]:
    """An answer as the agent sends it back next time (what openai's pydantic model dumps)."""
    return message.model_dump(exclude_none=True)  # type: ignore[no-any-return]


async def test_chat_through_the_proxy_equals_the_upstream_and_is_recorded(proxied: Proxied) -> None:
    params: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 8,
        "seed": 5,
        "temperature": 1.0,
        "logprobs": True,
    }
    extra = {"return_token_ids": True}
    agent, direct = proxied.agent(), proxied.direct()
    raw = await agent.chat.completions.with_raw_response.create(
        messages=[SYSTEM, USER], extra_body=extra, **params
    )
    first = raw.parse()
    trace_id = raw.headers["x-agentr-trace-id"]
    expected = await direct.chat.completions.create(messages=[SYSTEM, USER], extra_body=extra, **params)
    assert first.choices[0].message.content == expected.choices[0].message.content
    assert first.choices[0].logprobs is not None and expected.choices[0].logprobs is not None
    assert [t.logprob for t in first.choices[0].logprobs.content or []] == pytest.approx(
        [t.logprob for t in expected.choices[0].logprobs.content or []], abs=1e-5
    )

    # the agent continues the conversation: the call joins the same trace (continuity, no header)
    follow = {"role": "user", "content": "You have 1 oak log."}
    second_messages = [SYSTEM, USER, _dump(first.choices[0].message), follow]
    raw2 = await agent.chat.completions.with_raw_response.create(messages=second_messages, **params)
    second = raw2.parse()
    assert raw2.headers["x-agentr-trace-id"] == trace_id

    # another project sending the very same conversation never joins project A's trace
    raw_b = await proxied.agent(proxied.other_key).chat.completions.with_raw_response.create(
        messages=second_messages, **params
    )
    assert raw_b.headers["x-agentr-trace-id"] != trace_id

    await proxied.runtime.recorder.flush()
    read = await proxied.trace(trace_id)
    assert read.status_code == 200, read.text
    trace = read.json()
    assert trace["source_format"] == "proxy" and trace["status"] == "waiting_for_outcome"
    trajectory = trace["trajectory"]
    assert trajectory["instruction"] == SYSTEM["content"] and trajectory["task"] == USER["content"]
    steps = trajectory["steps"]
    assert [s["action"] for s in steps] == [
        first.choices[0].message.content,
        second.choices[0].message.content,
    ]
    assert steps[0]["observation"] == follow["content"]

    calls = await proxied.calls(trace_id)
    assert [c.call_index for c in calls] == [0, 1]
    assert calls[1].request["messages_from"] == 3 and calls[1].request["messages"] == [follow]
    recorded = calls[0].response["choices"][0]
    assert recorded["token_ids"] == (expected.choices[0].model_extra or {})["token_ids"]
    assert recorded["token_ids"] and len(recorded["token_ids"]) == len(recorded["logprobs"]["content"])
    assert calls[0].response["prompt_token_ids"]
    # no credential of the agent in what was stored
    stored = json.dumps([c.request for c in calls] + [c.response for c in calls])
    assert proxied.key not in stored and proxied.key.split("_")[1][:8] not in stored

    # a key of another project cannot read it; the outcome is set later by PATCH (the critic then runs)
    assert (await proxied.trace(trace_id, proxied.other_key)).status_code == 404
    async with httpx.AsyncClient(base_url=proxied.base, timeout=120) as client:
        patched = await client.patch(
            f"/v1/traces/{trace_id}",
            json={"outcome": "failure"},
            headers={"Authorization": f"Bearer {proxied.key}"},
        )
    assert patched.status_code == 200 and patched.json()["changed"] is True


async def test_streaming_is_relayed_and_recorded_as_the_assembled_answer(proxied: Proxied) -> None:
    params: dict[str, Any] = {"model": MODEL, "max_tokens": 10, "seed": 11, "logprobs": True}
    raw = await proxied.agent().chat.completions.with_raw_response.create(
        messages=[SYSTEM, USER], stream=True, stream_options={"include_usage": True}, **params
    )
    trace_id = raw.headers["x-agentr-trace-id"]
    assert raw.headers["content-type"].startswith("text/event-stream")
    pieces, usage = [], None
    async for chunk in raw.parse():
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                pieces.append(choice.delta.content)
    expected = await proxied.direct().chat.completions.create(messages=[SYSTEM, USER], **params)
    assert "".join(pieces) == expected.choices[0].message.content
    assert len(pieces) > 1  # token by token, not one blob
    assert usage is not None and usage.completion_tokens == expected.usage.completion_tokens  # type: ignore[union-attr]

    await proxied.runtime.recorder.flush()
    (call,) = await proxied.calls(trace_id)
    assert call.stream is True
    assert call.response["choices"][0]["message"]["content"] == expected.choices[0].message.content
    assert call.response["usage"]["completion_tokens"] == usage.completion_tokens
    assert len(call.response["choices"][0]["logprobs"]["content"]) == usage.completion_tokens
    assert call.trajectory is not None and call.trajectory.steps[0].action == "".join(pieces).strip()


async def test_tool_calls_in_the_conversation_are_recorded_as_tool_steps(proxied: Proxied) -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_recipe", "arguments": '{"item": "oak planks"}'},
    }
    messages = [
        SYSTEM,
        USER,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"recipe": "1 oak log -> 4 oak planks"}'},
    ]
    params: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 6,
        "seed": 2,
        "tools": TOOLS,
        "tool_choice": "auto",
    }
    raw = await proxied.agent().chat.completions.with_raw_response.create(
        messages=messages,
        extra_headers={"X-Agentr-Trace-Id": "order-42", "X-Agentr-Task": "craft-planks"},
        **params,
    )
    answer = raw.parse()
    expected = await proxied.direct().chat.completions.create(messages=messages, **params)
    assert answer.choices[0].message.content == expected.choices[0].message.content
    trace_id = raw.headers["x-agentr-trace-id"]

    await proxied.runtime.recorder.flush()
    trace = (await proxied.trace(trace_id)).json()
    assert trace["external_id"] == "order-42" and trace["task_key"] == "craft-planks"
    trajectory = trace["trajectory"]
    assert trajectory["tools"] == TOOLS
    tool_step, final = trajectory["steps"]
    assert tool_step["tool_calls"] == [
        {"call_id": "call_1", "name": "get_recipe", "arguments": '{"item": "oak planks"}'}
    ]
    assert tool_step["observation"] == messages[3]["content"]
    # the trajectory holds the answer byte for byte, as the call's recorded response does (issue 48:
    # agent text is kept as it was, outer whitespace included)
    assert final["action"] == (answer.choices[0].message.content or "")
    (recorded,) = await proxied.calls(trace_id)
    assert recorded.response["choices"][0]["message"]["content"] == answer.choices[0].message.content
    assert recorded.request["tools"] == TOOLS and recorded.request["tool_choice"] == "auto"


async def test_upstream_errors_come_back_unchanged(proxied: Proxied) -> None:
    async with httpx.AsyncClient(timeout=120) as client:
        for body in (
            {"model": "gpt-nonexistent", "messages": [USER]},
            {"model": MODEL, "messages": [USER], "temperature": 99},
            {"model": "gpt-nonexistent", "messages": [USER], "stream": True},
        ):
            direct = await client.post(f"{proxied.upstream}/chat/completions", json=body)
            through = await client.post(
                f"{proxied.base}/v1/proxy/openai/v1/chat/completions",
                json=body,
                headers={"Authorization": f"Bearer {proxied.key}"},
            )
            assert direct.status_code in (400, 404)
            assert (through.status_code, through.json()) == (direct.status_code, direct.json())
        models = await client.get(
            f"{proxied.base}/v1/proxy/openai/v1/models", headers={"Authorization": f"Bearer {proxied.key}"}
        )
        assert models.json() == (await client.get(f"{proxied.upstream}/models")).json()
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        await proxied.agent().chat.completions.create(model="gpt-nonexistent", messages=[USER])
    with pytest.raises(openai.AuthenticationError):
        await proxied.agent("agr_wrong_key").chat.completions.create(model=MODEL, messages=[USER])
    assert proxied.runtime.recorder.pending == 0 and proxied.runtime.recorder.stored == 0


@asynccontextmanager
async def database_down(database: str) -> AsyncIterator[None]:
    """The test database refuses every connection (open ones are terminated) until the block ends."""
    admin = await asyncpg.connect(pg_admin_dsn(), timeout=10)
    try:
        await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = $1 AND pid <> pg_backend_pid()",
            database,
        )
        yield
    finally:
        await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
        await admin.close()


async def test_store_down_during_calls_answers_and_loses_nothing(proxied: Proxied, pg_url: str) -> None:
    params: dict[str, Any] = {"model": MODEL, "max_tokens": 6, "seed": 9}
    agent = proxied.agent()
    warm = await agent.chat.completions.with_raw_response.create(
        messages=[SYSTEM, USER], **params
    )  # key verified
    trace_id = warm.headers["x-agentr-trace-id"]
    first = warm.parse()
    await proxied.runtime.recorder.flush()
    recorder = proxied.runtime.recorder
    conversation = [SYSTEM, USER, _dump(first.choices[0].message)]
    answers = []
    async with database_down(pg_url.rsplit("/", 1)[1]):
        for turn in range(3):
            conversation.append({"role": "user", "content": f"Observation {turn}: nothing happens."})
            raw = await agent.chat.completions.with_raw_response.create(messages=conversation, **params)
            assert raw.headers["x-agentr-trace-id"] == trace_id
            answer = raw.parse()
            answers.append((answer.choices[0].message.content or "").strip())
            conversation.append(_dump(answer.choices[0].message))
        streamed = await agent.chat.completions.create(messages=[USER], stream=True, **params)
        assert [c async for c in streamed]
        for _ in range(200):  # the drainer tried the store, failed, and spooled every call
            if (
                recorder.failures
                and not recorder.queue.qsize()
                and len(list(recorder.spool_dir.glob("*.json"))) == 4
            ):
                break
            await asyncio.sleep(0.05)
        assert len(list(recorder.spool_dir.glob("*.json"))) == 4
        assert recorder.pending == 4
    await recorder.flush(timeout_s=60)
    assert not list(recorder.spool_dir.glob("*.json"))
    calls = await proxied.calls(trace_id)
    assert [c.call_index for c in calls] == [0, 1, 2, 3]
    final = calls[-1].trajectory
    assert final is not None
    assert [s.action for s in final.steps] == [(first.choices[0].message.content or "").strip(), *answers]
    read = (await proxied.trace(trace_id)).json()
    assert [s["action"] for s in read["trajectory"]["steps"]] == [
        (first.choices[0].message.content or "").strip(),
        *answers,
    ]
    ingested = [r.event for r in await proxied.store.read_stream(trace_stream(trace_id))]
    assert sum(isinstance(e, TraceIngested) for e in ingested) == 1


async def test_the_environment_headers_name_where_the_trace_can_be_replayed(proxied: Proxied) -> None:
    """``X-Agentr-Environment`` + ``-Task``: the recorded trace names its local environment and task
    (the replay critic's input once its outcome is failure); a remote or half-given one is a 400
    naming the header, and nothing is forwarded or recorded."""
    params: dict[str, Any] = {"model": MODEL, "max_tokens": 4, "seed": 5}
    headers = {"X-Agentr-Environment": "textcraft?max_steps=8", "X-Agentr-Environment-Task": "goal:stick"}
    raw = await proxied.agent().chat.completions.with_raw_response.create(
        messages=[SYSTEM, USER], extra_headers=headers, **params
    )
    trace_id = raw.headers["x-agentr-trace-id"]
    await proxied.runtime.recorder.flush()
    events = [r.event for r in await proxied.store.read_stream(trace_stream(trace_id))]
    (ingested,) = [e for e in events if isinstance(e, TraceIngested)]
    assert (ingested.env_uri, ingested.env_task_id) == ("textcraft?max_steps=8", "goal:stick")
    remote = "agentgym+http://10.0.0.1:8000/textcraft"
    for bad, named in (
        ({"X-Agentr-Environment": remote, "X-Agentr-Environment-Task": "1"}, "not a local environment"),
        ({"X-Agentr-Environment": "tau2:retail"}, "go together"),
    ):
        with pytest.raises(openai.BadRequestError) as refused:
            await proxied.agent().chat.completions.create(
                messages=[SYSTEM, USER], extra_headers=bad, **params
            )
        assert named in refused.value.response.text and "X-Agentr-Environment" in refused.value.response.text
