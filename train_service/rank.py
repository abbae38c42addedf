"""Owns one rank of a torchrun launch (``python -m train_service.rank JOB_FILE``, started by
``train_service.launcher``): it trains with ``run_train_iteration`` like every other runner, prints
rank 0's progress lines (``AGENTR_PROGRESS {json}``) for the dispatcher, and rank 0 writes the
result file."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from train_service.launcher import progress_line


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def main(job_file: str) -> int:
    """One rank of a torchrun launch: train, rank 0 writes ``result_file``."""
    from core.runtime.logging import configure_logging
    from train_service.celery_app import run_train_iteration

    configure_logging(os.environ.get("AGENTR_LOG_LEVEL", "INFO"), False)
    job = json.loads(Path(job_file).read_text())
    result_file = Path(job.pop("result_file"))
    rank = _rank()

    def progress(step: int, max_steps: int, loss: float | None) -> None:
        if rank == 0:  # one write: the other ranks' log lines share the pipe (launcher.progress_line)
            sys.stdout.flush()
            os.write(sys.stdout.fileno(), progress_line(step, max_steps, loss))

    result = run_train_iteration(**job, on_step=progress)
    if rank == 0:
        result_file.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
