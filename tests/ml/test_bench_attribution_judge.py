"""bench/attribution.py ``--judge-model``: the model critic with a given model folder (SmolLM2 in the
bench; here a real tiny transformers model) scored on the same injected trajectories as every other
critic, as the ``model_given`` row, with the trajectories it judged, its fallbacks and the tokens it
spent per trajectory reported, and ``--judge-model-limit`` leaving the rest unjudged (misses)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support import TinySpec

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import attribution  # noqa: E402


@pytest.fixture(scope="module")
def tiny_spec() -> TinySpec:
    return TinySpec(name="tiny-attribution-judge", seed=3, hidden=32, layers=2, vocab_size=512)


async def test_a_given_judge_is_scored_as_its_own_row(tiny_folder: Path) -> None:
    cases, _ = await attribution.source_cases(attribution.textcraft_sources(3, 0), 0, 2, 16)
    assert len(cases) >= 3
    for case in cases:
        attribution.trivial_picks(case, 0)
    extra = await attribution.given_judge_picks(cases, str(tiny_folder), limit=2)
    assert extra["model_given_judged"] == 2 and extra["model_given_not_judged_limit"] == {
        "textcraft": len(cases) - 2
    }
    assert extra["model_given_tokens_per_trace"] > 0 and 0 <= extra["model_given_fallback"] <= 2
    judged = [c for c in cases if c.picks["model_given"] is not None]
    assert len(judged) == 2 and all(0 <= c.picks["model_given"] < len(c.trajectory.steps) for c in judged)
    assert extra["model_given_exact_on_judged"]["n"] == 2
    line = attribution.attribution_line(cases, ["rules", "first", "model_given", "replay_expert"], {}, extra)
    assert line["critics"]["model_given"]["exact"]["n"] == len(cases)  # the same trajectories as the rest
