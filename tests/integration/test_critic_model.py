"""The model critic on a real tiny transformers model: prefix reuse gives the same label scores as
the policy's own score_labels, costs fewer tokens, is deterministic, and stops at the first bad."""

from __future__ import annotations

import pytest
import torch

from core.domain.critic import label_from_scores
from core.domain.trajectory import Step, Trajectory
from core.llm.judge_prompt import LABEL_TEXTS, judge_conversation, label_reserve
from core.llm.prompts import JUDGE_QUESTION
from critic_service.critic import CriticConfig, critique, judge_batched, judge_prefix

TEXTS = [
    "Crafting commands: craft 4 oak planks using 1 oak logs. Goal: craft stick.",
    "Thought: I need logs.\nAction: get 1 oak logs",
    "Got 1 oak logs. Could not execute craft 1 stick. Judge your last action. Good Bad Uncertain",
    JUDGE_QUESTION,
] * 20


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from core.llm.hf import HFPolicy
    from core.llm.tiny import build_tiny_model

    torch.set_num_threads(1)
    folder = tmp_path_factory.mktemp("tiny") / "model"
    build_tiny_model(folder, TEXTS, hidden=64, layers=2, heads=2, vocab_size=400, seed=0)
    return HFPolicy.from_folder(folder, device="cpu")


def _path(n: int) -> Trajectory:
    steps = tuple(
        Step(thought=f"step {i}", action=f"get {i + 1} oak logs", observation=f"Got {i + 1} oak logs")
        for i in range(n)
    )
    return Trajectory(task="Goal: craft stick.", instruction="Craft things.", steps=steps, reward=0.0)


async def test_prefix_scores_equal_policy_score_labels(policy) -> None:  # type: ignore[no-untyped-def]
    path = _path(6)
    steps = list(range(2, 6))
    prefix, prefix_tokens = await judge_prefix(policy, path, steps, early_exit=False)
    reference = await policy.score_labels([judge_conversation(path, i) for i in steps], LABEL_TEXTS)
    assert [v.step_index for v in prefix] == steps
    counts = {label: len(policy.encode(label)) for label in LABEL_TEXTS}
    for verdict, ref in zip(prefix, reference, strict=True):
        normalised = {label: value / counts[label] for label, value in ref.items()}  # mean per token
        for label, value in normalised.items():
            assert verdict.scores[label.lower()] == pytest.approx(value, abs=2e-3)
        assert verdict.label == label_from_scores(normalised)
    batched, batched_tokens = await judge_batched(policy, path, steps)
    assert [v.label for v in batched] == [v.label for v in prefix]
    naive, naive_tokens = await judge_prefix(policy, path, steps, early_exit=False, reuse=False)
    assert [v.label for v in naive] == [v.label for v in prefix]
    # the shared history is run once: fewer tokens than one full prompt per step
    assert 0 < prefix_tokens < naive_tokens < batched_tokens


async def test_model_strategy_is_deterministic_and_records_everything(policy) -> None:  # type: ignore[no-untyped-def]
    path = _path(5)
    config = CriticConfig(strategy="model", early_exit=False)
    first = await critique(config, path, shared_steps=1, policy=policy)
    second = await critique(config, path, shared_steps=1, policy=policy)
    assert first == second
    assert first.strategy == "model" and first.model_version == policy.model_version
    assert [v.step_index for v in first.verdicts] == [1, 2, 3, 4]
    assert all(set(v.scores) == {"good", "bad", "uncertain"} and v.method == "scores" for v in first.verdicts)
    bad = [v.step_index for v in first.verdicts if v.label == "bad"]
    assert first.transition_index == (bad[0] if bad else 4)
    batched = await critique(CriticConfig(strategy="model", plan="batched"), path, 1, policy)
    assert batched.transition_index == first.transition_index


async def test_early_exit_stops_at_first_bad(policy) -> None:  # type: ignore[no-untyped-def]
    path = _path(8)
    full, _ = await judge_prefix(policy, path, list(range(8)), early_exit=False)
    early, _ = await judge_prefix(policy, path, list(range(8)), early_exit=True)
    labels = [v.label for v in full]
    stop = labels.index("bad") + 1 if "bad" in labels else len(labels)
    assert [v.label for v in early] == labels[:stop]
    assert len(early) <= len(full)


