"""Owns ``agentr up`` (the docker-compose topology as local processes) and the Celery wrappers
compose runs: ``agentr celery-worker`` (the ``train`` queue) and ``agentr flower``.

``agentr up`` runs ``agentr db upgrade`` first, then starts api, relay, search, critic, splice,
train and the Celery training worker as separate OS processes against the PostgreSQL and Redis
named by AGENTR_DATABASE_URL and AGENTR_REDIS_URL, prints their output line by line prefixed with
the process name (``[search] ...``), and stops them together: on Ctrl-C / SIGTERM, or as soon as one
of them exits on its own (which it reports). Each child runs in its own session, so a terminal's
Ctrl-C reaches only the supervisor, which then sends SIGTERM to every child (graceful drain) and
SIGKILL to those still running after the grace period.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from celery import Celery

    from core.runtime.settings import Settings

#: The long-running processes of docker-compose.yml, in start order (compose service names).
SERVICES: tuple[str, ...] = ("api", "relay", "search", "critic", "splice", "train", "trainer")
SCALABLE: frozenset[str] = frozenset({"search", "critic", "splice", "trainer"})
_COLORS = ("cyan", "magenta", "green", "yellow", "blue", "bright_red", "bright_cyan", "bright_magenta")


class UpError(Exception):
    """``agentr up`` cannot start: missing settings, bad --scale, no ``agentr`` executable."""


@dataclass(frozen=True)
class ProcessSpec:
    """One child process: its log prefix and its command line (arguments after ``agentr``)."""

    name: str
    args: tuple[str, ...]


def service_args(service: str) -> tuple[str, ...]:
    """The ``agentr`` arguments of one compose service (the same commands docker-compose.yml runs)."""
    if service == "api":
        return ("serve",)
    if service == "trainer":
        return ("celery-worker",)
    if service in ("relay", "search", "critic", "splice", "train"):
        return ("worker", service)
    raise UpError(f"unknown service {service!r}: use one of {', '.join(SERVICES)}")


def parse_scale(items: Iterable[str]) -> dict[str, int]:
    """``["search=4", "critic=2"]`` -> ``{"search": 4, "critic": 2}``, with clear errors."""
    scale: dict[str, int] = {}
    for item in items:
        name, sep, count = item.partition("=")
        if not sep or not count.strip().isdigit():
            raise UpError(f"--scale {item!r}: expected NAME=COUNT, e.g. search=4")
        name = name.strip()
        if name not in SCALABLE:
            raise UpError(f"--scale {item!r}: only {', '.join(sorted(SCALABLE))} can run several copies")
        scale[name] = int(count)
    return scale


def plan(scale: Mapping[str, int] | None = None, without: Iterable[str] = ()) -> list[ProcessSpec]:
    """The processes to start: every service once (``scale`` copies of the scalable ones), minus
    ``without``."""
    scale = dict(scale or {})
    skipped = set(without)
    unknown = skipped - set(SERVICES)
    if unknown:
        raise UpError(f"--without {', '.join(sorted(unknown))}: not a service ({', '.join(SERVICES)})")
    specs: list[ProcessSpec] = []
    for service in SERVICES:
        if service in skipped:
            continue
        copies = scale.get(service, 1)
        for index in range(1, copies + 1):
            name = service if copies == 1 else f"{service}.{index}"
            specs.append(ProcessSpec(name, service_args(service)))
    if not specs:
        raise UpError("nothing to start: every service was left out")
    return specs


def agentr_executable() -> str:
    """The ``agentr`` console script of this interpreter's environment (else the one on PATH)."""
    beside = shutil.which("agentr", path=str(Path(sys.executable).parent))
    found = beside or shutil.which("agentr")
    if not found:
        raise UpError("cannot find the `agentr` executable next to this Python or on PATH")
    return found


def child_environment(env_file: Path | None, api_port: int | None) -> dict[str, str]:
    """The environment every child gets: ours, plus ``env_file``'s values (ours win), checked."""
    env = dict(os.environ)
    if env_file is not None:
        from dotenv import dotenv_values

        if not env_file.is_file():
            raise UpError(f"--env-file {env_file}: no such file")
        for key, value in dotenv_values(env_file).items():
            if value is not None and key not in os.environ:
                env[key] = value
    missing = [name for name in ("AGENTR_DATABASE_URL", "AGENTR_REDIS_URL") if not env.get(name)]
    if missing:
        raise UpError(
            f"agentr up needs {' and '.join(missing)}: the processes share one PostgreSQL "
            "(AGENTR_DATABASE_URL=postgresql+asyncpg://USER@HOST:5432/DB) and one Redis "
            "(AGENTR_REDIS_URL=redis://HOST:6379/0). For a single process without servers, use `agentr run`."
        )
    if api_port is not None:
        env["AGENTR_API_PORT"] = str(api_port)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("COLUMNS", "160")  # children write to a pipe: keep their rich output from wrapping at 80
    return env


