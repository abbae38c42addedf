"""Critic bookkeeping without a model: the Direct-Revision fallback is recorded, label scores are
length-normalised, the reflect rule picks t', and FirstErrorMarked v1 rows upcast."""

from __future__ import annotations

import math

import pytest

from core.domain.critic import (
    CriticInputError,
    fell_back,
    label_from_scores,
    normalise_label_scores,
    reflect_transition,
    reflect_verdicts,
)
from core.domain.events import FirstErrorMarked, StepVerdict, decode
from core.domain.trajectory import Step, Trajectory
from critic_service.critic import CriticConfig, CriticConfigError, critique


def _path(observations: list[str]) -> Trajectory:
    steps = tuple(Step(f"t{i}", f"get {i + 1} oak logs", obs) for i, obs in enumerate(observations))
    return Trajectory(task="Goal: craft stick.", instruction="Craft.", steps=steps, reward=0.0)


def test_length_normalisation_is_the_mean_log_prob_per_label_token() -> None:
    # summed: a 3-token "Uncertain" at -1.2 per token loses to a 1-token "Bad" at -2.0 ...
    summed = {"Good": -2.5, "Bad": -2.0, "Uncertain": -3.6}
    assert label_from_scores(summed) == "bad"
    # ... but per token it is the most likely answer
    normalised = normalise_label_scores(summed, {"Good": 1, "Bad": 1, "Uncertain": 3})
    assert normalised == {"Good": -2.5, "Bad": -2.0, "Uncertain": pytest.approx(-1.2)}
    assert label_from_scores(normalised) == "uncertain"
    with pytest.raises(CriticInputError, match="no token count"):
        normalise_label_scores(summed, {"Good": 1, "Bad": 0, "Uncertain": 3})


def test_fallback_is_nothing_judged_bad_or_direct() -> None:
    good = StepVerdict(2, "good")
    bad = StepVerdict(3, "bad")
    assert fell_back([good, StepVerdict(3, "uncertain")], "model")
    assert not fell_back([good, bad], "model")
    assert fell_back([bad], "direct")


async def test_critique_records_the_fallback_for_rules_and_direct() -> None:
    clean = _path(["Got 1 oak logs", "Got 2 oak logs", "Got 3 oak logs"])
    rules = await critique(CriticConfig(strategy="rules"), clean, 1)
    assert rules.fallback and rules.transition_index == 2  # no rule fired: last action
    failing = _path(["Got 1 oak logs", "Could not find oak logs", "Got 3 oak logs"])
    rules = await critique(CriticConfig(strategy="rules"), failing, 1)
    assert not rules.fallback and rules.transition_index == 1
    direct = await critique(CriticConfig(strategy="direct"), failing, 1)
    assert direct.fallback and direct.transition_index == 2


async def test_model_strategies_need_a_policy() -> None:
    for strategy in ("model", "reflect"):
        with pytest.raises(CriticConfigError, match=f"the {strategy} strategy needs a policy"):
            await critique(CriticConfig(strategy=strategy), _path(["a", "b"]), 0)  # type: ignore[arg-type]


def test_reflect_picks_the_first_step_within_the_margin_of_the_best() -> None:
    scores = [(2, -3.0), (3, -1.5), (4, -1.4), (5, -2.0)]
    assert reflect_transition(scores) == 4  # argmax
    assert reflect_transition(scores, margin=0.2) == 3  # first within 0.2 of the best
    assert reflect_transition([(1, -1.0), (2, -1.0)]) == 1  # ties: earliest
    verdicts = reflect_verdicts(scores, margin=0.2)
    assert [v.label for v in verdicts] == ["good", "bad", "uncertain", "uncertain"]
    assert all(v.method == "reflection" and set(v.scores) == {"reflection"} for v in verdicts)
    with pytest.raises(CriticInputError, match="no judged steps"):
        reflect_transition([])
    with pytest.raises(CriticInputError, match="not a number"):
        reflect_transition([(1, math.nan)])
    with pytest.raises(CriticInputError, match="margin"):
        reflect_transition(scores, margin=-1)


def test_critic_config_validates_reflect_margin_and_names_strategies() -> None:
    assert CriticConfig.from_data({"strategy": "reflect", "reflect_margin": 0.5}).reflect_margin == 0.5
    for bad in (-0.1, 11, "x", True):
        with pytest.raises(CriticConfigError, match="reflect_margin"):
            CriticConfig.from_data({"strategy": "reflect", "reflect_margin": bad})
    with pytest.raises(CriticConfigError, match="model, direct, rules, reflect"):
        CriticConfig.from_data({"strategy": "oracular"})


def test_first_error_marked_v1_rows_upcast_with_the_fallback_derived() -> None:
    v1 = {
        "pair_id": "p1",
        "strategy": "model",
        "transition_index": 4,
        "verdicts": [{"step_index": 3, "label": "good"}, {"step_index": 4, "label": "uncertain"}],
    }
    event = decode("FirstErrorMarked", 1, v1)
    assert isinstance(event, FirstErrorMarked)
    assert event.fallback is True and event.oracle_index is None
    judged = dict(v1, verdicts=[{"step_index": 3, "label": "bad"}], transition_index=3)
    assert decode("FirstErrorMarked", 1, judged).fallback is False  # type: ignore[attr-defined]
    direct = dict(judged, strategy="direct")
    assert decode("FirstErrorMarked", 1, direct).fallback is True  # type: ignore[attr-defined]
    assert FirstErrorMarked.event_version == 2


async def test_first_after_divergence_strategy_and_the_reflect_baseline_without_a_model() -> None:
    from critic_service.critic import reflect_baseline
    from search_service.noisy_expert import NoisyExpertPolicy

    path = _path(["Got 1 oak logs", "Got 2 oak logs", "Got 3 oak logs", "Got 4 oak logs"])
    config = CriticConfig.from_data({"strategy": "first"})
    result = await critique(config, path, 1)
    assert result.strategy == "first" and result.transition_index == 1 and not result.fallback
    assert [(v.step_index, v.label, v.method) for v in result.verdicts] == [(1, "bad", "first")]
    # the reflect baseline needs a model and is on by default; compare_reflect false switches it off
    assert CriticConfig.from_data({}).compare_reflect is True
    assert await reflect_baseline(CriticConfig(), path, 1, None) == {}
    policy = NoisyExpertPolicy()  # proposes actions only: never asked here
    assert await reflect_baseline(CriticConfig(), path, 3, policy) == {"reflect": 3}  # one action left
    assert await reflect_baseline(CriticConfig(compare_reflect=False), path, 3, policy) == {}
    assert await reflect_baseline(CriticConfig(strategy="reflect"), path, 3, policy) == {}
