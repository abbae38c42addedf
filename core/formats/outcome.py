"""Owns the trace outcome: what a caller (or a span attribute) says about how an episode ended.

Accepted: ``"success" | "failure" | "unknown"``, a reward number in [0, 1] (success only at 1),
``true`` / ``false``, or ``{"success": bool, "reward": number}``; a separate ``reward`` may come with
any of them (it must agree: a failure with reward 1 is refused, naming both).
Strings keep the historic default rewards (success 1.0, failure 0.0,
unknown None). Anything else raises ``TraceFormatError`` naming the field and what to send.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from core.formats.errors import TraceFormatError, shown

Outcome = Literal["success", "failure", "unknown"]
OUTCOME_HINT = (
    'send "success", "failure" or "unknown", a reward number in [0, 1], '
    'or {"success": bool, "reward": number}'
)


def _reward_value(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TraceFormatError(path, f"must be a number in [0, 1], got {shown(value)}")
    if not 0.0 <= value <= 1.0:
        raise TraceFormatError(path, f"must be a number in [0, 1], got {shown(value)}")
    return float(value)


def parse_outcome(value: Any, reward: Any, path: str) -> tuple[Outcome, float | None]:
    """The envelope's ``outcome`` (+ optional separate ``reward``) -> (outcome, reward).

    A reward number alone means success at 1.0 and failure below; ``{"success", "reward"}`` states
    both; strings keep the historic default rewards (success 1.0, failure 0.0, unknown None).
    """
    explicit = None if reward is None else _reward_value(reward, f"{path}.reward")
    opath = f"{path}.outcome"
    if value is None:
        value = "unknown" if explicit is None else explicit
    if isinstance(value, bool):
        outcome: Outcome = "success" if value else "failure"
        score = explicit
    elif isinstance(value, int | float):
        score = _reward_value(value, opath)
        if explicit is not None and explicit != score:
            raise TraceFormatError(
                opath, f"the outcome {shown(value)} and reward {shown(reward)} disagree: send one of them"
            )
        outcome = "success" if score >= 1.0 else "failure"
    elif isinstance(value, str):
        if value not in ("success", "failure", "unknown"):
            raise TraceFormatError(
                opath, f"must be success, failure or unknown, got {shown(value)} ({OUTCOME_HINT})"
            )
        outcome = value  # type: ignore[assignment]
        score = explicit
    elif isinstance(value, dict):
        unknown_keys = sorted(set(value) - {"success", "reward"})
        if unknown_keys:
            raise TraceFormatError(f"{opath}.{unknown_keys[0]}", f"unknown field ({OUTCOME_HINT})")
        if not isinstance(value.get("success"), bool):
            raise TraceFormatError(f"{opath}.success", f"must be true or false ({OUTCOME_HINT})")
        outcome = "success" if value["success"] else "failure"
        score = None if value.get("reward") is None else _reward_value(value["reward"], f"{opath}.reward")
        if explicit is not None and score is not None and explicit != score:
            raise TraceFormatError(f"{path}.reward", "disagrees with outcome.reward: send one of them")
        score = score if score is not None else explicit
    else:
        raise TraceFormatError(opath, f"unsupported {type(value).__name__} ({OUTCOME_HINT})")
    if outcome == "failure" and score is not None and score >= 1.0:
        raise TraceFormatError(
            opath,
            f"outcome failure and reward {score:g} contradict each other (a reward of 1 is a success): "
            "send the outcome or the reward that is true",
        )
    if score is None:
        score = {"success": 1.0, "failure": 0.0, "unknown": None}[outcome]
    return outcome, score
