"""Owns asking the iteration's policy for reflection sentences (splice option ``reflection: model``).

``model_reflections`` asks ONE batched, greedy, short ``sample()`` call for all requests (the task,
the wrong action at the transition point and the observation it produced; prompt from
``core.domain.reflections.reflection_prompt``, fitted to the model's context). Each answer is
checked (one non-empty first-person sentence, no ``Action:``); an unusable answer, a prompt that does
not fit or a failed call falls back to the template choice, recorded as ``model|fallback:<id>``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from core.domain.reflections import DEFAULT_TEMPLATES, Reflection, model_or_template, reflection_prompt
from core.domain.trajectory import Message
from core.llm.context import fit_prompt
from core.llm.ports import Policy, PolicyError

log = logging.getLogger(__name__)

REFLECTION_MAX_TOKENS = 48


@dataclass(frozen=True)
class ReflectionRequest:
    pair_id: str
    task: str
    wrong_action: str
    observation: str
    choice_key: str = ""  # what picks the fallback template (default: the pair id)


async def model_reflections(
    policy: Policy,
    requests: Sequence[ReflectionRequest],
    templates: Mapping[str, str] = DEFAULT_TEMPLATES,
    max_tokens: int = REFLECTION_MAX_TOKENS,
) -> list[Reflection]:
    """One reflection per request, in order (see the module docstring)."""
    answers: list[str | None] = [None] * len(requests)
    asked: list[int] = []
    prompts: list[list[Message]] = []
    for index, request in enumerate(requests):
        messages = reflection_prompt(request.task, request.wrong_action, request.observation)
        try:
            prompts.append(fit_prompt(policy, messages, reserve=max_tokens))
        except PolicyError as exc:
            log.warning("reflection for pair %s not asked: %s", request.pair_id, exc)
            continue
        asked.append(index)
    if prompts:
        try:
            rows = await policy.sample(
                prompts, n=1, temperature=0.0, max_tokens=max_tokens, seed=0, stop=["\n"]
            )
        except PolicyError as exc:
            log.warning("reflections: the model call failed, using templates: %s", exc)
            rows = []
        for index, row in zip(asked, rows, strict=False):
            # a sampled NUL cannot be stored (PostgreSQL's JSON): kept as U+FFFD, as the search does
            answers[index] = row[0].text.replace("\x00", "\ufffd") if row else None
    out = []
    for request, answer in zip(requests, answers, strict=True):
        reflection, why = model_or_template(
            answer, request.choice_key or request.pair_id, request.wrong_action, templates
        )
        if why is not None:
            log.info("reflection for pair %s: %s; using %s", request.pair_id, why, reflection.template_id)
        out.append(reflection)
    return out
