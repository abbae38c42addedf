"""ReAct prompt layout: message building, action parsing, and truncation that keeps pairs aligned."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.domain.trajectory import Message, Step
from core.llm.prompts import (
    OMITTED_NOTE,
    build_messages,
    build_prompt,
    format_assistant,
    normalize_action,
    parse_action,
    truncate_messages,
)


def test_format_then_parse_round_trips() -> None:
    text = format_assistant("I need logs first.", "get 1 oak logs")
    assert text == "Thought: I need logs first.\nAction: get 1 oak logs"
    parsed = parse_action(text)
    assert parsed is not None
    assert (parsed.thought, parsed.action, parsed.normalized) == (
        "I need logs first.",
        "get 1 oak logs",
        "get 1 oak logs",
    )


@pytest.mark.parametrize(
    ("text", "action", "normalized"),
    [
        (
            "Thought: hm\nAction: Craft 4 Oak Planks using 1 oak logs.",
            "Craft 4 Oak Planks using 1 oak logs",
            "craft 4 oak planks using 1 oak logs",
        ),
        ("**Action:** `get 2 stick`", "get 2 stick", "get 2 stick"),
        ("thought: x\naction:   inventory  \nObservation: made up", "inventory", "inventory"),
        ("Thought: a\nAction: [get 1 iron ingot]", "get 1 iron ingot", "get 1 iron ingot"),
        ('Thought: a\nAction: "get  3   sand"', "get  3   sand", "get 3 sand"),
    ],
)
def test_parse_action_variants(text: str, action: str, normalized: str) -> None:
    parsed = parse_action(text)
    assert parsed is not None
    assert parsed.action == action
    assert parsed.normalized == normalized


@pytest.mark.parametrize("text", ["", "Thought: only thinking", "get 1 oak logs", "Action:   ", "Action: ``"])
def test_parse_action_rejects_answers_without_an_action(text: str) -> None:
    assert parse_action(text) is None


def test_first_action_line_wins_and_thought_is_text_before_it() -> None:
    parsed = parse_action("I think.\nAction: get 1 a\nAction: get 2 b")
    assert parsed is not None
    assert parsed.action == "get 1 a"
    assert parsed.thought == "I think."


def test_normalize_action_equates_cosmetic_variants() -> None:
    assert normalize_action(" Get 1  Oak Logs. ") == normalize_action("get 1 oak logs")
    assert normalize_action("get 1 oak logs") != normalize_action("get 2 oak logs")


def test_build_messages_layout() -> None:
    steps = [Step("t1", "get 1 a", "Got 1 a"), Step("t2", "inventory", "Inventory: [a] (1)")]
    messages = build_messages("sys", "task", steps)
    assert [m.role for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert messages[2].content == "Thought: t1\nAction: get 1 a"
    assert messages[5].content == "Inventory: [a] (1)"


def test_truncate_rejects_a_misaligned_conversation() -> None:
    bad = [Message("system", "s"), Message("user", "t"), Message("user", "o")]
    with pytest.raises(ValueError, match="must alternate"):
        truncate_messages(bad, 100)
    with pytest.raises(ValueError, match="starts with a system"):
        truncate_messages([Message("user", "t")], 100)


def test_truncate_keeps_everything_within_budget_and_notes_drops() -> None:
    steps = [Step(f"t{i}", f"get {i} x", f"Got {i} x" + "." * 50) for i in range(6)]
    full = build_prompt("sys", "task", steps)
    assert build_prompt("sys", "task", steps, budget=10_000) == full
    cut = build_prompt("sys", "task", steps, budget=250)
    dropped = (len(full) - len(cut)) // 2
    assert dropped > 0
    assert cut[1].content.endswith(OMITTED_NOTE.format(n=dropped))
    assert cut[2:] == full[2 + 2 * dropped :]


text = st.text(alphabet="abcdefgh xyz", min_size=0, max_size=40)


@settings(max_examples=200, deadline=None)
@given(
    pairs=st.lists(st.tuples(text, text), min_size=0, max_size=12),
    trailing=st.one_of(st.none(), text),
    budget=st.integers(min_value=0, max_value=600),
    note=st.booleans(),
)
def test_truncation_drops_whole_oldest_pairs_and_never_misaligns(
    pairs: list[tuple[str, str]], trailing: str | None, budget: int, note: bool
) -> None:
    # Tag each message with its pair index so alignment is checkable after truncation.
    messages = [Message("system", "instruction"), Message("user", "task")]
    for index, (action, observation) in enumerate(pairs):
        messages.append(Message("assistant", f"A{index}:{action}"))
        messages.append(Message("user", f"O{index}:{observation}"))
    if trailing is not None:
        messages.append(Message("assistant", f"T:{trailing}"))

    out = truncate_messages(messages, budget, note_omitted=note)

    assert out[0] == messages[0]
    assert out[1].content.startswith("task")
    body = out[2:]
    if trailing is not None:
        assert body[-1] == messages[-1]
        body = body[:-1]
    assert len(body) % 2 == 0
    kept_indices = []
    for position in range(0, len(body), 2):
        assistant, observation = body[position], body[position + 1]
        assert assistant.role == "assistant" and observation.role == "user"
        index = int(assistant.content[1 : assistant.content.index(":")])
        assert observation.content.startswith(f"O{index}:")  # the observation that action produced
        kept_indices.append(index)
    dropped = len(pairs) - len(kept_indices)
    # a suffix of the original pairs: only the oldest are dropped
    assert kept_indices == list(range(dropped, len(pairs)))
    size = sum(len(m.content) for m in out)
    if dropped < len(pairs):
        assert size <= budget  # it fits whenever any pair is kept
    if dropped > 0:
        # dropping one pair fewer would not have fitted (fewest drops)
        fewer = messages[:2] + messages[2 + 2 * (dropped - 1) :]
        note_text = f"\n{OMITTED_NOTE.format(n=dropped - 1)}" if note and dropped > 1 else ""
        assert sum(len(m.content) for m in fewer) + len(note_text) > budget
        assert out[1].content.endswith(OMITTED_NOTE.format(n=dropped)) == note
