"""Owns the constrained rows of the hf backend's decoding (``core.llm.hf_decoding``'s docstring has
the rules): a row's place (free Thought, or a walk through the Action line: a node of the action
trie, or a state of a tool-call grammar, core.llm.hf_tool_guide), the logits mask of each step, the
forced marker when the tokens left can only just hold an action line, and the re-pick of a token
that carries text past the ``Action:`` marker. ``HFDecoding`` inherits it; nothing else should.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from core.llm.action_trie import marker_span


class Walk(Protocol):
    """A row's place in its Action line: ``core.llm.action_trie.TrieWalk`` or
    ``core.llm.hf_tool_guide.GrammarWalk``."""

    def allowed(self) -> list[int]: ...
    def accepting(self) -> bool: ...
    def advance(self, token: int) -> bool: ...
    def closed(self) -> bool: ...
    def budgeted(self, left: int) -> list[int] | None: ...


class Constraint(Protocol):
    """What a constrained row is given: ``ActionConstraint`` or ``ToolCallConstraint``
    (``open_ended``: its actions have no longest path, so the forced-marker budget is capped)."""

    open_ended: bool

    def walk(self, prefix: str = "") -> Walk: ...
    def forced_prefix(self, text: str) -> str: ...
    def forced_depth(self) -> int: ...


@dataclass
class Guide:
    """One constrained row's place: free Thought (``walk`` None) or a walk through its Action line."""

    constraint: Constraint
    forced_depth: int
    walk: Walk | None = None

    def enter(self, walk: Walk) -> None:
        self.walk = walk


class HFConstrained:
    """The trie-guided side of a decoding step (mixin: needs the attributes HFPolicy sets)."""

    # set by HFPolicy.__init__
    _torch: Any
    tokenizer: Any
    eos_ids: set[int]

    def _terminators(self) -> set[int]:
        """Tokens that end an answer at an action's end: end-of-turn and the newline token."""
        found = getattr(self, "_terminator_ids", None)
        if found is None:
            newline = self.tokenizer("\n", add_special_tokens=False)["input_ids"]
            found = set(self.eos_ids) | ({int(newline[0])} if len(newline) == 1 else set())
            self._terminator_ids = found
        return found

    def _guide_mask(self, logits: Any, row: int, guide: Guide, generated: list[int], max_tokens: int) -> None:
        """Mask ``logits[row]`` to what the row may emit next; force the marker when the tokens
        left can only just hold an action line."""
        if guide.walk is None and max_tokens - len(generated) <= guide.forced_depth:
            text = self.tokenizer.decode(generated, skip_special_tokens=True)
            guide.enter(guide.constraint.walk(guide.constraint.forced_prefix(text)))
        if guide.walk is None:  # free Thought: it may not end the turn before its Action line
            logits[row, list(self.eos_ids)] = float("-inf")
            return
        walk = guide.walk
        left = max_tokens - len(generated)
        if guide.constraint.open_ended and left <= 1 and walk.accepting():
            self._restrict(logits, row, sorted(self._terminators()))  # the last token: end here
            return
        tight = walk.budgeted(left)  # what fits the tokens left (None: anything the walk allows)
        allowed = walk.allowed() if tight is None else tight
        if walk.accepting():
            allowed = allowed + sorted(self._terminators() - set(allowed))
        self._restrict(logits, row, allowed)

    def _restrict(self, logits: Any, row: int, allowed: list[int]) -> None:
        allowed = [t for t in allowed if t < logits.shape[-1]]  # a tokenizer larger than the embedding
        index = self._torch.tensor(allowed, dtype=self._torch.long, device=logits.device)
        kept = logits[row, index].clone()
        logits[row] = float("-inf")
        logits[row, index] = kept

    def _guide_marker(
        self, guide: Guide, token: int, generated: list[int], logits: Any, temperature: float, generator: Any
    ) -> tuple[int, bool]:
        """A free row sampled ``token``: enter the trie when the text now holds the marker. A token
        carrying text past the marker is taken back and re-picked from ``logits`` under the walk of
        the marker's remainder. Returns the token to emit and whether it is the trie's first token
        (False: free text, the marker's last token included)."""
        before = self.tokenizer.decode(generated, skip_special_tokens=True)
        text = self.tokenizer.decode([*generated, token], skip_special_tokens=True)
        span = marker_span(text)
        if span is None:
            return token, False
        if span[1] == len(text):  # the marker ends with this token: the walk starts at the next
            guide.enter(guide.constraint.walk(""))
            return token, False
        if text.startswith(before) and span[1] > len(before):
            remainder = text[len(before) : span[1]]
        else:  # the marker was complete before this token (cannot happen: checked every step)
            remainder = guide.constraint.forced_prefix(before)
        walk = guide.constraint.walk(remainder)
        guide.enter(walk)
        masked = logits[None, :].clone()
        self._restrict(masked, 0, walk.allowed())
        if temperature == 0:
            return int(masked[0].argmax()), True
        probs = self._torch.softmax(masked[0] / temperature, dim=-1)
        return int(self._torch.multinomial(probs, 1, generator=generator)), True
