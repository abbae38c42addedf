"""`agentr run --env tau2:mock --quick --iterations 1` end to end: one real process (subprocess), a
tmp AGENTR_HOME, the tiny model built on the environment's own text and warm-started on the gold
actions of the run's tau2 mock training tasks (agentr.cli.warm_start), then MCTS over tool calls, the
critic, the splicer and SFT on iteration 0's samples.

What it pins: the tool-calling world runs on the embedded default (issue #49 item 1: the warm start
used to stop at "all N samples lost their trained tokens to max_length=512"): the run exits 0, its
search found at least one pair, the critic marked it, the splicer made a revision sample, and
iteration 0 trained on it; the context the run trained with was derived from the environment's
episodes in the model's tokens (the printed note, the run's config), and the tool-call samples in
the dataset are tau2 calls with the domain's tools.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tau2.domains.mock.environment", reason="tau2-bench's domains (the tau2 extra)")

pytestmark = pytest.mark.slow

AGENTR = str(Path(sys.executable).parent / "agentr")


def test_agentr_run_tau2_mock_quick_finds_pairs_and_trains(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTR_")}
    env.update(AGENTR_HOME=str(home), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", COLUMNS="200")
    proc = subprocess.run(
        [AGENTR, "run", "--env", "tau2:mock", "--quick", "--iterations", "1", "--threads", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,  # a loaded 2-core machine; about 3 minutes on an idle one
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    printed = " ".join(proc.stderr.split())
    assert "tau2:mock's expert episodes take up to" in printed and "train max_length" in printed

    (run_dir,) = [p for p in (home / "runs").iterdir() if p.is_dir()]
    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] == "completed"
    config = report["config"]
    assert config["env"] == "tau2:mock"
    # the context: above the --quick plan's TextCraft sizes, within the tiny model's window
    assert 512 < config["train"]["max_length"] <= 4096
    assert config["search"]["max_tokens"] > 32

    db = sqlite3.connect(home / "agentr.db")
    types = [t for (t,) in db.execute("select event_type from events order by position")]
    assert types.count("PairFound") >= 1
    assert types.count("FirstErrorMarked") >= 1  # the critic judged the pair
    trained = [
        json.loads(d)
        for (d,) in db.execute("select data from events where event_type = 'ModelTrained' order by position")
    ]
    assert [t["iteration"] for t in trained] == [0]
    (ready,) = [
        json.loads(d)
        for (d,) in db.execute("select data from events where event_type = 'IterationDatasetReady'")
    ]
    assert ready["revision_samples"] + ready["good_samples"] >= 1
    lines = [json.loads(x) for x in (run_dir / "datasets" / "iter-0.jsonl").read_text().splitlines()]
    assert len(lines) == ready["revision_samples"] + ready["good_samples"]
    # the samples are tau2 conversations: the domain's policy and tools in the system turn
    tools = {"create_task", "get_users", "update_task_status", "transfer_to_human_agents"}
    for line in lines:
        system = line["messages"][0]
        assert system["role"] == "system" and all(f"{name}(" in system["content"] for name in tools)
    assert (run_dir / "checkpoints" / "iter-0" / "meta.json").is_file()
