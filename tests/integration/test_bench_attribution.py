"""bench/attribution.py's quick path on a small N: fault-injected TextCraft and tau2 trajectories,
each kept only where the expert confirms its injected step is decisive, scored by every critic on the
same trajectories; the JSON line compares the replay critic with the best non-replay one."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import attribution  # noqa: E402


def test_the_quick_path_on_a_small_n(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tau2")
    out = tmp_path / "line.json"
    export = tmp_path / "judge.jsonl"
    attribution.main(
        ["--quick", "--textcraft", "6", "--tau2", "1", "--seed", "3", "--out", str(out)]
        + ["--judge-export", str(export)]
    )
    line = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == line  # one JSON line, printed
    assert line["metric"] == "attribution_exact" and line["traces"] >= 12
    assert set(line["by_environment"]) >= {"textcraft", "tau2:retail"}
    assert set(line["critics"]) == {"rules", "first", "last", "random", "replay_expert"}
    table = line["critics"]
    # every critic is scored on the same trajectories, with its 95% Wilson interval
    assert {entry["exact"]["n"] for entry in table.values()} == {line["traces"]}
    for entry in table.values():
        low, high = entry["exact"]["ci95"]
        assert low <= entry["exact"]["share"] <= high
        assert entry["within_one"]["share"] >= entry["exact"]["share"]
    assert line["ours"] == table["replay_expert"]["exact"]["share"] and line["ours"] >= 0.9
    best = max(("rules", "first", "last", "random"), key=lambda c: table[c]["exact"]["share"])
    assert line["baseline"] == table[best]["exact"]["share"]
    assert line["continuations_per_trace"]["max"] <= 16 and line["continuations_per_trace"]["mean"] > 0
    assert sum(line["by_kind"].values()) == line["traces"]
    assert "model_critic" in line  # says why the model critic did not run in --quick
    # the injected set as judge data: conversation + decisive step, split by task
    rows = [json.loads(text) for text in export.read_text().splitlines()]
    assert len(rows) == line["traces"] == line["judge_export"]["rows"]
    for row in rows:
        assistant = [m for m in row["messages"] if m["role"] == "assistant"]
        assert 0 <= row["decisive_step"] < len(assistant) and row["split"] in ("train", "test")
    by_task: dict[str, set[str]] = {}
    for row in rows:
        by_task.setdefault(f"{row['environment']}|{row['task_id']}", set()).add(row["split"])
    assert all(len(splits) == 1 for splits in by_task.values())  # a task is never in both splits


async def test_verified_labels_become_judge_examples() -> None:
    """Each injected trajectory gives its steps before the decisive one as Good examples and the
    decisive one as Bad, in the critic's own conversation, the answer word trained alone."""
    sources = attribution.textcraft_sources(2, 0)
    cases, _ = await attribution.source_cases(sources, 0, 2, 16)
    samples = attribution.injected_judge_samples(cases)
    assert len(samples) == sum(c.injected.index + 1 for c in cases)
    labels = [s.provenance["label"] for s in samples]
    assert labels.count("bad") == len(cases)
    first = samples[cases[0].injected.index]  # the first case's Bad example
    assert first.provenance["label"] == "bad" and first.messages[-1].content == "Bad"
    assert [m.weight for m in first.messages].count(1) == 1


def test_the_line_refuses_an_empty_comparison() -> None:
    with pytest.raises(SystemExit, match="no confirmed injected trajectory"):
        attribution.attribution_line([], ["rules", "replay_expert"], {}, {})
