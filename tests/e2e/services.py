"""Owns the services e2e tests' shared setup: the environment, the deployment and run follow-up.

``service_env`` is the environment every agentr process of one deployment shares (the real
PostgreSQL database and Redis prefix, its home folder, the API port, quick reclaim and trainer
heartbeat timeouts);
``deploy`` starts the compose topology as separate OS processes (``agentr db upgrade``,
``agentr serve``, the relay / search / critic / splice / train workers and the Celery trainer), bootstraps a
project key and stops everything at the end, asserting that every process exited cleanly; a
``Deployment`` gives each test a client of a project of its own (``new_client``). ``follow`` waits for
a run to finish and asserts it completed; ``quick_run_config`` is the cheap run those tests submit
(also the base of tests/ml/test_methods_run.py's embedded runs). ``tests/e2e/conftest.py`` turns
them into the ``deployment`` (one deployment for every e2e test that asks for it) and ``run_config``
fixtures.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.e2e.helpers import ApiClient, ServiceGroup, free_port, quick_tiny_model, wait_until

ADMIN_KEY = "e2e-admin-" + "k" * 24
WORKERS = ("relay", "search", "critic", "splice", "train")


QUICK_HOME = "agentr-quick-home"
"""The folder (under pytest's base temp) holding the tests' shared warm-started tiny model."""


def quick_run_config(home: Path, **overrides: Any) -> dict[str, Any]:
    """The ``agentr run --quick`` configuration with its warm-started tiny model (built once under
    ``home``): 1 iteration with training and a small evaluation; ``overrides`` replace keys."""
    _ref, config = quick_tiny_model(home)
    config.update(
        iterations=1,
        max_eval_tasks=1,
        evaluation={"max_steps": 4, "max_tokens": 32, "recovery_episodes": 1, "baseline": False},
        data_only=False,
        seed=11,
    )
    return {**config, **overrides}


def service_env(
    pg_url: str, redis_url: str, redis_prefix: str, home: Path, port: int, model_roots: Sequence[Path] = ()
) -> dict[str, str]:
    """The deployment's environment; ``model_roots`` are model folders the API accepts besides its
    own model store and runs (AGENTR_MODEL_ROOTS), e.g. the tests' shared warm-started tiny model."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTR_")}
    if model_roots:
        roots = [home / "models", home / "runs", *model_roots]
        env["AGENTR_MODEL_ROOTS"] = os.pathsep.join(str(root) for root in roots)
    env.update(
        AGENTR_DATABASE_URL=pg_url,
        AGENTR_REDIS_URL=redis_url,
        AGENTR_REDIS_PREFIX=redis_prefix,
        AGENTR_HOME=str(home),
        AGENTR_ADMIN_KEY=ADMIN_KEY,
        AGENTR_API_HOST="127.0.0.1",
        AGENTR_API_PORT=str(port),
        AGENTR_BLOCK_MS="200",
        AGENTR_RECLAIM_IDLE_MS="1500",  # a killed worker's messages are reclaimed quickly
        AGENTR_TRAIN_HEARTBEAT_TIMEOUT_S="6",  # a killed trainer's job is queued again quickly
        AGENTR_SEARCH_CONCURRENCY="1",
        AGENTR_LOG_LEVEL="INFO",
        PYTHONUNBUFFERED="1",
        OMP_NUM_THREADS="1",
    )
    return env


def follow(client: ApiClient, group: ServiceGroup, run_id: str, timeout: float = 150) -> dict[str, Any]:
    def finished() -> dict[str, Any] | None:
        run = client.run(run_id)
        return run if run["status"] in ("completed", "failed", "cancelled") else None

    run: dict[str, Any] = wait_until(finished, timeout=timeout, what=f"run {run_id}", check=group.check_alive)
    assert run["status"] == "completed", (
        f"run {run_id} ended {run['status']}: {run.get('reason')}\n{group.logs()}"
    )
    return run


@dataclass(frozen=True)
class Deployment:
    """A running deployment: its processes, a client with a project key, the services' home folder
    (``AGENTR_HOME``: runs' datasets and checkpoints) and database URL."""

    group: ServiceGroup
    client: ApiClient
    home: Path
    database_url: str

    def new_client(self, project_name: str) -> ApiClient:
        """A client of the same API with a new project and a run + read key of it."""
        client = ApiClient(str(self.client.http.base_url), self.client.admin_key)
        client.bootstrap(project_name)
        return client


@contextmanager
def deploy(
    pg_url: str, redis_url: str, redis_prefix: str, folder: Path, model_roots: Sequence[Path] = ()
) -> Iterator[Deployment]:
    """Every service as its own process on the database ``pg_url``, logs and home under ``folder``;
    the API also accepts models inside ``model_roots``."""
    port = free_port()
    home = folder / "home"
    env = service_env(pg_url, redis_url, redis_prefix, home, port, model_roots)
    group = ServiceGroup(env, folder)
    client = ApiClient(f"http://127.0.0.1:{port}", ADMIN_KEY)
    try:
        group.run_once("migrate", "db", "upgrade")
        group.start("api", "serve")
        for name in WORKERS:
            group.start(name, "worker", name)
        group.start("trainer", "celery-worker")
        wait_until(client.ready, timeout=60, what="the API's /readyz", check=group.check_alive)
        client.bootstrap()
        yield Deployment(group, client, home, pg_url)
    finally:
        client.close()
        codes = group.stop_all()
        # SIGTERM drains gracefully: every service exits 0 (a killed worker was restarted);
        # uvicorn re-raises the SIGTERM it handled once its shutdown is complete.
        bad = {name: code for name, code in codes.items() if code not in (0, None)}
        if bad.get("api") == -signal.SIGTERM and "api stopped" in group.processes["api"].tail():
            del bad["api"]
        assert not bad, f"services did not stop cleanly: {bad}\n{group.logs()}"
