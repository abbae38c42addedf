"""Owns the ``agentr db`` command group: schema migrations and read-model rebuilds."""

from __future__ import annotations

import asyncio
import logging

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

db_app = typer.Typer(help="Database schema (Alembic migrations) and projections.", no_args_is_help=True)
console = Console(stderr=True)
log = logging.getLogger("agentr.db")

UrlOption = typer.Option(
    None,
    "--url",
    help="Database URL (postgresql+asyncpg://... or sqlite+aiosqlite:///...). "
    "Default: AGENTR_DATABASE_URL, else the embedded SQLite file under AGENTR_HOME.",
)


def _url(url: str | None) -> str:
    if url:
        return url
    from core.runtime.settings import load_settings

    return load_settings().effective_database_url


def _safe(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _fail(message: str) -> typer.Exit:
    console.print(f"[red]error:[/red] {message}")
    return typer.Exit(code=1)


@db_app.command("upgrade")
def upgrade(
    url: str | None = UrlOption,
    revision: str = typer.Option("head", "--revision", "-r", help="Target revision."),
) -> None:
    """Apply migrations up to REVISION (default: the newest)."""
    from core.store import migrate

    target = _url(url)
    try:
        migrate.upgrade(target, revision)
        now = asyncio.run(migrate.current_revision(target))
    except Exception as exc:
        raise _fail(f"upgrade of {_safe(target)} failed: {exc}") from exc
    console.print(f"database {_safe(target)} is at revision [bold]{now}[/bold]")


@db_app.command("downgrade")
def downgrade(
    url: str | None = UrlOption,
    revision: str = typer.Option(..., "--revision", "-r", help="Target revision ('base' drops everything)."),
) -> None:
    """Revert migrations down to REVISION."""
    from core.store import migrate

    target = _url(url)
    try:
        migrate.downgrade(target, revision)
        now = asyncio.run(migrate.current_revision(target))
    except Exception as exc:
        raise _fail(f"downgrade of {_safe(target)} failed: {exc}") from exc
    console.print(f"database {_safe(target)} is at revision [bold]{now or 'base'}[/bold]")


@db_app.command("current")
def current(url: str | None = UrlOption) -> None:
    """Print the database's migration revision and the newest one available."""
    from core.store import migrate

    target = _url(url)
    try:
        now = asyncio.run(migrate.current_revision(target))
    except Exception as exc:
        raise _fail(f"cannot read the revision of {_safe(target)}: {exc}") from exc
    head = migrate.head_revision()
    state = "up to date" if now == head else "needs `agentr db upgrade`"
    typer.echo(f"current: {now or 'base'}  head: {head}  ({state})")


@db_app.command("rebuild")
def rebuild(url: str | None = UrlOption) -> None:
    """Empty every projection (read model) table and replay all events into it, in one transaction."""
    from core.store.factory import open_store
    from core.store.projections import rebuild as rebuild_projections

    target = _url(url)

    async def go() -> int:
        store = await open_store(target, create_tables=target.startswith("sqlite"))
        try:
            with Progress(
                TextColumn("replaying events"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
            ) as progress:
                task = progress.add_task("replay", total=await store.last_position() or 1)
                return await rebuild_projections(
                    store, progress=lambda done, total: progress.update(task, completed=done, total=total)
                )
        finally:
            await store.close()

    try:
        replayed = asyncio.run(go())
    except Exception as exc:
        raise _fail(f"rebuild of {_safe(target)} failed: {exc}") from exc
    console.print(f"rebuilt the projections of {_safe(target)} from {replayed} events")


def register(app: typer.Typer) -> None:
    app.add_typer(db_app, name="db")
