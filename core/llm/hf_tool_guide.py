"""Owns the hf backend's tool-call constraint: the grammar of core.llm.tool_grammar run token by
token by llguidance (PyPI ``llguidance``: a Rust Earley parser over the tokenizer's vocabulary, the
structured-output engine of vLLM, SGLang and llama.cpp) on the model's own tokenizer. It plugs into
the same decoding loop as the action trie (core/llm/hf_decoding.py): the Thought is free, the
``Action:`` line is walked by a ``GrammarWalk`` (the tokens the grammar allows next, whether the
action may end here, and whether anything may follow).

``ToolCallConstraint.forced_depth`` is the token budget kept for a forced ``\nAction: <call>``
line: the shortest tool's skeleton call (its required keys with empty values) plus 2 where a
message is an action too (the longest tool's when only calls are), at most half of ``max_tokens``
(``HFConstrained`` applies the cap), so a Thought runs free until its last few tokens (a forced
marker cuts the model's own Thought short: measured on tau2 mock's warm-started model, a budget
sized for the longest call forced the marker mid-Thought and the rest of the Thought became the
message). The budget then steers
the Action line: before a tool is named, no token may open a call whose skeleton takes more tokens
than are left (a message, or a shorter tool, is written instead); when the tokens left are no
more than a call needs to close (``GrammarWalk.needed``: one per string, bracket or parenthesis left
open, the tokens of ``, "key": ""`` per required key not yet written, and 3), a row inside a call is
limited to the tokens the grammar allows that start no optional key while a required one is
missing, and of those to the ones that leave the fewest of those open (``Openness``: a scan
of the action's text outside JSON strings), when any leaves fewer than now, else to those that open
nothing new; a message (or a whole call) ends at the last token. A call still open when
``max_tokens`` runs out is cut there (finish ``length``), as a free answer would be: an answer that
reaches its own ``Action:`` marker late can name a call longer than the tokens left.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

from core.llm.action_trie import FORCED_PREFIXES
from core.llm.ports import CannotConstrain
from core.llm.tool_grammar import ToolCalls, function_of, lark_grammar, parameters_of, skeleton

INSTALL = 'pip install "llguidance>=1.0"'
_FORCED_MARGIN = 2
_CALLED = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\(")
_KEY_TYPED = re.compile(r'[{,] ?"([A-Za-z0-9_]*)"?:?$')  # an object key being written, at the end


def _llguidance() -> Any:
    try:
        import llguidance
        import llguidance.hf
        import llguidance.numpy
    except ImportError as exc:
        raise CannotConstrain(
            f"constrained tool calls need llguidance ({INSTALL}; it is in the tau2 extra): {exc}; or "
            "set search.constrain_tool_calls / evaluation.constrain_tool_calls to false"
        ) from exc
    return llguidance


@dataclass(frozen=True)
class Openness:
    """What an action's text leaves open: a JSON string (and a pending escape), brackets and
    parentheses outside strings, innermost last."""

    in_string: bool = False
    escape: bool = False
    stack: str = ""

    def after(self, text: str) -> Openness:
        in_string, escape, stack = self.in_string, self.escape, self.stack
        for char in text:
            if in_string:
                if escape:
                    escape = False
                elif char == "\\":
                    escape = True
                elif char == '"':
                    in_string = False
            elif char == '"':
                in_string = True
            elif char in "([{":
                stack += char
            elif char in ")]}" and stack:
                stack = stack[:-1]
        return Openness(in_string, escape, stack)

    @property
    def count(self) -> int:
        return int(self.in_string) + len(self.stack)


class GrammarWalk:
    """One row's place in a compiled grammar (an llguidance matcher)."""

    def __init__(
        self,
        matcher: Any,
        tokenizer: LLTokenizer,
        required: dict[str, tuple[tuple[str, int], ...]],
        costs: dict[str, int],
    ) -> None:
        self._matcher = matcher
        self._vocab = tokenizer.vocab
        self._eos = tokenizer.eos
        self._texts = tokenizer.texts
        self._required = required
        self._costs = costs  # tool -> tokens of its skeleton call
        self._text = ""
        self._open = Openness()
        self._allowed: list[int] | None = None

    def allowed(self) -> list[int]:
        """The tokens that continue the action (end-of-turn not included)."""
        if self._allowed is None:
            import numpy as np

            llg = _llguidance()
            mask = llg.numpy.allocate_token_bitmask(1, self._vocab)
            llg.numpy.fill_next_token_bitmask(self._matcher, mask, 0)
            bits = np.unpackbits(mask[0].view(np.uint8), bitorder="little")[: self._vocab]
            self._allowed = [int(t) for t in np.flatnonzero(bits) if int(t) != self._eos]
        return self._allowed

    def accepting(self) -> bool:
        """Whether the text so far is a whole action (the answer may end here)."""
        return bool(self._matcher.is_accepting())

    def advance(self, token: int) -> bool:
        """Take ``token``; False when it is not part of the action (a terminator at its end)."""
        if token not in self.allowed():
            return False
        if not self._matcher.consume_token(token):
            raise CannotConstrain(f"llguidance refused token {token}: {self._matcher.get_error()}")
        self._allowed = None
        text = self._texts[token] if token < len(self._texts) else ""
        self._open = self._open.after(text)
        self._text += text
        return True

    def closed(self) -> bool:
        """Whether nothing can follow (a whole call: the answer ends here)."""
        return self.accepting() and not self.allowed()

    def _opens(self, token: int, names: set[str]) -> bool:
        text = self._texts[token] if token < len(self._texts) else ""
        if "(" not in text:
            return False
        match = _CALLED.search(self._text + text)
        return match is not None and match.group(1) in names

    def _missing(self) -> list[str]:
        match = _CALLED.search(self._text)
        required = self._required.get(match.group(1), ()) if match else ()
        return [key for key, _ in required if f'"{key}":' not in self._text]

    def _required_keys_first(self, allowed: list[int]) -> list[int]:
        """``allowed`` without the tokens that start an optional key while a required one is
        missing (the budget holds the required ones only); ``allowed`` when none is left."""
        missing = self._missing()
        if not missing:
            return allowed
        kept = []
        for token in allowed:
            typed = _KEY_TYPED.search(self._text + (self._texts[token] if token < len(self._texts) else ""))
            if typed is None or any(key.startswith(typed.group(1)) for key in missing):
                kept.append(token)
        return kept or allowed

    def needed(self) -> int:
        """Tokens this call still needs at least to close (module docstring)."""
        match = _CALLED.search(self._text)
        required = self._required.get(match.group(1), ()) if match else ()
        missing = sum(cost for key, cost in required if f'"{key}":' not in self._text)
        return self._open.count + missing + 3

    def budgeted(self, left: int) -> list[int] | None:
        """The allowed tokens that fit ``left`` tokens (module docstring), else None: before a tool
        is named, none that opens a call whose skeleton takes more; in a call that can only just
        close, those that leave the least open."""
        if _CALLED.search(self._text) is None:
            too_long = {name for name, cost in self._costs.items() if cost > left}
            if not too_long:
                return None
            kept = [t for t in self.allowed() if not self._opens(t, too_long)]
            return kept or None  # no message allowed and no call fits: the grammar's own choice
        if left > self.needed():
            return None
        allowed = self._required_keys_first(self.allowed())
        now = self._open.count
        after = {t: self._open.after(self._texts[t] if t < len(self._texts) else "").count for t in allowed}
        fewest = min(after.values(), default=now)
        if fewest < now:
            return [t for t in allowed if after[t] == fewest]
        kept = [t for t in allowed if after[t] <= now]
        return kept or allowed


