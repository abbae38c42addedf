"""Owns the ``agentr proxy`` command: the capture proxy as a process of its own (api/proxy/app.py)."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command("proxy")
    def proxy(
        upstream: str = typer.Option(
            ..., "--upstream", help="OpenAI-compatible base URL to forward to (e.g. http://vllm:8000/v1)."
        ),
        host: str = typer.Option("127.0.0.1", "--host", help="Address to bind."),
        port: int = typer.Option(8001, "--port", help="Port to bind."),
        spool: Path | None = typer.Option(
            None,
            "--spool",
            help="Folder where calls wait while the store is down (default AGENTR_HOME/proxy-spool).",
        ),
    ) -> None:
        """Capture a production agent's model calls with no change to its code.

        Point the agent's OpenAI client at http://HOST:PORT/v1/proxy/openai/v1 with a project key
        (ingest scope) as its api_key. Chat completions are forwarded to --upstream (its key, if it
        needs one, from AGENTR_PROXY_UPSTREAM_KEY: never on the command line, never in traces) and
        every call is recorded into a trace (AGENTR_DATABASE_URL). Set the outcome later with
        `agentr traces set-outcome TRACE_ID success|failure` (the trace id is in each response's
        X-Agentr-Trace-Id header). See docs/proxy.md.
        """
        import uvicorn

        from api.proxy.app import create_proxy_app
        from api.proxy.routes import load_proxy_settings
        from api.server import uvicorn_config
        from core.runtime.logging import configure_logging
        from core.runtime.settings import load_settings

        settings = load_settings()
        configure_logging(settings.log_level, settings.log_json)
        overrides: dict[str, object] = {"upstream_url": upstream}
        if spool is not None:
            overrides["spool_dir"] = spool
        proxy_settings = load_proxy_settings(**overrides)
        # as `agentr serve` runs: proxy headers believed only from AGENTR_TRUSTED_PROXIES (the
        # failed-auth limit counts the TCP peer otherwise), no server header, our own access log
        app = create_proxy_app(settings, proxy_settings)
        uvicorn.Server(uvicorn_config(app, settings, host, port)).run()
