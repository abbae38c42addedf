"""The capture proxy's recording off the response path (issue #50 item 2) stays complete: calls that
arrive one at a time gather into one transaction (``linger_s``), ``max_batch`` queued calls go at
once, shutdown stores what is queued, a store that is down keeps every call in the spool until a
store takes it, and a key revoked through the API stops the proxy mounted on it at once (its verified
key cache forgets it). Also: the upstream client keeps the base URL's query string.

Real parts: PostgreSQL (a fresh database per test), the API in-process over ASGI, a real HTTP upstream
on 127.0.0.1 (tests/api/proxy_upstream.py).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from api.proxy.recorder import CallRecord, Recorder, StoreSink
from api.proxy.upstream import UpstreamClient
from core.domain.events import ModelCallRecorded, TraceIngested
from core.domain.ids import trace_stream
from core.store.factory import make_engine
from core.store.sql import SqlEventStore
from tests.api.conftest import make_settings, running
from tests.api.proxy_upstream import Upstream, upstream
from tests.api.test_api_proxy_hardening import CHAT, proxied_api
from tests.api.test_api_proxy_streams import _call
from tests.support import free_port

BOTH = [TraceIngested.event_type, ModelCallRecorded.event_type]  # a new trace's first call


async def _stored(store: SqlEventStore, record: CallRecord) -> list[str]:
    return [r.event_type for r in await store.read_stream(trace_stream(record.trace_id))]


def _count_appends(store: SqlEventStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the store's appends from now on (the real append still runs)."""
    sizes: list[int] = []
    append = store.append

    async def counted(events: Any, *args: Any, **kwargs: Any) -> Any:
        sizes.append(len(events))
        return await append(events, *args, **kwargs)

    monkeypatch.setattr(store, "append", counted)
    return sizes


async def test_calls_arriving_one_at_a_time_are_stored_in_one_transaction(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running(make_settings(pg_url)) as api:
        appends = _count_appends(api.store, monkeypatch)
        recorder = Recorder(StoreSink(api.store), tmp_path / "spool", linger_s=0.5)
        recorder.start()
        try:
            records = [_call("project-a", f"task {i}") for i in range(5)]
            for record in records:  # as an agent's calls come: one, a pause, the next
                recorder.submit(record)
                await asyncio.sleep(0.02)
            await recorder.flush(timeout_s=30)
        finally:
            await recorder.close()
        assert appends == [10], appends  # without the linger: [2, 2, 2, 2, 2]
        assert recorder.stored == 5
        for record in records:
            assert await _stored(api.store, record) == BOTH


async def test_a_full_batch_is_stored_without_waiting_out_the_linger(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running(make_settings(pg_url)) as api:
        appends = _count_appends(api.store, monkeypatch)
        recorder = Recorder(StoreSink(api.store), tmp_path / "spool", linger_s=60, max_batch=4)
        recorder.start()
        try:
            started = time.monotonic()
            for i in range(4):
                recorder.submit(_call("project-a", f"task {i}"))
            await recorder.flush(timeout_s=20)  # a 60 s linger would time this out
            assert time.monotonic() - started < 20
        finally:
            await recorder.close()
        assert appends == [8], appends


async def test_shutdown_stores_what_is_queued_instead_of_leaving_it_for_a_later_process(
    pg_url: str, tmp_path: Path
) -> None:
    async with running(make_settings(pg_url)) as api:
        recorder = Recorder(StoreSink(api.store), tmp_path / "spool", linger_s=60)
        recorder.start()
        records = [_call("project-a", f"task {i}") for i in range(3)]
        for record in records:
            recorder.submit(record)
        await asyncio.sleep(0.05)  # the drainer is lingering now (60 s)
        started = time.monotonic()
        await recorder.close()
        assert time.monotonic() - started < 5
        assert recorder.stored == 3 and recorder.pending == 0
        assert not list((tmp_path / "spool").glob("*.json"))
        for record in records:
            assert ModelCallRecorded.event_type in await _stored(api.store, record)


async def test_calls_made_while_the_store_is_down_are_kept_and_stored_once_a_store_answers(
    pg_url: str, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    nowhere = SqlEventStore(make_engine(f"postgresql+asyncpg://agentr@127.0.0.1:{free_port()}/down"))
    down = Recorder(StoreSink(nowhere, timeout_s=2), spool, linger_s=0.05, retry_s=0.05)
    down.start()
    records = [_call("project-a", f"task {i}") for i in range(3)]
    try:
        for record in records:
            down.submit(record)
        for _ in range(200):  # the store refused: every call is on disk, none lost, none stored
            if down.failures and len(list(spool.glob("*.json"))) == 3:
                break
            await asyncio.sleep(0.05)
        assert len(list(spool.glob("*.json"))) == 3
        assert down.stored == 0 and down.pending == 3
    finally:
        started = time.monotonic()
        await down.close()  # a down store does not hold the shutdown for drain_s
        assert time.monotonic() - started < 3
        await nowhere.close()
    assert len(list(spool.glob("*.json"))) == 3
    async with running(make_settings(pg_url)) as api:
        back = Recorder(StoreSink(api.store), spool, linger_s=0.05)
        back.start()
        try:
            await back.flush(timeout_s=30)
        finally:
            await back.close()
        assert back.stored == 3 and not list(spool.glob("*.json"))
        for record in records:
            assert await _stored(api.store, record) == BOTH


@pytest.fixture
def up() -> Any:
    with upstream() as served:
        yield served


async def test_a_key_revoked_through_the_api_stops_the_proxy_mounted_on_it_at_once(
    pg_url: str, tmp_path: Path, up: Upstream
) -> None:
    async with proxied_api(pg_url, tmp_path / "spool", up.url) as api:
        project = await api.project("a")
        issued = await api.client.post(
            f"/v1/projects/{project}/keys", json={"scopes": ["ingest"]}, headers=api.admin
        )
        key, key_id = issued.json()["key"], issued.json()["key_id"]
        body = {"messages": [{"role": "user", "content": "hi"}]}
        assert (await api.client.post(CHAT, json=body, headers=api.auth(key))).status_code == 200
        assert api.app.state.services.verified.get(api.app.state.services.verified.digest(key))
        revoked = await api.client.post(f"/v1/projects/{project}/keys/{key_id}/revoke", headers=api.admin)
        assert revoked.status_code == 200, revoked.text
        refused = await api.client.post(CHAT, json=body, headers=api.auth(key))
        assert refused.status_code == 401, refused.text  # not after AGENTR_PROXY_AUTH_CACHE_S (60 s)
        assert up.calls == 1


async def test_the_upstream_client_keeps_the_base_urls_query_and_credentials() -> None:
    client = UpstreamClient("http://agent:pw@127.0.0.1:9/v1/?api-version=2024-10", None, 5.0)
    try:
        assert str(client.url("/chat/completions")) == (
            "http://agent:pw@127.0.0.1:9/v1/chat/completions?api-version=2024-10"
        )
    finally:
        await client.aclose()
