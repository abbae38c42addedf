"""`agentr run --quick --method dpo --iterations 1` end to end: one real process (subprocess), a tmp
AGENTR_HOME, the real tiny model warm-started by the command itself (or by the session's other quick
runs: the home's models folder is theirs, tests/conftest.py ``quick_models``). Iteration 0 trains with DPO on
the pairs its search found: the event log's ModelTrained, the checkpoint's meta.json, report.json
and the printed summary all say dpo, the DPO dataset holds one preference example per pair, and
the plan's DPO settings (agentr.cli.methods) are what the trainer ran with."""

from __future__ import annotations

import json
import math
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

AGENTR = [str(Path(sys.executable).parent / "agentr")]


def test_agentr_run_quick_trains_iteration_zero_with_dpo(tmp_path: Path, quick_models: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    # the session's quick runs' models folder (tests/conftest.py): the same --quick warm start,
    # built once per session by whichever quick run comes first
    (home / "models").symlink_to(quick_models, target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTR_")}
    env.update(AGENTR_HOME=str(home), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", COLUMNS="200")
    proc = subprocess.run(
        [*AGENTR, "run", "--quick", "--method", "dpo", "--iterations", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,  # a loaded 2-core machine: the quick run took up to ~15 min there
        cwd=Path.cwd(),
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    printed = " ".join(proc.stderr.split())
    assert "critic: direct (--method dpo trains no SFT iteration" in printed  # the plan's note
    assert "trained with iteration 0: dpo" in printed
    assert "## Training" in proc.stderr and "| 0 | dpo |" in proc.stderr

    (run_dir,) = [p for p in (home / "runs").iterdir() if p.is_dir()]
    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] == "completed"
    assert [row["model"] for row in report["rows"]] == ["start", "iter 0"]
    train = report["config"]["train"]
    assert train["method"] == "dpo" and report["config"]["critic"] == {"strategy": "direct"}
    assert train["batch_size"] == 2 and train["warmup"] == 0.0  # half the quick SFT batch of 4
    (iteration,) = report["iterations"]
    assert iteration["train"]["method"] == "dpo"

    # the event log: the iteration's ModelTrained names its learner and what DPO measured
    db = sqlite3.connect(home / "agentr.db")
    trained = [
        json.loads(data)
        for (data,) in db.execute(
            "select data from events where stream_id = ? and event_type = 'ModelTrained'",
            (f"run-{run_dir.name}",),
        )
    ]
    assert len(trained) == 1
    metrics = trained[0]["metrics"]
    assert metrics["method"] == "dpo" and metrics["reference"] == "frozen"
    pairs = report["datasets"]["0"]["pairs"]
    assert pairs > 0 and metrics["pairs"] == metrics["dataset"]["pairs"] == pairs, metrics
    assert metrics["pairs_dropped"] == 0
    assert metrics["steps"] == math.ceil(pairs / 2)  # one epoch at the plan's DPO batch of 2
    # the first step's policy IS the frozen reference: the loss is -log sigmoid(0) = log 2
    assert metrics["first_loss"] == pytest.approx(math.log(2), abs=1e-4)

    # the DPO dataset (one preference example per pair, with its manifest) and no SFT file
    datasets = run_dir / "datasets"
    lines = (datasets / "iter-0.dpo.jsonl").read_text().splitlines()
    assert len(lines) == pairs
    assert (datasets / "iter-0.dpo.manifest.json").is_file()
    assert not (datasets / "iter-0.jsonl").exists()
    meta = json.loads((run_dir / "checkpoints" / "iter-0" / "meta.json").read_text())
    assert meta["config"]["method"] == "dpo" and meta["config"]["batch_size"] == 2
