"""Owns training as a Celery task: the app factory, the ``train`` queue, submit / cancel / inline run.

Workers run ``celery -A train_service.celery_app worker -Q train`` (GPU machines subscribe to the
``train`` queue); the broker and result backend are the Redis at ``AGENTR_REDIS_URL``, with every
key under ``AGENTR_REDIS_PREFIX`` (kombu's ``global_keyprefix``), so several deployments or test
runs share one Redis safely.

The task ``agentr.train_iteration`` trains one iteration from a dataset FILE (the ``samples`` JSONL
of ``core.formats.export`` or its Parquet) into a checkpoint folder and returns
``{"checkpoint", "metrics", "reused"}``; appending ``ModelTrained`` is the caller's business.

* a trainer that dies mid-job: the job holds a lease in Redis that a thread of its trainer refreshes
  (``train_service.train_jobs``); once it expires, the train worker that waits on the job queues it
  again under the same task id (``train_service.runs``), so a fresh trainer takes it within
  ``AGENTR_TRAIN_HEARTBEAT_TIMEOUT_S``. acks_late + reject_on_worker_lost, with the broker's
  visibility timeout ``AGENTR_TRAIN_VISIBILITY_TIMEOUT_S``, remain the backstop. Every delivery is
  safe to run again: a copy whose job another live trainer holds, or that already finished
  (``done:{task}``), trains nothing; a retry reuses a completed checkpoint (``existing_checkpoint``).
* retries: transient failures (``TransientTrainingError``, connection errors) retry with backoff,
  up to 3 times; bad input (empty dataset, missing file, bad template) fails at once.
* cancel: ``cancel_training`` revokes the task (a queued one is never started) and raises a Redis
  flag that the running task polls after each optimizer step, so it also stops under ``--pool solo``;
  the run's own flag (``TrainJobs.cancel_run``, raised when the run is cancelled) stops every job of
  the run, and a job delivered after it does nothing; a cancelled task ends in state REVOKED and
  writes no checkpoint.
* ``run_inline`` runs the same function in-process (single-process / embedded mode).
* launcher: ``launch={"launcher": "torchrun", "nproc_per_node": N}`` makes the task a dispatcher of
  a torchrun process group (``train_service.launcher``); keep the worker on ``--pool solo``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from celery import Celery, Task, states
from celery.exceptions import Ignore
from celery.result import AsyncResult

from core.runtime.settings import Settings, load_settings
from core.runtime.torch_threads import in_training_phase
from train_service.train_jobs import TrainJobs

log = logging.getLogger(__name__)

TASK_NAME = "agentr.train_iteration"
TRAIN_QUEUE = "train"


class TransientTrainingError(RuntimeError):
    """A failure worth retrying (e.g. a shared file system or device briefly unavailable)."""


def _load_samples(dataset_path: Path) -> Any:
    from core.formats.export import iter_parquet, read_samples_jsonl

    if not dataset_path.is_file():
        raise FileNotFoundError(f"dataset file not found: {dataset_path}")
    if dataset_path.suffix == ".parquet":
        return iter_parquet(dataset_path)
    return read_samples_jsonl(dataset_path)


@in_training_phase  # the embedded loop's training thread count (core.runtime.torch_threads)
def run_train_iteration(
    *,
    run_id: str | None,
    iteration: int,
    dataset_id: str,
    dataset_path: str,
    model_path: str,
    out_dir: str,
    config: dict[str, Any] | None = None,
    launch: dict[str, Any] | None = None,
    method: str = "sft",
    online: dict[str, Any] | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_step: Callable[[int, int, float | None], None] | None = None,
) -> dict[str, Any]:
    """Train one iteration (the task body; also what single-process mode calls directly).

    ``launch`` (``train_service.launcher.LaunchSettings`` as a dict) picks inline training or a
    torchrun process group that runs this same function on every rank. ``method`` (``train.method``):
    ``sft``, or ``dpo`` / ``archer`` (``train_service.methods.run_method``, inline only).
    ``online``: where an online learner plays (``env_uri``, ``task_ids``, ``store_url``,
    ``project_id``; online ArCHer).
    """
    from train_service.launcher import LaunchSettings, launch_torchrun
    from train_service.sft import SFTConfig, TrainJob, train_sft

    settings = LaunchSettings.from_data(launch)
    job: dict[str, Any] = {  # what every learner's call (and each torchrun rank) gets
        "run_id": run_id,
        "iteration": iteration,
        "dataset_id": dataset_id,
        "dataset_path": dataset_path,
        "model_path": model_path,
        "out_dir": out_dir,
        "config": config or {},
    }
    if method != "sft":
        if settings.launcher != "inline":
            raise ValueError(
                f"train.method {method!r} trains in one process: train.launcher must be 'inline'"
            )
        from train_service.methods import run_method

        return run_method(method, **job, online=online, should_stop=should_stop, on_step=on_step)
    cfg = SFTConfig.from_dict(config or {})  # bad fields fail here, before any process starts
    if settings.launcher == "torchrun":
        if dataset_id and (Path(out_dir) / "meta.json").is_file():
            from train_service.checkpoint import existing_checkpoint

            if (found := existing_checkpoint(out_dir, dataset_id)) is not None:
                return {"checkpoint": str(found), "metrics": {}, "reused": True}
        if not Path(dataset_path).is_file():
            raise FileNotFoundError(f"dataset file not found: {dataset_path}")
        return launch_torchrun(job, settings, should_stop=should_stop, on_step=on_step)
    samples = _load_samples(Path(dataset_path))
    train_job = TrainJob(model_path, out_dir, iteration, dataset_id, run_id, should_stop, on_step)
    report = train_sft(train_job, samples, cfg)
    return {"checkpoint": str(report.checkpoint), "metrics": report.metrics, "reused": report.reused}


run_inline = run_train_iteration


def _cancel_poller(
    jobs: TrainJobs, task_id: str, run_id: str | None, every_s: float = 1.0
) -> Callable[[], bool]:
    """``should_stop`` for the learners: the task's or the run's cancel flag, read at most every
    ``every_s`` seconds."""
    last = [0.0]

    def should_stop() -> bool:
        now = time.monotonic()
        if now - last[0] < every_s:
            return False
        last[0] = now
        try:
            return jobs.stop_requested(task_id, run_id)
        except Exception as exc:  # a Redis hiccup must not kill a long training run
            log.warning("could not check the cancel flags of task %s: %s", task_id, exc)
            return False

    return should_stop


def _revoked(task: Task, message: str) -> Ignore:
    """Record the task as REVOKED (what ``AsyncResult.get`` raises as TaskRevokedError)."""
    task.update_state(
        state=states.REVOKED,
        meta={"exc_type": "TaskRevokedError", "exc_module": "celery.exceptions", "exc_message": message},
    )
    return Ignore()


def make_celery(settings: Settings | None = None) -> Celery:
    """A Celery app wired to ``settings`` (broker + backend = Redis, keys under the prefix)."""
    settings = settings or load_settings()
    url = settings.redis_url or "redis://127.0.0.1:6379/0"
    prefix = f"{settings.redis_prefix}:celery:"
    app = Celery("agentr", broker=url, backend=url, set_as_current=False)
    app.conf.update(
        task_default_queue=TRAIN_QUEUE,
        task_routes={TASK_NAME: {"queue": TRAIN_QUEUE}},
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_track_started=True,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
        broker_transport_options={
            "global_keyprefix": prefix,
            "visibility_timeout": settings.train_visibility_timeout_s,
        },
        result_backend_transport_options={"global_keyprefix": prefix},
        result_expires=7 * 24 * 3600,
    )

    @app.task(
        name=TASK_NAME,
        bind=True,
        acks_late=True,
        autoretry_for=(TransientTrainingError, ConnectionError, TimeoutError),
        retry_backoff=True,
        retry_backoff_max=300,
        retry_jitter=True,
        max_retries=3,
    )
    def train_iteration(self: Task, **job: Any) -> dict[str, Any]:
        """``job``: the keyword arguments of ``run_train_iteration`` that ``submit_training`` sends."""
        from train_service.sft import TrainingCancelled

        task_id = self.request.id or ""
        log.info(
            "training run %s iteration %s on dataset %s (task %s)",
            job.get("run_id"),
            job.get("iteration"),
            job.get("dataset_id"),
            task_id,
        )

        def progress(step: int, max_steps: int, loss: float | None) -> None:
            if task_id:
                self.update_state(state="PROGRESS", meta={"step": step, "max_steps": max_steps, "loss": loss})

        jobs = TrainJobs(settings)
        run_id = job.get("run_id")
        if jobs.run_cancelled(run_id):
            log.info("run %s was cancelled: task %s trains nothing", run_id, task_id)
            raise _revoked(self, f"run {run_id} was cancelled")
        done = jobs.finished(task_id)
        if done is not None:  # a late copy of a finished job (the broker's backstop re-send)
            log.info("task %s already finished; returning its result", task_id)
            return done
        lease = jobs.lease(task_id)
        if not lease.acquire():  # a copy of a job that a live trainer is running
            log.info("task %s is running on %s; this copy trains nothing", task_id, lease.held_by())
            raise Ignore()
        lease.start()
        try:
            result = run_train_iteration(
                **job,
                should_stop=_cancel_poller(jobs, task_id, run_id),
                on_step=progress,
            )
            jobs.mark_finished(task_id, result)
            return result
        except TrainingCancelled as exc:
            log.info("%s", exc)
            raise _revoked(self, str(exc)) from exc
        finally:
            lease.release()

    return app


def submit_training(
    app: Celery,
    *,
    run_id: str | None,
    iteration: int,
    dataset_id: str,
    dataset_path: str,
    model_path: str,
    out_dir: str,
    config: dict[str, Any] | None = None,
    launch: dict[str, Any] | None = None,
    task_id: str | None = None,
    method: str = "sft",
    online: dict[str, Any] | None = None,
) -> AsyncResult:
    """Queue a training job on the ``train`` queue; ``task_id`` (e.g. derived from the dataset)
    makes a resubmission of the same iteration recognisable."""
    return app.send_task(
        TASK_NAME,
        kwargs={
            "run_id": run_id,
            "iteration": iteration,
            "dataset_id": dataset_id,
            "dataset_path": dataset_path,
            "model_path": model_path,
            "out_dir": out_dir,
            "config": config or {},
            "launch": launch or {},
            "method": method,
            "online": online,
        },
        queue=TRAIN_QUEUE,
        task_id=task_id,
    )


def cancel_training(app: Celery, task_id: str, settings: Settings | None = None) -> None:
    """Cancel a queued or running training task (see the module docstring)."""
    settings = settings or load_settings()
    TrainJobs(settings).cancel_task(task_id)
    app.control.revoke(task_id)


app = make_celery()
