"""Shared test fixtures: throwaway PostgreSQL databases and Redis key prefixes on the real servers.

Each test (or module) that asks for ``pg_url`` gets a fresh, empty database on the PostgreSQL at
``AGENTR_TEST_PG`` (default 127.0.0.1:5432, trust auth) that is dropped afterwards; ``redis_url``
plus ``redis_prefix`` give an isolated key namespace on the real Redis, deleted afterwards
(``pg_database`` and ``redis_namespace`` are the same for fixtures of a wider scope).
``store_url`` runs a test on both adapters (a SQLite file, then a fresh PostgreSQL database) and
``store`` opens the event store there with its tables created.
``quick_run`` and ``resumed_quick_run`` are the session's two ``agentr run --quick`` processes
(``tests/e2e/quick_runs.py``: one undisturbed, one SIGKILLed after its first training and resumed),
shared by the tests that read them instead of each starting its own.
Several test runs (and developers) can share the servers without seeing each other's data.

On a machine where the servers are not running (issue 18, point 9), the first test that needs one
either starts a throwaway instance from the installed binaries (PostgreSQL ``initdb`` + ``pg_ctl``
into a temporary folder, ``redis-server`` without persistence; each on a free port, stopped and
removed when the test process exits) or, when the binaries are not installed, stops the whole run
at once with one line naming what to install or start. Nothing waits on a dead port: reachability
is a one-second TCP connect. ``AGENTR_TEST_SERVICES=require`` never starts anything (stop with the
line instead); ``AGENTR_TEST_PG_BINDIR`` names the folder holding ``initdb``/``pg_ctl`` (default:
PATH, then /usr/lib/postgresql/*/bin).
"""

from __future__ import annotations

import atexit
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import pytest

if TYPE_CHECKING:
    from core.store.sql import SqlEventStore
    from tests.e2e.quick_runs import QuickRun, ResumedRun

