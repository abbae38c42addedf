"""A deployment that survives a dead trainer (issue 45), over the real services (``agentr serve``,
the workers and the Celery trainer as OS processes, PostgreSQL and Redis; tests/e2e/conftest.py).

* The trainer is SIGKILLed in the middle of a run's training job (Celery says PROGRESS, step >= 2).
  While no trainer runs, a second run (data only) is submitted and completes: the first run's wait
  holds up nothing else. A fresh trainer is then started: the train worker sees that the job's
  lease expired (``AGENTR_TRAIN_HEARTBEAT_TIMEOUT_S``, short in these services), queues it again,
  and the run completes with exactly one ``ModelTrained`` for its iteration, no duplicate samples,
  and the checkpoint trained by the fresh trainer to the end of its steps.
* A run cancelled while its job trains: the job stops (its lease released, Celery state REVOKED)
  within 30 s; no ``ModelTrained``, no checkpoint.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import redis
from sqlalchemy import select

from core.domain.ids import run_stream
from core.runtime.settings import Settings
from core.store.factory import open_store
from core.store.tables import events
from tests.e2e.helpers import wait_until
from tests.e2e.services import Deployment, follow
from tests.e2e.test_services_e2e import check_dataset, dataset_records
from train_service.celery_app import make_celery


async def _run_events(database_url: str, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    store = await open_store(database_url)
    try:
        async with store.engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(events.c.event_type, events.c.data)
                    .where(events.c.stream_id == run_stream(run_id))
                    .order_by(events.c.position)
                )
            ).all()
    finally:
        await store.close()
    return [(t, d) for t, d in rows]


def run_events(deployment: Deployment, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    return asyncio.run(_run_events(deployment.database_url, run_id))


class TrainingJobs:
    """The deployment's training jobs as the test sees them: lease keys and Celery states."""

    def __init__(self, deployment: Deployment) -> None:
        env = deployment.group.env
        self.settings = Settings(redis_url=env["AGENTR_REDIS_URL"], redis_prefix=env["AGENTR_REDIS_PREFIX"])
        self.redis = redis.Redis.from_url(env["AGENTR_REDIS_URL"])
        self.app = make_celery(self.settings)

    def task_id(self, deployment: Deployment, run_id: str) -> str | None:
        ready = [d for t, d in run_events(deployment, run_id) if t == "IterationDatasetReady"]
        if not ready:
            return None
        from core.domain.ids import derived_id

        return derived_id("train-task", run_id, 0, ready[0]["dataset_id"])

    def leased(self, task_id: str) -> bool:
        return bool(self.redis.exists(f"{self.settings.redis_prefix}:train:job:{task_id}"))

    def attempts(self, task_id: str) -> int:
        return int(self.redis.get(f"{self.settings.redis_prefix}:train:attempts:{task_id}") or 0)

    def progress(self, task_id: str) -> int:
        result = self.app.AsyncResult(task_id)
        info = result.info if result.state == "PROGRESS" else None
        return int(info.get("step", 0)) if isinstance(info, dict) else 0

    def state(self, task_id: str) -> str:
        return str(self.app.AsyncResult(task_id).state)

    def close(self) -> None:
        self.app.close()
        self.redis.close()


def _training_under_way(deployment: Deployment, jobs: TrainingJobs, run_id: str, steps: int) -> str:
    group = deployment.group

    def under_way() -> str | None:
        task_id = jobs.task_id(deployment, run_id)
        if task_id and jobs.leased(task_id) and jobs.progress(task_id) >= steps:
            return task_id
        return None

    try:
        found: str = wait_until(
            under_way,
            timeout=240,
            poll_s=0.1,
            what="the training job to be under way",
            check=group.check_alive,
        )
    except AssertionError as exc:
        run = deployment.client.run(run_id)
        raise AssertionError(f"{exc}\nrun: {run}\n{group.logs(60)}") from None
    return found


def test_a_killed_trainer_s_job_is_taken_by_a_fresh_one(
    deployment: Deployment, run_config: dict[str, Any]
) -> None:
    group, client = deployment.group, deployment.client
    jobs = TrainingJobs(deployment)
    try:
        steps = 120
        config = {**run_config, "train": {**run_config.get("train", {}), "max_steps": steps}}
        first = client.submit_run(config)
        task_id = _training_under_way(deployment, jobs, first, 2)
        group.kill("trainer", signal.SIGKILL)  # mid-job: the job is leased and past step 2

        # no trainer at all now: another run's steps go on all the same
        second = client.submit_run({**run_config, "data_only": True})

        def second_finished() -> dict[str, Any] | None:
            run = client.run(second)
            return run if run["status"] in ("completed", "failed", "cancelled") else None

        def the_others_alive() -> None:
            dead = {
                name: service.proc.returncode
                for name, service in group.processes.items()
                if name not in ("migrate", "trainer") and service.proc and service.proc.poll() is not None
            }
            assert not dead, f"services exited: {dead}\n{group.logs()}"

        done = wait_until(second_finished, timeout=240, what="the data-only run", check=the_others_alive)
        assert done["status"] == "completed", f"{done}\n{group.logs()}"
        assert client.run(first)["status"] == "running"

        group.restart("trainer")
        run = follow(client, group, first, timeout=300)
        attempts = jobs.attempts(task_id)
    finally:
        jobs.close()
    assert attempts == 2, "the lost job was queued exactly once more"
    trained = [d for t, d in run_events(deployment, first) if t == "ModelTrained"]
    assert len(trained) == 1 and trained[0]["iteration"] == 0, trained
    assert trained[0]["metrics"]["steps"] == steps and trained[0]["metrics"]["reused"] is False
    assert "lost (no trainer heartbeat); queueing it again" in group.processes["train"].tail(400)
    iteration = run["iterations"][0]
    records = dataset_records(client, first)
    check_dataset(records)
    assert len(records) == iteration["revisions"] + iteration["goods"]
    meta = json.loads((Path(iteration["checkpoint"]) / "meta.json").read_text())
    assert meta["dataset_id"] == iteration["dataset_id"]


def test_cancelling_a_run_stops_its_training_job(deployment: Deployment, run_config: dict[str, Any]) -> None:
    group, client = deployment.group, deployment.client
    jobs = TrainingJobs(deployment)
    try:
        config = {**run_config, "train": {**run_config.get("train", {}), "max_steps": 100_000}}
        run_id = client.submit_run(config)
        task_id = _training_under_way(deployment, jobs, run_id, 1)
        response = client.http.post(
            f"/v1/runs/{run_id}/cancel", json={"reason": "e2e cancel"}, headers=client.headers
        )
        assert response.status_code == 202, response.text

        def stopped() -> bool:
            return not jobs.leased(task_id) and jobs.state(task_id) == "REVOKED"

        wait_until(stopped, timeout=30, what="the training job to stop", check=group.check_alive)
    finally:
        jobs.close()
    types = Counter(t for t, _ in run_events(deployment, run_id))
    assert types["RunCancelled"] == 1 and types["ModelTrained"] == 0, types
    assert client.run(run_id)["status"] == "cancelled"
    checkpoint = deployment.home / "runs" / run_id / "checkpoints" / "iter-0"
    assert not checkpoint.exists()
