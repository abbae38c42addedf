"""Owns training as a Celery task: the app factory, the ``train`` queue, submit / cancel / inline run.

Workers run ``celery -A train_service.celery_app worker -Q train`` (GPU machines subscribe to the
``train`` queue); the broker and result backend are the Redis at ``AGENTR_REDIS_URL``, with every
key under ``AGENTR_REDIS_PREFIX`` (kombu's ``global_keyprefix``), so several deployments or test
runs share one Redis safely.

The task ``agentr.train_iteration`` trains one iteration from a dataset FILE (the ``samples`` JSONL
of ``core.formats.export`` or its Parquet) into a checkpoint folder and returns
``{"checkpoint", "metrics", "reused"}``; appending ``ModelTrained`` is the caller's business.

* acks_late + reject_on_worker_lost: a worker that dies mid-training leaves the message to be
  redelivered; the retry then reuses a checkpoint that was completed (``existing_checkpoint``).
* retries: transient failures (``TransientTrainingError``, connection errors) retry with backoff,
  up to 3 times; bad input (empty dataset, missing file, bad template) fails at once.
* cancel: ``cancel_training`` revokes the task (a queued one is never started) and raises a Redis
  flag that the running task polls after each optimizer step, so it also stops under ``--pool solo``;
  a cancelled task ends in state REVOKED and writes no checkpoint.
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

log = logging.getLogger(__name__)

TASK_NAME = "agentr.train_iteration"
TRAIN_QUEUE = "train"
CANCEL_TTL_S = 24 * 3600


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
    from train_service.sft import SFTConfig, train_sft

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
    report = train_sft(
        model_path,
        samples,
        out_dir,
        cfg,
        iteration=iteration,
        dataset_id=dataset_id,
        run_id=run_id,
        should_stop=should_stop,
        on_step=on_step,
    )
    return {"checkpoint": str(report.checkpoint), "metrics": report.metrics, "reused": report.reused}


run_inline = run_train_iteration


def cancel_key(settings: Settings, task_id: str) -> str:
    return f"{settings.redis_prefix}:train:cancel:{task_id}"


def _redis_client(settings: Settings) -> Any:
    import redis

    if not settings.redis_url:
        raise RuntimeError("AGENTR_REDIS_URL is not set: Celery training needs Redis")
    return redis.Redis.from_url(settings.redis_url, socket_timeout=10)


def _cancel_poller(settings: Settings, task_id: str, every_s: float = 1.0) -> Callable[[], bool]:
    client = _redis_client(settings)
    key = cancel_key(settings, task_id)
    last = [0.0]

    def should_stop() -> bool:
        now = time.monotonic()
        if now - last[0] < every_s:
            return False
        last[0] = now
        try:
            return bool(client.exists(key))
        except Exception as exc:  # a Redis hiccup must not kill a long training run
            log.warning("could not check the cancel flag %s: %s", key, exc)
            return False

    return should_stop


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
        broker_transport_options={"global_keyprefix": prefix, "visibility_timeout": 12 * 3600},
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

        try:
            return run_train_iteration(
                **job,
                should_stop=_cancel_poller(settings, task_id) if task_id else None,
                on_step=progress,
            )
        except TrainingCancelled as exc:
            log.info("%s", exc)
            self.update_state(
                state=states.REVOKED,
                meta={
                    "exc_type": "TaskRevokedError",
                    "exc_module": "celery.exceptions",
                    "exc_message": str(exc),
                },
            )
            raise Ignore() from exc

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
    _redis_client(settings).set(cancel_key(settings, task_id), "1", ex=CANCEL_TTL_S)
    app.control.revoke(task_id)


app = make_celery()
