"""Owns the ``agentr run --quick`` processes that several slow tests read (one of each per session).

``quick_run`` is one undisturbed ``agentr run --quick`` (two iterations) in its own AGENTR_HOME.
``resumed_quick_run`` is the same command (the same seeds) SIGKILLed once its first ModelTrained is in
the event log (after iteration 0's training, before its evaluation and all of iteration 1), then
``agentr run --resume RUN_ID`` to completion; it keeps the event log as it was at the kill and after.
Both homes share one models folder (a symlink), so the warm-started tiny model is built by whichever
run comes first and reused by the other, as a second ``agentr run --quick`` in one home reuses it.

tests/conftest.py makes them the session fixtures ``quick_run`` and ``resumed_quick_run``:
tests/e2e/test_agentr_run.py checks the first run and that the resumed one is the same run, to the
byte; tests/integration/test_runs_resume.py checks that the resume wrote every step exactly once.
Each process is real (a subprocess), as a user runs it, with ``--threads N`` and OMP_NUM_THREADS=N,
N = ``$AGENTR_TEST_THREADS`` (default 1): both runs under the same recorded conditions (their
config's ``runtime``; the tests check it). ISA caps in the environment (ONEDNN_MAX_CPU_ISA,
ATEN_CPU_CAPABILITY: README "Testing on other CPUs") pass through to the processes.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

AGENTR = str(Path(sys.executable).parent / "agentr")
RUN_TIMEOUT_S = 1800  # a loaded 2-core machine: one quick run took up to ~15 min there
Event = tuple[str, str, str]  # (stream id, event type, data JSON) in log order


def quick_threads() -> int:
    """The torch thread count the quick runs train with: ``$AGENTR_TEST_THREADS``, default 1."""
    raw = os.environ.get("AGENTR_TEST_THREADS", "1").strip()
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"AGENTR_TEST_THREADS must be a whole number >= 1, got {raw!r}")
    return int(raw)


def agentr_env(home: Path) -> dict[str, str]:
    """The environment of an ``agentr`` process with its own home (no AGENTR_* settings inherited)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTR_")}
    env.update(AGENTR_HOME=str(home), OMP_NUM_THREADS=str(quick_threads()), TOKENIZERS_PARALLELISM="false")
    return env


def quick_argv() -> list[str]:
    """``agentr run --quick`` with the tests' thread count (``quick_threads``)."""
    return [AGENTR, "run", "--quick", "--threads", str(quick_threads())]


def events(db_path: Path) -> list[Event]:
    """Every event of the home's SQLite log in position order ([] while it is not created yet)."""
    if not db_path.exists():
        return []
    try:
        with sqlite3.connect(db_path, timeout=5) as db:
            return list(db.execute("select stream_id, event_type, data from events order by position"))
    except sqlite3.OperationalError:  # the tables are not created yet / locked for a moment
        return []


@dataclass(frozen=True)
class QuickRun:
    """A finished ``agentr run --quick``: its home and its run folder (``home/runs/RUN_ID``)."""

    home: Path
    run_dir: Path


@dataclass(frozen=True)
class ResumedRun(QuickRun):
    """A quick run killed after its first training and resumed: the event log at the kill and after."""

    run_id: str
    before: list[Event]
    after: list[Event]


def _home(root: Path, models: Path) -> Path:
    home = root / "home"
    home.mkdir(parents=True)
    models.mkdir(parents=True, exist_ok=True)
    (home / "models").symlink_to(models, target_is_directory=True)
    return home


def run_quick(root: Path, models: Path) -> QuickRun:
    """``agentr run --quick`` to completion in ``root/home`` (AssertionError with its stderr if it fails)."""
    home = _home(root, models)
    proc = subprocess.run(
        quick_argv(),
        env=agentr_env(home),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    (run_dir,) = [p for p in (home / "runs").iterdir() if p.is_dir()]
    return QuickRun(home, run_dir)


def run_quick_killed_and_resumed(root: Path, models: Path) -> ResumedRun:
    """``agentr run --quick`` SIGKILLed after its first ModelTrained, then ``--resume``d to completion."""
    home = _home(root, models)
    db_path = home / "agentr.db"
    log_path = root / "first.log"
    with log_path.open("w") as log:
        first = subprocess.Popen(
            quick_argv(),
            env=agentr_env(home),
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + RUN_TIMEOUT_S
            while not any(t == "ModelTrained" for _, t, _ in events(db_path)):
                assert first.poll() is None, log_path.read_text()[-3000:]
                assert time.monotonic() < deadline, "the first iteration never finished training"
                time.sleep(0.2)
            os.killpg(first.pid, signal.SIGKILL)  # mid-run: after training, before/while evaluating
            first.wait(timeout=30)
        finally:
            if first.poll() is None:
                os.killpg(first.pid, signal.SIGKILL)
                first.wait(timeout=30)
    before = events(db_path)
    run_id = next(json.loads(d)["run_id"] for _, t, d in before if t == "RunRequested")
    second = subprocess.run(
        [AGENTR, "run", "--resume", run_id],
        env=agentr_env(home),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert second.returncode == 0, second.stderr[-4000:]
    return ResumedRun(home, home / "runs" / run_id, run_id, before, events(db_path))
