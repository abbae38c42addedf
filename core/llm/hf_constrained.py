"""Owns the constrained rows of the hf backend's decoding (``core.llm.hf_decoding``'s docstring has
the rules): a row's place (free Thought or a node of the action trie), the logits mask of each step,
the forced marker when the tokens left can only just hold an action line, and the re-pick of a
token that carries text past the ``Action:`` marker. ``HFDecoding`` inherits it; nothing else should.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.llm.action_trie import ActionConstraint, TokenTrie, marker_span


@dataclass
class Guide:
    """One constrained row's place: free Thought (``trie`` None) or a node of a trie."""

    constraint: ActionConstraint
    forced_depth: int
    trie: TokenTrie | None = None
    node: int = 0

    def enter(self, trie: TokenTrie) -> None:
        self.trie, self.node = trie, 0


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
        if guide.trie is None and max_tokens - len(generated) <= guide.forced_depth:
            text = self.tokenizer.decode(generated, skip_special_tokens=True)
            guide.enter(guide.constraint.trie(guide.constraint.forced_prefix(text)))
        if guide.trie is None:  # free Thought: it may not end the turn before its Action line
            logits[row, list(self.eos_ids)] = float("-inf")
            return
        allowed = guide.trie.allowed(guide.node)
        if guide.trie.ends[guide.node]:
            allowed = allowed + sorted(self._terminators() - set(allowed))
        self._restrict(logits, row, allowed)

    def _restrict(self, logits: Any, row: int, allowed: list[int]) -> None:
        index = self._torch.tensor(allowed, dtype=self._torch.long, device=logits.device)
        kept = logits[row, index].clone()
        logits[row] = float("-inf")
        logits[row, index] = kept

    def _guide_marker(
        self, guide: Guide, token: int, generated: list[int], logits: Any, temperature: float, generator: Any
    ) -> tuple[int, bool]:
        """A free row sampled ``token``: enter the trie when the text now holds the marker. A token
        carrying text past the marker is taken back and re-picked from ``logits`` under the trie of
        the marker's remainder. Returns the token to emit and whether it is the trie's first token
        (False: free text, the marker's last token included)."""
        before = self.tokenizer.decode(generated, skip_special_tokens=True)
        text = self.tokenizer.decode([*generated, token], skip_special_tokens=True)
        span = marker_span(text)
        if span is None:
            return token, False
        if span[1] == len(text):  # the marker ends with this token: the trie starts at the next
            guide.enter(guide.constraint.trie(""))
            return token, False
        if text.startswith(before) and span[1] > len(before):
            remainder = text[len(before) : span[1]]
        else:  # the marker was complete before this token (cannot happen: checked every step)
            remainder = guide.constraint.forced_prefix(before)
        guide.enter(guide.constraint.trie(remainder))
        masked = logits[None, :].clone()
        self._restrict(masked, 0, guide.trie.allowed(0) if guide.trie is not None else [])
        if temperature == 0:
            return int(masked[0].argmax()), True
        probs = self._torch.softmax(masked[0] / temperature, dim=-1)
        return int(self._torch.multinomial(probs, 1, generator=generator)), True
