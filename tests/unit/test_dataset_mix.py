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
)
from core.domain.good_samples import trajectory_to_sample
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


def test_general_count_makes_eta_the_agent_share_of_the_mix() -> None:
    # L = eta * L_agent + (1 - eta) * L_general as a mixing ratio: agent data is eta of the samples
    assert general_count(80, 0.2) == 320  # 80 / (80 + 320) = 0.2
    assert general_count(80, 1.0) == 0  # eta = 1: agent data only
    assert general_count(0, 0.2) == 0
    assert general_count(3, 0.5) == 3
    with pytest.raises(DatasetError, match="agent share"):
        general_count(10, 0.0)


@given(st.integers(min_value=1, max_value=5000), st.floats(min_value=0.05, max_value=1.0))
def test_agent_fraction_is_within_rounding_of_eta(agent: int, eta: float) -> None:
    g = general_count(agent, eta)
    # g is agent*(1-eta)/eta rounded, so agent / (agent + g) is eta up to that rounding
    assert abs(g - agent * (1 - eta) / eta) <= 0.5
    share = agent / (agent + g)
    assert abs(share - eta) <= 0.5 / (agent + g) * (1 + eta) + 1e-12
    # the expected per-sample loss of the shuffled mix is eta * L_agent + (1 - eta) * L_general
    l_agent, l_general = 2.0, 5.0
    mixed = (agent * l_agent + g * l_general) / (agent + g)
    assert abs(mixed - (share * l_agent + (1 - share) * l_general)) < 1e-9


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
    assert counts == {"revision": 7, "good": 4, "general": round(11 * 0.8 / 0.2)}
    assert counts["general"] == 44
    assert built.manifest.agent_share == 11 / 55 == 0.2 and built.manifest.note is None
    assert built.manifest.good_rejected == 1
    assert built.manifest.alpha == 0.5
    assert len(built.samples) == 55
    assert built.manifest.template_ids == ("tpl-v1",)
    assert built.manifest.max_position == 204

    it2 = build_dataset(run_id="run1", iteration=2, revisions=[], good=good, general=general_pool(50))
    assert it2.manifest.alpha == 1.0  # alpha = 1.0 is inclusive: the perfect run gets in
    assert it2.manifest.counts["good"] == 1
    it9 = build_dataset(run_id="run1", iteration=9, revisions=[], good=good)
    assert it9.manifest.alpha == 1.0  # past the schedule: last value


def test_general_shortfall_and_cap_are_recorded() -> None:
    built = build_dataset(run_id=None, iteration=0, revisions=revs(40), good=[], general=general_pool(4))
    assert built.manifest.counts == {"revision": 40, "good": 0, "general": 4}  # agent data never dropped
    assert built.manifest.general_wanted == 160
    assert built.manifest.agent_share == 40 / 44
    assert built.manifest.note is not None and "general data has 4 samples" in built.manifest.note
    capped = build_dataset(
        run_id=None,
        iteration=0,
        revisions=revs(40),
        good=[],
        general=general_pool(100),
        config=DatasetConfig(max_general=2),
    )
    assert capped.manifest.counts["general"] == 2
    assert capped.manifest.note is not None and "max_general caps it at 2" in capped.manifest.note


def test_without_general_data_training_is_agent_only_with_a_note() -> None:
    built = build_dataset(run_id="r", iteration=0, revisions=revs(5), good=[], general=[])
    assert built.manifest.counts == {"revision": 5, "good": 0, "general": 0}
    assert built.manifest.agent_share == 1.0 and built.manifest.general_wanted == 20
    assert built.manifest.note is not None
    assert "no general data is configured" in built.manifest.note and "agent-only" in built.manifest.note
    only = build_dataset(
        run_id="r", iteration=0, revisions=revs(5), good=[], general=[], config=DatasetConfig(eta=1.0)
    )
    assert only.manifest.note is None and only.manifest.general_wanted == 0  # asked for: no note


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


def test_another_run_finding_the_same_samples_trains_on_the_same_sequence() -> None:
    # a second run with the same seeds: the same conversations, but other ids (derived from its
    # random run id) and other event positions (its concurrent trees appended in another order)
    def offered(run: str, positions: list[int]) -> list[Candidate]:
        out = []
        for i, pos in enumerate(positions):
            base = sample(f"{run}-rev-{i}")
            messages = (
                *base.messages[:1],
                Message("user", f"task {i}"),
                Message("assistant", f"Action: a {i}", 1),
            )
            out.append(Candidate(TrainingSample(base.sample_id, "revision", messages, 1.0), pos))
        return out

    kwargs = dict(iteration=1, good=[], general=[], config=DatasetConfig(seed=7))
    a = build_dataset(run_id="run-a", revisions=offered("a", list(range(10, 22))), **kwargs)  # type: ignore[arg-type]
    b = build_dataset(run_id="run-b", revisions=offered("b", [50 - 3 * i for i in range(12)]), **kwargs)  # type: ignore[arg-type]
    assert [s.sample_id for s in a.samples] != [s.sample_id for s in b.samples]
    assert [s.messages for s in a.samples] == [s.messages for s in b.samples]


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
        ({"eta": 0.0}, "agent share"),  # general data alone is not agent training
        ({"eta": 1.5}, "eta"),
        ({"eta": -0.1}, "eta"),
        ({"eta": True}, "eta"),
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


def _traj(steps: tuple[Step, ...]) -> Trajectory:
    return Trajectory(task="Goal: craft black dye.", instruction="You craft.", steps=steps, reward=1.0)


