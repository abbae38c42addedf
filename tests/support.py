"""Owns the tests' process plumbing: a free local port, and a subprocess that serves HTTP.

``free_port()`` asks the kernel for a port nobody listens on. ``start_http_process`` starts a
command with its output (stdout and stderr together) in a log file and waits until a URL answers
200; if the process exits or the time runs out first it is stopped and a ``RuntimeError`` carries
the tail of its output, so a server that cannot start says why. The ``ServedProcess`` it returns is
a context manager that stops the process on the way out. ``TinySpec`` names the tiny model a test
file asks tests/ml/conftest.py for.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx


@dataclass(frozen=True)
class TinySpec:
    """The tiny model a test file wants (see tests/ml/conftest.py): ``name`` is its folder name and
    the model name `agentr model serve` serves it as."""

    name: str
    seed: int
    hidden: int = 64
    layers: int = 2
    heads: int = 2
    vocab_size: int = 512


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ServedProcess:
    """A subprocess started by ``start_http_process``; its output is in ``log_path``."""

    process: subprocess.Popen[bytes]
    log_path: Path
    owns_log: bool = False

    def output(self, last_chars: int = 4000) -> str:
        """The tail of everything the process wrote so far."""
        if not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-last_chars:]

    def __enter__(self) -> ServedProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM, then SIGKILL if it has not exited after ``timeout_s``; safe to call twice."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.owns_log:
            self.log_path.unlink(missing_ok=True)


def start_http_process(
    command: Sequence[str],
    ready_url: str,
    *,
    what: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    log_path: Path | None = None,
    timeout_s: float = 60.0,
    poll_s: float = 0.2,
) -> ServedProcess:
    """Start ``command`` and return once GET ``ready_url`` answers 200.

    Output goes to ``log_path`` (a temporary file, deleted on ``stop()``, when not given). Raises
    ``RuntimeError`` naming ``what`` with the process's output if it exits or is not ready within
    ``timeout_s`` (the process is stopped first)."""
    owns_log = log_path is None
    if log_path is None:
        handle, name = tempfile.mkstemp(prefix="agentr-test-", suffix=".log")
        os.close(handle)
        log_path = Path(name)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            list(command),
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    served = ServedProcess(process, log_path, owns_log)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(ready_url, timeout=1).status_code == 200:
                return served
        except httpx.HTTPError:
            pass
        if process.poll() is not None:
            output = served.output()
            served.stop()
            raise RuntimeError(
                f"{what} exited with {process.returncode} before {ready_url} answered:\n{output}"
            )
        if time.monotonic() > deadline:
            output = served.output()
            served.stop()
            raise RuntimeError(f"{what} did not answer {ready_url} within {timeout_s:.0f} s:\n{output}")
        time.sleep(poll_s)
