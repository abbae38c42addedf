"""Owns the ``agentr`` command line: the root Typer app and the registration of its command groups.

Each command module (``agentr/cli/<name>.py``) exposes ``register(app)``; heavy imports (torch,
transformers, FastAPI) happen inside the commands so ``agentr --help`` stays fast.
"""

from __future__ import annotations

import importlib

import typer

COMMAND_MODULES = ("db", "worker", "env", "model", "run", "serve", "proxy", "client", "datasets", "up")

app = typer.Typer(
    name="agentr",
    help="agentr: Agent-R self-correction training as a service (MCTS -> first-error critic -> "
    "revision splicing -> SFT).",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


def _register_all() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(f"agentr.cli.{name}").register(app)


_register_all()


def main() -> None:
    app()
