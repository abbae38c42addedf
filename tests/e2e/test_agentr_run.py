"""`agentr run --quick` end to end: one real process (subprocess), tmp AGENTR_HOME, real tiny model.

The whole loop runs: tiny model built and warm-started, MCTS, critic, splicer, SFT, evaluation, for
two iterations; the first dataset holds revision samples (the search found both successes and
failures), the report (held-out and seen tasks) exists, and `agentr export` writes the iteration's
dataset in every format. A second run with the same seeds is the same run, byte for byte - and that
second run is the session's killed-and-resumed one (``resumed_quick_run``, also read by
tests/integration/test_runs_resume.py): SIGKILLed after its first training, then ``--resume``d, it
still equals the undisturbed run. The runs are session fixtures (tests/e2e/quick_runs.py).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.e2e.quick_runs import AGENTR, QuickRun, ResumedRun, agentr_env

pytestmark = pytest.mark.slow


def test_agentr_run_quick_completes_with_data_and_report(quick_run: QuickRun, tmp_path: Path) -> None:
    home = quick_run.home
    runs = [p for p in (home / "runs").iterdir() if p.is_dir()]
    assert len(runs) == 1
    run_dir = runs[0]
    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] == "completed"
    assert [row["model"] for row in report["rows"]] == ["start", "iter 0", "iter 1"]
    for row in report["rows"]:
        # held-out goals (test split, stratified: two depths) and, apart, the searched (seen) demo
        # goals; two seeded episodes per goal
        assert 0.0 <= row["success_rate"] <= 1.0 and row["episodes"] == 4 and row["tasks"] == 2
        assert row["episodes_per_task"] == 2 and row["max_steps"] == 4
        assert 0.0 <= row["seen_success_rate"] <= 1.0 and row["seen_episodes"] == 4
    # recovery: the starting model's failed held-out episodes, the same prefixes for every model
    assert report["rows"][0]["recovery_episodes"] > 0
    assert len({(row["recovery_episodes"], row["recovery_set_id"]) for row in report["rows"]}) == 1
    markdown = (run_dir / "report.md").read_text()
    assert markdown.startswith("# agentr run")
    assert "## Held-out tasks" in markdown and "## Seen tasks" in markdown and "## Datasets" in markdown
    assert (run_dir / "report.png").stat().st_size > 1000
    # both iterations had something to train on, and training wrote checkpoints with meta.json
    kinds: dict[int, list[str]] = {}
    for iteration in (0, 1):
        counts = report["datasets"][str(iteration)]
        assert counts["trees"] == 2
        assert counts.get("revision", 0) + counts.get("good", 0) > 0
        lines = (run_dir / "datasets" / f"iter-{iteration}.jsonl").read_text().splitlines()
        assert lines and all(json.loads(line)["messages"] for line in lines)
        kinds[iteration] = [json.loads(line)["kind"] for line in lines]
        assert kinds[iteration].count("revision") == counts.get("revision", 0)
        assert (run_dir / "checkpoints" / f"iter-{iteration}" / "meta.json").is_file()
    # the search found successes AND failures: the starting model's trees gave pairs, hence
    # verified revision samples in the first dataset (fixed seeds: the same on every run)
    first = report["datasets"]["0"]
    assert first["pairs"] > 0 and first["revision"] > 0 and first["good"] > 0
    assert first["verified"] == first["revision"] and 0.0 < first["verified_share"] <= 1.0
    assert "revision" in kinds[0] and "good" in kinds[0]
    assert report["rows"][1]["revision_length_mean"] >= 1.0
    # the event log says the same
    db = sqlite3.connect(home / "agentr.db")
    types = [
        t
        for (t,) in db.execute("select event_type from events where stream_id = ?", (f"run-{run_dir.name}",))
    ]
    assert types.count("IterationStarted") == 2 and types.count("ModelTrained") == 2
    assert types[-1] == "RunCompleted"

    # export the first iteration's dataset in each format
    for fmt, name in (("openai", "d.jsonl"), ("sharegpt", "s.jsonl"), ("parquet", "d.parquet")):
        out = tmp_path / name
        exported = subprocess.run(
            [AGENTR, "export", run_dir.name, "0", "--format", fmt, "-o", str(out)],
            env=agentr_env(home), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert exported.returncode == 0, exported.stderr
        assert out.stat().st_size > 0
    exported_first = json.loads((tmp_path / "d.jsonl").read_text().splitlines()[0])
    assert any(m["role"] == "assistant" and m.get("weight") == 1 for m in exported_first["messages"])
    bad = subprocess.run(
        [AGENTR, "export", "no-such-run", "0", "-o", str(tmp_path / "x.jsonl")],
        env=agentr_env(home), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2 and "no run no-such-run" in bad.stderr


def test_same_seeds_same_run_even_killed_and_resumed(
    quick_run: QuickRun, resumed_quick_run: ResumedRun
) -> None:
    # the same seeds again (another run id, the warm start reused from the models folder), killed
    # after its first training and resumed: the same run, to the byte — same samples in the same
    # order in both iterations, the same trained weights
    run_dir, second = quick_run.run_dir, resumed_quick_run.run_dir
    assert second.name != run_dir.name
    report = json.loads((run_dir / "report.json").read_text())
    for iteration in (0, 1):
        name = f"iter-{iteration}.jsonl"
        first_rows = [json.loads(line) for line in (run_dir / "datasets" / name).read_text().splitlines()]
        second_rows = [json.loads(line) for line in (second / "datasets" / name).read_text().splitlines()]
        assert [r["messages"] for r in first_rows] == [r["messages"] for r in second_rows], iteration
        weights = [
            (d / "checkpoints" / f"iter-{iteration}" / "model.safetensors").read_bytes()
            for d in (run_dir, second)
        ]
        assert hashlib.sha256(weights[0]).digest() == hashlib.sha256(weights[1]).digest(), iteration
    second_report = json.loads((second / "report.json").read_text())
    keys = ("success_rate", "seen_success_rate", "recovery_success", "invalid_action_rate", "dead_loop_rate")
    assert [[row[k] for k in keys] for row in second_report["rows"]] == [
        [row[k] for k in keys] for row in report["rows"]
    ]
