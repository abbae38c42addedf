"""`agentr run --model FOLDER` on the imported SmolLM2 (``ml_real``): the real model passes the
submission checks (chat template, prefix-stable masks), searches with its own template and the
run ends by naming why it has no data. Zero-shot SmolLM2 does not write the ReAct ``Action:``
format (README, Real models), so the data-only run's tree has no success, no pair and an empty
dataset; the run says exactly that (exit 1) rather than training on nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ml.real_model import imported_smollm2

pytestmark = [pytest.mark.ml_real, pytest.mark.slow]


def test_agentr_run_data_only_searches_with_the_real_model(tmp_path: Path) -> None:
    folder = imported_smollm2()
    script = Path(sys.executable).with_name("agentr")
    home = tmp_path / "home"
    command = [
        str(script),
        "run",
        "--model",
        str(folder),
        "--quick",
        "--iterations",
        "1",
        "--max-tasks",
        "1",
        "--max-eval-tasks",
        "1",
        "--data-only",
        "--home",
        str(home),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900, check=False)
    output = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 1, output
    assert "the dataset is empty" in output and "1 tree(s) completed" in output, output
    assert "no good trajectory reached alpha" in output
    (run,) = list((home / "runs").iterdir())
    report = json.loads((run / "report.json").read_text())
    assert report["status"] == "failed" and "the dataset is empty" in report["reason"]
    (iteration,) = report["iterations"]
    assert iteration["model_ref"] == str(folder) and iteration["trees"] == 1
    assert report["config"]["data_only"] is True
