"""Owns the trace-dataset and listing commands: ``agentr datasets create|list|download`` and
``agentr traces list``, over HTTP against a running ``agentr serve`` (same ``--api`` / ``--key``
options as agentr.cli.api_client).

``datasets create NAME`` builds a named, versioned dataset from a query (``--task-key``,
``--source``, ``--kind``, ``--outcome``, ``--strategy``, ``--since``, ``--until``, ``--trace``,
``--run``) and prints its id; ``datasets download ID --out FILE --format F`` streams it into a file
(temporary file, then rename); ``datasets list`` and ``traces list`` print one JSON object per line
and follow the API's cursors to the end (or ``--limit`` items).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from agentr.cli.api_client import ApiOption, KeyOption, _call, _check, _client
from agentr.cli.client_traces import traces_app

datasets_app = typer.Typer(help="Build, list and download named trace datasets.", no_args_is_help=True)


def _pages(api: str, key: str, path: str, params: dict[str, Any], limit: int | None) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    with _client(api, key) as client:
        while True:
            query = {k: v for k, v in params.items() if v is not None}
            query["limit"] = min(500, limit - len(items)) if limit else 500
            if cursor:
                query["cursor"] = cursor
            page = _call(lambda q=query: _check(client.get(path, params=q)).json())
            items.extend(page["items"])
            cursor = page.get("next_cursor")
            if not cursor or (limit and len(items) >= limit):
                return items[:limit] if limit else items


@datasets_app.command("create")
def datasets_create(
    name: str = typer.Argument(..., help="Dataset name; the same name again makes the next version."),
    task_key: list[str] = typer.Option([], "--task-key", help="Only these task keys (repeat)."),
    source: list[str] = typer.Option([], "--source", help="traces and/or runs (repeat; default both)."),
    kind: list[str] = typer.Option([], "--kind", help="revision and/or good (repeat; default both)."),
    outcome: str | None = typer.Option(None, "--outcome", help="success or failure (trace samples)."),
    strategy: list[str] = typer.Option([], "--strategy", help="Critic strategy of revisions (repeat)."),
    since: str | None = typer.Option(None, "--since", help="ISO time with zone, inclusive."),
    until: str | None = typer.Option(None, "--until", help="ISO time with zone, exclusive."),
    trace: list[str] = typer.Option([], "--trace", help="Only these trace ids (repeat)."),
    run: list[str] = typer.Option([], "--run", help="Only these run ids (repeat)."),
    allow_empty: bool = typer.Option(False, "--allow-empty", help="Create it even when nothing matches."),
    include_reasoning: bool = typer.Option(
        False,
        "--include-reasoning",
        help="Train on reasoning: downloads put it in a <think> block before the assistant content.",
    ),
    api: str = ApiOption,
    key: str = KeyOption,
) -> None:
    """Build a dataset from a query over the event log; prints its id (details on stderr)."""
    query: dict[str, Any] = {
        "task_keys": task_key,
        "critic_strategies": strategy,
        "trace_ids": trace,
        "run_ids": run,
        "outcome": outcome,
        "since": since,
        "until": until,
    }
    if source:
        query["sources"] = source
    if kind:
        query["kinds"] = kind
    if include_reasoning:
        query["include_reasoning"] = True
    body: dict[str, Any] = {
        "name": name,
        "query": {k: v for k, v in query.items() if v not in (None, [])},
        "allow_empty": allow_empty,
    }
    with _client(api, key) as client:
        made = _call(lambda: _check(client.post("/v1/datasets", json=body)).json())
    typer.echo(
        f"dataset {made['name']} v{made['version']}: {made['samples']} samples "
        f"({made['revisions']} revisions, {made['goods']} good), log position {made['log_position']}",
        err=True,
    )
    typer.echo(made["dataset_id"])


@datasets_app.command("list")
def datasets_list(
    name: str | None = typer.Option(None, "--name", help="Only versions of this name."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="At most this many."),
    api: str = ApiOption,
    key: str = KeyOption,
) -> None:
    """The project's datasets, newest first, one JSON object per line."""
    for item in _pages(api, key, "/v1/datasets", {"name": name}, limit):
        typer.echo(json.dumps(item, sort_keys=True))


@datasets_app.command("download")
def datasets_download(
    dataset_id: str = typer.Argument(..., help="The dataset id (from datasets create / list)."),
    out: Path = typer.Option(..., "--out", "-o", help="File (or hf folder) to write (replaced atomically)."),
    fmt: str = typer.Option(
        "openai",
        "--format",
        help="openai, sharegpt, samples, parquet; dpo, prm (from the pairs behind its revision samples); "
        "tokenized (Parquet for --model), hf (a datasets folder). See docs/datasets.md.",
    ),
    model: str | None = typer.Option(None, "--model", help="Tokenizer for tokenized / hf (folder or id)."),
    max_length: int = typer.Option(1024, "--max-length", min=1, help="Tokens per sample (as the trainer)."),
    api: str = ApiOption,
    key: str = KeyOption,
) -> None:
    """Stream a dataset into a file (a temporary file, renamed when complete)."""
    from agentr.cli.client_runs import download_as

    path = f"/v1/datasets/{dataset_id}/download"
    written = download_as(api, key, path, {}, fmt, out, model, max_length, f"dataset {dataset_id}")
    typer.echo(f"wrote {out} ({written}, {fmt})")


@traces_app.command("list")
def traces_list(
    task_key: str | None = typer.Option(None, "--task-key", help="Only this task key."),
    outcome: str | None = typer.Option(None, "--outcome", help="success, failure or unknown."),
    status: str | None = typer.Option(None, "--status", help="ingested, critiqued, revised, ..."),
    since: str | None = typer.Option(None, "--since", help="Created at or after (ISO time)."),
    until: str | None = typer.Option(None, "--until", help="Created before (ISO time)."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="At most this many."),
    api: str = ApiOption,
    key: str = KeyOption,
) -> None:
    """The project's traces, newest first, one JSON object per line."""
    params = {"task_key": task_key, "outcome": outcome, "status": status, "since": since, "until": until}
    for item in _pages(api, key, "/v1/traces", params, limit):
        typer.echo(json.dumps(item, sort_keys=True))


def register(app: typer.Typer) -> None:
    app.add_typer(datasets_app, name="datasets")
