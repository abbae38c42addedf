"""A run survives SIGKILL: `agentr run --quick` killed mid-run (after iteration 0's training, before its
evaluation and iteration 1), restarted with --resume, completes, and its event log has every step
exactly once (deterministic event ids + tracking rows), whether iteration 1 found data to train on
or stopped the run early (a completed run with its reason; that depends on the CPU's kernels).

The run is the session's ``resumed_quick_run`` (tests/e2e/quick_runs.py); test_agentr_run.py checks
that it also equals the undisturbed quick run to the byte.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from tests.e2e.quick_runs import ResumedRun

pytestmark = pytest.mark.slow


def test_run_resumes_after_sigkill_without_duplicates(resumed_quick_run: ResumedRun) -> None:
    before, after, run_id = resumed_quick_run.before, resumed_quick_run.after, resumed_quick_run.run_id
    assert any(t == "ModelTrained" for _, t, _ in before)  # killed after training ...
    assert not any(t == "RunCompleted" for _, t, _ in before)  # ... and before the end
    assert after[: len(before)] == before  # nothing rewritten
    run_types = Counter(t for s, t, _ in after if s == f"run-{run_id}")
    # iteration 0 trained (the kill came after it); iteration 1 trained too, or found nothing to
    # train on and completed the run early (which one depends on the CPU's float kernels,
    # tests/e2e/test_agentr_run.py) - either way each step exactly once
    second = run_types["ModelTrained"] - 1
    assert second in (0, 1) and run_types["IterationDatasetEmpty"] == 1 - second
    assert run_types == Counter(
        RunRequested=1, IterationStarted=2, IterationDatasetReady=1 + second, ModelTrained=1 + second,
        IterationEvaluated=1 + second, IterationDatasetEmpty=1 - second, RunCompleted=1,
    )  # fmt: skip
    per_tree = Counter((s, t) for s, t, _ in after if s.startswith("tree-"))
    trees = {s for s, _ in per_tree}
    assert len(trees) == 4
    for tree in trees:
        for kind in ("SearchRequested", "TreeStarted", "TreeCompleted"):
            assert per_tree[(tree, kind)] == 1, (tree, kind)
    # the report of the resumed run covers every trained iteration
    report = json.loads((resumed_quick_run.run_dir / "report.json").read_text())
    assert report["status"] == "completed"
    assert [r["model"] for r in report["rows"]] == ["start", "iter 0", "iter 1"][: 2 + second]
