"""The ``reflect`` critic on a real tiny transformers model: the likelihood of a reflection right
after each step, length-normalised, the same through prefix reuse and through the Policy port, and
it sharpens where revision training put reflections (one SFT through the real trainer)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from core.domain.reflections import DEFAULT_TEMPLATES
from core.domain.trajectory import Message, Step, TrainingSample, Trajectory
from core.llm.hf import HFPolicy
from core.llm.prompts import JUDGE_QUESTION, build_messages, format_assistant
from critic_service.critic import CriticConfig, critique, reflect_conversation, reflection_texts

ERROR = "Could not find enough items to craft minecraft:stick"
TEXTS = [
    "Crafting commands: craft 1 stick using 2 bamboo. Goal: craft stick.",
    "Thought: I need 2 bamboo.\nAction: get 2 bamboo",
    f"Got 2 bamboo. {ERROR}. Crafted 1 minecraft:stick",
    JUDGE_QUESTION,
    *(f"Thought: {t}" for t in DEFAULT_TEMPLATES.values()),
] * 10


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from core.llm.tiny import build_tiny_model

    torch.set_num_threads(1)
    path = tmp_path_factory.mktemp("tiny-reflect") / "model"
    return build_tiny_model(path, TEXTS, hidden=64, layers=2, heads=2, vocab_size=500, seed=0)


def _path(error_at: int, n: int = 5) -> Trajectory:
    steps = []
    for i in range(n):
        action = f"get {i + 1} bamboo" if i != error_at else "craft 1 stick using 3 bamboo"
        steps.append(Step(f"step {i}", action, ERROR if i == error_at else f"Got {i + 1} bamboo"))
    return Trajectory(task="Goal: craft stick.", instruction="Craft things.", steps=tuple(steps), reward=0.0)


class PortOnly:
    """The same model seen only through the Policy port (no prefix reuse) plus exact label counts."""

    def __init__(self, inner: HFPolicy) -> None:
        self.inner = inner
        self.model_version = inner.model_version

    async def sample(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        return await self.inner.sample(*args, **kwargs)

    async def score_labels(self, conversations, labels):  # type: ignore[no-untyped-def]
        return await self.inner.score_labels(conversations, labels)

    def label_token_counts(self, labels):  # type: ignore[no-untyped-def]
        return {label: len(self.inner.encode(label)) for label in labels}

    async def close(self) -> None:
        return None


async def test_reflect_scores_are_the_mean_per_token_and_equal_across_plans(folder: Path) -> None:
    policy = HFPolicy.from_folder(folder, device="cpu")
    path = _path(error_at=2)
    result = await critique(CriticConfig(strategy="reflect"), path, 1, policy)
    assert result.strategy == "reflect" and result.fallback is False and result.tokens_processed > 0
    assert [v.step_index for v in result.verdicts] == [1, 2, 3, 4]
    scores = {v.step_index: v.scores["reflection"] for v in result.verdicts}
    assert result.transition_index == max(scores, key=lambda i: (scores[i], -i))  # argmax, earliest
    # the score is the mean over templates of each template's mean log-probability per token
    texts = reflection_texts(path.steps[3].action)
    summed = (await policy.score_labels([reflect_conversation(path, 3)], texts))[0]
    expected = sum(summed[t] / len(policy.encode(t)) for t in texts) / len(texts)
    assert scores[3] == pytest.approx(expected, abs=2e-3)
    port = await critique(CriticConfig(strategy="reflect"), path, 1, PortOnly(policy))  # type: ignore[arg-type]
    assert port.transition_index == result.transition_index
    for a, b in zip(port.verdicts, result.verdicts, strict=True):
        assert a.scores["reflection"] == pytest.approx(b.scores["reflection"], abs=2e-3)
    assert await critique(CriticConfig(strategy="reflect"), path, 1, policy) == result  # deterministic


def _revision(path: Trajectory, at: int, template_id: str) -> TrainingSample:
    """What revision training teaches: after the wrong step, a reflection opens the next turn."""
    messages = build_messages(path.instruction, path.task, path.steps[: at + 1])
    reflection = DEFAULT_TEMPLATES[template_id].format(action=path.steps[at].action)
    messages.append(
        Message("assistant", format_assistant(f"{reflection} I need 2 bamboo.", "get 2 bamboo"), 1)
    )
    return TrainingSample(f"rev-{at}-{template_id}", "revision", tuple(messages))


async def test_reflect_sharpens_where_revision_training_put_reflections(folder: Path, tmp_path: Path) -> None:
    from train_service.hf_trainer import TrainJob
    from train_service.sft import SFTConfig, train_sft

    samples = [
        _revision(_path(error_at=at), at, template_id)
        for at in range(1, 5)
        for template_id in sorted(DEFAULT_TEMPLATES)
    ]
    cfg = SFTConfig(max_steps=60, learning_rate=3e-3, batch_size=8, max_length=256, logging_steps=100)
    report = train_sft(TrainJob(folder, tmp_path / "trained"), samples, cfg)
    trained = HFPolicy.from_folder(report.checkpoint, device="cpu")
    hits = 0
    for at in range(1, 5):
        result = await critique(CriticConfig(strategy="reflect"), _path(error_at=at), 0, trained)
        hits += result.transition_index == at
    assert hits >= 3, hits  # the reflection is most likely right after the failed step
