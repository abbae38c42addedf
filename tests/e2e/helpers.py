"""Process management for the e2e tests: agentr services as real OS processes, and an HTTP client.

``ServiceGroup`` starts ``agentr ...`` commands (each in its own session, output to a log file
under the test's tmp folder), kills or restarts one by name, and stops all of them (SIGTERM, then
SIGKILL after a grace period). ``ApiClient`` makes projects and their keys with the admin key
(``bootstrap``: a project and a key this client then uses) and wraps the run / dataset routes.
Failures include the tail of every log, so a broken service says why.
``quick_tiny_model`` builds and warm-starts the tiny model exactly as ``agentr run --quick`` does
(its own functions, cached in the given home folder) for tests that need a model that can succeed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support import free_port as free_port  # re-exported: the e2e tests take it from here

AGENTR = str(Path(sys.executable).parent / "agentr")


# Warm-start steps for the tests' tiny model (``agentr run --quick --warm-start-steps``): at 40 the
# model has seen its 2 expert episodes too little to write actions (measured: train loss 3.3, garbage
# text); at 200 (~8 s) it writes the episodes' actions, with slips at the search temperature, so trees
# hold successes and failures (`agentr run --quick` itself uses 300).
QUICK_WARM_START_STEPS = 200


def quick_tiny_model(
    home: Path, seed: int = 0, warm_start_steps: int = QUICK_WARM_START_STEPS
) -> tuple[str, dict[str, Any]]:
    """(model folder, run config) of ``agentr run --quick``: the tiny model built and warm-started by
    ``agentr.cli.warm_start.prepare_model`` (cached under ``home/models``: a second call reuses it)."""
    from agentr.cli.demo import RunOptions, plan_run
    from agentr.cli.warm_start import prepare_model

    plan = plan_run(RunOptions(quick=True, iterations=1, seed=seed, warm_start_steps=warm_start_steps))
    ref = prepare_model(plan, home, seed)
    return ref, dict(plan.config, model=ref)


@dataclass
class ServiceProcess:
    name: str
    args: tuple[str, ...]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    def tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class ServiceGroup:
    """agentr processes of one test, sharing one environment; see the module docstring."""

    env: Mapping[str, str]
    log_dir: Path
    grace_s: float = 20.0
    processes: dict[str, ServiceProcess] = field(default_factory=dict)

    def start(self, name: str, *args: str) -> ServiceProcess:
        service = self.processes.get(name) or ServiceProcess(name, args, self.log_dir / f"{name}.log")
        self.processes[name] = service
        service.starts += 1
        log = service.log_path.open("ab")
        log.write(f"\n===== start #{service.starts}: agentr {' '.join(args)}\n".encode())
        log.flush()
        service.proc = subprocess.Popen(
            [AGENTR, *args],
            env=dict(self.env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        return service

    def run_once(self, name: str, *args: str, timeout: float = 120) -> None:
        """Run a one-shot command (migrations) to completion; AssertionError with its log if it fails."""
        service = self.start(name, *args)
        assert service.proc is not None
        code = service.proc.wait(timeout=timeout)
        assert code == 0, f"agentr {' '.join(args)} exited {code}:\n{service.tail()}"

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL) -> None:
        proc = self.processes[name].proc
        assert proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        proc.wait(timeout=self.grace_s)

    def restart(self, name: str) -> ServiceProcess:
        return self.start(name, *self.processes[name].args)

    def check_alive(self) -> None:
        dead = {
            n: s.proc.returncode for n, s in self.processes.items() if s.proc and s.proc.poll() is not None
        }
        dead = {n: code for n, code in dead.items() if n != "migrate"}
        assert not dead, f"services exited: {dead}\n{self.logs()}"

    def logs(self, lines: int = 40) -> str:
        return "\n".join(f"----- {s.name}\n{s.tail(lines)}" for s in self.processes.values())

    def stop_all(self) -> dict[str, int | None]:
        running = [s for s in self.processes.values() if s.proc is not None and s.proc.poll() is None]
        for service in running:
            assert service.proc is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(service.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        for service in running:
            assert service.proc is not None
            try:
                service.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(service.proc.pid, signal.SIGKILL)
                service.proc.wait(timeout=10)
        return {s.name: (s.proc.returncode if s.proc else None) for s in self.processes.values()}


def wait_until(
    condition: Callable[[], Any],
    *,
    timeout: float,
    what: str,
    check: Callable[[], None] | None = None,
    poll_s: float = 0.3,
) -> Any:
    """Poll ``condition`` until it returns something truthy; ``check`` runs each round (e.g. that
    the services are still alive)."""
    deadline = time.monotonic() + timeout
    while True:
        if check is not None:
            check()
        try:
            value = condition()
        except httpx.TransportError:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(poll_s)


class ApiClient:
    """The agentr HTTP API as a user sees it: admin key -> project -> project key -> runs."""

    def __init__(self, base_url: str, admin_key: str) -> None:
        self.http = httpx.Client(base_url=base_url, timeout=30)
        self.admin_key = admin_key
        self.key: str | None = None

    def ready(self) -> bool:
        return self.http.get("/readyz").status_code == 200

    def create_project(self, name: str) -> str:
        """A new project (with the admin key); its id."""
        made = self.http.post("/v1/projects", json={"name": name}, headers=self.admin_headers)
        assert made.status_code == 201, made.text
        return str(made.json()["project_id"])

    def issue_key(self, project_id: str, scopes: Sequence[str], label: str) -> str:
        """A new key of ``project_id`` with ``scopes`` (with the admin key)."""
        issued = self.http.post(
            f"/v1/projects/{project_id}/keys",
            json={"scopes": list(scopes), "label": label},
            headers=self.admin_headers,
        )
        assert issued.status_code == 201, issued.text
        return str(issued.json()["key"])

    def bootstrap(self, project_name: str = "e2e") -> None:
        """A project of its own and a run + read key of it, which this client then uses."""
        self.key = self.issue_key(self.create_project(project_name), ("run", "read"), "e2e")

    @property
    def admin_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_key}"}

    @property
    def headers(self) -> dict[str, str]:
        assert self.key, "call bootstrap() first"
        return {"Authorization": f"Bearer {self.key}"}

    def submit_run(self, config: dict[str, Any]) -> str:
        response = self.http.post("/v1/runs", json=config, headers=self.headers)
        assert response.status_code == 202, response.text
        return str(response.json()["run_id"])

    def run(self, run_id: str) -> dict[str, Any]:
        response = self.http.get(f"/v1/runs/{run_id}", headers=self.headers)
        assert response.status_code == 200, response.text
        return dict(response.json())

    def dataset(self, run_id: str, iteration: int, fmt: str = "sharegpt") -> tuple[httpx.Response, str]:
        response = self.http.get(
            f"/v1/runs/{run_id}/iterations/{iteration}/dataset", params={"format": fmt}, headers=self.headers
        )
        assert response.status_code == 200, response.text
        return response, response.text

    def close(self) -> None:
        self.http.close()
