"""Token labels from per-message weights: exact masking, loud template errors, packing boundaries."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from core.domain.trajectory import Message, TrainingSample
from core.llm.tiny import build_tiny_model
from train_service.tokenize import (
    IGNORE_INDEX,
    TemplateError,
    collate,
    pack,
    tokenize_sample,
)

TEXTS = [
    "You are a crafting agent. Reply with Thought: ... then Action: ...",
    "Goal: craft stick. craft 4 stick using 2 oak planks",
    "Thought: I need oak planks.\nAction: get 2 oak planks",
    "Could not find dirt. Got 2 oak planks. Crafted 4 minecraft:stick",
] * 20


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from transformers import AutoTokenizer

    folder = build_tiny_model(
        tmp_path_factory.mktemp("tiny") / "m", TEXTS, hidden=32, layers=1, heads=2, vocab_size=400
    )
    return AutoTokenizer.from_pretrained(folder)


def revision() -> TrainingSample:
    return TrainingSample(
        sample_id="rev1",
        kind="revision",
        messages=(
            Message("system", "You are a crafting agent."),
            Message("user", "Goal: craft stick."),
            Message("assistant", "Thought: dirt first.\nAction: get 1 dirt", 0),
            Message("user", "Could not find dirt."),
            Message("assistant", "Thought: I was wrong, I need planks.\nAction: get 2 oak planks", 1),
            Message("user", "Got 2 oak planks"),
            Message("assistant", "Thought: now craft.\nAction: craft 4 stick using 2 oak planks", 1),
        ),
    )


def trained_runs(ids: list[int], labels: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    current: list[int] = []
    for tok, lab in zip(ids, labels, strict=True):
        if lab != IGNORE_INDEX:
            assert lab == tok
            current.append(tok)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return runs


def test_trained_tokens_are_exactly_the_weight_one_assistant_contents(tokenizer) -> None:  # type: ignore[no-untyped-def]
    s = revision()
    tok = tokenize_sample(tokenizer, s)
    runs = trained_runs(tok.input_ids, tok.labels)
    decoded = [tokenizer.decode(r, skip_special_tokens=True) for r in runs]
    wanted = [m.content for m in s.messages if m.role == "assistant" and m.weight == 1]
    assert decoded == wanted
    # the end-of-turn token is generated too, and trained on; nothing else is
    eos = tokenizer.eos_token_id
    assert all(r[-1] == eos for r in runs)
    assert tok.trained_tokens == sum(len(r) for r in runs)
    # the weight-0 assistant turn and all context are masked
    full = tokenizer.decode(tok.input_ids)
    assert "get 1 dirt" in full
    assert "dirt" not in " ".join(decoded)


def test_token_ids_match_the_chat_template(tokenizer) -> None:  # type: ignore[no-untyped-def]
    s = revision()
    tok = tokenize_sample(tokenizer, s)
    ref = tokenizer.apply_chat_template(
        [{"role": m.role, "content": m.content} for m in s.messages],
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
    )
    assert tok.input_ids == list(ref["input_ids"])
    # our labels are the library's assistant mask restricted to weight-1 messages
    trained = {i for i, x in enumerate(tok.labels) if x != IGNORE_INDEX}
    assistant = {i for i, x in enumerate(ref["assistant_masks"]) if x}
    assert trained < assistant


def test_truncation(tokenizer) -> None:  # type: ignore[no-untyped-def]
    tok = tokenize_sample(tokenizer, revision(), max_length=10)
    assert len(tok) == 10 and tok.trained_tokens == 0


def test_bad_templates_fail_loudly(tokenizer) -> None:  # type: ignore[no-untyped-def]
    # (stock templates without generation markers: tests/ml/test_chat_template_spans.py)
    original = tokenizer.chat_template
    try:
        # one generation block around the whole conversation: spans do not match messages
        tokenizer.chat_template = (
            "{% generation %}{% for m in messages %}{{ m['content'] }}{% endfor %}{% endgeneration %}"
        )
        with pytest.raises(TemplateError, match="marked 1 assistant span"):
            tokenize_sample(tokenizer, revision())
        tokenizer.chat_template = None
        with pytest.raises(TemplateError, match="no chat template"):
            tokenize_sample(tokenizer, revision())
    finally:
        tokenizer.chat_template = original


def test_packing_keeps_label_boundaries(tokenizer) -> None:  # type: ignore[no-untyped-def]
    toks = [tokenize_sample(tokenizer, revision()) for _ in range(5)]
    n = len(toks[0])
    block = 2 * n + 3
    blocks = pack(toks, block, tokenizer.pad_token_id)
    assert len(blocks) == 3  # 2 + 2 + 1 samples
    assert [len(b) for b in blocks] == [block] * 3
    assert [len(b.sample_ids) for b in blocks] == [2, 2, 1]
    first = blocks[0]
    assert first.position_ids == list(range(n)) + list(range(n)) + [0, 1, 2]
    assert first.input_ids[:n] == toks[0].input_ids and first.input_ids[n : 2 * n] == toks[1].input_ids
    # labels inside each sample unchanged; boundaries and padding never targets
    assert first.labels[1:n] == toks[0].labels[1:]
    assert first.labels[n] == IGNORE_INDEX and first.labels[-3:] == [IGNORE_INDEX] * 3
    assert sum(b.trained_tokens for b in blocks) == sum(t.trained_tokens for t in toks)


def test_packed_block_attends_within_each_sample_only(tmp_path: Path, tokenizer) -> None:  # type: ignore[no-untyped-def]
    from transformers import AutoModelForCausalLM

    folder = build_tiny_model(tmp_path / "m", TEXTS, hidden=32, layers=1, heads=2, vocab_size=400)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    a = tokenize_sample(tokenizer, revision())
    other = TrainingSample(
        "o", "general", (Message("user", "hi"), Message("assistant", "Crafted 4 stick", 1))
    )
    b = tokenize_sample(tokenizer, other)
    (block,) = pack([b, a], len(a) + len(b), tokenizer.pad_token_id)
    batch = collate([block], tokenizer.pad_token_id)
    assert "attention_mask" not in batch
    with torch.inference_mode():
        packed_logits = model(
            input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False
        ).logits
        alone = model(input_ids=torch.tensor([a.input_ids])).logits
    assert torch.allclose(packed_logits[0, len(b) :], alone[0], atol=1e-4)


def test_collate_pads_right(tokenizer) -> None:  # type: ignore[no-untyped-def]
    a = tokenize_sample(tokenizer, revision())
    b = tokenize_sample(tokenizer, revision(), max_length=7)
    batch = collate([a, b], tokenizer.pad_token_id)
    assert batch["input_ids"].shape == (2, len(a))
    assert batch["attention_mask"][1].tolist() == [1] * 7 + [0] * (len(a) - 7)
    assert batch["labels"][1, 7:].eq(IGNORE_INDEX).all()
    assert batch["input_ids"][1, 7:].eq(tokenizer.pad_token_id).all()
