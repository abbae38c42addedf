"""Owns the API client command groups: ``agentr runs|dataset|traces|projects|keys ...`` over HTTP
(``register``; the commands: ``agentr.cli.client_runs``, ``agentr.cli.client_traces``).

Every command talks to a running ``agentr serve`` at ``--api`` (``AGENTR_API_URL``, default
http://127.0.0.1:8000) with the key in ``--key`` (``AGENTR_API_KEY``). Uploads send an
Idempotency-Key derived from their content, so re-running a failed command never duplicates data.
"""

from __future__ import annotations

import typer

from agentr.cli.api_client import (
    API_KEY_ENV,
    API_URL_ENV,
    TERMINAL,
    ApiCallError,
    ApiOption,
    KeyOption,
)
from agentr.cli.client_runs import dataset_app, runs_app
from agentr.cli.client_traces import keys_app, projects_app, traces_app

__all__ = [
    "API_KEY_ENV",
    "API_URL_ENV",
    "TERMINAL",
    "ApiCallError",
    "ApiOption",
    "KeyOption",
    "dataset_app",
    "keys_app",
    "projects_app",
    "register",
    "runs_app",
    "traces_app",
]


def register(app: typer.Typer) -> None:
    app.add_typer(runs_app, name="runs")
    app.add_typer(dataset_app, name="dataset")
    app.add_typer(traces_app, name="traces")
    app.add_typer(projects_app, name="projects")
    app.add_typer(keys_app, name="keys")
