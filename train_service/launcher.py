"""Owns how a training job is launched: in this process (``inline``) or as a ``torchrun`` process
group (``torchrun``, optionally through ``accelerate launch`` with a DeepSpeed / FSDP config file).

``train.launcher`` (RunConfig) picks it; ``LaunchSettings`` holds it:

* ``inline`` (default): ``train_service.sft.train_sft`` runs in the calling process (the embedded
  run's thread, or the Celery worker, which then trains itself).
* ``torchrun``: the caller stays a dispatcher. It writes the job to ``<out_dir>.launch/job.json`` and
  starts ``python -m torch.distributed.run --standalone --nproc_per_node N -m train_service.rank
  job.json`` (or ``accelerate launch --config_file FILE --num_processes N ...`` when
  ``accelerate_config`` is set) as a NEW process group. Every rank runs the same ``train_sft``;
  transformers' Trainer does DDP (gloo on CPU, NCCL on CUDA) and rank 0 alone writes the checkpoint
  + ``meta.json`` and ``result.json``. The children's output is forwarded line by line to the
  ``agentr.train.child`` logger; rank 0's progress lines (``AGENTR_PROGRESS {json}``) feed
  ``on_step``. ``should_stop`` is polled every half second: cancellation sends SIGTERM to the whole
  group (SIGKILL after a grace period) and raises ``TrainingCancelled``. A non-zero exit raises
  ``LaunchFailed`` with the children's last lines, which the run records as ``TrainingFailed``.

The Celery worker must keep ``--pool solo`` (CUDA is not fork-safe; the children are spawned fresh).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from core.domain.config import LAUNCHERS, launch_problem

__all__ = [
    "LAUNCHERS",
    "LaunchFailed",
    "LaunchSettings",
    "launch_problem",
    "launch_torchrun",
    "parse_progress",
    "progress_line",
]
log = logging.getLogger(__name__)
child_log = logging.getLogger("agentr.train.child")

PROGRESS_PREFIX = "AGENTR_PROGRESS "
TAIL_LINES = 200
KILL_GRACE_S = 10.0


class LaunchFailed(RuntimeError):
    """The training process group exited with an error; the message ends with its last lines."""


@dataclass(frozen=True)
class LaunchSettings:
    """launcher: ``inline`` | ``torchrun``. nproc_per_node: training processes (torchrun).
    accelerate_config: an accelerate config file (DeepSpeed / FSDP) to launch with instead of plain
    torchrun. master_port: the rendezvous port (None = a free one, ``--standalone``)."""

    launcher: str = "inline"
    nproc_per_node: int = 1
    accelerate_config: str | None = None
    master_port: int | None = None

    def __post_init__(self) -> None:
        problem = launch_problem(asdict(self))
        if problem:
            raise ValueError(problem)

    @classmethod
    def from_data(cls, data: dict[str, Any] | None) -> LaunchSettings:
        return cls(**(data or {}))


def _command(settings: LaunchSettings, job_file: Path) -> list[str]:
    entry = ["-m", "train_service.rank", str(job_file)]
    if settings.accelerate_config:
        return [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--config_file",
            settings.accelerate_config,
            "--num_processes",
            str(settings.nproc_per_node),
            *entry,
        ]
    rendezvous = (
        ["--standalone"]
        if settings.master_port is None
        else ["--master_addr", "127.0.0.1", "--master_port", str(settings.master_port)]
    )
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *rendezvous,
        "--nproc_per_node",
        str(settings.nproc_per_node),
        *entry,
    ]


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def launch_torchrun(
    job: dict[str, Any],
    settings: LaunchSettings,
    *,
    should_stop: Callable[[], bool] | None = None,
    on_step: Callable[[int, int, float | None], None] | None = None,
) -> dict[str, Any]:
    """Run ``job`` (``run_train_iteration``'s keyword arguments) in a torchrun process group and
    return rank 0's result (see the module docstring)."""
    from train_service.sft import TrainingCancelled

    out_dir = Path(job["out_dir"])
    work = out_dir.parent / f"{out_dir.name}.launch"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    job_file = work / "job.json"
    job_file.write_text(json.dumps({**job, "result_file": str(work / "result.json")}))
    command = _command(settings, job_file)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.setdefault("OMP_NUM_THREADS", "1")
    log.info("launching %s", " ".join(command))
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,  # its own process group: cancellation kills every rank
    )
    tail: deque[str] = deque(maxlen=TAIL_LINES)

    def forward() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            step, rest = parse_progress(raw.rstrip("\n"))
            if step is not None and on_step is not None:
                on_step(*step)
            if rest.strip():
                tail.append(rest)
                child_log.info("%s", rest)

    reader = threading.Thread(target=forward, name="torchrun-output", daemon=True)
    reader.start()
    try:
        while proc.poll() is None:
            if should_stop is not None and should_stop():
                _kill_group(proc)
                reader.join(timeout=5)
                raise TrainingCancelled(
                    f"training of dataset {job.get('dataset_id') or '?'} was cancelled; "
                    f"its {settings.nproc_per_node} process(es) were stopped"
                )
            time.sleep(0.5)
    except BaseException:
        if proc.poll() is None:
            _kill_group(proc)
        raise
    reader.join(timeout=10)
    if proc.returncode != 0:
        raise LaunchFailed(
            f"torchrun training ({settings.nproc_per_node} process(es)) exited with code "
            f"{proc.returncode}; last lines:\n{_failure_lines(list(tail))}"
        )
    result_file = work / "result.json"
    if not result_file.is_file():
        raise LaunchFailed(f"torchrun training exited 0 but rank 0 wrote no {result_file}")
    result: dict[str, Any] = json.loads(result_file.read_text())
    shutil.rmtree(work, ignore_errors=True)
    return result


def progress_line(step: int, max_steps: int, loss: float | None) -> bytes:
    """Rank 0's progress line for the dispatcher, as ONE ``os.write`` must send it: the ranks share
    the dispatcher's pipe, and a line written in pieces (``print`` under ``PYTHONUNBUFFERED`` writes
    the text and its newline separately) can take another rank's log line in between."""
    payload = json.dumps({"step": step, "max_steps": max_steps, "loss": loss})
    return f"{PROGRESS_PREFIX}{payload}\n".encode()


def parse_progress(line: str) -> tuple[tuple[int, int, float | None] | None, str]:
    """A child's output line -> (its progress report ``(step, max_steps, loss)`` or None, the rest of
    the line to log). Tolerates text around the report (another process's output that landed in
    the same line of the shared pipe): the JSON object after the prefix is decoded on its own."""
    start = line.find(PROGRESS_PREFIX)
    if start < 0:
        return None, line
    body = line[start + len(PROGRESS_PREFIX) :]
    try:
        info, end = json.JSONDecoder().raw_decode(body)
        step = (int(info["step"]), int(info["max_steps"]), info.get("loss"))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None, line
    return step, line[:start] + body[end:]


_ERROR_LINE = re.compile(r"^(\[rank\d+\]:)?\s*[A-Za-z_][\w.]*(Error|Exception|Failed|Interrupt)\b")


def _failure_lines(tail: list[str]) -> str:
    """The children's exception lines (torchrun's own summary hides them) + the last few lines."""
    errors = [line.strip() for line in tail if _ERROR_LINE.match(line)]
    unique = list(dict.fromkeys(errors))[-3:]
    return "\n".join([*unique, *tail[-8:]])
