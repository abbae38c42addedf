"""DPO at the divergence node on a real tiny Llama: the loss equals a hand computation, the masks
are exactly the continuation's assistant turns, a step raises the chosen margin, checkpoints carry
meta.json, reference-free mode, and bad input is refused."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from core.domain.datasets import EmptyDatasetError
from core.domain.preferences import PreferencePair, preference_pair
from core.domain.trajectory import Step, Trajectory
from tests.ml.learner_data import tiny_learner_model
from train_service.checkpoint import read_meta
from train_service.dpo import (
    DPOConfig,
    PreferenceCollator,
    dpo_loss,
    reference_logps,
    sequence_logps,
    tokenize_pairs,
    train_dpo,
)
from train_service.hf_trainer import TrainJob
from train_service.tokenize import IGNORE_INDEX


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_learner_model(tmp_path_factory.mktemp("tiny") / "m")


def pair(i: int = 0) -> PreferencePair:
    shared = Step("I need planks.", "get 2 oak planks", "Got 2 oak planks")
    good = Trajectory(
        f"Goal: craft stick. ({i})",
        "You are a crafting agent.",
        (
            shared,
            Step("craft it", "craft 4 stick using 2 oak planks", "Crafted 4 minecraft:stick", 1.0, True),
        ),
        reward=1.0,
    )
    bad = Trajectory(
        f"Goal: craft stick. ({i})",
        "You are a crafting agent.",
        (
            shared,
            Step("dirt", "get 1 dirt", "Could not find dirt", valid=False),
            Step("again", "get 1 dirt", "x"),
        ),
        reward=0.0,
    )
    return preference_pair(f"p{i}", bad, good, 1, position=i)


def test_dpo_loss_equals_a_hand_computation() -> None:
    pc, pr, rc, rr = torch.tensor([-3.0]), torch.tensor([-5.0]), torch.tensor([-4.0]), torch.tensor([-4.5])
    loss, chosen_r, rejected_r = dpo_loss(pc, pr, rc, rr, beta=0.5)
    # beta * ((-3 + 4) - (-5 + 4.5)) = 0.5 * 1.5 = 0.75; loss = -log sigmoid(0.75) = log(1 + e^-0.75)
    assert float(loss) == pytest.approx(math.log1p(math.exp(-0.75)), rel=1e-6)
    assert float(chosen_r[0]) == pytest.approx(0.5) and float(rejected_r[0]) == pytest.approx(-0.25)
    # reference-free: the reference terms are zero
    free, _, _ = dpo_loss(pc, pr, torch.zeros(1), torch.zeros(1), beta=0.5)
    assert float(free) == pytest.approx(math.log1p(math.exp(-1.0)), rel=1e-6)


def test_sequence_logps_sums_only_labelled_next_tokens() -> None:
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6]]]))
    labels = torch.tensor([[IGNORE_INDEX, 1, 2]])  # token 1 scored by position 0, token 2 by position 1
    assert float(sequence_logps(logits, labels)[0]) == pytest.approx(math.log(0.25) + math.log(0.3))
    masked = torch.tensor([[IGNORE_INDEX, IGNORE_INDEX, 2]])
    assert float(sequence_logps(logits, masked)[0]) == pytest.approx(math.log(0.3))


def test_masks_are_exactly_the_continuation_turns(base_model: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base_model)
    [example], stats = tokenize_pairs(tok, [pair()], 512)

    def trained_text(sample) -> str:  # type: ignore[no-untyped-def]
        return tok.decode(
            [t for t, lab in zip(sample.input_ids, sample.labels, strict=True) if lab != IGNORE_INDEX]
        )

    chosen, rejected = trained_text(example.chosen), trained_text(example.rejected)
    assert "craft 4 stick using 2 oak planks" in chosen
    assert "get 2 oak planks" not in chosen  # the shared prompt turn is context
    assert "Got 2 oak planks" not in chosen and "Crafted" not in chosen  # observations are masked
    assert rejected.count("get 1 dirt") == 2 and "Could not find dirt" not in rejected
    # the labelled tokens are exactly those inside the assistant turns after the divergence
    assert stats["trained_tokens"] == example.chosen.trained_tokens + example.rejected.trained_tokens
    assert example.chosen.input_ids[:10] == example.rejected.input_ids[:10]  # same prompt


def test_reference_logps_match_the_model_on_the_masked_tokens(base_model: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base_model)
    model = AutoModelForCausalLM.from_pretrained(base_model)
    examples, _ = tokenize_pairs(tok, [pair(0), pair(1)], 512)
    with_ref = reference_logps(model, examples, tok.pad_token_id or 0, batch_size=2)
    # by hand, one sequence at a time: sum of log p(token) over labelled positions
    ids = torch.tensor([examples[1].rejected.input_ids])
    with torch.inference_mode():
        logp = torch.log_softmax(model(input_ids=ids).logits[0], -1)
    labels = examples[1].rejected.labels
    hand = sum(float(logp[t - 1, labels[t]]) for t in range(1, len(labels)) if labels[t] != IGNORE_INDEX)
    assert with_ref[1].ref_rejected == pytest.approx(hand, abs=1e-4)
    batch = PreferenceCollator(tok.pad_token_id or 0)(with_ref)
    assert batch["input_ids"].shape[0] == 4 and batch["ref_logps"].tolist()[3] == pytest.approx(
        hand, abs=1e-4
    )


def test_dpo_step_raises_the_margin_and_writes_a_checkpoint(base_model: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = DPOConfig(max_steps=3, batch_size=2, learning_rate=5e-3, warmup=0, logging_steps=1, beta=0.5)
    pairs = [pair(0), pair(1)]
    report = train_dpo(
        TrainJob(base_model, tmp_path / "ckpt", iteration=1, dataset_id="ds", run_id="r"), pairs, cfg
    )
    meta = read_meta(report.checkpoint)
    assert meta.config["method"] == "dpo" and meta.dataset_id == "ds" and meta.metrics["pairs"] == 2
    assert json.loads((report.checkpoint / "meta.json").read_text())["metrics"]["reference"] == "frozen"
    tok = AutoTokenizer.from_pretrained(base_model)
    examples, _ = tokenize_pairs(tok, pairs, 512)
    before = reference_logps(
        AutoModelForCausalLM.from_pretrained(base_model), examples, tok.pad_token_id or 0, 2
    )
    after = reference_logps(
        AutoModelForCausalLM.from_pretrained(report.checkpoint), examples, tok.pad_token_id or 0, 2
    )
    margin_before = sum(e.ref_chosen - e.ref_rejected for e in before)
    margin_after = sum(e.ref_chosen - e.ref_rejected for e in after)
    assert margin_after > margin_before
    assert meta.metrics["last_loss"] < meta.metrics["first_loss"]
    # a retry with the same dataset reuses the checkpoint
    assert train_dpo(TrainJob(base_model, tmp_path / "ckpt", dataset_id="ds"), pairs, cfg).reused


def test_reference_free_and_bad_input(base_model: Path, tmp_path: Path) -> None:
    cfg = DPOConfig(max_steps=1, batch_size=1, reference="none", learning_rate=1e-3, warmup=0)
    report = train_dpo(TrainJob(base_model, tmp_path / "free"), [pair(0)], cfg)
    assert read_meta(report.checkpoint).metrics["reference"] == "none"
    with pytest.raises(EmptyDatasetError):
        train_dpo(TrainJob(base_model, tmp_path / "empty"), [], cfg)
    with pytest.raises(ValueError, match="reference"):
        DPOConfig(reference="policy")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown field"):
        DPOConfig.from_dict({"gamma": 1})