class ToolCallConstraint:
    """A state's tool-call action space, compiled for one tokenizer (one grammar per prefix)."""

    open_ended = True  # module docstring: the forced-line budget is capped at half of max_tokens

    def __init__(self, space: ToolCalls, tokenizer: Any, encode: Any) -> None:
        self.space = space
        self._tokenizer = tokenizer
        self._encode = encode
        self._grammars: dict[str, str] = {}
        self._depth: int | None = None
        self._required: dict[str, tuple[tuple[str, int], ...]] = {}  # tool -> (required key, its tokens)
        for tool in space.tools:
            keys = [str(k) for k in parameters_of(tool).get("required") or ()]
            costs = [len(ids) for ids in encode([f', "{k}": ""' for k in keys])] if keys else []
            self._required[str(function_of(tool)["name"])] = tuple(zip(keys, costs, strict=True))
        names = [str(function_of(t)["name"]) for t in space.tools]
        calls = encode([skeleton(t) for t in space.tools])
        self._costs = {name: len(ids) + 1 for name, ids in zip(names, calls, strict=True)}  # + end

    def walk(self, prefix: str = "") -> GrammarWalk:
        llg = _llguidance()
        grammar = self._grammars.get(prefix)
        if grammar is None:
            grammar = llg.LLMatcher.grammar_from_lark(lark_grammar(self.space, prefix))
            failed, problems = llg.LLMatcher.validate_grammar_with_warnings(grammar, self._tokenizer.ll)
            if failed:
                raise CannotConstrain(
                    f"the tool-call grammar of {', '.join(self.space.names)} is refused: {problems[0]}"
                )
            self._grammars[prefix] = grammar
        matcher = llg.LLMatcher(self._tokenizer.ll, grammar, log_level=1)
        if matcher.is_error():
            raise CannotConstrain(f"the tool-call grammar did not compile: {matcher.get_error()}")
        return GrammarWalk(matcher, self._tokenizer, self._required, self._costs)

    def forced_prefix(self, text: str) -> str:
        return FORCED_PREFIXES[1] if not text or text.endswith("\n") else FORCED_PREFIXES[0]

    def forced_depth(self) -> int:
        """Tokens kept for a forced Action line (module docstring; capped by the caller)."""
        if self._depth is None:
            calls = [skeleton(t) for t in self.space.tools]
            call = min(calls, key=len) if self.space.messages else max(calls, key=len)
            line = f"{FORCED_PREFIXES[0]} {call}"
            self._depth = len(self._encode([line])[0]) + _FORCED_MARGIN
        return self._depth


