"""schemathesis's own CLI against the served API: every check, every phase (stateful included).

The real app is served by uvicorn over TCP on a fresh PostgreSQL database seeded with a project,
a key holding every scope and a run, with the capture proxy in front of a local upstream (a real HTTP
server answering OpenAI-shaped responses, tests/api/proxy_upstream.py), so the proxy routes are in
the document and fuzzed too; ``schemathesis run`` then reads /openapi.json and runs its
examples, coverage, fuzzing and stateful phases with ALL checks (server errors, status codes,
content types, response schemas and headers, negative-data rejection, positive-data acceptance,
ignored auth, ...) and must report zero failures. Bounded (``--max-examples``, a fixed seed) so the
whole run stays within a few minutes on two cores. /v1/events is left out: it is an endless stream
by design (tests/api/test_api_data.py covers it), and schemathesis reads a response to its end;
key revocation is left out because the stateful phase would revoke the very key it runs with
(tests/api/test_api_auth_matrix.py and test_api_events_scope.py cover it). Strings are generated
with NUL characters: the document states where the server refuses one (api/openapi.py). One check is
replaced: ``positive_data_acceptance`` runs as ``positive_data_acceptance_stated``
(tests/api/schemathesis_hooks.py), which does not accept a 422 for a request the document admits,
except the rules listed there (a cursor must be one this list returned, ``since`` before ``until``,
each trace once per batch, ...; each named by operation, field and message, each in
docs/security.md); it does not accept 5xx either, which the default does.
``AGENTR_SCHEMATHESIS_LOG=FILE`` keeps the full report.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from api.app import create_app
from api.proxy.routes import load_proxy_settings
from tests.api.conftest import make_settings
from tests.api.proxy_upstream import Upstream, upstream
from tests.api.test_api_openapi_fuzz import _seed
from tests.conftest import drop_pg_database, make_pg_database

MAX_EXAMPLES = int(os.environ.get("AGENTR_SCHEMATHESIS_EXAMPLES", "10"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, str, Upstream]]:
    import uvicorn

    name, url = make_pg_database()
    server: uvicorn.Server | None = None
    thread: threading.Thread | None = None
    with tempfile.TemporaryDirectory() as spool, upstream() as answering:
        try:
            key = asyncio.run(_seed(url))
            proxy = load_proxy_settings(upstream_url=answering.url, spool_dir=Path(spool))
            app = create_app(make_settings(url), create_tables=True, proxy_settings=proxy)
            port = _free_port()
            server = uvicorn.Server(
                uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
            )
            thread = threading.Thread(target=server.run, daemon=True)
            thread.start()
            deadline = time.monotonic() + 30
            while not server.started:
                if not thread.is_alive() or time.monotonic() > deadline:
                    raise RuntimeError("uvicorn did not start")
                time.sleep(0.05)
            yield f"http://127.0.0.1:{port}", key, answering
        finally:
            if server is not None and thread is not None:
                server.should_exit = True
                thread.join(timeout=30)
            drop_pg_database(name)


def test_schemathesis_all_checks_all_phases_zero_failures(
    served: tuple[str, str, Upstream], tmp_path: Path
) -> None:
    base, key, answering = served
    extra = os.environ.get("AGENTR_SCHEMATHESIS_ARGS", "").split()  # e.g. --include-path-regex /v1/proxy
    config = tmp_path / "schemathesis.toml"
    config.write_text(
        '[checks.positive_data_acceptance]\nexpected-statuses = ["2XX", "401", "403", "404", "409", "429"]\n'
    )
    command = [
        str(Path(sys.executable).parent / "schemathesis"),
        "--config-file",
        str(config),
        "run",
        f"{base}/openapi.json",
        "--checks",
        "all",
        "--exclude-checks",
        "positive_data_acceptance",  # runs as positive_data_acceptance_stated (schemathesis_hooks.py)
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        "18",
        "--exclude-path",
        "/v1/events",
        "--exclude-path-regex",
        "/revoke$",
        "--generation-codec",
        "utf-8",
        "--header",
        f"Authorization: Bearer {key}",
        "--request-timeout",
        "30",
        "--generation-database",
        "none",
        "--no-color",
        *extra,
    ]
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "SCHEMATHESIS_HOOKS": "tests.api.schemathesis_hooks",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env)
    output = done.stdout + done.stderr
    if os.environ.get("AGENTR_SCHEMATHESIS_LOG"):
        Path(os.environ["AGENTR_SCHEMATHESIS_LOG"]).write_text(output)
    print(output[-6000:])
    assert done.returncode == 0, output[-12000:]
    assert "No issues found" in output or " 0 failures" in output or "failures" not in output.lower()
    assert answering.calls > 0, "the proxy routes were not fuzzed through to the upstream"
