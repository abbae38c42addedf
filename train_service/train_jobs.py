"""Owns the liveness and stop signals of training jobs in Redis, and the trainer's health heartbeat.

Celery's Redis broker re-sends a job whose trainer died only after its visibility timeout, and a
busy ``--pool solo`` worker cannot answer pings. So the jobs keep signals of their own, every key
under ``{AGENTR_REDIS_PREFIX}:train:``:

* ``job:{task}``: the LEASE of the trainer running that job (a token, expiring after
  ``AGENTR_TRAIN_HEARTBEAT_TIMEOUT_S``), taken with ``SET NX`` before training and refreshed by a
  thread every third of that time (:class:`JobLease`). A second delivery of a job whose lease is
  held (the broker's backstop re-send of a job that still trains) does nothing. A job that Celery
  says is started but whose lease has expired is LOST: the train worker queues it again
  (``train_service.runs``), at most ``AGENTR_TRAIN_MAX_ATTEMPTS`` times in all (``attempts:{task}``).
* ``done:{task}``: the result of a finished job, so a late duplicate delivery returns it instead of
  training again.
* ``cancel:{task}`` and ``cancel-run:{run}``: stop flags the running job polls after each optimizer
  step; a job whose run is flagged does not start at all (``train_service.celery_app``).

The trainer PROCESS also writes a heartbeat FILE (:class:`TrainerHeartbeat`, from a thread, each
time the broker answered a ping), so ``agentr celery-worker --ping`` can say "healthy" while the
single worker thread is busy training (:func:`trainer_health`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from core.runtime.settings import Settings

log = logging.getLogger(__name__)

FLAG_TTL_S = 24 * 3600  # how long cancel flags and finished results are kept

_REFRESH = """
local held = redis.call('get', KEYS[1])
if held == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
if not held then
  redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 2
end
return 0
"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
"""


def redis_client(settings: Settings) -> Any:
    import redis

    if not settings.redis_url:
        raise RuntimeError("AGENTR_REDIS_URL is not set: Celery training needs Redis")
    return redis.Redis.from_url(settings.redis_url, socket_timeout=10, socket_connect_timeout=5)


class TrainJobs:
    """The Redis signals of training jobs (module docstring), for trainers and the train worker."""

    def __init__(self, settings: Settings, client: Any = None) -> None:
        self.settings = settings
        self.client = client if client is not None else redis_client(settings)
        self.base = f"{settings.redis_prefix}:train"

    # -- keys ---------------------------------------------------------------------------------------
    def job_key(self, task_id: str) -> str:
        return f"{self.base}:job:{task_id}"

    def done_key(self, task_id: str) -> str:
        return f"{self.base}:done:{task_id}"

    def cancel_key(self, task_id: str) -> str:
        return f"{self.base}:cancel:{task_id}"

    def run_cancel_key(self, run_id: str) -> str:
        return f"{self.base}:cancel-run:{run_id}"

    def attempts_key(self, task_id: str) -> str:
        return f"{self.base}:attempts:{task_id}"

    # -- the train worker's side ----------------------------------------------------------------------
    def holder(self, task_id: str) -> str | None:
        """Who holds the job's lease (``host:pid:token``), or None when no trainer is alive on it."""
        value = self.client.get(self.job_key(task_id))
        return value.decode() if isinstance(value, bytes) else value

    def count_attempt(self, task_id: str) -> int:
        """One more submission of the job; returns how many there were (this one included)."""
        key = self.attempts_key(task_id)
        count = int(self.client.incr(key))
        self.client.expire(key, FLAG_TTL_S)
        return count

    def attempts(self, task_id: str) -> int:
        """How many times the job was submitted (0: never, or the count expired)."""
        return int(self.client.get(self.attempts_key(task_id)) or 0)

    def cancel_task(self, task_id: str) -> None:
        self.client.set(self.cancel_key(task_id), "1", ex=FLAG_TTL_S)

    def cancel_run(self, run_id: str) -> None:
        """Every job of ``run_id``, running or delivered later, stops (or never starts)."""
        self.client.set(self.run_cancel_key(run_id), "1", ex=FLAG_TTL_S)

    # -- the trainer's side ---------------------------------------------------------------------------
    def run_cancelled(self, run_id: str | None) -> bool:
        return bool(run_id) and bool(self.client.exists(self.run_cancel_key(str(run_id))))

    def stop_requested(self, task_id: str, run_id: str | None) -> bool:
        keys = [self.cancel_key(task_id)] + ([self.run_cancel_key(run_id)] if run_id else [])
        return bool(self.client.exists(*keys))

    def finished(self, task_id: str) -> dict[str, Any] | None:
        raw = self.client.get(self.done_key(task_id))
        return dict(json.loads(raw)) if raw else None

    def mark_finished(self, task_id: str, result: dict[str, Any]) -> None:
        self.client.set(self.done_key(task_id), json.dumps(result), ex=FLAG_TTL_S)

    def lease(self, task_id: str) -> JobLease:
        return JobLease(self.client, self.job_key(task_id), self.settings.train_heartbeat_timeout_s)


