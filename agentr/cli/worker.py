"""Owns the ``agentr worker NAME`` command (one service, or the relay, as its own process) and
``agentr health``, the probe of a worker container (``core.runtime.health``)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("worker")
    def worker(
        name: str = typer.Argument(
            ...,
            help="search, critic, splice, train, relay — or package.module:function, a factory "
            "build_service(settings, store) -> Service of your own.",
            metavar="NAME",
        ),
        burst: bool = typer.Option(
            False, "--burst", help="Handle everything available, then exit (tests, cron-style runs)."
        ),
        metrics_port: int | None = typer.Option(
            None, "--metrics-port", help="Serve Prometheus metrics on this port at /metrics."
        ),
        consumer: str | None = typer.Option(
            None, "--consumer", help="Consumer name in the group (default: service-host-pid-random)."
        ),
    ) -> None:
        """Run one agentr worker: consume its events from Redis, handle them, commit, ack.

        Reads AGENTR_DATABASE_URL and AGENTR_REDIS_URL (see `agentr --help` and the README).
        SIGTERM or Ctrl-C stops taking new messages and finishes the ones in flight.
        """
        import asyncio

        from agentr.process import WorkerSetupError, run_process
        from core.runtime.logging import configure_logging
        from core.runtime.metrics import serve_metrics
        from core.runtime.settings import load_settings

        settings = load_settings()
        configure_logging(settings.log_level, settings.log_json)
        if metrics_port is not None:
            serve_metrics(metrics_port)
        try:
            done = asyncio.run(run_process(name, settings, burst=burst, consumer=consumer))
        except WorkerSetupError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        typer.echo(f"worker {name}: {done} {'events published' if name == 'relay' else 'messages handled'}")

    @app.command("health")
    def health(
        metrics_port: int | None = typer.Option(
            None, "--metrics-port", help="Also require the worker's metrics endpoint on this local port."
        ),
        timeout: float = typer.Option(5.0, "--timeout", min=0.1, help="Seconds each check may take."),
    ) -> None:
        """Exit 0 when a worker here can do its work: the database (AGENTR_DATABASE_URL) answers a
        query, Redis (AGENTR_REDIS_URL) answers PING and, with --metrics-port, the worker process
        answers on that port; else exit 1 naming what failed. The compose healthcheck of workers."""
        import asyncio

        from core.runtime.health import check_health
        from core.runtime.settings import load_settings

        problems = asyncio.run(check_health(load_settings(), metrics_port, timeout))
        if problems:
            for problem in problems:
                typer.echo(f"unhealthy: {problem}", err=True)
            raise typer.Exit(1)
        typer.echo("healthy")
