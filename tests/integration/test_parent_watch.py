"""core/runtime/parent_watch.py with real processes: a child that watches its parent keeps running
while the parent lives and ends once the parent is killed with SIGKILL (no cleanup runs); a child
whose parent is already gone ends at once with ORPHANED_EXIT_CODE, saying why."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.runtime.parent_watch import ORPHANED_EXIT_CODE, exit_with_parent

ROOT = Path(__file__).resolve().parents[2]
CHILD = (
    "import sys, time\n"
    "from core.runtime.parent_watch import exit_with_parent\n"
    "exit_with_parent(int(sys.argv[1]), interval=0.1)\n"
    "time.sleep(120)\n"
)
PARENT = (
    "import os, subprocess, sys, time\n"
    f"child = subprocess.Popen([sys.executable, '-c', {CHILD!r}, str(os.getpid())])\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(120)\n"
)


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (an exited, unreaped one is a zombie: not running)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def wait_until(condition: object, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
def test_a_watching_child_lives_with_its_parent_and_ends_when_the_parent_is_killed() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, env=env())
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        time.sleep(1.0)  # ten checks while the parent lives
        assert running(child)  # the control: a live parent keeps its child
        parent.send_signal(signal.SIGKILL)  # no cleanup in the parent: only the watch can end the child
        parent.wait()
        assert wait_until(lambda: not running(child), 30), f"child {child} outlived its killed parent"
    finally:
        parent.kill()
        parent.wait()


def test_a_child_whose_parent_is_already_gone_ends_at_once_and_says_why() -> None:
    code = CHILD.replace("int(sys.argv[1])", "1")  # pid 1 is never this child's parent here
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(), timeout=60)
    assert done.returncode == ORPHANED_EXIT_CODE
    assert "parent 1 died; exiting" in done.stderr


def test_the_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval must be > 0"):
        exit_with_parent(os.getppid(), interval=0)
