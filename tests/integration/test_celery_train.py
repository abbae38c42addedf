"""Training through a real Celery worker process on the real Redis (isolated key prefix)."""

from __future__ import annotations

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

from core.domain.trajectory import Message, TrainingSample
from core.formats.export import write_jsonl
from core.llm.tiny import build_tiny_model
from core.runtime.settings import Settings
from train_service.celery_app import cancel_training, make_celery, run_inline, submit_training
from train_service.checkpoint import read_meta

REPO = Path(__file__).resolve().parents[2]
TEXTS = [
    "Goal: craft stick.",
    "Thought: I need oak planks.\nAction: get 2 oak planks",
    "Got 2 oak planks",
] * 20


def samples(n: int) -> list[TrainingSample]:
    return [
        TrainingSample(
            f"s{i}",
            "revision",
            (
                Message("user", f"Goal: craft stick. ({i})"),
                Message("assistant", "Thought: I need oak planks.\nAction: get 2 oak planks", 1),
            ),
        )
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def model_and_data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("celery")
    model = build_tiny_model(root / "m", TEXTS, hidden=32, layers=1, heads=2, vocab_size=320)
    data = root / "ds.jsonl"
    write_jsonl(data, samples(4), "samples")
    return model, data


@pytest.fixture
def settings(redis_url: str, redis_prefix: str) -> Settings:
    return Settings(redis_url=redis_url, redis_prefix=redis_prefix)


@pytest.fixture
def worker(settings: Settings, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    env = {
        **os.environ,
        "AGENTR_REDIS_URL": settings.redis_url or "",
        "AGENTR_REDIS_PREFIX": settings.redis_prefix,
        "PYTHONPATH": str(REPO),
    }
    log = (tmp_path / "worker.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "celery", "-A", "train_service.celery_app", "worker",
            "-Q", "train", "--pool", "solo", "--without-mingle", "--without-gossip",
            "-n", f"test-{uuid.uuid4().hex[:8]}@%h", "--loglevel", "INFO",
        ],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_worker_trains_a_tiny_model(settings: Settings, worker, model_and_data, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model, data = model_and_data
    app = make_celery(settings)
    out = tmp_path / "ckpt"
    result = submit_training(
        app, run_id="run-1", iteration=0, dataset_id="ds-1", dataset_path=str(data), model_path=str(model),
        out_dir=str(out), config={"max_steps": 2, "batch_size": 2, "learning_rate": 1e-3},
    )  # fmt: skip
    try:
        value = result.get(timeout=180)
    except Exception:
        print((tmp_path / "worker.log").read_text())
        raise
    assert value["checkpoint"] == str(out)
    assert value["metrics"]["steps"] == 2 and value["reused"] is False
    meta = read_meta(out)
    assert (meta.run_id, meta.iteration, meta.dataset_id) == ("run-1", 0, "ds-1")
    # a resubmission (e.g. a redelivered message) reuses the finished checkpoint
    again = submit_training(
        app, run_id="run-1", iteration=0, dataset_id="ds-1", dataset_path=str(data), model_path=str(model),
        out_dir=str(out), config={"max_steps": 2, "batch_size": 2},
    ).get(timeout=120)  # fmt: skip
    assert again["reused"] is True
    # bad input fails at once with a clear message (no retries)
    bad = submit_training(
        app, run_id="run-1", iteration=1, dataset_id="ds-2", dataset_path=str(tmp_path / "missing.jsonl"),
        model_path=str(model), out_dir=str(tmp_path / "c2"),
    )  # fmt: skip
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        bad.get(timeout=120)
    app.close()


def test_running_task_can_be_cancelled(settings: Settings, worker, model_and_data, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model, data = model_and_data
    app = make_celery(settings)
    out = tmp_path / "never"
    result = submit_training(
        app, run_id="run-2", iteration=0, dataset_id="ds-3", dataset_path=str(data), model_path=str(model),
        out_dir=str(out), config={"max_steps": 100_000, "batch_size": 2},
    )  # fmt: skip
    deadline = time.monotonic() + 180
    while result.state != "PROGRESS":
        assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()
        time.sleep(0.5)
    cancel_training(app, result.id, settings)
    with pytest.raises(TaskRevokedError):
        result.get(timeout=120)
    assert not out.exists()
    app.close()


def test_inline_mode_runs_the_same_function(model_and_data, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model, data = model_and_data
    value = run_inline(
        run_id=None, iteration=2, dataset_id="ds-inline", dataset_path=str(data), model_path=str(model),
        out_dir=str(tmp_path / "inline"), config={"max_steps": 1, "batch_size": 4},
    )  # fmt: skip
    assert read_meta(value["checkpoint"]).iteration == 2
