"""``agentr health`` on a loaded machine (issue 45): each check's timeout counts the check, not the
imports it needs.

Seen in the compose check (deploy/compose-check) on 2 busy cores: importing the store, the database
driver, redis and httpx took 2-5 s each, and made inside the checks those imports blocked the event
loop past every check's 5 s deadline, so every worker was "unhealthy" with PostgreSQL, Redis and the
worker all answering. Here ``agentr health`` runs as a process whose imports of those modules are
slowed down (a ``sitecustomize`` import hook sleeping before each), against the real PostgreSQL,
Redis and a live metrics endpoint, with a per-check timeout shorter than one slowed import: it must
still say "healthy"; a dead metrics port is still reported.
"""

from __future__ import annotations

import asyncio
import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import free_port

REPO = Path(__file__).resolve().parents[2]
AGENTR = str(Path(sys.executable).parent / "agentr")
IMPORT_DELAY_S = 2.0
CHECK_TIMEOUT_S = 1.0  # shorter than one slowed import

SLOW_IMPORTS = f"""
import importlib.abc, sys, time

SLOW = {{"core.store.factory", "asyncpg", "aiosqlite", "redis.asyncio", "httpx"}}


class SlowImports(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in SLOW:
            time.sleep({IMPORT_DELAY_S})
        return None


sys.meta_path.insert(0, SlowImports())
"""


class _Metrics(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        body = b"# a worker's metrics\n"
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture
def metrics_port() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


async def _create_tables(url: str) -> None:
    from core.store.factory import open_store

    store = await open_store(url, create_tables=True)
    await store.close()


def test_health_timeouts_do_not_count_slow_imports(
    pg_url: str, redis_url: str, redis_prefix: str, metrics_port: int, tmp_path: Path
) -> None:
    asyncio.run(_create_tables(pg_url))
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SLOW_IMPORTS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTR_")}
    env.update(
        AGENTR_DATABASE_URL=pg_url,
        AGENTR_REDIS_URL=redis_url,
        AGENTR_REDIS_PREFIX=redis_prefix,
        PYTHONPATH=os.pathsep.join([str(hook), str(REPO)]),
    )

    def health(port: int) -> subprocess.CompletedProcess[str]:
        args = [AGENTR, "health", "--metrics-port", str(port), "--timeout", str(CHECK_TIMEOUT_S)]
        return subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, cwd=REPO)

    ok = health(metrics_port)
    assert ok.returncode == 0 and ok.stdout.strip() == "healthy", ok.stdout + ok.stderr
    dead = free_port()
    down = health(dead)
    assert down.returncode == 1, down.stdout + down.stderr
    assert f"unhealthy: metrics port {dead}:" in down.stderr
    assert "database" not in down.stderr and "redis" not in down.stderr, down.stderr