PG_ADMIN_DSN = os.environ.get("AGENTR_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("AGENTR_TEST_REDIS", "redis://127.0.0.1:6379/0")
_ready: dict[str, str] = {}  # "pg" / "redis" -> the address in use, once checked (or started)


def _reachable(url: str, default_port: int) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection(
            (parts.hostname or "127.0.0.1", parts.port or default_port), timeout=1.0
        ):
            return True
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stop_run(line: str) -> None:
    pytest.exit(line, returncode=3)


def _may_start() -> bool:
    return os.environ.get("AGENTR_TEST_SERVICES", "auto") != "require"


def _pg_bindir() -> Path | None:
    configured = os.environ.get("AGENTR_TEST_PG_BINDIR")
    candidates = [Path(configured)] if configured else []
    if not configured:
        initdb = shutil.which("initdb")
        if initdb:
            candidates.append(Path(initdb).parent)
        candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    for folder in candidates:
        if (folder / "initdb").is_file() and (folder / "pg_ctl").is_file():
            return folder
    return None


def _start_postgres(bindir: Path) -> str:
    """A throwaway PostgreSQL (trust auth, no fsync) on a free port; stopped and removed at exit."""
    root = Path(tempfile.mkdtemp(prefix="agentr-test-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root: run the server as the postgres user
        runuser = shutil.which("runuser")
        if runuser is None:
            _stop_run("PostgreSQL is not running and, as root, starting a throwaway one needs `runuser`")
        as_user = [str(runuser), "-u", "postgres", "--"]
        shutil.chown(root, "postgres")
    port = _free_port()
    data = root / "data"
    run = {"capture_output": True, "text": True, "timeout": 120}
    done = subprocess.run(
        [
            *as_user,
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--no-sync",
        ],
        **run,  # type: ignore[call-overload]
    )
    if done.returncode != 0:
        _stop_run(
            f"starting a throwaway PostgreSQL failed at initdb: {done.stderr.strip().splitlines()[-1:]}"
        )
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
    done = subprocess.run(
        [
            *as_user,
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-o",
            options,
            "-l",
            str(root / "log"),
            "-w",
            "-t",
            "60",
            "start",
        ],
        **run,  # type: ignore[call-overload]
    )
    if done.returncode != 0:
        _stop_run(f"starting a throwaway PostgreSQL failed at pg_ctl start: {done.stderr.strip()[-200:]}")

    def stop() -> None:
        subprocess.run(
            [*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(root, ignore_errors=True)

    atexit.register(stop)
    return f"postgresql://postgres@127.0.0.1:{port}/postgres"


def _start_redis(binary: str) -> str:
    port = _free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def stop() -> None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()

    atexit.register(stop)
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 15
    while not _reachable(url, 6379):
        if process.poll() is not None or time.monotonic() > deadline:
            _stop_run(f"a throwaway redis-server on port {port} did not start")
        time.sleep(0.05)
    return url


def pg_admin_dsn() -> str:
    """The PostgreSQL admin DSN in use: AGENTR_TEST_PG when it answers, else a throwaway server."""
    if "pg" not in _ready:
        if _reachable(PG_ADMIN_DSN, 5432):
            _ready["pg"] = PG_ADMIN_DSN
        else:
            bindir = _pg_bindir() if _may_start() else None
            where = urlsplit(PG_ADMIN_DSN).netloc.rsplit("@", 1)[-1]
            if bindir is None:
                _stop_run(
                    f"PostgreSQL is not reachable at {where} (AGENTR_TEST_PG): start it (e.g. `pg_ctlcluster "
                    "--skip-systemctl-redirect $(ls /etc/postgresql) main start`) or install the server "
                    "(`apt-get install postgresql`) so the tests start a throwaway one"
                )
            else:
                _ready["pg"] = _start_postgres(bindir)
    return _ready["pg"]


def redis_test_url() -> str:
    """The Redis URL in use: AGENTR_TEST_REDIS when it answers, else a throwaway redis-server."""
    if "redis" not in _ready:
        if _reachable(REDIS_URL, 6379):
            _ready["redis"] = REDIS_URL
        else:
            binary = shutil.which("redis-server") if _may_start() else None
            if binary is None:
                where = urlsplit(REDIS_URL).netloc
                _stop_run(
                    f"Redis is not reachable at {where} (AGENTR_TEST_REDIS): start it (`redis-server "
                    "--daemonize yes`) or install it (`apt-get install redis-server`) so the tests start "
                    "a throwaway one"
                )
            else:
                _ready["redis"] = _start_redis(binary)
    return _ready["redis"]


def _admin_sync(sql: str) -> None:
    import asyncio

    import asyncpg

    dsn = pg_admin_dsn()

    async def go() -> None:
        conn = await asyncpg.connect(dsn, timeout=10)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(go())


def make_pg_database() -> tuple[str, str]:
    """Create an empty database; returns (name, SQLAlchemy asyncpg URL)."""
    name = "agentr_t_" + uuid.uuid4().hex[:12]
    _admin_sync(f'CREATE DATABASE "{name}"')
    base = pg_admin_dsn().rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://")
    return name, f"{base}/{name}"


def drop_pg_database(name: str) -> None:
    _admin_sync(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def pg_database() -> Iterator[str]:
    """A fresh, empty database (its SQLAlchemy asyncpg URL), dropped at the end."""
    name, url = make_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(name)


@contextmanager
def redis_namespace() -> Iterator[str]:
    """A fresh Redis key prefix; every key under it is deleted at the end."""
    import redis

    prefix = "agentr-test-" + uuid.uuid4().hex[:10]
    try:
        yield prefix
    finally:
        client = redis.Redis.from_url(redis_test_url())
        try:
            keys = list(client.scan_iter(match=f"{prefix}*", count=500))
            if keys:
                client.delete(*keys)
        finally:
            client.close()


@pytest.fixture
def pg_url() -> Iterator[str]:
    with pg_database() as url:
        yield url


@pytest.fixture
def sqlite_url(tmp_path) -> str:  # type: ignore[no-untyped-def]
    return f"sqlite+aiosqlite:///{tmp_path / 'agentr.db'}"


@pytest.fixture
def redis_url() -> str:
    return redis_test_url()


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    with redis_namespace() as prefix:
        yield prefix


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest) -> str:
    # a sync fixture: pg_url creates its database with asyncio.run, outside the test's loop
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[SqlEventStore]:
    from core.store.factory import open_store

    opened = await open_store(store_url, create_tables=True)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture(scope="session")
def quick_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The models folder both quick runs' homes link to (the warm start is built once)."""
    return tmp_path_factory.mktemp("quick-models")


@pytest.fixture(scope="session")
def quick_run(tmp_path_factory: pytest.TempPathFactory, quick_models: Path) -> QuickRun:
    from tests.e2e.quick_runs import run_quick

    return run_quick(tmp_path_factory.mktemp("quick-run"), quick_models)


@pytest.fixture(scope="session")
def resumed_quick_run(tmp_path_factory: pytest.TempPathFactory, quick_models: Path) -> ResumedRun:
    from tests.e2e.quick_runs import run_quick_killed_and_resumed

    return run_quick_killed_and_resumed(tmp_path_factory.mktemp("resumed-quick-run"), quick_models)


@pytest.fixture(autouse=True)
def _torch_threads_forgotten() -> Iterator[None]:
    """A test that ran the embedded loop in-process (``embedded_settings``) configured torch threads
    per phase for the whole process; the next test starts without that (core.runtime.torch_threads)."""
    yield
    from core.runtime import torch_threads

    torch_threads.reset()