def test_good_sample_gives_rejected_steps_weight_zero_and_keeps_them_as_context() -> None:
    steps = (
        Step("t", "get 1 ink sac", "Got 1 ink sac"),
        Step(
            "t", "craft 1 orange bone using 1 orange tulip", "Could not find a valid recipe for orange bone"
        ),
        Step("t", "craft 2 black dye using 1 ink sac", "Wrong item format: 2 black dye", valid=False),
        Step("t", "craft 1 black dye using 1 ink sac", "Crafted 1 minecraft:black_dye", 1.0, True),
    )
    s = trajectory_to_sample(_traj(steps), "g1")
    assistant = [m for m in s.messages if m.role == "assistant"]
    assert [m.weight for m in assistant] == [1, 0, 0, 1]
    assert "orange bone" in assistant[1].content  # still in the conversation, as context
    assert any("Could not find a valid recipe" in m.content for m in s.messages if m.role == "user")
    assert s.provenance["loss_masked"] == {"invalid_steps": True, "loop_steps": True, "invalid": 2, "loop": 0}
    kept = trajectory_to_sample(_traj(steps), "g1", mask_invalid_steps=False)
    assert [m.weight for m in kept.messages if m.role == "assistant"] == [1, 1, 1, 1]


def test_good_sample_gives_loop_repeats_weight_zero_but_not_a_legitimate_double_step() -> None:
    steps = (
        Step("t", "get 1 bamboo", "Got 1 bamboo"),
        Step("t", "get 1 bamboo", "Got 1 bamboo"),  # a double get is legitimate
        Step("t", "inventory", "Inventory: [bamboo] (2)"),
        Step("t", "inventory", "Inventory: [bamboo] (2)"),
        Step("t", "inventory", "Inventory: [bamboo] (2)"),  # three in a row: a loop
        Step("t", "craft 1 stick using 2 bamboo", "Crafted 1 minecraft:stick", 1.0, True),
    )
    s = trajectory_to_sample(_traj(steps), "g2")
    assert [m.weight for m in s.messages if m.role == "assistant"] == [1, 1, 1, 0, 0, 1]
    assert s.provenance["loss_masked"]["loop"] == 2
    period_two = (
        Step("t", "get 1 a", "Got 1 a"),
        Step("t", "inventory", "Inventory: [a] (1)"),
        Step("t", "get 1 a", "Got 1 a"),
        Step("t", "inventory", "Inventory: [a] (1)"),
        Step("t", "craft 1 b using 1 a", "Crafted 1 minecraft:b", 1.0, True),
    )
    weights = [
        m.weight for m in trajectory_to_sample(_traj(period_two), "g3").messages if m.role == "assistant"
    ]
    assert weights == [1, 1, 0, 0, 1]
    off = trajectory_to_sample(_traj(steps), "g2", mask_loop_steps=False)
    assert [m.weight for m in off.messages if m.role == "assistant"] == [1] * 6


def test_manifest_counts_masked_good_steps_and_checks_the_rule() -> None:
    bad_step = Step("t", "craft 1 x using 1 y", "Could not find a valid recipe for x")
    win = Step("t", "craft 1 black dye using 1 ink sac", "Crafted 1 minecraft:black_dye", 1.0, True)
    loop = Step("t", "inventory", "Inventory: []")
    a = trajectory_to_sample(_traj((bad_step, win)), "a")
    b = trajectory_to_sample(_traj((loop, loop, loop, bad_step, win)), "b")
    built = build_dataset(run_id="r", iteration=0, revisions=[], good=[Candidate(a, 1), Candidate(b, 2)])
    assert built.manifest.masked_invalid_steps == 2 and built.manifest.masked_loop_steps == 2
    data = json.loads(json.dumps(built.manifest.to_dict()))
    assert data["masked_invalid_steps"] == 2 and DatasetManifest.from_dict(data) == built.manifest
    # a good sample built with another rule than the dataset's is refused, naming both
    with pytest.raises(DatasetError, match="built with masking"):
        build_dataset(
            run_id="r",
            iteration=0,
            revisions=[],
            good=[Candidate(a, 1)],
            config=DatasetConfig(mask_loop_steps=False),
        )


def test_manifest_counts_masked_revision_steps_apart_and_checks_the_rule() -> None:
    from core.domain.good_samples import revision_masks
    from core.domain.splice import revision_sample, splice_path

    rejected = Step(
        "t", "craft 1 b using 1 a", "Could not find enough items to craft minecraft:b", valid=False
    )
    get_a = Step("t", "get 1 a", "Got 1 a")
    win = Step("t", "craft 1 b using 1 a", "Crafted 1 minecraft:b", 1.0, True)
    good = _traj((rejected, get_a, win))
    bad = _traj((Step("t", "inventory", "Inventory: []"), Step("t", "get 9 z", "Could not find z")))
    path = splice_path(bad, good, shared_steps=0, transition=1)
    masked, record = revision_masks(path)
    rev = revision_sample("r1", bad, good, path, "I was wrong.", {"loss_masked": record}, masked=masked)
    built = build_dataset(run_id="r", iteration=0, revisions=[Candidate(rev, 1)], good=[])
    manifest = built.manifest
    assert (manifest.revision_masked_invalid_steps, manifest.revision_masked_loop_steps) == (1, 0)
    assert (manifest.masked_invalid_steps, manifest.masked_loop_steps) == (0, 0)  # good samples only
    with pytest.raises(DatasetError, match="revision sample r1 was built with masking"):
        build_dataset(
            run_id="r", iteration=0, revisions=[Candidate(rev, 1)], good=[],
            config=DatasetConfig(mask_invalid_steps=False),
        )  # fmt: skip
