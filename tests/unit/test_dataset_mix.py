"""Per-iteration dataset mixing: alpha schedule, eta counts, determinism, manifest rebuild."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.domain.datasets import (
    Candidate,
    DatasetConfig,
    DatasetError,
    DatasetManifest,
    EmptyDatasetError,
    build_dataset,
    general_count,
    rebuild,
    trajectory_to_sample,
)
from core.domain.trajectory import Message, Step, TrainingSample, Trajectory


def sample(sid: str, kind: str = "revision", reward: float | None = 1.0) -> TrainingSample:
    return TrainingSample(
        sample_id=sid,
        kind=kind,  # type: ignore[arg-type]
        messages=(
            Message("system", "sys"),
            Message("user", f"task {sid}"),
            Message("assistant", f"Thought: t\nAction: a {sid}", 1),
        ),
        reward=reward,
    )


def general_pool(n: int) -> list[TrainingSample]:
    return [sample(f"g{i}", "general", None) for i in range(n)]


def revs(n: int, start_pos: int = 100) -> list[Candidate]:
    return [Candidate(sample(f"r{i}"), start_pos + i, "tpl-v1") for i in range(n)]


def test_general_count_makes_eta_the_fraction_of_the_final_mix() -> None:
    assert general_count(80, 0.2) == 20
    assert general_count(80, 0.0) == 0
    assert general_count(0, 0.2) == 0
    assert general_count(3, 0.5) == 3


@given(st.integers(min_value=1, max_value=5000), st.floats(min_value=0.0, max_value=0.9))
def test_general_fraction_is_within_rounding_of_eta(agent: int, eta: float) -> None:
    g = general_count(agent, eta)
    # g is eta*agent/(1-eta) rounded, so g / (agent + g) is eta up to that rounding
    assert abs(g - eta * agent / (1 - eta)) <= 0.5
    if g:
        assert abs(g / (agent + g) - eta) <= 0.5 / (agent + g) + 1e-12


def test_eta_mixing_counts_and_alpha_filter() -> None:
    good = [
        Candidate(sample(f"good{i}", "good", r), 200 + i) for i, r in enumerate([0.4, 0.5, 0.69, 0.7, 1.0])
    ]
    built = build_dataset(
        run_id="run1",
        iteration=0,
        revisions=revs(7),
        good=good,
        general=general_pool(50),
        config=DatasetConfig(eta=0.2, seed=3),
        general_source="chat.jsonl sha256=abc",
    )
    counts = built.manifest.counts
    # alpha(0) = 0.5, inclusive: 0.5, 0.69, 0.7, 1.0 admitted; 0.4 rejected
    assert counts == {"revision": 7, "good": 4, "general": round(0.2 * 11 / 0.8)}
    assert counts["general"] == 3
    assert built.manifest.good_rejected == 1
    assert built.manifest.alpha == 0.5
    assert len(built.samples) == 14
    assert built.manifest.template_ids == ("tpl-v1",)
    assert built.manifest.max_position == 204

    it2 = build_dataset(run_id="run1", iteration=2, revisions=[], good=good, general=general_pool(50))
    assert it2.manifest.alpha == 1.0  # alpha = 1.0 is inclusive: the perfect run gets in
    assert it2.manifest.counts["good"] == 1
    it9 = build_dataset(run_id="run1", iteration=9, revisions=[], good=good)
    assert it9.manifest.alpha == 1.0  # past the schedule: last value


def test_general_shortfall_and_cap_are_recorded() -> None:
    built = build_dataset(run_id=None, iteration=0, revisions=revs(40), good=[], general=general_pool(4))
    assert built.manifest.counts["general"] == 4
    assert built.manifest.general_wanted == 10
    capped = build_dataset(
        run_id=None,
        iteration=0,
        revisions=revs(40),
        good=[],
        general=general_pool(100),
        config=DatasetConfig(max_general=2),
    )
    assert capped.manifest.counts["general"] == 2


def test_build_is_deterministic_and_order_independent() -> None:
    kwargs = dict(run_id="r", iteration=1, good=[], general=general_pool(30), config=DatasetConfig(seed=7))
    a = build_dataset(revisions=revs(20), **kwargs)  # type: ignore[arg-type]
    b = build_dataset(revisions=list(reversed(revs(20))), **kwargs)  # type: ignore[arg-type]
    assert [s.sample_id for s in a.samples] == [s.sample_id for s in b.samples]
    assert a.manifest.dataset_id == b.manifest.dataset_id
    c = build_dataset(revisions=revs(20), **{**kwargs, "config": DatasetConfig(seed=8)})  # type: ignore[arg-type]
    assert c.manifest.dataset_id != a.manifest.dataset_id
    # the mix is shuffled, not three blocks
    kinds = [s.kind for s in a.samples]
    assert kinds != sorted(kinds, key=lambda k: k != "revision")


def test_duplicates_are_dropped() -> None:
    built = build_dataset(run_id="r", iteration=0, revisions=revs(3) + revs(3), good=[], general=[])
    assert built.manifest.counts["revision"] == 3


def test_manifest_round_trips_and_rebuilds_identically() -> None:
    pool = general_pool(40)
    built = build_dataset(run_id="r", iteration=0, revisions=revs(30), good=[], general=pool)
    data = json.loads(json.dumps(built.manifest.to_dict()))
    assert data["counts"]["revision"] == 30
    manifest = DatasetManifest.from_dict(data)
    assert manifest == built.manifest
    lookup = {c.sample.sample_id: c.sample for c in revs(30)}
    assert rebuild(manifest, lookup, pool) == built.samples
    with pytest.raises(DatasetError, match="not found"):
        rebuild(manifest, {}, pool)
    with pytest.raises(DatasetError, match="general sample"):
        rebuild(manifest, lookup, general_pool(40)[::-1])


def test_empty_dataset_is_a_clear_error() -> None:
    low = [Candidate(sample("g", "good", 0.3), 1)]
    with pytest.raises(EmptyDatasetError, match=r"no training samples.*alpha=0.5.*1 good"):
        build_dataset(run_id="r", iteration=0, revisions=[], good=low, general=general_pool(10))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"eta": 1.0}, "eta"),
        ({"eta": -0.1}, "eta"),
        ({"alpha_schedule": ()}, "alpha_schedule"),
        ({"alpha_schedule": (0.5, 1.5)}, "alpha_schedule"),
        ({"alpha_schedule": ("0.5",)}, "alpha_schedule"),  # thresholds read as strings: refused
    ],
)
def test_bad_config_is_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(DatasetError, match=message):
        DatasetConfig(**kwargs)


def test_sample_without_loss_is_refused() -> None:
    s = TrainingSample("x", "revision", (Message("user", "u"), Message("assistant", "a", 0)))
    with pytest.raises(DatasetError, match="no assistant message with weight 1"):
        build_dataset(run_id="r", iteration=0, revisions=[Candidate(s)], good=[])


def test_trajectory_to_sample() -> None:
    traj = Trajectory(
        task="Goal: craft stick.",
        instruction="You craft.",
        steps=(
            Step("need planks", "get 2 oak planks", "Got 2 oak planks"),
            Step("now", "craft 4 stick", "Crafted"),
        ),
        reward=1.0,
    )
    s = trajectory_to_sample(traj, "s1")
    assert [m.role for m in s.messages] == ["system", "user", "assistant", "user", "assistant"]
    assert [m.weight for m in s.messages] == [0, 0, 1, 0, 1]
    assert s.messages[2].content == "Thought: need planks\nAction: get 2 oak planks"
    assert s.kind == "good" and s.reward == 1.0
