"""The README's test command on a machine where PostgreSQL / Redis are not running (issue 18, point 9).

A probe test that needs both servers is run by a fresh pytest process (with tests/conftest.py as
its plugin) pointed at CLOSED ports:

* with the server binaries installed (as here), the run starts throwaway instances on free ports,
  passes, and leaves no server and no data folder behind;
* told not to start anything, or with no binaries to start, it stops at once with one line naming
  what to install or start: no hang (the subprocess has a timeout), no wall of connection errors.
"""

from __future__ import annotations

import glob
import os
import re
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import asyncpg
import redis.asyncio as aioredis


async def test_probe(pg_url, redis_url):
    conn = await asyncpg.connect(pg_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        assert await conn.fetchval("SELECT 1") == 1
    finally:
        await conn.close()
    client = aioredis.from_url(redis_url)
    try:
        assert await client.ping()
    finally:
        await client.aclose()
    print("PROBE", pg_url, redis_url)
"""


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when the socket is


def _open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def _run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    probe = tmp_path / "test_probe.py"
    probe.write_text(PROBE)
    pg_port, redis_port = _closed_port(), _closed_port()
    full_env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "AGENTR_TEST_PG": f"postgresql://postgres@127.0.0.1:{pg_port}/test",
        "AGENTR_TEST_REDIS": f"redis://127.0.0.1:{redis_port}/0",
        **env,
    }
    command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-p", "tests.conftest"]
    command += ["-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT), str(probe)]
    return subprocess.run(command, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=240)


def _throwaway_folders() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "agentr-test-pg-*")))


@pytest.mark.skipif(
    not (Path("/usr/lib/postgresql").exists() or os.environ.get("AGENTR_TEST_PG_BINDIR")),
    reason="needs the PostgreSQL server binaries installed",
)
def test_installed_but_not_running_starts_throwaway_servers_and_cleans_up(tmp_path: Path) -> None:
    before = _throwaway_folders()
    done = _run(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    match = re.search(r"PROBE postgresql\+asyncpg://\S+:(\d+)/\S+ redis://127\.0\.0\.1:(\d+)/0", done.stdout)
    assert match, done.stdout[-2000:]
    pg_port, redis_port = int(match.group(1)), int(match.group(2))
    assert not _open(pg_port) and not _open(redis_port)  # stopped when the test process exited
    assert _throwaway_folders() == before  # and its data folder removed


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"AGENTR_TEST_SERVICES": "require"}, "start it"),
        ({"AGENTR_TEST_PG_BINDIR": "/nonexistent"}, "apt-get install postgresql"),
    ],
    ids=["require", "not-installed"],
)
def test_not_running_and_not_startable_stops_with_one_line(
    tmp_path: Path, env: dict[str, str], names: str
) -> None:
    done = _run(tmp_path, **env)
    output = done.stdout + done.stderr
    assert done.returncode == 3, output[-3000:]
    lines = [line for line in output.splitlines() if "PostgreSQL is not reachable" in line]
    assert len(lines) == 1 and names in lines[0], output[-3000:]
    assert "Traceback" not in output and "ConnectionRefusedError" not in output and "OSError" not in output
    assert "PROBE" not in output
