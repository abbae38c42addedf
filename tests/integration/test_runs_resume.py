"""A run survives SIGKILL: `agentr run` killed mid-run, restarted with --resume, completes, and its
event log has every step exactly once (deterministic event ids + tracking rows)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

AGENTR = str(Path(sys.executable).parent / "agentr")


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTR_")}
    env.update(AGENTR_HOME=str(home), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    return env


def _types(db_path: Path) -> list[tuple[str, str, str]]:
    if not db_path.exists():
        return []
    try:
        with sqlite3.connect(db_path, timeout=5) as db:
            return list(db.execute("select stream_id, event_type, data from events order by position"))
    except sqlite3.OperationalError:  # the tables are not created yet / locked for a moment
        return []


def test_run_resumes_after_sigkill_without_duplicates(tmp_path: Path) -> None:
    home = tmp_path / "home"
    db_path = home / "agentr.db"
    log = (tmp_path / "first.log").open("w")
    first = subprocess.Popen(
        [AGENTR, "run", "--quick", "--iterations", "1"],
        env=_env(home),
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if any(t == "ModelTrained" for _, t, _ in _types(db_path)):
                break
            assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            time.sleep(0.2)
        else:
            pytest.fail("the first iteration never finished training")
        os.killpg(first.pid, signal.SIGKILL)  # mid-run: after training, before/while evaluating
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        log.close()
    before = _types(db_path)
    assert not any(t == "RunCompleted" for _, t, _ in before)
    run_id = next(json.loads(d)["run_id"] for _, t, d in before if t == "RunRequested")

    second = subprocess.run(
        [AGENTR, "run", "--resume", run_id], env=_env(home), capture_output=True, text=True, timeout=600
    )
    assert second.returncode == 0, second.stderr[-4000:]
    after = _types(db_path)
    assert after[: len(before)] == before  # nothing rewritten
    run_types = Counter(t for s, t, _ in after if s == f"run-{run_id}")
    assert run_types == Counter(
        RunRequested=1, IterationStarted=1, IterationDatasetReady=1, ModelTrained=1, IterationEvaluated=1,
        RunCompleted=1,
    )  # fmt: skip
    per_tree = Counter((s, t) for s, t, _ in after if s.startswith("tree-"))
    trees = {s for s, _ in per_tree}
    assert len(trees) == 2
    for tree in trees:
        for kind in ("SearchRequested", "TreeStarted", "TreeCompleted"):
            assert per_tree[(tree, kind)] == 1, (tree, kind)
    # the report of the resumed run covers every iteration
    report = json.loads((home / "runs" / run_id / "report.json").read_text())
    assert report["status"] == "completed" and [r["model"] for r in report["rows"]] == [
        "start",
        "iter 0",
    ]
