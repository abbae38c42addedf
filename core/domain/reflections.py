"""Owns the reflection sentences written into revision trajectories, and their deterministic choice.

Each template is a short first-person sentence an agent says when it notices its own mistake, written
for this project. ``{action}`` (optional) is filled with the wrong action at the transition point.
The choice is a pure function of a key (a stable hash, not Python's salted ``hash``), so a replayed
splice picks the same sentence; the chosen template id is recorded with the sample. The splicer keys
it by the pair's CONTENT (``pair_choice_key``: task, divergence depth and both paths' actions), not
by its id: pair ids derive from the run id, which is random, so an id key would give two runs with
the same seeds different revision samples, hence different models.

Reflections may also come from the model (``reflection_prompt`` asks for one first-person sentence);
``check_model_reflection`` accepts only one non-empty first-person sentence with no ``Action:`` /
``Thought:`` marker, and ``model_or_template`` falls back to the template choice, recording it in the
template id (``"model"``, or ``"model|fallback:r03"``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from core.domain.trajectory import Message


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


def pair_choice_key(
    task_key: str, shared_steps: int, bad_actions: Sequence[str], good_actions: Sequence[str]
) -> str:
    """A key for a pair's reflection choice that depends only on what the pair holds (no ids)."""
    canonical = json.dumps(
        [task_key, shared_steps, list(bad_actions), list(good_actions)], separators=(",", ":")
    )
    return "content:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def choose_reflection(
    key: str, wrong_action: str = "", templates: Mapping[str, str] = DEFAULT_TEMPLATES
) -> Reflection:
    """The reflection for ``key`` (a pair's id or ``pair_choice_key``): a stable hash of the key
    picks a template (sorted by id)."""
    validate_templates(templates)
    ids = sorted(templates)
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    template_id = ids[int.from_bytes(digest[:8], "big") % len(ids)]
    action = " ".join(wrong_action.split()) or "that action"
    return Reflection(template_id=template_id, text=templates[template_id].format(action=action))


# --------------------------------------------------------------------------------------------
# Reflections from the model
# --------------------------------------------------------------------------------------------

MODEL_TEMPLATE_ID = "model"
REFLECTION_SYSTEM = "You review your own attempt at a task and notice your mistakes."
REFLECTION_REQUEST = (
    "Task: {task}\nYour action: {action}\nWhat happened: {observation}\n"
    "In one short first-person sentence, say what was wrong with that action and that you will "
    "change course. Answer with the sentence only."
)
MAX_REFLECTION_CHARS = 240
_FIRST_PERSON = re.compile(r"\b(i|i'm|i've|i'll|i'd|me|my|myself)\b", re.IGNORECASE)
_MARKER = re.compile(r"\b(action|thought)\s*:", re.IGNORECASE)
_INNER_END = re.compile(r"[.!?][\"')\]]*\s+\S")


def reflection_prompt(task: str, wrong_action: str, observation: str) -> list[Message]:
    """The conversation asking the model for a one-sentence reflection on ``wrong_action``."""
    request = REFLECTION_REQUEST.format(
        task=task.strip(), action=" ".join(wrong_action.split()), observation=observation.strip()
    )
    return [Message("system", REFLECTION_SYSTEM), Message("user", request)]


def check_model_reflection(text: str) -> str:
    """The model's sentence, whitespace-folded; ``ReflectionError`` says why it is unusable."""
    sentence = " ".join(text.split()).strip("\"'` ")
    if not sentence:
        raise ReflectionError("model reflection: empty answer")
    if "\n" in text.strip():
        raise ReflectionError("model reflection: more than one line")
    if _MARKER.search(sentence):
        raise ReflectionError("model reflection: contains an Action:/Thought: marker")
    if len(sentence) > MAX_REFLECTION_CHARS:
        raise ReflectionError(f"model reflection: longer than {MAX_REFLECTION_CHARS} characters")
    if sentence[-1] not in ".!?":
        raise ReflectionError("model reflection: not a finished sentence (no final . ! or ?)")
    if _INNER_END.search(sentence):
        raise ReflectionError("model reflection: more than one sentence")
    if len(sentence.split()) < 3:
        raise ReflectionError("model reflection: fewer than three words")
    if not _FIRST_PERSON.search(sentence):
        raise ReflectionError("model reflection: not in the first person (no I / me / my)")
    return sentence


def model_or_template(
    answer: str | None,
    pair_id: str,
    wrong_action: str = "",
    templates: Mapping[str, str] = DEFAULT_TEMPLATES,
) -> tuple[Reflection, str | None]:
    """The model's reflection when ``answer`` passes ``check_model_reflection``, else the template
    choice for ``pair_id`` with id ``"model|fallback:<template id>"``; second: why it fell back."""
    try:
        if answer is None:
            raise ReflectionError("model reflection: no answer")
        return Reflection(MODEL_TEMPLATE_ID, check_model_reflection(answer)), None
    except ReflectionError as exc:
        fallback = choose_reflection(pair_id, wrong_action, templates)
        template_id = f"{MODEL_TEMPLATE_ID}|fallback:{fallback.template_id}"
        return Reflection(template_id, fallback.text), str(exc)
