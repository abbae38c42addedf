"""train.method dpo and archer through a real Celery worker process on the real Redis (isolated key
prefix): the same task as SFT trains from the method's dataset file (preference pairs / transitions
JSONL) and returns the checkpoint, with meta.json (and ArCHer's critic) in it; an unknown method
fails at once with a clear message."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.domain.events import NodeRecord
from core.domain.mcts import SearchTree
from core.domain.preferences import preference_pair
from core.domain.trajectory import Step, Trajectory
from core.domain.transitions import TreeSource, tree_transitions
from core.llm.tiny import build_tiny_model
from core.runtime.settings import Settings
from train_service.celery_app import make_celery, submit_training
from train_service.checkpoint import read_meta
from train_service.rl_data import write_records
from train_service.value_model import has_critic

REPO = Path(__file__).resolve().parents[2]
TEXTS = [
    "Goal: craft stick.",
    "Thought: I need oak planks.\nAction: get 2 oak planks",
    "Got 2 oak planks",
] * 20


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
def worker(settings: Settings, tmp_path: Path) -> Iterator[Path]:
    env = {
        **os.environ,
        "AGENTR_REDIS_URL": settings.redis_url or "",
        "AGENTR_REDIS_PREFIX": settings.redis_prefix,
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
    }
    log_path = tmp_path / "worker.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "celery", "-A", "train_service.celery_app", "worker",
            "-Q", "train", "--pool", "solo", "--without-mingle", "--without-gossip",
            "-n", f"methods-{uuid.uuid4().hex[:8]}@%h", "--loglevel", "INFO",
        ],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        yield log_path
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_worker_trains_dpo_and_archer(settings: Settings, worker: Path, files, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
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
            print(worker.read_text())
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
