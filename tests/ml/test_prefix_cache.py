"""The hf backend's cross-call prefix cache (core.llm.kv_prefix) on a real tiny Llama: a prompt samples
and scores bit for bit the same whether its prefix was cached, evicted or never seen; the cache
really serves the shared prefix; its budget holds; a bad budget is named."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from core.domain.trajectory import Message
from core.llm.hf import PREFIX_CACHE_ENV, HFPolicy
from core.llm.kv_prefix import PrefixCache
from core.llm.ports import PolicyError
from core.llm.tiny import build_tiny_model, default_corpus

BLOCK = 16
LABELS = ["Good", "Bad", "Uncertain"]


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny") / "model"
    return build_tiny_model(folder, default_corpus(), hidden=64, layers=2, heads=2, vocab_size=512, seed=0)


def load(folder: Path, mb: int = 64, block: int = BLOCK) -> HFPolicy:
    torch.set_num_threads(1)
    return HFPolicy.from_folder(folder, device="cpu", prefix_cache_mb=mb, prefix_block_tokens=block)


def episode(turns: int) -> list[Message]:
    """An episode's conversation after ``turns`` turns (each turn's prompt extends the previous one)."""
    messages = [
        Message("system", "You craft items. Answer with a thought and one action."),
        Message("user", "Crafting commands:\ncraft 4 oak planks using 1 oak log\n\nGoal: craft oak planks."),
    ]
    for turn in range(turns):
        messages.append(Message("assistant", f"Thought: step {turn}.\nAction: get 1 oak log"))
        messages.append(Message("user", f"Got 1 oak log (turn {turn})"))
    return messages


async def sample(policy: HFPolicy, conversation: list[Message]) -> list[tuple[str, tuple[float, ...]]]:
    rows = await policy.sample([conversation], n=3, temperature=1.0, max_tokens=12, seed=7, logprobs=True)
    return [(c.text, c.logprobs or ()) for c in rows[0]]


async def test_a_prompt_samples_bit_identically_cold_or_after_its_prefix(tiny_folder: Path) -> None:
    cold, warm = load(tiny_folder), load(tiny_folder)
    assert cold.prefix_cache is not None and warm.prefix_cache is not None
    for turns in range(3):  # the warm policy sees the episode grow turn by turn
        await sample(warm, episode(turns))
    before = warm.prefix_cache.stats.computed_tokens
    ours = await sample(warm, episode(3))
    computed = warm.prefix_cache.stats.computed_tokens - before
    reference = await sample(cold, episode(3))
    assert ours == reference  # texts AND every token's log-probability, exactly
    prompt = len(warm.encode(warm.render(episode(3))))
    assert prompt > 4 * BLOCK
    # only the new turn (and the tail after the last shared block) was prefilled
    assert computed < prompt - 2 * BLOCK
    assert warm.prefix_cache.stats.hit_tokens > 0


async def test_the_cached_prefill_matches_a_plain_one_up_to_float_rounding(tiny_folder: Path) -> None:
    cached, plain = load(tiny_folder), load(tiny_folder, mb=0)
    assert plain.prefix_cache is None
    conversation = episode(4)
    ours = await cached.sample([conversation], n=1, temperature=0.0, max_tokens=12, logprobs=True)
    reference = await plain.sample([conversation], n=1, temperature=0.0, max_tokens=12, logprobs=True)
    assert ours[0][0].text == reference[0][0].text
    assert ours[0][0].logprobs == pytest.approx(reference[0][0].logprobs, abs=1e-4)


async def test_label_scores_are_exact_cold_or_warm_and_equal_a_plain_pass(tiny_folder: Path) -> None:
    cold, warm, plain = load(tiny_folder), load(tiny_folder), load(tiny_folder, mb=0)
    conversations = [episode(t) for t in range(4)]
    warm_rows = await warm.score_labels(conversations, LABELS)  # each judged step extends the last
    cold_rows = [(await cold.score_labels([c], LABELS))[0] for c in reversed(conversations)][::-1]
    assert warm_rows == cold_rows
    plain_rows = await plain.score_labels(conversations, LABELS)
    for ours, reference in zip(warm_rows, plain_rows, strict=True):
        for label in LABELS:
            assert ours[label] == pytest.approx(reference[label], abs=1e-4)


async def test_prompts_of_exact_block_multiples_and_shorter_than_a_block(tiny_folder: Path) -> None:
    cold, warm = load(tiny_folder), load(tiny_folder)
    base = warm.encode(warm.render(episode(2)))
    for length in (BLOCK * 3, BLOCK * 3 + 1, BLOCK - 3, 1):
        prompt = base[:length]
        await warm.generate([base[: length + 5]], n=1, max_tokens=4, seed=1)  # a longer neighbour first
        ours = await warm.generate([prompt], n=2, max_tokens=6, seed=2, logprobs=True)
        reference = await cold.generate([prompt], n=2, max_tokens=6, seed=2, logprobs=True)
        assert [s.completion for s in ours[0]] == [s.completion for s in reference[0]], length


async def test_the_budget_holds_and_eviction_changes_nothing(tiny_folder: Path) -> None:
    cold = load(tiny_folder)
    small = load(tiny_folder, mb=1, block=BLOCK)
    assert small.prefix_cache is not None
    per_block = None
    for turns in range(6):
        await sample(small, episode(turns))
        store = small.prefix_cache
        assert store.bytes <= store.max_bytes
        if len(store):
            per_block = store.bytes / len(store)
    assert per_block is not None
    # shrink the budget to three blocks: older blocks are evicted, results do not move
    small.prefix_cache.max_bytes = int(per_block * 3)
    await sample(small, episode(6))
    assert len(small.prefix_cache) <= 3 and small.prefix_cache.stats.evicted_blocks > 0
    assert await sample(small, episode(7)) == await sample(cold, episode(7))


def test_bad_budgets_and_blocks_are_named(tiny_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PREFIX_CACHE_ENV, "lots")
    with pytest.raises(PolicyError, match=PREFIX_CACHE_ENV):
        HFPolicy.from_folder(tiny_folder, device="cpu")
    monkeypatch.setenv(PREFIX_CACHE_ENV, "0")
    assert HFPolicy.from_folder(tiny_folder, device="cpu").prefix_cache is None
    with pytest.raises(ValueError, match="prefix_cache_mb"):
        load(tiny_folder, mb=-1)
    with pytest.raises(ValueError, match="block_tokens"):
        PrefixCache(block_tokens=0)
    with pytest.raises(ValueError, match="holds 16 tokens"):
        PrefixCache(block_tokens=16).store(0, [1, 2, 3], None, 0)


async def test_token_ids_outside_the_vocabulary_are_named(tiny_folder: Path) -> None:
    policy = load(tiny_folder)
    with pytest.raises(PolicyError, match="token id 100000, outside the vocabulary"):
        await policy.generate([[1, 2, 100000]], max_tokens=2)
    with pytest.raises(PolicyError, match="token id -1"):
        await policy.generate([[-1]], max_tokens=2)
    assert policy.prefix_cache is not None and len(policy.prefix_cache) == 0  # nothing half-done


async def test_shared_passes_decode_cached_prefills_together(tiny_folder: Path) -> None:
    """batch_invariant off: each prompt is prefilled alone through the cache, then all decode in
    one left-padded batch; greedy texts and log-probabilities agree with one-prompt passes, and the
    same batch gives the same samples again (deterministic for the same neighbours)."""
    alone = load(tiny_folder)
    shared = HFPolicy.from_folder(
        tiny_folder, device="cpu", batch_invariant=False, prefix_cache_mb=64, prefix_block_tokens=BLOCK
    )
    batch = [episode(1), episode(4), episode(2)]  # different lengths: left padding matters
    greedy = await shared.sample(batch, n=2, temperature=0.0, max_tokens=10, logprobs=True)
    reference = await alone.sample(batch, n=2, temperature=0.0, max_tokens=10, logprobs=True)
    for ours, theirs in zip(greedy, reference, strict=True):
        for a, b in zip(ours, theirs, strict=True):
            assert a.text == b.text
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert shared.prefix_cache is not None and shared.prefix_cache.stats.lookups == len(batch)
    first = await shared.sample(batch, n=2, temperature=1.0, max_tokens=10, seed=11)
    again = await shared.sample(batch, n=2, temperature=1.0, max_tokens=10, seed=11)
    assert first == again
    scores = await shared.score_labels(batch, LABELS)
    expected = await alone.score_labels(batch, LABELS)
    for ours_row, theirs_row in zip(scores, expected, strict=True):
        assert ours_row == pytest.approx(theirs_row, abs=1e-4)
