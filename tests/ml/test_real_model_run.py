"""`agentr run --model FOLDER` on the imported SmolLM2 (``ml_real``).

Zero-shot (data-only): the real model passes the submission checks (chat template, prefix-stable
masks) and searches with its own template; it writes no ReAct ``Action:`` line (README, Real
models), so the tree has no success, no pair and an empty dataset, and the run says exactly that
(exit 1) rather than training on nothing. After a short LoRA warm start (tests/ml/real_model.py)
the same command with training completes: search, dataset, SFT of the real model, evaluation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ml.real_model import imported_smollm2, warm_smollm2

pytestmark = [pytest.mark.ml_real, pytest.mark.slow]


def agentr_run(folder: Path, home: Path, *extra: str) -> tuple[int, str]:
    script = Path(sys.executable).with_name("agentr")
    command = [str(script), "run", "--model", str(folder), "--quick", "--iterations", "1"]
    command += ["--max-tasks", "1", "--max-eval-tasks", "1", "--home", str(home), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1200, check=False)
    return done.returncode, " ".join((done.stdout + done.stderr).split())


def test_agentr_run_data_only_searches_with_the_real_model(tmp_path: Path) -> None:
    folder = imported_smollm2()
    home = tmp_path / "home"
    code, output = agentr_run(folder, home, "--data-only")
    assert code == 1, output
    assert "the dataset is empty" in output and "1 tree(s) completed" in output, output
    assert "no good trajectory reached alpha" in output
    (run,) = list((home / "runs").iterdir())
    report = json.loads((run / "report.json").read_text())
    assert report["status"] == "failed" and "the dataset is empty" in report["reason"]
    (iteration,) = report["iterations"]
    assert iteration["model_ref"] == str(folder) and iteration["trees"] == 1
    assert report["config"]["data_only"] is True


def test_agentr_run_trains_the_warm_started_real_model(tmp_path: Path) -> None:
    folder = warm_smollm2()
    home = tmp_path / "home"
    code, output = agentr_run(folder, home)
    assert code == 0, output
    (run,) = list((home / "runs").iterdir())
    report = json.loads((run / "report.json").read_text())
    assert report["status"] == "completed", report
    (iteration,) = report["iterations"]
    assert iteration["model_ref"] == str(folder)
    checkpoint = Path(iteration["checkpoint"])
    assert (checkpoint / "meta.json").is_file() and (checkpoint / "model.safetensors").is_file()
    assert iteration["train"]["steps"] >= 1
    assert report["datasets"]["0"]["trees"] == 1
