"""Owns ending a child process when its parent dies.

``exit_with_parent(parent_pid)``, called first thing in a spawned child, starts a daemon thread that
checks every ``interval`` seconds whether the process's parent is still ``parent_pid`` (an orphan is
re-parented to init or a subreaper) and, when not, ends the process at once (``os._exit``) with
``ORPHANED_EXIT_CODE``. A parent that exits normally stops its children itself; this is for a
parent that is killed (``kill -9``, the kernel's OOM killer), which runs no cleanup.

Why: spawned workers outlived such a parent, each holding a model and gigabytes, playing on or
waiting forever on a queue nobody writes: an orphaned bench/paper.py run process of SmolLM2-135M
kept 9.4 GB and a core busy for 9 minutes after its parent was killed, and the OOM killer then took
the next runs (docs/results.md). ``PR_SET_PDEATHSIG`` is not used: on Linux it fires when the
parent THREAD that started the child ends, which in a process whose event loop starts workers from
pool threads would kill live workers.
"""

from __future__ import annotations

import os
import sys
import threading
import time

ORPHANED_EXIT_CODE = 70
"""A child's exit code when it ended because its parent died."""


def exit_with_parent(parent_pid: int, interval: float = 1.0) -> threading.Thread:
    """End this process once its parent is no longer ``parent_pid`` (module docstring); returns the
    watching thread (a daemon: it never keeps the process alive)."""
    if interval <= 0:
        raise ValueError(f"interval must be > 0, got {interval}")

    def orphaned() -> bool:
        if os.getppid() == parent_pid:
            return False
        print(f"process {os.getpid()}: parent {parent_pid} died; exiting", file=sys.stderr, flush=True)
        os._exit(ORPHANED_EXIT_CODE)

    def watch() -> None:
        while not orphaned():
            time.sleep(interval)

    orphaned()  # it may have died before we started watching
    thread = threading.Thread(target=watch, name="parent-watch", daemon=True)
    thread.start()
    return thread
