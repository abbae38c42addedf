"""`agentr run --quick` end to end: one real process (subprocess), tmp AGENTR_HOME, real tiny model.

The whole loop runs: tiny model built and warm-started, MCTS, critic, splicer, SFT, evaluation, for
up to two iterations. What the tiny model's search FINDS depends on float kernels (the CPU's ISA,
threads, precision): on one CPU iteration 1 finds pairs, on another it finds none and the run stops
early - a completed run with its reason. So these tests assert what the system guarantees on any
CPU: every stage ran and said so, the event log and the report agree, the report's shape, an early
stop is completed with its reason, every trained iteration left a dataset, a checkpoint whose
meta.json names its conditions (threads, precision, CPU), and exports in every format. That an
iteration's data is found, trained on and followed by the next iteration is asserted exactly with
the noisy expert as the search policy (tests/integration/test_run_expert_policy.py).

A second run with the same seeds, under the same recorded conditions, is the same run, byte for
byte - and that second run is the session's killed-and-resumed one (``resumed_quick_run``, also read
by tests/integration/test_runs_resume.py): SIGKILLed after its first training, then ``--resume``d,
it still equals the undisturbed run. The runs are session fixtures (tests/e2e/quick_runs.py); their
thread count is ``$AGENTR_TEST_THREADS`` (default 1), ISA caps pass through (README "Testing on
other CPUs").
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from core.runtime.cpu_features import cpu_model
from tests.e2e.quick_runs import AGENTR, QuickRun, ResumedRun, agentr_env, quick_threads

pytestmark = pytest.mark.slow


def run_events(home: Path, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    """(event type, data) of the run's own stream, in order."""
    db = sqlite3.connect(home / "agentr.db")
    return [
        (t, json.loads(d))
        for t, d in db.execute(
            "select event_type, data from events where stream_id = ? order by position", (f"run-{run_id}",)
        )
    ]


def trained_iterations(events: list[tuple[str, dict[str, Any]]]) -> list[int]:
    return [d["iteration"] for t, d in events if t == "ModelTrained"]


