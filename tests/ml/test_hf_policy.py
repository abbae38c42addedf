"""The hf Policy backend on a real tiny Llama built offline: sampling, determinism, label scoring."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from core.domain.trajectory import Message
from core.llm.hf import HFPolicy
from core.llm.openai_compat import OpenAIPolicy
from core.llm.ports import Policy, PolicyError
from core.llm.registry import open_policy, split_openai_ref
from core.llm.tiny import build_tiny_model, default_corpus

LABELS = ["Good", "Bad", "Uncertain", "G"]  # "G": a one-token label


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny") / "model"
    return build_tiny_model(folder, default_corpus(), hidden=64, layers=2, heads=2, vocab_size=512, seed=0)


@pytest.fixture(scope="module")
def policy(tiny_folder: Path) -> HFPolicy:
    torch.set_num_threads(1)
    return HFPolicy.from_folder(tiny_folder, device="cpu")


def conversations() -> list[list[Message]]:
    return [
        [Message("system", "You craft items."), Message("user", "Goal: craft oak planks.")],
        [
            Message("system", "You craft items."),
            Message("user", "Crafting commands:\ncraft 1 stick using 2 planks\n\nGoal: craft stick."),
            Message("assistant", "Thought: I need planks.\nAction: get 2 planks"),
            Message("user", "Got 2 oak planks"),
        ],
    ]


def test_tiny_folder_loads_like_a_real_model_with_an_assistant_mask(tiny_folder: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_folder)
    model = AutoModelForCausalLM.from_pretrained(tiny_folder)
    assert model.config.model_type == "llama"
    assert model.config.vocab_size == len(tokenizer)
    messages = [{"role": m.role, "content": m.content} for m in conversations()[1]]
    out = tokenizer.apply_chat_template(
        messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    trained = [t for t, keep in zip(out["input_ids"], out["assistant_masks"], strict=True) if keep]
    assert tokenizer.decode(trained) == "Thought: I need planks.\nAction: get 2 planks" + tokenizer.eos_token


def test_policy_satisfies_the_port(policy: HFPolicy) -> None:
    assert isinstance(policy, Policy)
    assert policy.model_version.endswith("@" + policy.model_version.rsplit("@", 1)[1])
    assert len(policy.model_version.rsplit("@", 1)[1]) == 16


async def test_same_seed_gives_same_samples_and_n_samples_are_distinct(policy: HFPolicy) -> None:
    first = await policy.sample(conversations(), n=4, temperature=1.0, max_tokens=16, seed=7)
    again = await policy.sample(conversations(), n=4, temperature=1.0, max_tokens=16, seed=7)
    other = await policy.sample(conversations(), n=4, temperature=1.0, max_tokens=16, seed=8)
    assert len(first) == 2 and all(len(row) == 4 for row in first)
    assert [[c.text for c in row] for row in first] == [[c.text for c in row] for row in again]
    assert [[c.text for c in row] for row in first] != [[c.text for c in row] for row in other]
    for row in first:
        assert len({c.text for c in row}) == 4  # n samples come back distinct


async def test_a_conversation_samples_the_same_alone_or_batched(policy: HFPolicy) -> None:
    batched = await policy.sample(conversations(), n=3, max_tokens=12, seed=11)
    alone = await policy.sample(conversations()[:1], n=3, max_tokens=12, seed=11)
    assert [c.text for c in batched[0]] == [c.text for c in alone[0]]


async def test_greedy_decoding_matches_transformers_generate(policy: HFPolicy) -> None:
    conversation = conversations()[1]
    ours = await policy.sample([conversation], n=2, temperature=0.0, max_tokens=10)
    ids = torch.tensor([policy.encode(policy.render(conversation))])
    with torch.inference_mode():
        reference = policy.model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=10,
            eos_token_id=policy.tokenizer.eos_token_id,
            pad_token_id=policy.pad_id,
        )
    new_tokens = [t for t in reference[0, ids.shape[1] :].tolist() if t not in policy.eos_ids]
    expected = policy.tokenizer.decode(new_tokens, skip_special_tokens=True)
    assert ours[0][0].text == expected == ours[0][1].text


async def test_token_logprobs_equal_a_plain_forward_pass(policy: HFPolicy) -> None:
    conversation = conversations()[0]
    samples = await policy.generate([policy.render(conversation)], n=2, max_tokens=8, seed=3, logprobs=True)
    prompt = policy.encode(policy.render(conversation))
    for sample in samples[0]:
        assert sample.completion.logprobs is not None
        assert len(sample.completion.logprobs) == sample.completion.tokens == len(sample.token_ids)
        ids = torch.tensor([prompt + sample.token_ids])
        with torch.inference_mode():
            logprobs = torch.log_softmax(policy.model(input_ids=ids).logits[0].float(), dim=-1)
        for offset, (token, reported) in enumerate(
            zip(sample.token_ids, sample.completion.logprobs, strict=True)
        ):
            assert reported == pytest.approx(float(logprobs[len(prompt) - 1 + offset, token]), abs=1e-4)


async def test_label_scores_equal_the_models_own_next_token_logprobs(policy: HFPolicy) -> None:
    scores = await policy.score_labels(conversations(), LABELS)
    assert len(scores) == 2
    for conversation, row in zip(conversations(), scores, strict=True):
        assert set(row) == set(LABELS)
        prompt = policy.encode(policy.render(conversation))
        for label in LABELS:
            label_ids = policy.encode(label)
            ids = torch.tensor([prompt + label_ids])
            with torch.inference_mode():
                logprobs = torch.log_softmax(policy.model(input_ids=ids).logits[0].float(), dim=-1)
            expected = sum(float(logprobs[len(prompt) - 1 + i, token]) for i, token in enumerate(label_ids))
            assert row[label] == pytest.approx(expected, abs=1e-4)


async def test_stop_strings_end_the_text_before_the_stop(policy: HFPolicy) -> None:
    free = await policy.sample(conversations()[:1], n=4, max_tokens=24, seed=5)
    # pick a character that the free-running samples do produce, then stop on it
    stop_char = next(ch for c in free[0] for ch in c.text[2:] if ch.strip())
    stopped = await policy.sample(conversations()[:1], n=4, max_tokens=24, seed=5, stop=[stop_char])
    hit = 0
    for before, after in zip(free[0], stopped[0], strict=True):
        assert stop_char not in after.text
        if stop_char in before.text:
            hit += 1
            assert after.finish_reason == "stop"
            assert before.text.startswith(after.text)
    assert hit >= 1


async def test_bad_arguments_and_context_overflow_are_named(policy: HFPolicy) -> None:
    with pytest.raises(ValueError, match="n must be"):
        await policy.sample(conversations(), n=0)
    with pytest.raises(ValueError, match="at least one label"):
        await policy.score_labels(conversations(), [])
    with pytest.raises(ValueError, match="encodes to no tokens"):
        await policy.score_labels(conversations(), [""])
    huge = [[Message("system", "s"), Message("user", "craft " * (policy.max_positions + 100))]]
    with pytest.raises(PolicyError, match="exceeds the model's context"):
        await policy.sample(huge, max_tokens=8)


def test_malformed_folders_raise_policy_error_naming_what_is_missing(
    tiny_folder: Path, tmp_path: Path
) -> None:
    with pytest.raises(PolicyError, match="does not exist"):
        HFPolicy.from_folder(tmp_path / "nowhere")
    broken = tmp_path / "broken"
    shutil.copytree(tiny_folder, broken)
    (broken / "model.safetensors").unlink()
    with pytest.raises(PolicyError, match=r"missing: weights"):
        HFPolicy.from_folder(broken)
    (broken / "tokenizer.json").unlink()
    (broken / "config.json").unlink()
    with pytest.raises(PolicyError, match=r"missing: config.json, weights .*, tokenizer"):
        HFPolicy.from_folder(broken)
    with pytest.raises(PolicyError, match="unknown dtype"):
        HFPolicy.from_folder(tiny_folder, dtype="float8")


def test_registry_opens_folders_and_urls(tiny_folder: Path) -> None:
    assert isinstance(open_policy(str(tiny_folder), device="cpu"), HFPolicy)
    remote = open_policy("http://127.0.0.1:9/v1#my-model")
    assert isinstance(remote, OpenAIPolicy)
    assert (remote.base_url, remote.model) == ("http://127.0.0.1:9/v1", "my-model")
    assert split_openai_ref("https://h.example/v1?model=m&x=1") == ("https://h.example/v1?x=1", "m")
    assert split_openai_ref("http://h:8000/v1/") == ("http://h:8000/v1", None)
    with pytest.raises(PolicyError, match="unsupported model reference"):
        open_policy("s3://bucket/model")
    with pytest.raises(PolicyError, match="empty model reference"):
        open_policy("  ")
