"""Training through a real Celery worker process on the real Redis (isolated key prefix): SFT
(progress, retry reuse, clear bad-input errors, cancel, the same function inline), and train.method
dpo and archer through the same task, each from its dataset file (preference pairs / transitions
JSONL), returning the checkpoint with meta.json (and ArCHer's critic in it); an unknown method
fails at once with a clear message."""

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

from core.domain.events import NodeRecord
from core.domain.mcts import SearchTree
from core.domain.preferences import preference_pair
from core.domain.trajectory import Message, Step, TrainingSample, Trajectory
from core.domain.transitions import TreeSource, tree_transitions
from core.formats.export import write_jsonl
from core.llm.tiny import build_tiny_model
from core.runtime.settings import Settings
from train_service.celery_app import cancel_training, make_celery, run_inline, submit_training
from train_service.checkpoint import read_meta
from train_service.rl_data import write_records
from train_service.value_model import has_critic

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


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("celery-methods")
    model = build_tiny_model(root / "m", TEXTS, hidden=32, layers=1, heads=2, vocab_size=320)
    shared = Step("I need oak planks.", "get 2 oak planks", "Got 2 oak planks")
    good = Trajectory(
        "Goal: craft stick.", "", (shared, Step("craft", "craft 4 stick", "Crafted", 1.0, True)), 1.0
    )
    bad = Trajectory(
        "Goal: craft stick.", "", (shared, Step("dirt", "get 1 dirt", "Could not find dirt")), 0.0
    )
    pairs = root / "pairs.dpo.jsonl"
    write_records(pairs, [preference_pair("p1", bad, good, 1)])
    tree = SearchTree("t1", "root", 5)
    tree.add_nodes([NodeRecord("root", None, 0, "", "", "Goal: craft stick.")])
    tree.add_nodes([NodeRecord("a", "root", 1, "get 2 oak planks", "planks", "Got 2 oak planks", 1.0, True)])
    tree.finish_rollout("a", 1.0, "done")
    transitions = root / "tr.transitions.jsonl"
    write_records(transitions, tree_transitions(TreeSource(tree, "Goal: craft stick.", "", 1)))
    return model, pairs, transitions


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
        "OMP_NUM_THREADS": "1",
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


def test_worker_trains_dpo_and_archer(settings: Settings, worker, files, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model, pairs, transitions = files
    app = make_celery(settings)
    try:
        dpo = submit_training(
            app, run_id="r", iteration=0, dataset_id="dpo-1", dataset_path=str(pairs), model_path=str(model),
            out_dir=str(tmp_path / "dpo"), config={"max_steps": 1, "batch_size": 1, "learning_rate": 1e-3},
            method="dpo",
        )  # fmt: skip
        archer = submit_training(
            app, run_id="r", iteration=0, dataset_id="archer-1", dataset_path=str(transitions),
            model_path=str(model), out_dir=str(tmp_path / "archer"), method="archer",
            config={"iterations": 2, "warmup_iters": 1, "critic_epochs": 1, "actor_epochs": 1,
                    "batch_size": 1, "grad_accumulation": 1, "head_hidden": 8, "max_state_tokens": 64,
                    "max_length": 128},
        )  # fmt: skip
        try:
            got_dpo, got_archer = dpo.get(timeout=240), archer.get(timeout=240)
        except Exception:
            print((tmp_path / "worker.log").read_text())
            raise
        assert got_dpo["metrics"]["method"] == "dpo" and got_dpo["metrics"]["steps"] == 1
        assert read_meta(got_dpo["checkpoint"]).config["method"] == "dpo"
        assert got_archer["metrics"]["critic_updates"] == 2 and got_archer["metrics"]["actor_updates"] == 1
        assert (
            has_critic(got_archer["checkpoint"])
            and read_meta(got_archer["checkpoint"]).dataset_id == "archer-1"
        )
        bad = submit_training(
            app, run_id="r", iteration=1, dataset_id="x", dataset_path=str(pairs), model_path=str(model),
            out_dir=str(tmp_path / "x"), method="ppo",
        )  # fmt: skip
        with pytest.raises(ValueError, match="train.method must be one of"):
            bad.get(timeout=120)
    finally:
        app.close()