def test_agentr_run_quick_completes_with_data_and_report(quick_run: QuickRun, tmp_path: Path) -> None:
    home = quick_run.home
    runs = [p for p in (home / "runs").iterdir() if p.is_dir()]
    assert len(runs) == 1
    run_dir = runs[0]
    report = json.loads((run_dir / "report.json").read_text())
    events = run_events(home, run_dir.name)
    types = [t for t, _ in events]
    trained = trained_iterations(events)
    # completed: both iterations trained, or iteration 1 found nothing to train on (an early stop:
    # completed, with the reason in the event log and the report). Iteration 0 always trains: its
    # model is the warm-started one, which the search finds paths with on every CPU measured
    assert report["status"] == "completed" and types[-1] == "RunCompleted"
    assert trained in ([0], [0, 1]), trained
    assert [row["model"] for row in report["rows"]] == ["start"] + [f"iter {i}" for i in trained]
    assert types.count("IterationStarted") == 2 and types.count("IterationEvaluated") == len(trained)
    completed = events[-1][1]
    if trained == [0]:
        assert types.count("IterationDatasetEmpty") == 1
        stopped = completed["summary"]["stopped_early"]
        assert stopped["iteration"] == 1 and stopped["reason"]
        assert report["reason"].startswith("stopped early at iteration 1: the dataset is empty")
    else:
        assert types.count("IterationDatasetEmpty") == 0 and not report.get("reason")
    assert completed["final_model_ref"] == str(run_dir / "checkpoints" / f"iter-{trained[-1]}")
    for row in report["rows"]:
        # held-out goals (test split, stratified: two depths) and, apart, the searched (seen) demo
        # goals; two seeded episodes per goal
        assert 0.0 <= row["success_rate"] <= 1.0 and row["episodes"] == 4 and row["tasks"] == 2
        assert row["episodes_per_task"] == 2 and row["max_steps"] == 4
        assert 0.0 <= row["seen_success_rate"] <= 1.0 and row["seen_episodes"] == 4
    # recovery: up to 2 of the starting model's failed held-out episodes, the same prefixes for
    # every model
    # at most the quick plan's 2 recovery prefixes, each continued with EvalConfig's 3 recovery seeds
    from train_service.evaluation import EvalConfig

    assert 0 <= report["rows"][0]["recovery_episodes"] <= 2 * EvalConfig().recovery_seeds
    assert len({(row["recovery_episodes"], row["recovery_set_id"]) for row in report["rows"]}) == 1
    markdown = (run_dir / "report.md").read_text()
    assert markdown.startswith("# agentr run")
    assert "## Held-out tasks" in markdown and "## Seen tasks" in markdown and "## Datasets" in markdown
    assert (run_dir / "report.png").stat().st_size > 1000
    # the run's recorded conditions: in its config, its report and every checkpoint
    threads = quick_threads()
    runtime = report["config"]["runtime"]
    assert runtime["threads"]["training"] == threads and runtime["threads"]["inference"] == 1
    assert runtime["precision"] == "fp32" and runtime["cpu"]["model"] == cpu_model()
    conditions = f"computed with: {threads} torch thread(s) for training, 1 for inference; precision fp32"
    assert conditions in markdown
    assert f"CPU {cpu_model()} ({runtime['cpu']['capability']} kernels" in markdown
    # every trained iteration had something to train on, and training wrote checkpoints with meta.json
    ready = {d["iteration"]: d for t, d in events if t == "IterationDatasetReady"}
    assert sorted(ready) == trained
    for iteration in trained:
        counts = report["datasets"][str(iteration)]
        assert counts["trees"] == 2
        assert counts.get("revision", 0) + counts.get("good", 0) > 0
        assert (counts.get("revision", 0), counts.get("good", 0)) == (
            ready[iteration]["revision_samples"],
            ready[iteration]["good_samples"],
        )  # the event log and the report agree
        assert counts.get("verified", 0) == counts.get("revision", 0)  # only verified samples are kept
        lines = (run_dir / "datasets" / f"iter-{iteration}.jsonl").read_text().splitlines()
        assert lines and all(json.loads(line)["messages"] for line in lines)
        kinds = [json.loads(line)["kind"] for line in lines]
        assert kinds.count("revision") == counts.get("revision", 0)
        assert kinds.count("good") == counts.get("good", 0)
        meta = json.loads((run_dir / "checkpoints" / f"iter-{iteration}" / "meta.json").read_text())
        assert meta["runtime"]["threads"]["training"] == threads and meta["runtime"]["precision"] == "fp32"
        assert meta["runtime"]["cpu"]["model"] == cpu_model()
        assert meta["runtime"]["cpu"]["isa_caps"] == runtime["cpu"]["isa_caps"]
    assert report["datasets"]["1"]["trees"] == 2  # iteration 1 searched, whatever it found

    # export the first iteration's dataset in each format (iteration 0 trained: asserted above)
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
    # after its first training and resumed: under the same recorded conditions (threads,
    # precision, CPU and ISA caps, checked first), the same run, to the byte — the same iterations
    # trained (or the same early stop), the same samples in the same order, the same weights
    run_dir, second = quick_run.run_dir, resumed_quick_run.run_dir
    assert second.name != run_dir.name
    report = json.loads((run_dir / "report.json").read_text())
    second_report = json.loads((second / "report.json").read_text())
    assert second_report["config"]["runtime"] == report["config"]["runtime"]
    assert second_report["config"]["runtime"]["threads"]["training"] == quick_threads()
    trained = trained_iterations(run_events(quick_run.home, run_dir.name))
    assert trained_iterations(run_events(resumed_quick_run.home, second.name)) == trained
    assert second_report.get("reason") == report.get("reason")
    for iteration in trained:
        name = f"iter-{iteration}.jsonl"
        first_rows = [json.loads(line) for line in (run_dir / "datasets" / name).read_text().splitlines()]
        second_rows = [json.loads(line) for line in (second / "datasets" / name).read_text().splitlines()]
        assert [r["messages"] for r in first_rows] == [r["messages"] for r in second_rows], iteration
        weights = [
            (d / "checkpoints" / f"iter-{iteration}" / "model.safetensors").read_bytes()
            for d in (run_dir, second)
        ]
        assert hashlib.sha256(weights[0]).digest() == hashlib.sha256(weights[1]).digest(), iteration
        metas = [
            json.loads((d / "checkpoints" / f"iter-{iteration}" / "meta.json").read_text())
            for d in (run_dir, second)
        ]
        assert metas[0]["runtime"] == metas[1]["runtime"], iteration
    keys = ("success_rate", "seen_success_rate", "recovery_success", "invalid_action_rate", "dead_loop_rate")
    assert [[row[k] for k in keys] for row in second_report["rows"]] == [
        [row[k] for k in keys] for row in report["rows"]
    ]
