"""Owns the trace, project and key client commands: ``agentr traces upload|set-outcome``,
``agentr projects create``, ``agentr keys create``, over HTTP against a running ``agentr serve``.
Uploads send an Idempotency-Key derived from their content, so re-running a failed command never
duplicates data."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import typer

from agentr.cli.api_client import (
    ApiOption,
    KeyOption,
    _call,
    _check,
    _client,
    _fail,
)

# ------------------------------------------------------------------------------------------------
# traces
# ------------------------------------------------------------------------------------------------

traces_app = typer.Typer(help="Upload production traces for critique and revision.", no_args_is_help=True)


def _read_traces(path: Path) -> list[Any]:
    """A JSON list, ``{"traces": [...]}``, one JSON trace, or JSONL (one trace per line)."""
    if not path.is_file():
        raise FileNotFoundError(f"traces file not found: {path}")
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if isinstance(data, list):
        return data
    if isinstance(data, dict):
        traces = data.get("traces")
        return traces if isinstance(traces, list) else [data]
    items = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                items.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not JSON: {exc}") from None
    return items


@traces_app.command("upload")
def traces_upload(
    path: Path = typer.Argument(..., help="JSONL (one trace per line) or a JSON list / {'traces': [...]}."),
    fmt: str = typer.Option(
        ...,
        "--format",
        help="openai, openai-legacy, openai-responses, otel, otlp (OTLP/JSON export requests, one per "
        "line, as an OpenTelemetry Collector file exporter writes them), sharegpt or langfuse "
        "({trace, observations}); docs/traces.md.",
    ),
    batch_size: int = typer.Option(500, "--batch-size", min=1, max=10_000, help="Traces per request."),
    api: str = ApiOption,
    key: str = KeyOption,
) -> None:
    """Upload traces in batches; each batch is stored completely or not at all. Prints trace ids."""
    try:
        items = _read_traces(path)
    except (OSError, ValueError) as exc:
        _fail(exc)
    if not items:
        _fail(ValueError(f"{path}: no traces"))
    ids: list[str] = []
    with _client(api, key) as client:
        for start in range(0, len(items), batch_size):
            batch = items[start : start + batch_size]
            body = {"format": fmt, "traces": batch}
            digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:32]
            headers = {"Idempotency-Key": f"traces-{digest}"}
            result = _call(
                lambda b=body, h=headers: _check(client.post("/v1/traces", json=b, headers=h)).json()
            )
            ids.extend(result["trace_ids"])
            typer.echo(f"batch {start // batch_size + 1}: {len(batch)} traces accepted", err=True)
    for trace_id in ids:
        typer.echo(trace_id)


@traces_app.command("set-outcome")
def traces_set_outcome(
    trace_id: str = typer.Argument(..., help="A trace ingested without an outcome."),
    outcome: str = typer.Argument(..., help="success, failure, or a reward in [0, 1] (success only at 1)."),
    reward: float | None = typer.Option(None, "--reward", min=0.0, max=1.0, help="Final reward in [0, 1]."),
    api: str = ApiOption,
    key: str = KeyOption,
) -> None:
    """Set the outcome of a trace that waits for one (PATCH /v1/traces/{id}); the critic then runs."""
    value: Any = outcome
    if outcome not in ("success", "failure"):
        try:
            value = float(outcome)
        except ValueError:
            _fail(ValueError(f"outcome {outcome!r}: send success, failure or a reward in [0, 1]"))
    body = {"outcome": value, "reward": reward}
    with _client(api, key) as client:
        result = _call(lambda: _check(client.patch(f"/v1/traces/{trace_id}", json=body)).json())
    changed = "set" if result["changed"] else "unchanged (already set)"
    typer.echo(f"{result['trace_id']}: {result['outcome']} (reward {result['reward']}) {changed}")


# ------------------------------------------------------------------------------------------------
# projects and keys
# ------------------------------------------------------------------------------------------------

projects_app = typer.Typer(help="Create projects (bootstrap admin key).", no_args_is_help=True)
keys_app = typer.Typer(help="Issue API keys for a project.", no_args_is_help=True)


@projects_app.command("create")
def projects_create(
    name: str = typer.Argument(..., help="Project name."),
    api: str = ApiOption,
    key: str = KeyOption,
) -> None:
    """Create a project (needs the AGENTR_ADMIN_KEY of the server); prints its id."""
    with _client(api, key) as client:
        project = _call(lambda: _check(client.post("/v1/projects", json={"name": name})).json())
    typer.echo(project["project_id"])


@keys_app.command("create")
def keys_create(
    project_id: str = typer.Argument(..., help="The project the key belongs to."),
    scope: list[str] = typer.Option(["read"], "--scope", help="read, ingest, run, review or admin (repeat)."),
    label: str = typer.Option("", "--label", help="Shown in key listings."),
    api: str = ApiOption,
    key: str = KeyOption,
) -> None:
    """Issue a key and print it. It is shown only this once: store it now."""
    with _client(api, key) as client:
        issued = _call(
            lambda: _check(
                client.post(f"/v1/projects/{project_id}/keys", json={"scopes": scope, "label": label})
            ).json()
        )
    typer.secho(f"key {issued['key_id']} (scopes {', '.join(issued['scopes'])}); shown once:", err=True)
    typer.echo(issued["key"])