class Supervisor:
    """Starts child processes, prefixes their output, and stops them together."""

    def __init__(self, executable: str, env: Mapping[str, str], *, grace_s: float = 30.0) -> None:
        from rich.console import Console

        self.executable = executable
        self.env = dict(env)
        self.grace_s = grace_s
        self.console = Console(highlight=False, markup=False, soft_wrap=True)
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self._colors: dict[str, str] = {}
        self._pumps: list[threading.Thread] = []
        self._write_lock = threading.Lock()
        self.stop_requested = threading.Event()

    def say(self, name: str, line: str) -> None:
        from rich.text import Text

        color = self._colors.setdefault(name, _COLORS[len(self._colors) % len(_COLORS)])
        text = Text(f"[{name}] ", style=f"bold {color}")
        text.append(line)
        with self._write_lock:
            self.console.print(text)

    def _pump(self, name: str, stream: IO[bytes]) -> None:
        for raw in iter(stream.readline, b""):
            self.say(name, raw.decode("utf-8", "replace").rstrip("\r\n"))
        stream.close()

    def start(self, spec: ProcessSpec) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [self.executable, *spec.args],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches the supervisor only; it stops the children
        )
        assert proc.stdout is not None
        pump = threading.Thread(target=self._pump, args=(spec.name, proc.stdout), daemon=True)
        pump.start()
        self._pumps.append(pump)
        self.children[spec.name] = proc
        self.say("up", f"started {spec.name} (pid {proc.pid}): agentr {' '.join(spec.args)}")
        return proc

    def run_once(self, spec: ProcessSpec) -> int:
        """Run a one-shot child (migrations) to completion; returns its exit code."""
        proc = self.start(spec)
        code = proc.wait()
        del self.children[spec.name]
        return code

    def watch(self, poll_s: float = 0.2) -> str | None:
        """Block until a stop is requested (returns None) or a child exits (returns its name)."""
        while not self.stop_requested.is_set():
            for name, proc in self.children.items():
                if proc.poll() is not None:
                    return name
            time.sleep(poll_s)
        return None

    def stop_all(self) -> dict[str, int]:
        """SIGTERM every running child, SIGKILL what is left after the grace period; exit codes."""
        for name, proc in self.children.items():
            if proc.poll() is None:
                self.say("up", f"stopping {name} (SIGTERM)")
                _signal(proc, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        for name, proc in self.children.items():
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.say("up", f"{name} still running after {self.grace_s:.0f}s: SIGKILL")
                _signal(proc, signal.SIGKILL)
                proc.wait()
        for pump in self._pumps:
            pump.join(timeout=2)
        return {name: proc.returncode for name, proc in self.children.items()}


def _signal(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)  # the child's whole session: Celery's pool processes included


def _celery_app() -> tuple[Settings, Celery]:
    from core.runtime.settings import load_settings

    settings = load_settings()
    if not settings.redis_url:
        typer.echo("error: AGENTR_REDIS_URL is not set: the Celery broker is that Redis", err=True)
        raise typer.Exit(2)
    from train_service.celery_app import app  # configured from the same AGENTR_* environment

    return settings, app


def register(app: typer.Typer) -> None:
    @app.command("up")
    def up(
        scale: list[str] = typer.Option(
            [], "--scale", metavar="NAME=COUNT", help="Run COUNT copies of search, critic, splice or trainer."
        ),
        without: list[str] = typer.Option(
            [],
            "--without",
            metavar="NAME",
            help="Leave a service out (e.g. trainer when training elsewhere).",
        ),
        env_file: Path | None = typer.Option(
            None, "--env-file", help="Read AGENTR_* settings from this file (the environment wins)."
        ),
        port: int | None = typer.Option(None, "--port", help="API port (default: AGENTR_API_PORT or 8000)."),
        migrate: bool = typer.Option(True, "--migrate/--no-migrate", help="Run `agentr db upgrade` first."),
        grace: float = typer.Option(30.0, "--grace", min=0, help="Seconds to drain before SIGKILL on stop."),
    ) -> None:
        """Start the docker-compose topology as local processes (api, relay, search, critic, splice,
        train, Celery trainer) against AGENTR_DATABASE_URL and AGENTR_REDIS_URL.

        Output is prefixed with the process name. Ctrl-C or SIGTERM stops them all; if one exits on
        its own, the rest are stopped too and the exit code is 1.
        """
        try:
            specs = plan(parse_scale(scale), without)
            env = child_environment(env_file, port)
            executable = agentr_executable()
        except UpError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        supervisor = Supervisor(executable, env, grace_s=grace)

        def request_stop(signum: int, _frame: object) -> None:
            supervisor.say("up", f"received {signal.Signals(signum).name}: stopping everything")
            supervisor.stop_requested.set()

        signal.signal(signal.SIGINT, request_stop)
        signal.signal(signal.SIGTERM, request_stop)
        if migrate:
            code = supervisor.run_once(ProcessSpec("migrate", ("db", "upgrade")))
            if code != 0:
                supervisor.say("up", f"migrations failed (exit {code}): nothing started")
                raise typer.Exit(1)
        died: str | None = None
        try:
            for spec in specs:
                if supervisor.stop_requested.is_set():
                    break
                supervisor.start(spec)
            supervisor.say("up", f"{len(supervisor.children)} processes running; Ctrl-C stops them all")
            died = supervisor.watch()
            if died is not None:
                code = supervisor.children[died].returncode
                supervisor.say("up", f"{died} exited on its own (exit {code}): stopping the rest")
        finally:
            codes = supervisor.stop_all()
        supervisor.say("up", "stopped: " + ", ".join(f"{name}={code}" for name, code in codes.items()))
        raise typer.Exit(1 if died is not None else 0)

    @app.command("celery-worker")
    def celery_worker(
        queue: str = typer.Option("train", "--queue", "-Q", help="Queue(s) to consume, comma-separated."),
        pool: str = typer.Option(
            "solo", "--pool", help="Celery pool: solo (one job in this process) or prefork."
        ),
        concurrency: int = typer.Option(1, "--concurrency", min=1, help="Jobs at once (prefork pool only)."),
        node: str = typer.Option("trainer@%h", "--node", "-n", help="Celery node name (%h = host name)."),
        ping: bool = typer.Option(
            False,
            "--ping",
            help="Instead of working: exit 0 if this host's trainer NODE is healthy (healthcheck): "
            "its heartbeat, written by a thread also while it trains, is younger than "
            "AGENTR_TRAIN_HEARTBEAT_TIMEOUT_S and the broker answers PING.",
        ),
    ) -> None:
        """Run the Celery worker that trains (the `train` queue), with agentr's broker settings.

        Equivalent to `celery -A train_service.celery_app worker -Q train`, configured from
        AGENTR_REDIS_URL and AGENTR_REDIS_PREFIX, plus a heartbeat thread for --ping. GPU machines
        run this next to their GPUs.
        """
        from train_service.train_jobs import TrainerHeartbeat, trainer_health

        settings, celery = _celery_app()
        node_name = node.replace("%h", socket.gethostname())
        if ping:
            problem = trainer_health(settings, node_name)
            if problem is not None:
                typer.echo(f"unhealthy: {problem}", err=True)
                raise typer.Exit(1)
            typer.echo(f"{node_name} is healthy")
            return
        argv = ["worker", "-Q", queue, "-n", node_name, "--pool", pool, "--concurrency", str(concurrency)]
        argv += ["--loglevel", settings.log_level, "--task-events", "--without-gossip", "--without-mingle"]
        heartbeat = TrainerHeartbeat(settings, node_name).start()
        try:
            celery.worker_main(argv)
        finally:
            heartbeat.stop()

    @app.command("flower")
    def flower(
        port: int = typer.Option(5555, "--port", help="Port of the web UI."),
        address: str = typer.Option("0.0.0.0", "--address", help="Interface to bind."),
    ) -> None:
        """Serve Flower, Celery's monitoring UI, for the training queue (needs `pip install flower`)."""
        import importlib.util

        if importlib.util.find_spec("flower") is None:
            typer.echo(
                "error: Flower is not installed: `pip install flower` (the `flower` image has it)", err=True
            )
            raise typer.Exit(2)
        _settings, celery = _celery_app()
        raise typer.Exit(celery.start(["flower", f"--port={port}", f"--address={address}"]) or 0)
