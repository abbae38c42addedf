"""bench/critic_traces.py: the JSON line compares the model critic with the BEST trivial critic on the
same traces, counts the discordant traces for McNemar's test, and refuses an empty comparison."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import critic_traces  # noqa: E402

from core.domain.stats import mcnemar_exact  # noqa: E402


def row(oracle: int, model: int, reflect: int, n: int, rules: int | None = None) -> dict[str, int]:
    return {"oracle": oracle, "model": model, "reflect": reflect, "first": 0, "last": n - 1,
            "rules": n - 1 if rules is None else rules}  # fmt: skip


def test_the_baseline_is_the_best_trivial_critic_and_the_split_is_pair_by_pair() -> None:
    rows = [
        row(0, 0, 1, 5),  # first and model right
        row(0, 2, 0, 5),  # first right only
        row(0, 3, 0, 4),  # first right only
        row(2, 2, 2, 6),  # model and reflect right
        row(3, 3, 1, 4, rules=3),  # model, last and rules right
        row(4, 1, 4, 5),  # last right (n - 1 = 4) and reflect
    ]
    line = critic_traces.trace_match(rows)
    assert line["traces"] == 6
    assert line["ours"] == pytest.approx(3 / 6, abs=1e-4)
    # first: 3/6, last: 2/6, rules: 2/6 (its fallback is the last action) -> first is the baseline
    assert line["baseline_critic"] == "first" and line["baseline"] == pytest.approx(3 / 6, abs=1e-4)
    assert line["first"] == pytest.approx(0.5, abs=1e-4) and line["last"] == pytest.approx(2 / 6, abs=1e-4)
    assert line["rules"] == pytest.approx(2 / 6, abs=1e-4)
    assert line["reflect"] == pytest.approx(4 / 6, abs=1e-4)  # rows 2, 3, 4 and 6
    # model right where first is not: rows 4 and 5; first right where model is not: rows 2 and 3
    assert line["discordant"] == {"critic_only": 2, "baseline_only": 2, "p": round(mcnemar_exact(2, 2), 4)}
    assert line["ratio"] == pytest.approx(1.0, abs=1e-4)
    assert line["by_oracle_index"]["0"] == {
        "traces": 3, "model": 1, "reflect": 2, "first": 3, "last": 0, "rules": 0
    }  # fmt: skip
    assert line["by_oracle_index"]["4"]["last"] == 1


def test_a_later_trivial_critic_wins_when_it_is_better() -> None:
    rows = [row(3, 0, 0, 4), row(4, 0, 0, 5), row(0, 0, 0, 3)]
    line = critic_traces.trace_match(rows)
    assert line["baseline_critic"] == "last" and line["baseline"] == pytest.approx(2 / 3, abs=1e-4)
    assert line["ours"] == pytest.approx(1 / 3, abs=1e-4)


def test_no_trace_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="no trace the oracle judged"):
        critic_traces.trace_match([])
