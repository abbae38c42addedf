"""Owns the token prefix-trie of constrained decoding: the valid actions of one prompt as token-id
paths, and where in a ReAct answer the constrained part starts. Pure: stdlib only, no torch, no I/O
(the tokenizer is passed in as an ``encode`` function).

An answer is ``Thought: <free text>\\nAction: <one of the valid actions>``. The Thought is decoded
freely; the constraint starts right after the first ``Action:`` marker at a line start (the same
marker ``core.llm.prompts.parse_action`` reads), and from there every token must follow a path of
the trie of ``prefix + " " + action`` and ``prefix + action`` (with or without the space) for the
prompt's actions, where ``prefix`` is the part of the marker not yet emitted (empty when the marker
ended on a token boundary; see core/llm/hf_decoding.py). An action's end node also allows the
end-of-turn tokens; a node with no children ends the answer there.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

ACTION_MARKER = re.compile(r"(?im)^[ \t>*#`\"]*action[ \t]*[:：]")
"""The first ``Action:`` marker at a line start (what ``parse_action`` reads the action after)."""

FORCED_PREFIXES = ("\nAction:", "Action:")
"""What is forced before the action when the Thought runs out of tokens: after a newline (or at the
start of the answer) ``Action:``, else ``\\nAction:``."""

Encode = Callable[[list[str]], list[list[int]]]


def marker_span(text: str) -> tuple[int, int] | None:
    """(start, end) of the first ``Action:`` marker of ``text``, or None."""
    match = ACTION_MARKER.search(text)
    return None if match is None else (match.start(), match.end())


@dataclass
class TokenTrie:
    """Token-id paths; node 0 is the root. ``ends[node]``: a whole path stops at ``node``."""

    children: list[dict[int, int]] = field(default_factory=lambda: [{}])
    ends: list[bool] = field(default_factory=lambda: [False])
    depth: int = 0  # tokens of the longest path

    @classmethod
    def build(cls, paths: Sequence[Sequence[int]]) -> TokenTrie:
        trie = cls()
        for path in paths:
            if not path:
                continue
            node = 0
            for token in path:
                nxt = trie.children[node].get(token)
                if nxt is None:
                    nxt = len(trie.children)
                    trie.children[node][token] = nxt
                    trie.children.append({})
                    trie.ends.append(False)
                node = nxt
            trie.ends[node] = True
            trie.depth = max(trie.depth, len(path))
        return trie

    def allowed(self, node: int) -> list[int]:
        """The tokens that continue a path from ``node`` (end-of-turn not included)."""
        return list(self.children[node])

    def step(self, node: int, token: int) -> int | None:
        return self.children[node].get(token)

    def paths(self, node: int = 0) -> list[list[int]]:
        """Every whole path below ``node`` (for tests and checks)."""
        out: list[list[int]] = [[]] if self.ends[node] else []
        for token, child in self.children[node].items():
            out.extend([token, *rest] for rest in self.paths(child))
        return out


class TrieWalk:
    """One row's place in a trie (the walk interface the decoding loop uses, shared with
    core.llm.hf_tool_guide's ``GrammarWalk``)."""

    def __init__(self, trie: TokenTrie) -> None:
        self.trie = trie
        self.node = 0

    def allowed(self) -> list[int]:
        return self.trie.allowed(self.node)

    def accepting(self) -> bool:
        return self.trie.ends[self.node]

    def advance(self, token: int) -> bool:
        """Take ``token``; False when it does not continue a path (a terminator at an end)."""
        node = self.trie.step(self.node, token)
        if node is None:
            return False
        self.node = node
        return True

    def closed(self) -> bool:
        return not self.trie.children[self.node]

    def budgeted(self, left: int) -> list[int] | None:
        return None  # every path is bounded: the forced depth keeps room for the longest


class ActionConstraint:
    """The valid actions of one prompt and their tries, one per not-yet-emitted marker prefix."""

    open_ended = False  # a finite list: the longest path bounds a forced action line

    def __init__(self, actions: Sequence[str], encode: Encode) -> None:
        cleaned = list(dict.fromkeys(" ".join(a.split()) for a in actions))
        self.actions = [a for a in cleaned if a]
        if not self.actions:
            raise ValueError("a constraint needs at least one non-empty action")
        self._encode = encode
        self._tries: dict[str, TokenTrie] = {}

    def trie(self, prefix: str = "") -> TokenTrie:
        """The trie of ``prefix + " " + action`` and ``prefix + action`` over the actions."""
        trie = self._tries.get(prefix)
        if trie is None:
            texts = [f"{prefix} {a}" for a in self.actions] + [f"{prefix}{a}" for a in self.actions]
            trie = self._tries[prefix] = TokenTrie.build(self._encode(texts))
        return trie

    def walk(self, prefix: str = "") -> TrieWalk:
        """A walk from the root of ``trie(prefix)``."""
        return TrieWalk(self.trie(prefix))

    def forced_prefix(self, text: str) -> str:
        """The marker forced after ``text`` when the Thought must stop (FORCED_PREFIXES)."""
        return FORCED_PREFIXES[1] if not text or text.endswith("\n") else FORCED_PREFIXES[0]

    def forced_depth(self) -> int:
        """Tokens a forced action line can take (the longest path over both forced prefixes)."""
        return max(self.trie(prefix).depth for prefix in FORCED_PREFIXES)
