"""SFT on a real tiny Llama: a step changes the parameters, checkpoints round trip, bad input is refused."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from core.domain.datasets import EmptyDatasetError
from core.domain.trajectory import Message, TrainingSample
from core.llm.tiny import build_tiny_model
from train_service.checkpoint import META_FILE, CheckpointError, load_checkpoint, read_meta
from train_service.hf_trainer import TrainJob
from train_service.sft import LoraSettings, SFTConfig, TrainingCancelled, TrainReport, train_sft

TEXTS = [
    "You are a crafting agent.",
    "Goal: craft stick. craft 4 stick using 2 oak planks",
    "Thought: I need oak planks.\nAction: get 2 oak planks",
    "Got 2 oak planks. Crafted 4 minecraft:stick",
] * 20


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(
        tmp_path_factory.mktemp("tiny") / "m", TEXTS, hidden=32, layers=2, heads=2, vocab_size=400
    )


def samples(n: int) -> list[TrainingSample]:
    return [
        TrainingSample(
            sample_id=f"s{i}",
            kind="revision",
            messages=(
                Message("system", "You are a crafting agent."),
                Message("user", f"Goal: craft stick. ({i})"),
                Message("assistant", "Thought: dirt.\nAction: get 1 dirt", 0),
                Message("user", "Could not find dirt."),
                Message("assistant", "Thought: I need oak planks.\nAction: get 2 oak planks", 1),
            ),
        )
        for i in range(n)
    ]


def params(path: Path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    return {k: v.detach().clone() for k, v in AutoModelForCausalLM.from_pretrained(path).state_dict().items()}


def test_one_step_changes_parameters_and_checkpoint_round_trips(base_model: Path, tmp_path: Path) -> None:
    cfg = SFTConfig(max_steps=1, batch_size=4, learning_rate=1e-2, logging_steps=1)
    report = train_sft(
        TrainJob(base_model, tmp_path / "ckpt", iteration=3, dataset_id="ds-1", run_id="run-9"),
        samples(4),
        cfg,
    )
    before, after = params(base_model), params(report.checkpoint)
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert "model.embed_tokens.weight" in changed
    assert any("layers.1.self_attn.q_proj" in k for k in changed)
    assert report.metrics["steps"] == 1 and report.metrics["samples"] == 4
    assert report.metrics["trained_tokens"] < report.metrics["tokens"]

    model, tok, meta = load_checkpoint(report.checkpoint)
    assert meta.iteration == 3 and meta.dataset_id == "ds-1" and meta.run_id == "run-9"
    assert SFTConfig.from_dict(meta.config) == cfg
    assert meta.base_model == str(base_model)
    assert tok.chat_template == json.loads((base_model / "tokenizer_config.json").read_text()).get(
        "chat_template", tok.chat_template
    )
    for k, v in model.state_dict().items():
        assert torch.equal(v, after[k])
    # the saved checkpoint is an ordinary model folder: it trains again
    again = train_sft(
        TrainJob(report.checkpoint, tmp_path / "ckpt2"), samples(2), SFTConfig(max_steps=1, batch_size=2)
    )
    assert read_meta(again.checkpoint).base_model == str(report.checkpoint)


def test_training_lowers_the_loss_with_packing(base_model: Path, tmp_path: Path) -> None:
    cfg = SFTConfig(epochs=8, batch_size=2, learning_rate=1e-2, packing=True, max_length=256, logging_steps=1)
    report = train_sft(TrainJob(base_model, tmp_path / "packed"), samples(8), cfg)
    assert report.metrics["blocks"] < report.metrics["samples"]
    from train_service.tokenize import collate, tokenize_sample

    model, tok, _ = load_checkpoint(report.checkpoint)
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_model)
    batch = collate([tokenize_sample(tok, s) for s in samples(2)], tok.pad_token_id)
    with torch.inference_mode():
        trained_loss = model(**batch).loss.item()
        base_loss = base(**batch).loss.item()
    assert trained_loss < base_loss * 0.8


def _training_dtypes(run: Callable[[], TrainReport]) -> tuple[TrainReport, dict[str, set[torch.dtype]]]:
    """``run()``'s report and the dtypes the model's parts computed in while training (grad on):
    "mlp" (the MLP blocks' outputs), "attention", "head" (the LM head's logits)."""
    seen: dict[str, set[torch.dtype]] = {"mlp": set(), "attention": set(), "head": set()}

    def record(module: torch.nn.Module, _inputs: object, output: object) -> None:
        if not torch.is_grad_enabled():
            return
        first = output[0] if isinstance(output, tuple) else output
        if not isinstance(first, torch.Tensor):
            return
        name = type(module).__name__
        if name.endswith("MLP"):
            seen["mlp"].add(first.dtype)
        elif name.endswith("Attention"):
            seen["attention"].add(first.dtype)
        elif isinstance(module, torch.nn.Linear) and module.out_features > 300:  # the vocabulary
            seen["head"].add(first.dtype)

    handle = torch.nn.modules.module.register_module_forward_hook(record)
    try:
        report = run()
    finally:
        handle.remove()
    return report, seen


def test_mixed_bf16_runs_the_mlps_in_bf16_keeps_fp32_weights(base_model: Path, tmp_path: Path) -> None:
    """``mixed_bf16``: the MLP blocks compute in bfloat16 while training, attention and the LM head
    in fp32 (train_service/precision.py), the checkpoint is fp32, and the loss falls as in fp32."""
    cfg = SFTConfig(
        epochs=8, batch_size=2, learning_rate=1e-2, packing=True, max_length=256, logging_steps=1,
        mixed_bf16=True,
    )  # fmt: skip
    report, seen = _training_dtypes(
        lambda: train_sft(TrainJob(base_model, tmp_path / "mixed"), samples(8), cfg)
    )
    assert seen == {"mlp": {torch.bfloat16}, "attention": {torch.float32}, "head": {torch.float32}}
    assert report.metrics["mixed_bf16"] is True and report.metrics["bf16"] is False
    assert {t.dtype for t in params(report.checkpoint).values()} == {torch.float32}
    from train_service.tokenize import collate, tokenize_sample

    model, tok, _ = load_checkpoint(report.checkpoint)
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_model)
    batch = collate([tokenize_sample(tok, s) for s in samples(2)], tok.pad_token_id)
    with torch.inference_mode():
        assert model(**batch).loss.item() < base(**batch).loss.item() * 0.8


def test_fp32_training_computes_in_fp32(base_model: Path, tmp_path: Path) -> None:
    """The default: no autocast anywhere."""
    cfg = SFTConfig(max_steps=1, batch_size=4)
    report, seen = _training_dtypes(
        lambda: train_sft(TrainJob(base_model, tmp_path / "fp32"), samples(4), cfg)
    )
    assert seen == {"mlp": {torch.float32}, "attention": {torch.float32}, "head": {torch.float32}}
    assert report.metrics["mixed_bf16"] is False


def test_retry_reuses_a_complete_checkpoint_and_refuses_another_dataset(
    base_model: Path, tmp_path: Path
) -> None:
    cfg = SFTConfig(max_steps=1, batch_size=2)
    first = train_sft(TrainJob(base_model, tmp_path / "c", dataset_id="A"), samples(2), cfg)
    again = train_sft(TrainJob(base_model, tmp_path / "c", dataset_id="A"), samples(2), cfg)
    assert again.reused and again.checkpoint == first.checkpoint
    with pytest.raises(CheckpointError, match="already holds a checkpoint of dataset A"):
        train_sft(TrainJob(base_model, tmp_path / "c", dataset_id="B"), samples(2), cfg)


def test_lora_merges_into_plain_weights(base_model: Path, tmp_path: Path) -> None:
    cfg = SFTConfig(
        max_steps=2, batch_size=2, learning_rate=1e-2, lora=LoraSettings(r=4, alpha=8, dropout=0.0)
    )
    report = train_sft(TrainJob(base_model, tmp_path / "lora"), samples(4), cfg)
    after = params(report.checkpoint)
    before = params(base_model)
    assert set(after) == set(before)  # no adapter keys: merged
    assert not torch.equal(
        before["model.layers.0.self_attn.q_proj.weight"], after["model.layers.0.self_attn.q_proj.weight"]
    )
    assert torch.equal(
        before["model.layers.0.mlp.up_proj.weight"], after["model.layers.0.mlp.up_proj.weight"]
    )
    assert read_meta(report.checkpoint).lora == {
        "r": 4,
        "alpha": 8,
        "dropout": 0.0,
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
    }


def test_empty_dataset_is_a_clear_error(base_model: Path, tmp_path: Path) -> None:
    with pytest.raises(EmptyDatasetError, match="the dataset is empty"):
        train_sft(TrainJob(base_model, tmp_path / "x"), [], SFTConfig(max_steps=1))
    with pytest.raises(EmptyDatasetError, match="lost their trained tokens to max_length=8"):
        train_sft(TrainJob(base_model, tmp_path / "x"), samples(2), SFTConfig(max_steps=1, max_length=8))
    assert not (tmp_path / "x").exists()


def test_cancel_writes_nothing(base_model: Path, tmp_path: Path) -> None:
    with pytest.raises(TrainingCancelled, match="cancelled at step 1"):
        train_sft(
            TrainJob(base_model, tmp_path / "c", should_stop=lambda: True),
            samples(4),
            SFTConfig(max_steps=50, batch_size=2),
        )
    assert not (tmp_path / "c").exists()


def test_time_budget_stops_training(base_model: Path, tmp_path: Path) -> None:
    cfg = SFTConfig(epochs=10_000, batch_size=2, lr_scheduler="time_cosine", time_budget_s=1.0)
    report = train_sft(TrainJob(base_model, tmp_path / "t"), samples(4), cfg)
    assert report.metrics["stopped_by_time_budget"] is True
    assert report.metrics["steps"] < 10_000 * 2
    assert (report.checkpoint / META_FILE).is_file()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"learning_rate": 0}, "learning_rate"),
        ({"lr_scheduler": "time_cosine"}, "time_budget_s"),
        ({"batch_size": 0}, "batch_size"),
        ({"bf16": True, "mixed_bf16": True}, "mixed_bf16"),
    ],
)
def test_bad_config(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SFTConfig(**kwargs)
    with pytest.raises(ValueError, match="unknown field"):
        SFTConfig.from_dict({"epochz": 1})


def test_warm_start_on_expert_textcraft_episodes(base_model: Path, tmp_path: Path) -> None:
    from core.envs.textcraft import TextCraftEnv
    from train_service.warm_start import expert_samples, warm_start

    env = TextCraftEnv(split="demo", distractors=2)
    expert = expert_samples(env, 4, "demo")
    assert len(expert) == 4 and all(s.reward == 1.0 and s.kind == "good" for s in expert)
    assert (
        expert[0].messages[2].content.startswith("Thought: ")
        and "\nAction: get " in expert[0].messages[2].content
    )
    report = warm_start(base_model, env, 4, tmp_path / "warm", time_budget_s=2.0, split="demo")
    meta = read_meta(report.checkpoint)
    assert meta.iteration == -1 and meta.dataset_id == "warm-start:demo:4"
    assert meta.config["packing"] is True and meta.config["lr_scheduler"] == "time_cosine"
    assert report.metrics["stopped_by_time_budget"] is True
