"""The `value` critic strategy: the first step whose ArCHer advantage falls below the threshold is t',
from the critic of an archer checkpoint; the fallback is recorded; a folder without a critic is
refused naming what to do; the critic service routes it like the other strategies."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.domain.trajectory import Step, Trajectory
from critic_service.critic import CriticConfig, CriticConfigError, critique
from critic_service.strategies.value import StepValue, ValueScorer, value_verdicts
from tests.ml.learner_data import hand_transitions, tiny_learner_model
from train_service.archer import ArcherConfig, train_archer
from train_service.hf_trainer import TrainJob


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tiny_learner_model(tmp_path_factory.mktemp("tiny") / "m")
    transitions = hand_transitions()
    cfg = ArcherConfig(
        iterations=2, warmup_iters=2, critic_epochs=3, batch_size=3, grad_accumulation=1, head_hidden=16,
        max_state_tokens=96, max_action_tokens=24, max_length=160, critic_lr=1e-3, kl_coef=0.0,
    )  # fmt: skip
    ckpt = train_archer(
        TrainJob(base, tmp_path_factory.mktemp("ckpt") / "archer"), transitions, cfg
    ).checkpoint
    return base, ckpt


def bad_path() -> Trajectory:
    return Trajectory(
        "Goal: craft stick.",
        "You are a crafting agent.",
        (
            Step("I need oak planks.", "get 2 oak planks", "Got 2 oak planks"),
            Step("dirt", "get 1 dirt", "Could not find dirt", valid=False),
            Step("again", "get 1 dirt", "Could not find dirt", valid=False),
        ),
        reward=0.0,
    )


def test_value_verdicts_mark_the_first_step_below_the_threshold() -> None:
    values = [StepValue(1, 0.5, 0.3), StepValue(2, 0.1, 0.4), StepValue(3, 0.0, 0.9)]
    verdicts, fallback = value_verdicts(values, 0.0)
    assert [(v.step_index, v.label) for v in verdicts] == [(1, "good"), (2, "bad")] and not fallback
    assert verdicts[1].scores["advantage"] == pytest.approx(-0.3)
    verdicts, fallback = value_verdicts(values, -5.0)
    assert fallback and all(v.label == "good" for v in verdicts)


async def test_value_strategy_from_an_archer_checkpoint(models: tuple[Path, Path]) -> None:
    _base, ckpt = models
    path = bad_path()
    values = ValueScorer(ckpt).step_values(path, [1, 2])
    advantages = [v.advantage for v in values]
    # a threshold between the two advantages picks the step below it
    middle = sum(advantages) / 2
    result = await critique(
        CriticConfig(strategy="value", value_model=str(ckpt), value_threshold=middle), path, 1
    )
    lowest = 1 if advantages[0] < advantages[1] else 2
    assert result.strategy == "value" and not result.fallback
    if lowest == 1:
        assert result.transition_index == 1
    else:
        assert result.transition_index == 2 and result.verdicts[0].label == "good"
    # nothing below the threshold: fallback to the last action, recorded
    low = await critique(CriticConfig(strategy="value", value_model=str(ckpt), value_threshold=-1e6), path, 1)
    assert low.fallback and low.transition_index == 2 and low.tokens_processed > 0
    high = await critique(CriticConfig(strategy="value", value_model=str(ckpt), value_threshold=1e6), path, 1)
    assert high.transition_index == 1 and not high.fallback


async def test_value_strategy_needs_a_critic(models: tuple[Path, Path]) -> None:
    base, _ckpt = models
    with pytest.raises(CriticConfigError, match="train.method 'archer'"):
        await critique(CriticConfig(strategy="value", value_model=str(base)), bad_path(), 1)
    with pytest.raises(CriticConfigError, match="value_model"):
        await critique(CriticConfig(strategy="value"), bad_path(), 1)
    with pytest.raises(CriticConfigError, match="value_threshold"):
        CriticConfig.from_data({"strategy": "value", "value_threshold": "low"})
