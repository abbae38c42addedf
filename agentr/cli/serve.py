"""Owns the ``agentr serve`` command: the HTTP API (FastAPI app from ``api.app``) under uvicorn."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve(
        host: str | None = typer.Option(None, "--host", help="Address to bind (default AGENTR_API_HOST)."),
        port: int | None = typer.Option(None, "--port", help="Port to bind (default AGENTR_API_PORT)."),
        create_tables: bool = typer.Option(
            False,
            "--create-tables",
            help="Create missing tables at start-up (the embedded SQLite database always does; "
            "PostgreSQL normally uses `agentr db upgrade`).",
        ),
    ) -> None:
        """Serve the agentr HTTP API: runs, trees, datasets, traces and events under /v1.

        Reads AGENTR_DATABASE_URL, AGENTR_REDIS_URL (checked by /readyz), AGENTR_ADMIN_KEY (the
        bootstrap admin key that creates projects and their keys), AGENTR_MODEL_ROOTS and
        AGENTR_TRUSTED_PROXIES (docs/security.md). OpenAPI at /openapi.json,
        interactive docs at /docs, Prometheus metrics at /metrics. Scale out by running more
        processes behind a load balancer: the API keeps no state of its own.
        """
        import uvicorn

        from api.app import create_app
        from api.server import uvicorn_config
        from core.runtime.logging import configure_logging
        from core.runtime.settings import load_settings

        settings = load_settings()
        configure_logging(settings.log_level, settings.log_json, redact_exceptions=True)
        if not settings.admin_key:
            typer.echo(
                "note: AGENTR_ADMIN_KEY is not set; only existing project keys can call the API.", err=True
            )
        bind_host = host or settings.api_host
        bind_port = port or settings.api_port
        application = create_app(settings, create_tables=True if create_tables else None)
        # proxy headers off unless AGENTR_TRUSTED_PROXIES names the proxies (api/server.py)
        uvicorn.Server(uvicorn_config(application, settings, bind_host, bind_port)).run()
