"""Alembic migrations: upgrade -> downgrade base -> upgrade on an empty database, then no drift."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect
from typer.testing import CliRunner

from agentr.cli.db import db_app
from core.store import migrate
from core.store.factory import make_engine
from core.store.tables import metadata


def _inspect(url: str) -> tuple[list[str], list[Any]]:
    async def go() -> tuple[list[str], list[Any]]:
        engine = make_engine(url)
        try:
            async with engine.connect() as conn:

                def check(sync: Any) -> tuple[list[str], list[Any]]:
                    tables = sorted(inspect(sync).get_table_names())
                    context = MigrationContext.configure(sync, opts={"compare_type": True})
                    return tables, compare_metadata(context, metadata)

                return await conn.run_sync(check)
        finally:
            await engine.dispose()

    return asyncio.run(go())


@pytest.fixture(params=["postgresql", "sqlite"])
def empty_db(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("pg_url" if request.param == "postgresql" else "sqlite_url"))


def test_upgrade_downgrade_upgrade_without_drift(empty_db: str) -> None:
    expected = sorted(metadata.tables)
    assert asyncio.run(migrate.current_revision(empty_db)) is None

    migrate.upgrade(empty_db)
    tables, _ = _inspect(empty_db)
    assert set(expected) <= set(tables)
    assert asyncio.run(migrate.current_revision(empty_db)) == migrate.head_revision()

    migrate.downgrade(empty_db, "base")
    tables, _ = _inspect(empty_db)
    assert [t for t in tables if t != "alembic_version"] == []
    assert asyncio.run(migrate.current_revision(empty_db)) is None

    migrate.upgrade(empty_db)
    tables, drift = _inspect(empty_db)
    assert sorted(t for t in tables if t != "alembic_version") == expected
    assert drift == [], f"tables.py and the migrations differ: {drift}"


def test_cli_upgrade_and_current(pg_url: str) -> None:
    runner = CliRunner()
    result = runner.invoke(db_app, ["current", "--url", pg_url])
    assert result.exit_code == 0, result.output
    assert "current: base" in result.output and "needs `agentr db upgrade`" in result.output

    result = runner.invoke(db_app, ["upgrade", "--url", pg_url])
    assert result.exit_code == 0, result.output
    result = runner.invoke(db_app, ["current", "--url", pg_url])
    assert f"current: {migrate.head_revision()}" in result.output and "up to date" in result.output


def test_cli_names_a_bad_url() -> None:
    result = CliRunner().invoke(db_app, ["upgrade", "--url", "mysql://nowhere/db"])
    assert result.exit_code == 1
    assert "mysql" in result.output


def test_migrations_are_found_from_any_directory(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert (migrate.migrations_dir() / "env.py").is_file()
    declared = {
        found.group(1)
        for script in (migrate.migrations_dir() / "versions").glob("*.py")
        if (found := re.search(r"^revision\b[^=]*=\s*['\"]([^'\"]+)['\"]", script.read_text(), re.M))
    }
    assert migrate.head_revision() in declared  # the head is one of the revision scripts found
    monkeypatch.setenv("AGENTR_MIGRATIONS", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="AGENTR_MIGRATIONS"):
        migrate.migrations_dir()
