"""Health that means "can do its work", stop flags and duplicate deliveries of training jobs, and a
dead-lettered search step (issue 45), on the real PostgreSQL and Redis with real processes:

* ``agentr health`` (the workers' compose healthcheck) fails, naming the database, when PostgreSQL
  is unreachable, fails when the worker's metrics port does not answer, and passes on the real servers;
* ``agentr celery-worker --ping`` (the trainer's healthcheck) passes WHILE the trainer's one job
  trains (a busy ``--pool solo`` worker cannot answer Celery's own ping) and fails once the trainer
  is SIGKILLed (its heartbeat file ages past ``AGENTR_TRAIN_HEARTBEAT_TIMEOUT_S``);
* a copy of a job that a live trainer holds trains nothing (the broker's backstop re-send), and a
  job delivered after its run was cancelled does nothing (REVOKED, no checkpoint);
* a search step dead-lettered by the search worker fails its run with the reason (step, worker,
  deliveries, error) and ends its tree in ``SearchFailed`` with the same reason.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery.exceptions import TaskRevokedError

from core.formats.export import write_jsonl
from core.llm.tiny import build_tiny_model
from core.runtime.settings import Settings
from tests.integration.test_celery_train import TEXTS, samples
from tests.support import free_port
from train_service.celery_app import make_celery, submit_training
from train_service.train_jobs import TrainJobs

REPO = Path(__file__).resolve().parents[2]
AGENTR = str(Path(sys.executable).parent / "agentr")
HEARTBEAT_S = 3  # AGENTR_TRAIN_HEARTBEAT_TIMEOUT_S of these tests' trainer


@pytest.fixture(scope="module")
def model_and_data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("health")
    model = build_tiny_model(root / "m", TEXTS, hidden=32, layers=1, heads=2, vocab_size=320)
    data = root / "ds.jsonl"
    write_jsonl(data, samples(4), "samples")
    return model, data


@pytest.fixture
def settings(redis_url: str, redis_prefix: str) -> Settings:
    return Settings(redis_url=redis_url, redis_prefix=redis_prefix, train_heartbeat_timeout_s=HEARTBEAT_S)


def _env(settings: Settings, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTR_")}
    env.update(
        AGENTR_REDIS_URL=settings.redis_url or "",
        AGENTR_REDIS_PREFIX=settings.redis_prefix,
        AGENTR_TRAIN_HEARTBEAT_TIMEOUT_S=str(HEARTBEAT_S),
        PYTHONPATH=str(REPO),
        OMP_NUM_THREADS="1",
    )
    env.update(extra)
    return env


@pytest.fixture
def trainer(settings: Settings, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str, Path]]:
    """``agentr celery-worker`` as a process: (process, node name, log file)."""
    node = f"health-{uuid.uuid4().hex[:8]}@%h"
    log_path = tmp_path / "trainer.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [AGENTR, "celery-worker", "-n", node],
        cwd=REPO, env=_env(settings), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        yield proc, node, log_path
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()


def _agentr(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([AGENTR, *args], env=env, capture_output=True, text=True, timeout=120, cwd=REPO)


def _wait(condition, timeout: float, what: str, log: Path | None = None):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{log.read_text() if log else ''}")
        time.sleep(0.3)


def _submit(settings: Settings, model: Path, data: Path, out: Path, **job):  # type: ignore[no-untyped-def]
    app = make_celery(settings)
    result = submit_training(
        app, run_id=job.pop("run_id", "run-h"), iteration=0, dataset_id="ds-h", dataset_path=str(data),
        model_path=str(model), out_dir=str(out), config={"max_steps": job.pop("max_steps"), "batch_size": 2},
        **job,
    )  # fmt: skip
    return app, result


async def _create_tables(url: str) -> None:
    from core.store.factory import open_store

    store = await open_store(url, create_tables=True)
    await store.close()


def test_worker_health_needs_the_database_redis_and_the_worker(
    settings: Settings, pg_url: str, tmp_path: Path
) -> None:
    dead_port = free_port()
    down = _agentr(
        ["health"],
        _env(settings, AGENTR_DATABASE_URL=f"postgresql+asyncpg://postgres@127.0.0.1:{dead_port}/x"),
    )
    assert down.returncode == 1, down.stdout + down.stderr
    assert "unhealthy: database:" in down.stderr and "redis" not in down.stderr
    empty = _agentr(["health"], _env(settings, AGENTR_DATABASE_URL=pg_url))
    assert empty.returncode == 1 and 'relation "events" does not exist' in empty.stderr  # not migrated
    asyncio.run(_create_tables(pg_url))
    ok = _agentr(["health"], _env(settings, AGENTR_DATABASE_URL=pg_url))
    assert ok.returncode == 0 and ok.stdout.strip() == "healthy", ok.stdout + ok.stderr
    no_worker = _agentr(
        ["health", "--metrics-port", str(dead_port)], _env(settings, AGENTR_DATABASE_URL=pg_url)
    )
    assert no_worker.returncode == 1 and f"metrics port {dead_port}" in no_worker.stderr
    no_redis = _agentr(
        ["health"],
        _env(settings, AGENTR_DATABASE_URL=pg_url, AGENTR_REDIS_URL=f"redis://127.0.0.1:{dead_port}/0"),
    )
    assert no_redis.returncode == 1 and "unhealthy: redis:" in no_redis.stderr


def test_trainer_is_healthy_while_it_trains_and_not_once_killed(  # type: ignore[no-untyped-def]
    settings: Settings, trainer, model_and_data, tmp_path: Path
) -> None:
    proc, node, log = trainer
    model, data = model_and_data
    env = _env(settings)
    app, result = _submit(settings, model, data, tmp_path / "never", max_steps=100_000)
    try:
        _wait(lambda: result.state == "PROGRESS", 180, "the job to train", log)
        busy = _agentr(["celery-worker", "--ping", "-n", node], env)
        assert busy.returncode == 0 and "is healthy" in busy.stdout, busy.stdout + busy.stderr
        assert result.state == "PROGRESS"  # it answered while training
        # a copy of the running job (the broker re-sending it) is dropped by any other trainer: the
        # lease is held; this process takes it like a second trainer would
        jobs = TrainJobs(settings)
        assert jobs.holder(result.id) is not None
        assert not jobs.lease(result.id).acquire()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

        def unhealthy() -> subprocess.CompletedProcess[str] | None:
            done = _agentr(["celery-worker", "--ping", "-n", node], env)
            return done if done.returncode == 1 else None

        dead = _wait(unhealthy, 60, "the killed trainer to be reported unhealthy", log)
        assert "wrote no heartbeat" in dead.stderr, dead.stderr
        # and its job's lease expired: the train worker would now queue the job again
        _wait(lambda: jobs.holder(result.id) is None, 30, "the dead trainer's lease to expire", log)
    finally:
        app.close()


def test_a_job_of_a_cancelled_run_trains_nothing(  # type: ignore[no-untyped-def]
    settings: Settings, trainer, model_and_data, tmp_path: Path
) -> None:
    _proc, _node, log = trainer
    model, data = model_and_data
    TrainJobs(settings).cancel_run("run-cancelled")
    out = tmp_path / "cancelled"
    app, result = _submit(settings, model, data, out, max_steps=2, run_id="run-cancelled")
    try:
        with pytest.raises(TaskRevokedError):
            result.get(timeout=120)
        assert not out.exists(), log.read_text()
        # another run's job on the same trainer trains as usual, and a late copy of it returns the
        # finished result instead of training again
        app2, done = _submit(settings, model, data, tmp_path / "ok", max_steps=2, run_id="run-ok")
        first = done.get(timeout=180)
        assert first["metrics"]["steps"] == 2 and first["reused"] is False
        _app3, again = _submit(
            settings, model, data, tmp_path / "ok", max_steps=2, run_id="run-ok", task_id=done.id
        )
        assert again.get(timeout=120) == first
        app2.close()
        _app3.close()
    finally:
        app.close()


async def test_a_dead_lettered_search_step_fails_the_run_with_the_reason(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentr.process import build_service
    from core.domain.config import RunConfig
    from core.domain.events import NewEvent, RunRequested
    from core.domain.ids import run_stream
    from core.domain.runs import fold
    from core.runtime.embedded import run_embedded
    from core.runtime.service import Service
    from core.runtime.settings import load_settings
    from core.store.factory import open_store
    from train_service.service import build_service as build_train

    monkeypatch.setenv("AGENTR_MAX_DELIVERIES", "2")
    settings = load_settings(home=tmp_path, database_url=pg_url, redis_url=None, reclaim_idle_ms=500)
    config = RunConfig(env="textcraft", model="noisy-expert", tasks=("goal:oak_planks",), iterations=1)
    run_id = "run-dead-search"

    async def broken(recorded):  # type: ignore[no-untyped-def]
        raise RuntimeError("the search exploded")

    store = await open_store(pg_url, create_tables=True)
    try:
        await store.append([NewEvent(run_stream(run_id), RunRequested(run_id, "p", config.to_data()))])
        search = await build_service("search", settings, store)
        services = [
            Service(name=search.name, handlers={"SearchRequested": broken}),
            await build_service("splice", settings, store),
            build_train(settings, store),
        ]

        async def until() -> bool:
            history = await store.read_stream(run_stream(run_id))
            return fold(run_id, [r.event for r in history]).terminal

        await asyncio.wait_for(run_embedded(store, services, until, settings=settings), timeout=120)
        recorded = await store.read_all(0, limit=10_000)
        if search.on_close is not None:
            await search.on_close()
    finally:
        await store.close()
    state = fold(run_id, [r.event for r in recorded if r.stream_id == run_stream(run_id)])
    tree_id = next(r.event.tree_id for r in recorded if r.event_type == "SearchRequested")
    reason = (
        f"SearchRequested of tree {tree_id} could not be handled by the search worker after 2 "
        "deliveries: RuntimeError: the search exploded"
    )
    assert state.status == "failed" and state.reason == f"iteration 0: {reason}"
    failed = [r.event for r in recorded if r.event_type == "SearchFailed"]
    assert len(failed) == 1 and failed[0].tree_id == tree_id and failed[0].reason == reason
    assert [r.event_type for r in recorded].count("RunFailed") == 1


def test_agentr_run_keeps_its_own_store_inside_a_deployment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_url: str
) -> None:
    """Compose sets AGENTR_DATABASE_URL in every container: ``agentr run`` there must not write its
    run into the deployment's database (its workers would redo the work); --database-url may."""
    from agentr.cli.embedded_run import embedded_settings

    monkeypatch.setenv("AGENTR_DATABASE_URL", pg_url)
    monkeypatch.setenv("AGENTR_REDIS_URL", "redis://127.0.0.1:6379/0")
    settings, home = embedded_settings(tmp_path / "home")
    assert settings.effective_database_url == f"sqlite+aiosqlite:///{home / 'agentr.db'}"
    assert settings.embedded  # the in-process bus, not the deployment's Redis
    explicit, _ = embedded_settings(tmp_path / "home", database_url=pg_url)
    assert explicit.effective_database_url == pg_url
    shown = subprocess.run(
        [AGENTR, "run", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert "--database-url" in shown.stdout
