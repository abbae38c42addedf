"""Owns the reflection sentences written into revision trajectories, and their deterministic choice.

Each template is a short first-person sentence an agent says when it notices its own mistake, written
for this project. ``{action}`` (optional) is filled with the wrong action at the transition point.
The choice is a pure function of the pair id (a stable hash, not Python's salted ``hash``), so a
replayed splice picks the same sentence; the chosen template id is recorded with the sample.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Reflection:
    template_id: str
    text: str


DEFAULT_TEMPLATES: Mapping[str, str] = {
    "r01": "I realize my last action was a mistake; I should take a different step.",
    "r02": "Looking back, '{action}' did not help me reach the goal, so I will change course.",
    "r03": "I went the wrong way; let me correct it and continue from here.",
    "r04": "That did not work as I intended. I need to rethink my approach.",
    "r05": "My previous actions were not leading anywhere useful; I will try the right action now.",
    "r06": "I notice that '{action}' was an error, so I will revise my plan.",
    "r07": "I made a wrong move earlier. Let me fix it by doing what the task actually needs.",
    "r08": "This path is not working. I should step back and choose a better action.",
    "r09": "I was repeating an unhelpful approach; now I will act differently.",
    "r10": "On reflection, my last step was incorrect, and I will take the correct one instead.",
    "r11": "I got that wrong. Let me re-read the task and proceed carefully.",
    "r12": "The outcome shows my choice was wrong; I will recover with a more suitable action.",
}


class ReflectionError(ValueError):
    """An unusable template set (empty, or a template with an unknown placeholder)."""


def validate_templates(templates: Mapping[str, str]) -> None:
    if not templates:
        raise ReflectionError("reflection templates: the set is empty")
    for template_id, text in templates.items():
        if not text.strip():
            raise ReflectionError(f"reflection templates[{template_id!r}]: empty sentence")
        try:
            text.format(action="x")
        except (KeyError, IndexError, ValueError) as exc:
            raise ReflectionError(
                f"reflection templates[{template_id!r}]: bad placeholder ({exc}); only {{action}} is allowed"
            ) from None


def choose_reflection(
    pair_id: str, wrong_action: str = "", templates: Mapping[str, str] = DEFAULT_TEMPLATES
) -> Reflection:
    """The reflection for ``pair_id``: a stable hash of the id picks a template (sorted by id)."""
    validate_templates(templates)
    ids = sorted(templates)
    digest = hashlib.sha256(pair_id.encode("utf-8")).digest()
    template_id = ids[int.from_bytes(digest[:8], "big") % len(ids)]
    action = " ".join(wrong_action.split()) or "that action"
    return Reflection(template_id=template_id, text=templates[template_id].format(action=action))
