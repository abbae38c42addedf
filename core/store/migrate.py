"""Owns running the Alembic migrations in ``migrations/`` from Python (``agentr db ...``, tests).

The migration scripts live at the repository root next to ``alembic.ini``; an editable install
imports ``core`` from the repository, so they are found relative to this package. A different
location can be given with ``AGENTR_MIGRATIONS``. These functions are synchronous (Alembic's API
is); the async ``env.py`` runs its own event loop, so call them outside a running loop (or in a
worker thread: ``await asyncio.to_thread(upgrade, url)``).
"""

from __future__ import annotations

import os
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

REPO_ROOT = Path(__file__).resolve().parents[2]


def migrations_dir() -> Path:
    """The folder holding env.py and versions/; raises FileNotFoundError naming where it looked."""
    folder = Path(os.environ.get("AGENTR_MIGRATIONS", REPO_ROOT / "migrations"))
    if not (folder / "env.py").is_file():
        raise FileNotFoundError(
            f"agentr migrations not found at {folder} (set AGENTR_MIGRATIONS to the migrations folder)"
        )
    return folder


def alembic_config(url: str) -> Config:
    """An Alembic Config for ``url`` that does not depend on the working directory."""
    ini = REPO_ROOT / "alembic.ini"
    config = Config(str(ini)) if ini.is_file() else Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(url), revision)


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


async def current_revision(url: str) -> str | None:
    """The revision the database at ``url`` is at (None: never migrated)."""
    from core.store.factory import make_engine

    engine = make_engine(url)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(lambda sync: MigrationContext.configure(sync).get_current_revision())
    finally:
        await engine.dispose()
