"""Issue 44 item 1 on the worker side: a SearchRequested read from the bus (as an older API could have
let through) naming a served model or a remote environment outside the operator's allow-lists fails
its tree before any HTTP request is made, and the server's OPENAI_API_KEY reaches an allowed model
server only when the operator paired it with that server (AGENTR_OPENAI_API_KEY_URLS).

The model server is a real HTTP server on 127.0.0.1 that records every request's path and
Authorization header and answers chat completions with a TextCraft action; the workers are the real
search service over PostgreSQL, the relay and Redis Streams."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from sqlalchemy import select

from core.bus.redis_streams import RedisStreamsBus
from core.domain.events import NewEvent, SearchRequested
from core.domain.ids import new_id, tree_stream
from core.domain.mcts import SearchConfig
from core.runtime.relay import Relay
from core.runtime.settings import Settings
from core.runtime.worker import Worker
from core.store.factory import open_store
from core.store.tables import trees
from search_service.service import build_service

SERVER_KEY = "sk-server-secret-4242"
CONFIG = SearchConfig(iterations=1, max_depth=1, n_candidates=1, alpha=1.0, beta=0.5).to_dict()


class Recorder(BaseHTTPRequestHandler):
    seen: list[tuple[str, str | None]]

    def do_GET(self) -> None:
        self._record()
        self._answer({"object": "list", "data": [{"id": "m", "object": "model"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        self._record()
        if not self.path.endswith("/chat/completions"):
            self.send_response(404)
            self.end_headers()
            return
        choices = [
            {
                "index": i,
                "message": {"role": "assistant", "content": "Thought: wood first.\nAction: get 1 oak logs"},
                "finish_reason": "stop",
            }
            for i in range(int(body.get("n", 1)))
        ]
        self._answer({"choices": choices, "usage": {"completion_tokens": 9}})

    def _record(self) -> None:
        self.server.seen.append((self.path, self.headers.get("Authorization")))  # type: ignore[attr-defined]

    def _answer(self, data: dict[str, Any]) -> None:
        raw = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *_args: Any) -> None:
        return None


@pytest.fixture
def model_server() -> Iterator[tuple[str, list[tuple[str, str | None]]]]:
    """(base URL ``http://127.0.0.1:PORT/v1``, the (path, Authorization) of every request)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    server.seen = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", server.seen  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
async def search(
    pg_url: str, redis_url: str, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Any]:
    """``run(settings, *requests) -> {tree_id: (status, reason)}``: the requests appended, relayed
    to Redis and handled by a search worker with ``settings`` (the server's key in its environment)."""
    monkeypatch.setenv("OPENAI_API_KEY", SERVER_KEY)
    store = await open_store(pg_url, create_tables=True)
    bus = RedisStreamsBus(redis_url, redis_prefix)

    async def run(settings: Settings, *requests: NewEvent) -> dict[str, tuple[str, str | None]]:
        service = build_service(settings, store)
        try:
            await store.append(list(requests))
            await Relay(store, bus).drain()
            await Worker(service, store, bus, settings).run(burst=True)
        finally:
            await service.on_close()  # type: ignore[misc]
        async with store.engine.connect() as conn:
            rows = (await conn.execute(select(trees.c.tree_id, trees.c.status, trees.c.reason))).all()
        return {row.tree_id: (row.status, row.reason) for row in rows}

    try:
        yield run
    finally:
        await bus.close()
        await store.close()


def request(model_ref: str, env_uri: str = "textcraft") -> NewEvent:
    tree_id = new_id()
    event = SearchRequested(tree_id, None, 0, env_uri, "200", model_ref, CONFIG, 3)
    return NewEvent(tree_stream(tree_id), event)


def settings(**egress: str) -> Settings:
    return Settings(block_ms=100, search_concurrency=2, **egress)  # type: ignore[arg-type]


async def test_a_disallowed_model_or_environment_from_the_bus_is_refused_before_any_request(
    search: Any, model_server: tuple[str, list[tuple[str, str | None]]]
) -> None:
    base, seen = model_server
    port = base.split(":")[2].split("/")[0]
    model = request(f"{base}#m")  # no allow-list: the default
    env = request("noisy-expert", env_uri=f"agentgym+http://127.0.0.1:{port}/textcraft")
    userinfo = request(f"http://127.0.0.1:{port}@127.0.0.1:{port}/v1#m")
    status = await search(settings(allowed_env_urls="http://127.0.0.2:1"), model, env, userinfo)
    for new, setting in (
        (model, "AGENTR_ALLOWED_MODEL_URLS"),
        (env, "AGENTR_ALLOWED_ENV_URLS"),
        (userinfo, "user information"),
    ):
        state, reason = status[new.event.tree_id]  # type: ignore[attr-defined]
        assert state == "failed" and reason is not None and setting in reason, reason
    assert seen == []  # not one request reached the server


async def test_the_key_goes_only_to_the_server_it_is_paired_with(
    search: Any, model_server: tuple[str, list[tuple[str, str | None]]]
) -> None:
    base, seen = model_server
    allowed_unpaired = settings(allowed_model_urls=base)
    first = request(f"{base}#m")
    status = await search(allowed_unpaired, first)
    assert status[first.event.tree_id][0] == "completed", status  # type: ignore[attr-defined]
    assert seen and all(path.startswith("/v1/") for path, _ in seen)
    assert {auth for _, auth in seen} == {None}  # allowed, but not paired: no credential
    seen.clear()
    paired = settings(allowed_model_urls=base, openai_api_key_urls=base)
    second = request(f"{base}#m")
    status = await search(paired, second)
    assert status[second.event.tree_id][0] == "completed", status  # type: ignore[attr-defined]
    assert seen and {auth for _, auth in seen} == {f"Bearer {SERVER_KEY}"}


async def test_the_critic_worker_does_not_call_a_trace_critic_url_outside_the_allow_list(
    pg_url: str, redis_url: str, redis_prefix: str, model_server: tuple[str, list[tuple[str, str | None]]]
) -> None:
    """A TraceIngested naming ``critic.model`` = a URL the operator does not allow (the ingest-key
    vector): the critic worker refuses to open it, and nothing reaches the server."""
    from core.domain.events import Metadata, TraceIngested
    from core.domain.ids import trace_stream
    from core.formats.importing import parse_traces
    from critic_service.service import build_service as build_critic

    base, seen = model_server
    store = await open_store(pg_url, create_tables=True)
    bus = RedisStreamsBus(redis_url, redis_prefix)
    worker_settings = settings()  # the default: no served model allowed
    service = build_critic(worker_settings, store)
    try:
        messages = [{"role": "user", "content": "Goal: x"}, {"role": "assistant", "content": "Action: y"}]
        (parsed,) = parse_traces([{"messages": messages}], "openai")
        trace_id, project = new_id(), new_id()
        ingested = TraceIngested(
            trace_id, project, "k", parsed.trajectory, "failure", "openai",
            critic_strategy="model", critic_model=f"{base}#x",
        )  # fmt: skip
        await store.append([NewEvent(trace_stream(trace_id), ingested, Metadata(project_id=project))])
        await Relay(store, bus).drain()
        await Worker(service, store, bus, worker_settings).run(burst=True)
        critiqued = [
            r for r in await store.read_stream(trace_stream(trace_id)) if r.event_type == "TraceCritiqued"
        ]
        assert critiqued == []  # the model was never opened
        assert seen == []
    finally:
        await service.on_close()  # type: ignore[misc]
        await bus.close()
        await store.close()
