"""The token prefix-trie of constrained decoding (core.llm.action_trie), with a character-level
encoder: paths, ends, the marker, the forced prefix and the with/without-space variants."""

from __future__ import annotations

import pytest

from core.llm.action_trie import ActionConstraint, TokenTrie, marker_span


def chars(texts: list[str]) -> list[list[int]]:
    return [[ord(c) for c in text] for text in texts]


def test_trie_paths_ends_and_depth() -> None:
    trie = TokenTrie.build([[1, 2], [1, 2, 3], [4], []])
    assert sorted(trie.paths()) == [[1, 2], [1, 2, 3], [4]]
    assert trie.allowed(0) == [1, 4] and trie.depth == 3
    node = trie.step(trie.step(0, 1) or 0, 2)
    assert node is not None and trie.ends[node] and trie.allowed(node) == [3]
    assert trie.step(0, 9) is None


def test_constraint_tries_cover_both_spacings_and_the_marker_remainder() -> None:
    constraint = ActionConstraint(["get 1 oak logs", "  inventory ", "get 1 oak logs"], chars)
    assert constraint.actions == ["get 1 oak logs", "inventory"]
    texts = sorted("".join(map(chr, p)) for p in constraint.trie("").paths())
    assert texts == [" get 1 oak logs", " inventory", "get 1 oak logs", "inventory"]
    remainder = sorted("".join(map(chr, p)) for p in constraint.trie("ion:").paths())
    assert remainder == ["ion: get 1 oak logs", "ion: inventory", "ion:get 1 oak logs", "ion:inventory"]
    assert constraint.forced_prefix("") == "Action:"
    assert constraint.forced_prefix("Thought: x\n") == "Action:"
    assert constraint.forced_prefix("Thought: x") == "\nAction:"
    assert constraint.forced_depth() == len("\nAction: get 1 oak logs")
    with pytest.raises(ValueError, match="at least one"):
        ActionConstraint([" ", ""], chars)


def test_marker_is_the_first_action_line_parse_action_reads() -> None:
    assert marker_span("Thought: no Action: here") is None  # not at a line start
    text = "Thought: go\n**Action:** get"
    span = marker_span(text)
    assert span is not None and text[: span[1]] == "Thought: go\n**Action:"
    assert marker_span("action：x") == (0, 7)