class LLTokenizer:
    """A tokenizer as llguidance sees it (built once per HF tokenizer: it walks the vocabulary)."""

    _lock = threading.Lock()

    def __init__(self, hf_tokenizer: Any) -> None:
        llg = _llguidance()
        try:
            self.ll = llg.hf.from_tokenizer(hf_tokenizer)
        except Exception as exc:  # a slow (non-Rust) tokenizer, an unknown byte mapping
            raise CannotConstrain(
                f"llguidance cannot read the tokenizer {getattr(hf_tokenizer, 'name_or_path', '?')!r}: {exc}"
            ) from exc
        self.vocab = int(self.ll.vocab_size)
        self.eos: int | None = getattr(self.ll, "eos_token", None)
        pieces = hf_tokenizer.convert_ids_to_tokens(list(range(min(self.vocab, len(hf_tokenizer)))))
        # each token's own text (a byte-level piece of a multi-byte character decodes to U+FFFD)
        self.texts = [hf_tokenizer.convert_tokens_to_string([p]) if p is not None else "" for p in pieces]

    @classmethod
    def of(cls, owner: Any, hf_tokenizer: Any) -> LLTokenizer:
        """The one ``LLTokenizer`` of ``owner`` (a policy), built on first use."""
        with cls._lock:
            found = getattr(owner, "_ll_tokenizer", None)
            if found is None:
                found = cls(hf_tokenizer)
                owner._ll_tokenizer = found
            return found
