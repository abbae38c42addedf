"""Alembic environment of agentr: async engine, URL from -x url / AGENTR_DATABASE_URL / settings."""

from __future__ import annotations

import asyncio
import os

from alembic import context
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from core.store.tables import metadata

config = context.config


def database_url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    if url:
        return url
    if os.environ.get("AGENTR_DATABASE_URL"):
        return os.environ["AGENTR_DATABASE_URL"]
    from core.runtime.settings import load_settings

    return load_settings().effective_database_url


def configure(connection: Connection | None = None, url: str | None = None) -> None:
    dialect = connection.dialect.name if connection is not None else url.split(":", 1)[0]
    context.configure(
        connection=connection,
        url=url,
        target_metadata=metadata,
        compare_type=True,
        render_as_batch=dialect.startswith("sqlite"),  # SQLite cannot ALTER most things in place
        literal_binds=connection is None,
    )


def run_with(connection: Connection) -> None:
    configure(connection=connection)
    with context.begin_transaction():
        context.run_migrations()


async def run_online() -> None:
    url = database_url()
    if url.startswith("sqlite"):
        from core.store.factory import make_engine

        engine = make_engine(url)  # creates the folder of the file
    else:
        engine = create_async_engine(url)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(run_with)
            await connection.commit()
    finally:
        await engine.dispose()


if context.is_offline_mode():
    configure(url=database_url())
    with context.begin_transaction():
        context.run_migrations()
else:
    asyncio.run(run_online())
