"""The torchrun launcher on CPU: 2 gloo processes train the tiny model into a checkpoint that loads
(rank 0 writes it), a child failure carries the child's last lines, cancellation kills the process
group, and bad launch settings are named."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from core.domain.trajectory import Message, TrainingSample
from core.formats.export import write_jsonl
from core.llm.tiny import build_tiny_model
from train_service.celery_app import run_train_iteration
from train_service.checkpoint import META_FILE, load_checkpoint, read_meta
from train_service.launcher import LaunchFailed, LaunchSettings, launch_problem
from train_service.sft import TrainingCancelled

TEXTS = [
    "Goal: craft stick. craft 4 stick using 2 oak planks",
    "Thought: I need oak planks.\nAction: get 2 oak planks",
    "Got 2 oak planks. Crafted 4 minecraft:stick",
] * 20
TORCHRUN = {"launcher": "torchrun", "nproc_per_node": 2}


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(
        tmp_path_factory.mktemp("tiny") / "m", TEXTS, hidden=32, layers=1, heads=2, vocab_size=300
    )


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    samples = [
        TrainingSample(
            f"s{i}",
            "good",
            (
                Message("user", f"Goal: craft {i + 1} stick."),
                Message("assistant", f"Thought: planks.\nAction: get {i + 1} oak planks", 1),
            ),
        )
        for i in range(8)
    ]
    path = tmp_path_factory.mktemp("data") / "iter-0.jsonl"
    write_jsonl(path, samples, "samples")
    return path


def job(base_model: Path, dataset: Path, out: Path, **config: object) -> dict[str, object]:
    return {
        "run_id": "r",
        "iteration": 0,
        "dataset_id": "d0",
        "dataset_path": str(dataset),
        "model_path": str(base_model),
        "out_dir": str(out),
        "config": {"max_steps": 3, "batch_size": 2, "learning_rate": 1e-2, "logging_steps": 1, **config},
    }


def test_two_gloo_processes_train_a_checkpoint_that_loads(
    base_model: Path, dataset: Path, tmp_path: Path
) -> None:
    steps: list[int] = []
    out = tmp_path / "ckpt"
    result = run_train_iteration(
        **job(base_model, dataset, out), launch=TORCHRUN, on_step=lambda step, _max, _loss: steps.append(step)
    )  # type: ignore[arg-type]
    assert Path(result["checkpoint"]) == out and result["reused"] is False
    assert result["metrics"]["steps"] == 3
    assert steps and steps[-1] == 3  # rank 0's progress reached the dispatcher
    meta = read_meta(out)
    assert meta.dataset_id == "d0" and meta.metrics["steps"] == 3
    model, _, _ = load_checkpoint(out)
    from transformers import AutoModelForCausalLM

    before = AutoModelForCausalLM.from_pretrained(base_model).state_dict()
    after = model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert not (tmp_path / "ckpt.launch").exists()  # the job folder is cleaned up
    # a retry of the same dataset reuses the checkpoint without launching anything
    again = run_train_iteration(**job(base_model, dataset, out), launch=TORCHRUN)  # type: ignore[arg-type]
    assert again["reused"] is True


def test_a_child_failure_is_raised_with_its_last_lines(
    base_model: Path, dataset: Path, tmp_path: Path
) -> None:
    bad = job(base_model, dataset, tmp_path / "ckpt")
    bad["model_path"] = str(tmp_path / "no-such-model")
    with pytest.raises(LaunchFailed) as err:
        run_train_iteration(**bad, launch=TORCHRUN)  # type: ignore[arg-type]
    message = str(err.value)
    assert "exited with code" in message and "last lines" in message
    assert "no-such-model" in message  # the child's own error is in the tail
    assert not (tmp_path / "ckpt" / META_FILE).exists()


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


def test_cancellation_kills_the_process_group(base_model: Path, dataset: Path, tmp_path: Path) -> None:
    progressed: list[int] = []
    out = tmp_path / "ckpt"
    long_job = job(base_model, dataset, out, max_steps=100_000)
    with pytest.raises(TrainingCancelled, match="cancelled"):
        run_train_iteration(
            **long_job,  # type: ignore[arg-type]
            launch=TORCHRUN,
            on_step=lambda step, _max, _loss: progressed.append(step),
            should_stop=lambda: len(progressed) >= 2,
        )
    assert len(progressed) >= 2
    assert _processes_mentioning(str(tmp_path / "ckpt.launch")) == []  # every rank is gone
    assert not (out / META_FILE).exists()


def test_bad_launch_settings_are_named() -> None:
    assert launch_problem({"launcher": "torchrun", "nproc_per_node": 0}) == (
        "train.nproc_per_node must be an integer >= 1, got 0"
    )
    assert "one of inline, torchrun" in (launch_problem({"launcher": "mpirun"}) or "")
    assert "needs train.launcher 'torchrun'" in (launch_problem({"nproc_per_node": 2}) or "")
    assert "needs train.launcher 'torchrun'" in (launch_problem({"accelerate_config": "ds.yaml"}) or "")
    assert (
        launch_problem({"launcher": "torchrun", "nproc_per_node": 4, "accelerate_config": "ds.yaml"}) is None
    )
    with pytest.raises(ValueError, match="nproc_per_node"):
        LaunchSettings(launcher="torchrun", nproc_per_node=-1)
