"""Owns the run and dataset client commands: ``agentr runs submit|follow|list|cancel`` and
``agentr dataset download``, over HTTP against a running ``agentr serve``."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import typer

from agentr.cli.api_client import (
    TERMINAL,
    ApiOption,
    KeyOption,
    _call,
    _check,
    _client,
    _fail,
)
from agentr.cli.export_formats import FORMAT_HELP, LOCAL_FORMATS, convert_download

# ------------------------------------------------------------------------------------------------
# runs
# ------------------------------------------------------------------------------------------------

runs_app = typer.Typer(help="Submit, follow and list runs.", no_args_is_help=True)


@runs_app.command("submit")
def runs_submit(
    model: str = typer.Option(..., "--model", help="Local model folder or OpenAI-compatible base URL."),
    env: str = typer.Option("textcraft", "--env", help="Environment URI."),
    task: list[str] = typer.Option([], "--task", help="Task id (repeat); default: the split."),
    split: str = typer.Option("train", "--split", help="Named split when no --task is given."),
    max_tasks: int | None = typer.Option(None, "--max-tasks", help="Cap on tasks per iteration."),
    iterations: int = typer.Option(3, "--iterations", help="Search -> train iterations."),
    alpha: list[float] = typer.Option(
        [], "--alpha", help="Alpha per iteration (repeat); default 0.5 0.7 1.0."
    ),
    beta: float = typer.Option(0.2, "--beta", help="Bad reward <= good reward - beta."),
    eta: float = typer.Option(0.2, "--eta", help="Agent share of the mix (paper's eta; 1 = agent only)."),
    strategy: str = typer.Option(
        "first",
        "--critic",
        help="Critic strategy: first (default: the first action after the divergence, the most accurate "
        "measured on search pairs; the model critic is measured beside it), model, replay, direct, rules, "
        "reflect or value (docs/critic.md).",
    ),
    data_only: bool = typer.Option(
        False, "--data-only", help="Stop once each dataset is ready (no training)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of everything random in the run."),
    config: Path | None = typer.Option(
        None, "--config", help="JSON file with more RunConfig fields (flags given here override it)."
    ),
    follow: bool = typer.Option(False, "--follow", help="Then follow the run with progress bars."),
    api: str = ApiOption,
    key: str = KeyOption,
) -> None:
    """Submit a run; prints its id (and follows it with --follow)."""
    body: dict[str, Any] = {}
    if config is not None:
        if not config.is_file():
            _fail(FileNotFoundError(f"config file not found: {config}"))
        try:
            body = json.loads(config.read_text())
        except json.JSONDecodeError as exc:
            _fail(ValueError(f"{config}: not JSON: {exc}"))
    body.update(
        {
            "model": model,
            "env": env,
            "split": split,
            "iterations": iterations,
            "beta": beta,
            "eta": eta,
            "seed": seed,
        }
    )
    body["critic"] = {"strategy": strategy}
    body["data_only"] = data_only
    if task:
        body["tasks"] = task
    if max_tasks is not None:
        body["max_tasks"] = max_tasks
    if alpha:
        body["alpha_schedule"] = alpha
    with _client(api, key) as client:
        run = _call(lambda: _check(client.post("/v1/runs", json=body)).json())
    typer.echo(run["run_id"])
    if follow:
        _follow(api, key, run["run_id"], interval=2.0)


def _follow(api: str, key: str, run_id: str, interval: float) -> str:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    tasks: dict[int, Any] = {}
    with (
        _client(api, key) as client,
        Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            console=console,
        ) as progress,
    ):
        while True:
            run = _call(lambda: _check(client.get(f"/v1/runs/{run_id}")).json())
            for it in run["iterations"]:
                done = it["trees_done"] + it["trees_failed"]
                total = max(it["trees_expected"], 1)
                status = (
                    f"{it['status']}  pairs {it['pairs']}  revisions {it['revisions']}  goods {it['goods']}"
                )
                if it["iteration"] not in tasks:
                    tasks[it["iteration"]] = progress.add_task(
                        f"iteration {it['iteration']}", total=total, status=status
                    )
                progress.update(tasks[it["iteration"]], completed=done, total=total, status=status)
            if run["status"] in TERMINAL:
                break
            time.sleep(interval)
    colour = typer.colors.GREEN if run["status"] == "completed" else typer.colors.RED
    typer.secho(
        f"run {run_id}: {run['status']}" + (f" ({run['reason']})" if run.get("reason") else ""), fg=colour
    )
    return str(run["status"])


@runs_app.command("follow")
def runs_follow(
    run_id: str = typer.Argument(..., help="The run id."),
    interval: float = typer.Option(2.0, "--interval", min=0.1, help="Seconds between polls."),
    api: str = ApiOption,
    key: str = KeyOption,
) -> None:
    """Follow a run with a progress bar per iteration until it ends (exit 1 unless it completed)."""
    if _follow(api, key, run_id, interval) != "completed":
        raise typer.Exit(1)


@runs_app.command("list")
def runs_list(
    limit: int = typer.Option(20, "--limit", min=1, max=500, help="How many runs."),
    status: str | None = typer.Option(None, "--status", help="Only runs in this status."),
    api: str = ApiOption,
    key: str = KeyOption,
) -> None:
    """List the project's runs, newest first."""
    from rich.console import Console
    from rich.table import Table

    params: dict[str, Any] = {"limit": limit} | ({"status": status} if status else {})
    with _client(api, key) as client:
        page = _call(lambda: _check(client.get("/v1/runs", params=params)).json())
    table = Table("run id", "status", "iteration", "created")
    for run in page["items"]:
        table.add_row(run["run_id"], run["status"], str(run["current_iteration"]), run["created_at"])
    Console().print(table)


