"""Packing safety: the tiny Llama's packed logits equal separate ones, so packed training proceeds;
OPT (whose learned positions come from the attention mask, not from position ids) leaks across
packed samples (measured: ~0.09 on a random 1-layer OPT), and a packed training on it is refused
before any step."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.domain.trajectory import Message, TrainingSample
from core.llm.tiny import build_tiny_model
from train_service.hf_trainer import TrainJob
from train_service.packing_check import PackingUnsafe, check_packing, packed_difference
from train_service.sft import SFTConfig, train_sft

TEXTS = ["Goal: craft stick.", "Thought: planks.\nAction: get 2 oak planks"] * 20


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(
        tmp_path_factory.mktemp("tiny") / "m", TEXTS, hidden=32, layers=1, heads=2, vocab_size=300
    )


def test_tiny_llama_packs_exactly(tiny: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny)
    assert packed_difference(model, 0) < 1e-4
    assert check_packing(model, 0) < 1e-4


def test_a_model_that_leaks_across_packed_samples_is_refused(tiny: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer, OPTConfig, OPTForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tiny)  # any tokenizer with a chat template
    config = OPTConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        ffn_dim=64,
        word_embed_proj_dim=32,
        bos_token_id=tokenizer.bos_token_id or 0,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id or 0,
    )
    opt = OPTForCausalLM(config)
    assert packed_difference(opt, 0) > 1e-2
    with pytest.raises(PackingUnsafe, match="packing is unsafe for OPTForCausalLM"):
        check_packing(opt, 0)
    folder = tmp_path / "opt"
    opt.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    sample = TrainingSample(
        "s", "good", (Message("user", "Goal: craft stick."), Message("assistant", "Action: get 1 stick", 1))
    )
    cfg = SFTConfig(max_steps=1, packing=True, max_length=64, batch_size=1)
    with pytest.raises(PackingUnsafe, match="set train.packing false"):
        train_sft(TrainJob(folder, tmp_path / "ckpt"), [sample], cfg)
    assert not (tmp_path / "ckpt").exists()
