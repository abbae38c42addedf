"""Rank 0's progress lines through the pipe the ranks share (train_service.launcher): written in one
piece, and read back even when another process's output landed in the same line.

Seen on a loaded 2-core machine: the dispatcher got steps 1 and 2 of 3, because rank 0 printed its
line under PYTHONUNBUFFERED (text and newline in two writes) and rank 1's log line came between."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from train_service.launcher import PROGRESS_PREFIX, parse_progress, progress_line


def test_a_clean_line_gives_its_step_and_nothing_to_log() -> None:
    line = progress_line(3, 5, 0.25).decode().rstrip("\n")
    assert parse_progress(line) == ((3, 5, 0.25), "")


def test_another_process_output_in_the_same_line_keeps_the_step_and_is_logged() -> None:
    report = PROGRESS_PREFIX + json.dumps({"step": 3, "max_steps": 3, "loss": None})
    other = "[rank1]: INFO train_service.hf_trainer step 3/3 loss 1.2000"
    step, rest = parse_progress(report + other)
    assert step == (3, 3, None)
    assert rest == other
    step, rest = parse_progress("[rank1]: partial " + report)
    assert step == (3, 3, None) and rest == "[rank1]: partial "


def test_lines_without_a_report_or_with_a_broken_one_are_logged_unchanged() -> None:
    assert parse_progress("[rank0]: hello") == (None, "[rank0]: hello")
    broken = PROGRESS_PREFIX + '{"step": 3, "max_ste'
    assert parse_progress(broken) == (None, broken)
    no_step = PROGRESS_PREFIX + '{"max_steps": 3}'
    assert parse_progress(no_step) == (None, no_step)
    not_an_object = PROGRESS_PREFIX + "[1, 2]"
    assert parse_progress(not_an_object) == (None, not_an_object)


WRITER = """
import os, sys, logging
from train_service.launcher import progress_line
if sys.argv[1] == "progress":
    for step in range(1, 301):
        sys.stdout.flush()
        os.write(sys.stdout.fileno(), progress_line(step, 300, 0.5))
else:
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="[rank1]: %(message)s")
    for step in range(1, 301):
        logging.info("step %d/300 loss 0.5000 " + "x" * 200, step)
"""


def test_two_processes_on_one_pipe_lose_no_progress_line() -> None:
    """Rank 0's reports and another process's log lines, interleaved on one real pipe, as the
    dispatcher reads them: every step arrives, whole."""
    read_end, write_end = os.pipe()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, role], stdout=write_end, env=env)
        for role in ("progress", "log")
    ]
    os.close(write_end)
    with os.fdopen(read_end, encoding="utf-8") as pipe:
        lines = pipe.read().splitlines()
    assert all(p.wait(timeout=60) == 0 for p in procs)
    steps = [s[0] for s, _ in map(parse_progress, lines) if s is not None]
    assert steps == list(range(1, 301))
    logged = [rest for _, rest in map(parse_progress, lines) if rest.strip()]
    assert len(logged) == 300 and all(r.startswith("[rank1]: step ") for r in logged)