class JobLease:
    """A trainer's hold on one job: taken once (``SET NX``), refreshed by a daemon thread every third
    of ``ttl_s``, released (only if still ours) when the job ends."""

    def __init__(self, client: Any, key: str, ttl_s: float) -> None:
        self.client = client
        self.key = key
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self.token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._refresh = client.register_script(_REFRESH)
        self._release = client.register_script(_RELEASE)

    def acquire(self) -> bool:
        return bool(self.client.set(self.key, self.token, nx=True, px=self.ttl_ms))

    def held_by(self) -> str:
        value = self.client.get(self.key)
        return value.decode() if isinstance(value, bytes) else str(value)

    def _beat(self) -> None:
        interval = self.ttl_ms / 3000
        while not self._stop.wait(interval):
            try:
                outcome = self._refresh(keys=[self.key], args=[self.token, self.ttl_ms])
            except Exception as exc:  # Redis briefly away: the next beat tries again
                log.warning("could not refresh the training job's heartbeat %s: %s", self.key, exc)
                continue
            if outcome == 2:
                log.warning("training job heartbeat %s had expired; taken again", self.key)
            elif outcome == 0:
                log.warning("training job %s is now held by %s", self.key, self.held_by())

    def start(self) -> None:
        self._thread = threading.Thread(target=self._beat, name="train-job-heartbeat", daemon=True)
        self._thread.start()

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self._release(keys=[self.key], args=[self.token])
        except Exception as exc:  # it expires on its own
            log.warning("could not release the training job's heartbeat %s: %s", self.key, exc)


# ---------------------------------------------------------------------------------- process health
def heartbeat_path(node_name: str) -> Path:
    """The heartbeat file of Celery node ``node_name`` (in this container's temporary folder)."""
    safe = re.sub(r"[^A-Za-z0-9_.@-]+", "-", node_name)
    return Path(tempfile.gettempdir()) / f"agentr-celery-{safe}.heartbeat"


class TrainerHeartbeat:
    """Touches :func:`heartbeat_path` every ``interval_s`` from a daemon thread, each time the broker
    answered a ping: "this trainer process lives and reaches its broker", even mid-job."""

    def __init__(self, settings: Settings, node_name: str, interval_s: float | None = None) -> None:
        self.path = heartbeat_path(node_name)
        self.interval_s = interval_s or max(1.0, settings.train_heartbeat_timeout_s / 3)
        self.client = redis_client(settings)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trainer-heartbeat", daemon=True)

    def beat(self) -> bool:
        try:
            self.client.ping()
        except Exception as exc:
            log.warning("trainer heartbeat: the broker does not answer (%s)", exc)
            return False
        self.path.write_text(f"{time.time():.3f}\n")
        return True

    def _run(self) -> None:
        while True:
            self.beat()
            if self._stop.wait(self.interval_s):
                return

    def start(self) -> TrainerHeartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.path.unlink(missing_ok=True)


def trainer_health(settings: Settings, node_name: str, max_age_s: float | None = None) -> str | None:
    """None when the trainer ``node_name`` on this host is healthy: its heartbeat file is younger
    than ``max_age_s`` (default ``AGENTR_TRAIN_HEARTBEAT_TIMEOUT_S``) and the broker answers a ping;
    else what is wrong."""
    max_age = max_age_s if max_age_s is not None else settings.train_heartbeat_timeout_s
    path = heartbeat_path(node_name)
    try:
        age = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return f"no heartbeat file {path}: the trainer {node_name} is not running (or not started yet)"
    if age > max_age:
        return f"the trainer {node_name} wrote no heartbeat for {age:.0f}s (limit {max_age:.0f}s)"
    try:
        redis_client(settings).ping()
    except Exception as exc:
        return f"the broker {settings.redis_url} does not answer: {type(exc).__name__}: {exc}"
    return None