@pytest.fixture(scope="module")
def short_policy(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """The same kind of tiny model with a context of only 256 positions."""
    from core.llm.hf import HFPolicy
    from core.llm.tiny import build_tiny_model

    folder = tmp_path_factory.mktemp("tiny-short") / "model"
    build_tiny_model(folder, TEXTS, hidden=32, layers=1, heads=2, vocab_size=400, seed=0, max_positions=256)
    return HFPolicy.from_folder(folder, device="cpu")


async def test_long_paths_are_judged_within_the_models_context(short_policy) -> None:  # type: ignore[no-untyped-def]
    from core.llm.ports import PolicyError

    path = _path(12)
    last = len(path.steps) - 1
    full = judge_conversation(path, last)
    assert short_policy.prompt_tokens(full) > 256  # the untruncated prompt cannot be scored
    with pytest.raises(PolicyError):
        await short_policy.sample([full], max_tokens=1)
    fitted = judge_conversation(path, last, short_policy)
    assert short_policy.prompt_tokens(fitted) + label_reserve(short_policy) <= 256
    assert fitted[-1].content == full[-1].content and fitted[-2:] == full[-2:]  # judged step + question
    assert "earlier steps omitted]" in fitted[1].content
    prefix = await critique(CriticConfig(strategy="model", early_exit=False), path, 4, short_policy)
    batched = await critique(CriticConfig(strategy="model", plan="batched"), path, 4, short_policy)
    assert [v.step_index for v in prefix.verdicts] == list(range(4, 12))
    assert [v.label for v in batched.verdicts] == [v.label for v in prefix.verdicts]
    for a, b in zip(prefix.verdicts, batched.verdicts, strict=True):
        for label, value in a.scores.items():
            assert b.scores[label] == pytest.approx(value, abs=2e-3)


async def test_model_reflections_from_the_tiny_model_fall_back_to_templates(policy) -> None:  # type: ignore[no-untyped-def]
    from core.domain.reflections import check_model_reflection, choose_reflection
    from core.llm.prompts import parse_action
    from splice_service.reflector import ReflectionRequest, model_reflections

    requests = [
        ReflectionRequest(f"pair-{i}", "Goal: craft stick.", f"get {i + 1} oak logs", "Could not execute")
        for i in range(3)
    ]
    got = await model_reflections(policy, requests)
    assert len(got) == 3
    for request, reflection in zip(requests, got, strict=True):
        if reflection.template_id == "model":  # only a checked sentence is ever used as is
            assert check_model_reflection(reflection.text) == reflection.text
            assert parse_action(reflection.text) is None
        else:
            template = choose_reflection(request.pair_id, request.wrong_action)
            assert reflection.template_id == f"model|fallback:{template.template_id}"
            assert reflection.text == template.text
    # the random tiny model writes no usable sentence: every reflection took the fallback path
    assert all(r.template_id.startswith("model|fallback:") for r in got)
    assert got == await model_reflections(policy, requests)  # greedy: deterministic


async def test_reflect_baseline_is_the_reflect_strategys_t_prime(policy) -> None:  # type: ignore[no-untyped-def]
    """FirstErrorMarked.baselines["reflect"]: the reflect strategy's t' on the same path with the same
    (real, tiny) model, recorded beside the model critic's."""
    from critic_service.critic import reflect_baseline

    path = _path(5)
    reflected = await critique(CriticConfig(strategy="reflect"), path, 1, policy)
    assert await reflect_baseline(CriticConfig(), path, 1, policy) == {"reflect": reflected.transition_index}
    assert 1 <= reflected.transition_index <= 4


async def test_model_baseline_is_the_model_strategys_t_prime_beside_the_default(policy) -> None:  # type: ignore[no-untyped-def]
    """FirstErrorMarked.baselines["model"]: under the default ``first`` critic the model strategy's t'
    on the same path with the same (real, tiny) model, so the model critic stays measured."""
    from critic_service.critic import model_baseline

    path = _path(5)
    assert CriticConfig().strategy == "first" and CriticConfig.from_data({}).strategy == "first"
    judged = await critique(CriticConfig(strategy="model"), path, 1, policy)
    assert await model_baseline(CriticConfig(), path, 1, policy) == {"model": judged.transition_index}
    assert await model_baseline(CriticConfig(compare_model=False), path, 1, policy) == {}
    assert await model_baseline(CriticConfig(strategy="model"), path, 1, policy) == {}  # it is the critic
    assert await model_baseline(CriticConfig(), path, 1, None) == {}  # no model at hand: none recorded
    assert CriticConfig().needs_actor
    assert not CriticConfig(compare_model=False, compare_reflect=False).needs_actor
