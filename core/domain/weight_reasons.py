"""Owns the closed vocabulary of why a training message carries its loss weight (``Message.why``).

Pure (stdlib only). The code that builds a sample states, for every message it emits, why that
message has its weight (core.domain.splice for revision samples, core.domain.good_samples for
good samples, core.domain.preferences for preference pairs); nothing guesses it afterwards. The
reasons, in one place:

Context (weight 0):

* ``system`` — the system instruction.
* ``task`` — the task (the first user message).
* ``observation`` — what the environment answered: a user observation or a tool result.
* ``shared_prefix`` — a revision sample's (or a preference prompt's) turn that both paths took
  before the divergence.
* ``bad_step`` — the failed path's turn after the divergence, through the first error t'.
* ``masked_invalid`` — a turn the environment rejected (``core.domain.critic.invalid_signal``):
  kept as context so the model sees the mistake, never taught it.
* ``masked_loop`` — a turn that repeats a loop (``core.domain.good_samples.loop_repeats``).
* ``masked`` — kept at weight 0 by a caller's masking rule that did not name its reason.
* ``history`` — a turn of a state's history (core.domain.transitions: the state an action is
  taken or judged in).

Trained (weight 1):

* ``reflection`` — the first good turn after the divergence, whose thought starts with the
  reflection sentence.
* ``continuation`` — the rest of the good continuation of a revision sample.
* ``good_step`` — a turn of a good trajectory.
* ``chosen`` / ``rejected`` — a preference pair's continuation turns (DPO scores both).

``""`` means not recorded: samples stored before reasons existed, and samples read back from files
(the weight came from the file). A message's weight and its reason always agree: weight 1 exactly
when the reason is in ``TRAINED`` (``check_reasons``).

``MaskedSteps`` is the set of good-continuation indexes a revision sample keeps at weight 0 with
the reason for each (``core.domain.good_samples.revision_masks`` returns one; it is a frozenset, so
callers that only count or compare the indexes need not know). ``trained_dict`` is a message's
dict form without its reason, for the digests of what a sample trains (a reason changes no token,
so adding reasons changed no dataset id).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from core.domain.serde import to_dict
from core.domain.trajectory import Message

CONTEXT: dict[str, str] = {
    "system": "the system instruction",
    "task": "the task (first user message)",
    "observation": "what the environment answered (an observation or a tool result)",
    "shared_prefix": "a turn both paths took before the divergence",
    "bad_step": "the failed path's turn after the divergence, through t'",
    "masked_invalid": "a turn the environment rejected, kept as context",
    "masked_loop": "a turn repeating a loop, kept as context",
    "masked": "kept as context by the caller's masking rule",
    "history": "a turn of the state's history",
}
TRAINED: dict[str, str] = {
    "reflection": "the first good turn after the divergence, starting with the reflection",
    "continuation": "the good continuation after the divergence",
    "good_step": "a turn of a good trajectory",
    "chosen": "a preference pair's chosen turn",
    "rejected": "a preference pair's rejected turn",
}
REASONS: dict[str, str] = {**CONTEXT, **TRAINED}
UNRECORDED = ""


class MaskedSteps(frozenset[int]):
    """Indexes (into ``SplicedPath.good``) kept at weight 0, each with its reason (a CONTEXT key)."""

    reasons: dict[int, str]

    def __new__(cls, reasons: Mapping[int, str] | None = None) -> MaskedSteps:
        reasons = dict(reasons or {})
        unknown = sorted({why for why in reasons.values() if why not in CONTEXT})
        if unknown:
            raise ValueError(f"unknown mask reason(s) {unknown}; known: {', '.join(CONTEXT)}")
        out = super().__new__(cls, reasons)
        out.reasons = reasons
        return out

    def reason(self, index: int) -> str:
        return self.reasons.get(index, "masked")


def mask_reason(masked: Iterable[int], index: int) -> str:
    """Why step ``index`` of a masked set is at weight 0 (``masked`` when the set names no reason)."""
    return masked.reason(index) if isinstance(masked, MaskedSteps) else "masked"


def describe(why: str) -> str:
    """The one-line meaning of a reason (``not recorded`` for ``""``)."""
    if why == UNRECORDED:
        return "not recorded"
    return REASONS.get(why, "unknown reason")


def check_reasons(messages: Iterable[Message]) -> list[str]:
    """What is wrong with the messages' reasons: one line per message whose reason is unknown or
    disagrees with its weight (``""``, not recorded, is never wrong). Empty when all agree."""
    problems: list[str] = []
    for index, message in enumerate(messages):
        why = message.why
        if why == UNRECORDED:
            continue
        if why not in REASONS:
            problems.append(f"message {index}: unknown reason {why!r}")
        elif (why in TRAINED) != bool(message.weight):
            problems.append(f"message {index}: weight {message.weight} but reason {why!r}")
    return problems


def trained_dict(message: Message) -> dict[str, Any]:
    """``to_dict(message)`` without ``why`` (what the message trains, for content digests)."""
    data: dict[str, Any] = to_dict(message)
    data.pop("why", None)
    return data