@runs_app.command("cancel")
def runs_cancel(
    run_id: str = typer.Argument(..., help="The run id."),
    reason: str = typer.Option("cancelled by user", "--reason", help="Recorded with the cancellation."),
    api: str = ApiOption,
    key: str = KeyOption,
) -> None:
    """Cancel a run."""
    with _client(api, key) as client:
        _call(lambda: _check(client.post(f"/v1/runs/{run_id}/cancel", json={"reason": reason})))
    typer.echo(f"run {run_id}: cancellation requested")


# ------------------------------------------------------------------------------------------------
# dataset
# ------------------------------------------------------------------------------------------------

dataset_app = typer.Typer(help="Download datasets of finished iterations.", no_args_is_help=True)


@dataset_app.command("download")
def dataset_download(
    run_id: str = typer.Argument(..., help="The run id."),
    iteration: int = typer.Argument(..., help="0-based iteration."),
    out: Path = typer.Option(..., "--out", "-o", help="File (or hf folder) to write (replaced atomically)."),
    fmt: str = typer.Option("openai", "--format", help=FORMAT_HELP),
    partial: bool = typer.Option(False, "--partial", help="Export what exists before the dataset is ready."),
    model: str | None = typer.Option(None, "--model", help="Tokenizer for tokenized / hf (folder or id)."),
    max_length: int = typer.Option(1024, "--max-length", min=1, help="Tokens per sample (as the trainer)."),
    api: str = ApiOption,
    key: str = KeyOption,
) -> None:
    """Stream an iteration's dataset into a file (written to a temporary file, then renamed)."""
    path = f"/v1/runs/{run_id}/iterations/{iteration}/dataset"
    params = {"partial": str(partial).lower()}
    label = f"dataset {run_id} #{iteration}"
    size = download_as(api, key, path, params, fmt, out, model, max_length, label, source="openai")
    typer.echo(f"wrote {out} ({size}, {fmt})")


def download_as(
    api: str,
    key: str,
    path: str,
    params: dict[str, str],
    fmt: str,
    out: Path,
    model: str | None,
    max_length: int,
    label: str,
    source: str = "samples",
) -> str:
    """Download ``path`` in ``fmt`` into ``out``; tokenized / hf are made here (train_service.
    tokenized_export) from the ``source`` format the API serves: ``samples`` (sample ids kept) or
    ``openai`` (iteration downloads). Returns what was written, in words."""
    if fmt not in LOCAL_FORMATS:
        return f"{_stream_to(api, key, path, params | {'format': fmt}, out, label)} bytes"
    with tempfile.TemporaryDirectory() as folder:
        chat = Path(folder) / "chat.jsonl"
        _stream_to(api, key, path, params | {"format": source}, chat, label)
        try:
            rows = convert_download(chat, source, fmt, out, model, max_length)
        except (ValueError, OSError) as exc:
            typer.echo(f"cannot write {fmt}: {exc}", err=True)
            raise typer.Exit(2) from None
    return f"{rows} rows"


def _stream_to(api: str, key: str, path: str, params: dict[str, str], out: Path, label: str) -> int:
    from rich.progress import DownloadColumn, Progress, TransferSpeedColumn

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.part")

    def download() -> int:
        with _client(api, key) as client, client.stream("GET", path, params=params) as response:
            if response.status_code >= 400:
                response.read()
                _check(response)
            written = 0
            with Progress(
                *Progress.get_default_columns(), DownloadColumn(), TransferSpeedColumn()
            ) as progress:
                task = progress.add_task(label, total=None)
                with tmp.open("wb") as handle:
                    for chunk in response.iter_bytes():
                        handle.write(chunk)
                        written += len(chunk)
                        progress.update(task, completed=written)
            os.replace(tmp, out)
            return written

    try:
        return _call(download)
    finally:
        tmp.unlink(missing_ok=True)
