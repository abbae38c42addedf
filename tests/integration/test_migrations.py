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


async def _insert_events(conn: Any, stream_id: str, events: list[Any]) -> None:
    """Append ``events`` to ``stream_id`` as rows of the ``events`` table (before a migration runs)."""
    import sqlalchemy as sa

    from core.domain.serde import to_dict

    for version, event in enumerate(events):
        await conn.execute(
            sa.text(
                "INSERT INTO events (event_id, stream_id, stream_version, event_type, "
                "event_version, data, metadata, recorded_at) VALUES (:id, :stream, :v, "
                ":type, :ev, :data, :meta, CURRENT_TIMESTAMP)"
            ).bindparams(sa.bindparam("data", type_=sa.JSON), sa.bindparam("meta", type_=sa.JSON)),
            {
                "id": f"{stream_id}-e{version}",
                "stream": stream_id,
                "v": version,
                "type": event.event_type,
                "ev": event.event_version,
                "data": to_dict(event),
                "meta": {"producer": "test"},
            },
        )


def test_review_signals_migration_fills_pairs_from_the_event_log(empty_db: str) -> None:
    """0004 adds the review queue's columns to ``pairs`` and fills them for pairs judged before it
    (from each FirstErrorMarked, FirstErrorCorrected counted), so no rebuild is needed."""
    import sqlalchemy as sa

    from core.domain import events as ev

    migrate.upgrade(empty_db, "0003_traces")
    verdicts = (
        ev.StepVerdict(1, "good", {"good": -0.2, "bad": -2.0}),
        ev.StepVerdict(2, "bad", {"good": -1.0, "bad": -0.7}),
        ev.StepVerdict(3, "uncertain", {}),
    )
    marked = ev.FirstErrorMarked("p1", "model", 2, verdicts, oracle_index=1)
    corrected = ev.FirstErrorCorrected("p1", "c1", "agr_x", "2026-12-03T00:00:00+00:00", 2, 1, "")

    async def seed_and_read(before_upgrade: bool) -> list[Any]:
        engine = make_engine(empty_db)
        try:
            async with engine.begin() as conn:
                if before_upgrade:
                    await conn.execute(
                        sa.text(
                            "INSERT INTO pairs (pair_id, iteration, source, task_key, status, shared_steps) "
                            "VALUES ('p1', 0, 'search', 'k', 'critiqued', 1), "
                            "('p2', 0, 'search', 'k', 'found', 1)"
                        )
                    )
                    await _insert_events(conn, "pair-p1", [marked, corrected])
                    return []
                rows = await conn.execute(
                    sa.text(
                        "SELECT pair_id, critic_index, oracle_index, fallback, uncertain, margin, "
                        "corrections FROM pairs ORDER BY pair_id"
                    )
                )
                return [tuple(row) for row in rows]
        finally:
            await engine.dispose()

    asyncio.run(seed_and_read(True))
    migrate.upgrade(empty_db)
    (p1, p2) = asyncio.run(seed_and_read(False))
    assert p1[:5] == ("p1", 2, 1, False, 1) and abs(p1[5] - 0.3) < 1e-9 and p1[6] == 1
    assert p2 == ("p2", None, None, None, None, None, 0)


def test_claims_and_verdicts_migration_fills_agreement_from_the_event_log(empty_db: str) -> None:
    """0009 adds who holds a pair and how its reviewers agree, and fills them (with ``pair_verdicts``)
    for pairs reviewed before it, refolded from their streams."""
    import sqlalchemy as sa

    from core.domain import events as ev
    from tests.unit.test_review_domain import MARKED, PAIR

    migrate.upgrade(empty_db, "0008_pairs_review_priority")
    at = "2026-12-03T00:00:00+00:00"
    stream = [
        PAIR,
        MARKED,
        ev.FirstErrorCorrected("p", "c1", "agr_ann", at, 3, 2, "", reviewer_key="k-ann"),
        ev.FirstErrorAccepted("p", "a1", "agr_bob", at, 2),  # an older event: no key id, the name stands
    ]

    async def seed_and_read(before_upgrade: bool) -> list[Any]:
        engine = make_engine(empty_db)
        try:
            async with engine.begin() as conn:
                if before_upgrade:
                    await conn.execute(
                        sa.text(
                            "INSERT INTO pairs (pair_id, project_id, iteration, source, task_key, status, "
                            "shared_steps) VALUES ('p', 'proj', 0, 'search', 'k', 'critiqued', 1)"
                        )
                    )
                    await _insert_events(conn, "pair-p", stream)
                    return []
                pair = (
                    await conn.execute(
                        sa.text("SELECT reviewers, agree, agreed_index, disputed, claimed_key FROM pairs")
                    )
                ).one()
                verdicts = await conn.execute(
                    sa.text(
                        "SELECT reviewer_key, project_id, kind, transition_index, critic_index "
                        "FROM pair_verdicts ORDER BY reviewer_key"
                    )
                )
                return [tuple(pair), *(tuple(row) for row in verdicts)]
        finally:
            await engine.dispose()

    asyncio.run(seed_and_read(True))
    migrate.upgrade(empty_db)
    pair, *verdicts = asyncio.run(seed_and_read(False))
    assert pair == (2, 2, 2, False, None)
    assert verdicts == [
        ("agr_bob", "proj", "acceptance", 2, 3),
        ("k-ann", "proj", "correction", 2, 3),
    ]
