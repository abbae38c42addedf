"""`agentr traces list` and `agentr datasets create|list|download` against a real `agentr serve`.

The traces are uploaded with the CLI; the critic/splice workers' events for them are appended to
the store as the workers write them (tests.api.seed), then a dataset is built, listed and
downloaded in two formats over real HTTP.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import datasets
import pyarrow.parquet as pq
from typer.testing import CliRunner

from agentr.cli import app as cli_app
from core.store.factory import open_store
from tests.api.conftest import ADMIN_KEY
from tests.api.seed import critique_trace
from tests.api.test_api_cli import served  # noqa: F401  (the `agentr serve` process fixture)
from tests.tool_traces import TASK_KEY, failed_trace, successful_trace


def _run(*args: str) -> str:
    result = CliRunner().invoke(cli_app, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout.strip()


def test_trace_and_dataset_commands(served: str, pg_url: str, tmp_path: Path) -> None:  # noqa: F811
    api = ["--api", served]
    project = _run("projects", "create", "cli-datasets", *api, "--key", ADMIN_KEY)
    key = _run(
        "keys",
        "create",
        project,
        "--scope",
        "read",
        "--scope",
        "ingest",
        "--scope",
        "run",
        *api,
        "--key",
        ADMIN_KEY,
    )
    auth = [*api, "--key", key]
    traces = tmp_path / "traces.jsonl"
    traces.write_text("\n".join(json.dumps(t) for t in (failed_trace(), successful_trace())) + "\n")
    failed_id, ok_id = _run("traces", "upload", str(traces), "--format", "openai", *auth).splitlines()

    listed = [json.loads(line) for line in _run("traces", "list", "--task-key", TASK_KEY, *auth).splitlines()]
    assert {t["trace_id"] for t in listed} == {failed_id, ok_id}
    failures = _run("traces", "list", "--outcome", "failure", "--limit", "5", *auth).splitlines()
    assert [json.loads(line)["trace_id"] for line in failures] == [failed_id]

    async def critic_and_splicer_did_their_part() -> str:
        store = await open_store(pg_url)
        try:
            return await critique_trace(store, project, failed_id)
        finally:
            await store.close()

    sample_id = asyncio.run(critic_and_splicer_did_their_part())
    dataset_id = _run("datasets", "create", "cli", "--source", "traces", "--kind", "revision", *auth)
    (shown,) = [json.loads(line) for line in _run("datasets", "list", "--name", "cli", *auth).splitlines()]
    assert shown["dataset_id"] == dataset_id and shown["samples"] == 1 and shown["version"] == 1
    out = tmp_path / "out" / "cli.jsonl"
    _run("datasets", "download", dataset_id, "--out", str(out), "--format", "samples", *auth)
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["sample_id"] == sample_id and record["provenance"]["trace_id"] == failed_id
    parquet = tmp_path / "out" / "cli.parquet"
    _run("datasets", "download", dataset_id, "--out", str(parquet), "--format", "parquet", *auth)
    assert pq.read_table(parquet).column("sample_id").to_pylist() == [sample_id]
    folder = tmp_path / "out" / "cli-hf"  # a Hugging Face datasets folder, made by the CLI
    _run("datasets", "download", dataset_id, "--out", str(folder), "--format", "hf", *auth)
    (row,) = datasets.load_from_disk(str(folder))
    assert row["sample_id"] == sample_id and [m["weight"] for m in row["messages"]][-1] == 1
    assert not list(out.parent.glob(".*.part"))

    empty = CliRunner().invoke(cli_app, ["datasets", "create", "none", "--trace", "nope", *auth])
    assert empty.exit_code == 1 and "422" in empty.output and "allow_empty" in empty.output
