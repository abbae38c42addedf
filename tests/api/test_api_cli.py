"""`agentr serve` as a real process, driven by the client commands over real HTTP.

projects create -> keys create -> runs submit -> runs list -> traces upload (twice: the content-
derived Idempotency-Key makes the retry a no-op) -> dataset download (workers' events seeded into
the store) -> runs follow until the run completes.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentr.cli import app as cli_app
from core.domain import events as ev
from core.domain.events import Metadata, NewEvent
from core.domain.ids import run_stream
from core.store.factory import open_store
from tests.api.conftest import ADMIN_KEY, MODEL
from tests.api.seed import mark_dataset_ready, seed_revisions, seed_search
from tests.support import free_port, start_http_process


@pytest.fixture
def served(pg_url: str, tmp_path: Path, model_root: Path) -> Iterator[str]:
    port = free_port()
    env = {
        **os.environ,
        "AGENTR_DATABASE_URL": pg_url,
        "AGENTR_ADMIN_KEY": ADMIN_KEY,
        "AGENTR_LOG_JSON": "1",
        # the runs below name the session's tiny model folder (never opened: no workers)
        "AGENTR_MODEL_ROOTS": str(model_root),
    }
    env.pop("AGENTR_REDIS_URL", None)
    agentr = Path(sys.executable).with_name("agentr")
    base = f"http://127.0.0.1:{port}"
    with start_http_process(
        [str(agentr), "serve", "--port", str(port), "--create-tables"],
        f"{base}/readyz",
        what="agentr serve",
        env=env,
        log_path=tmp_path / "serve.log",
    ):
        yield base


def _run(*args: str) -> str:
    result = CliRunner().invoke(cli_app, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout.strip()


def test_client_commands_against_agentr_serve(
    served: str, pg_url: str, tmp_path: Path, model_root: Path
) -> None:
    api = ["--api", served]
    project = _run("projects", "create", "cli-project", *api, "--key", ADMIN_KEY)
    key = _run(
        "keys",
        "create",
        project,
        "--scope",
        "read",
        "--scope",
        "run",
        "--scope",
        "ingest",
        *api,
        "--key",
        ADMIN_KEY,
    )
    assert key.startswith("agr_")
    auth = [*api, "--key", key]
    tiny = str(model_root / MODEL)
    run_id = _run("runs", "submit", "--model", tiny, "--task", "1", "--iterations", "1", *auth)
    listing = _run("runs", "list", *auth)
    assert run_id[:8] in listing and "requested" in listing

    traces = tmp_path / "traces.jsonl"
    trace = {
        "outcome": "failure",
        "messages": [
            {"role": "user", "content": "Goal: x"},
            {"role": "assistant", "content": "Action: look"},
        ],
    }
    traces.write_text("\n".join(json.dumps(trace | {"id": str(i)}) for i in range(3)) + "\n")
    first = _run(
        "traces", "upload", str(traces), "--format", "openai", "--batch-size", "2", *auth
    ).splitlines()
    again = _run(
        "traces", "upload", str(traces), "--format", "openai", "--batch-size", "2", *auth
    ).splitlines()
    assert len(first) == 3 and first == again

    async def workers_did_their_part() -> None:
        store = await open_store(pg_url)
        try:
            seeded = await seed_search(store, project, run_id)
            await seed_revisions(store, project, run_id, seeded.pair_id, 30)
            await mark_dataset_ready(store, project, run_id, 0, revisions=30)
            await store.append(
                [
                    NewEvent(
                        run_stream(run_id),
                        ev.RunCompleted(run_id=run_id, final_model_ref="/models/v1"),
                        Metadata(producer="train", project_id=project),
                    )
                ]
            )
        finally:
            await store.close()

    asyncio.run(workers_did_their_part())
    out = tmp_path / "data" / "iteration0.jsonl"
    _run("dataset", "download", run_id, "0", "--out", str(out), "--format", "sharegpt", *auth)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 31 and all("conversations" in r for r in records)
    assert not list(out.parent.glob(".*.part"))

    followed = _run("runs", "follow", run_id, "--interval", "0.2", *auth)
    assert "completed" in followed

    missing = CliRunner().invoke(cli_app, ["runs", "follow", "no-such-run", *auth])
    assert missing.exit_code == 1 and "404" in missing.output
