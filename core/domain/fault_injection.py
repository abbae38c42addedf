"""Owns fault injection: a successful action sequence (an expert's plan, a task's gold actions) plus
ONE named fault at step ``i`` -> the action sequence of a failed trajectory whose decisive step is
known. Pure: action strings in, action strings out (the bench plays them and keeps a fault only
where the environment's expert confirms it is decisive: ``V(i) = 1`` and ``V(i + 1) = 0``).

After the fault the agent carries on with the rest of its plan, so the failed path is as long as a
real one and its decisive step is not simply its last action. Fault kinds (``FAULT_KINDS``):

- ``wrong_item`` (TextCraft): the action's item (a ``get``'s item, a ``craft``'s output) replaced by
  another item of the environment (``alternatives``);
- ``wrong_count`` (TextCraft): a ``get`` of one fewer (one more when it gets 1), or a ``craft`` with
  one ingredient's count off by one;
- ``wrong_argument`` (tau2): one argument of a tool call replaced by a value the same tool's
  argument takes in another task's gold actions (``alternatives``: ``"tool.arg" -> values``), so the
  call is well-formed and acts on the wrong thing;
- ``wrong_tool`` (tau2): the call made to another tool that accepts the same arguments
  (``alternatives``: ``"tool" -> other tools``);
- ``skipped`` (both): step ``i`` left out (the agent goes straight to the next);
- ``premature_end`` (tau2): the closing message to the user sent at step ``i`` (the episode ends);
- ``repeated`` (both): the previous action repeated at step ``i`` instead of the planned one, then
  the plan goes on.

``inject`` returns None where the kind does not apply at ``i`` (no alternative, nothing to repeat).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

FaultKind = Literal[
    "wrong_item", "wrong_count", "wrong_argument", "wrong_tool", "skipped", "premature_end", "repeated"
]
FAULT_KINDS: tuple[FaultKind, ...] = (
    "wrong_item",
    "wrong_count",
    "wrong_argument",
    "wrong_tool",
    "skipped",
    "premature_end",
    "repeated",
)
TEXTCRAFT_FAULTS: tuple[FaultKind, ...] = ("wrong_item", "wrong_count", "skipped", "repeated")
TAU2_FAULTS: tuple[FaultKind, ...] = ("wrong_argument", "wrong_tool", "skipped", "premature_end", "repeated")

_GET = re.compile(r"^get (\d+) (.+)$")
_CRAFT = re.compile(r"^craft (\d+) (.+?) using (.+)$")
_CALL = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\((.*)\)\s*$", re.DOTALL)


class InjectionError(ValueError):
    """A fault that cannot be described (unknown kind, index outside the plan)."""


@dataclass(frozen=True)
class Injected:
    """A failed action sequence with its known decisive step."""

    actions: tuple[str, ...]
    kind: FaultKind
    index: int  # the decisive step: the injected action's index in ``actions``
    original: str  # the planned action at that index ("" where none was planned: premature end)
    injected: str


def tool_call(action: str) -> tuple[str, dict[str, object]] | None:
    """``(name, arguments)`` of a ``name({...})`` call; None for anything else (a message)."""
    match = _CALL.match(action)
    if match is None:
        return None
    try:
        arguments = json.loads(match.group(2)) if match.group(2).strip() else {}
    except json.JSONDecodeError:
        return None
    return (match.group(1), arguments) if isinstance(arguments, dict) else None


def call_text(name: str, arguments: Mapping[str, object]) -> str:
    return f"{name}({json.dumps(dict(arguments), ensure_ascii=False)})" if arguments else f"{name}()"


def _choose(rng: random.Random, options: Sequence[str], not_this: str) -> str | None:
    pool = sorted({o for o in options if o != not_this})
    return rng.choice(pool) if pool else None


def _wrong_item(action: str, alternatives: Mapping[str, Sequence[str]], rng: random.Random) -> str | None:
    items = alternatives.get("items", ())
    if m := _GET.match(action):
        other = _choose(rng, items, m.group(2))
        return f"get {m.group(1)} {other}" if other else None
    if m := _CRAFT.match(action):
        other = _choose(rng, alternatives.get("craftable", items), m.group(2))
        return f"craft {m.group(1)} {other} using {m.group(3)}" if other else None
    return None


def _wrong_count(action: str) -> str | None:
    if m := _GET.match(action):
        count = int(m.group(1))
        return f"get {count - 1 if count > 1 else count + 1} {m.group(2)}"
    if m := _CRAFT.match(action):
        parts = [p.strip() for p in m.group(3).split(",")]
        first = re.match(r"^(\d+) (.+)$", parts[0])
        if first is None:
            return None
        count = int(first.group(1))
        parts[0] = f"{count + 1} {first.group(2)}"
        return f"craft {m.group(1)} {m.group(2)} using {', '.join(parts)}"
    return None


def _wrong_argument(action: str, alternatives: Mapping[str, Sequence[str]], rng: random.Random) -> str | None:
    call = tool_call(action)
    if call is None:
        return None
    name, arguments = call
    keys = [k for k in sorted(arguments) if alternatives.get(f"{name}.{k}")]
    rng.shuffle(keys)
    for key in keys:
        current = json.dumps(arguments[key], sort_keys=True, ensure_ascii=False)
        other = _choose(rng, alternatives[f"{name}.{key}"], current)
        if other is not None:
            return call_text(name, {**arguments, key: json.loads(other)})
    return None


def _wrong_tool(action: str, alternatives: Mapping[str, Sequence[str]], rng: random.Random) -> str | None:
    call = tool_call(action)
    if call is None:
        return None
    other = _choose(rng, alternatives.get(call[0], ()), call[0])
    return call_text(other, call[1]) if other else None


def inject(
    plan: Sequence[str],
    kind: FaultKind,
    index: int,
    *,
    alternatives: Mapping[str, Sequence[str]] | None = None,
    closing: str | None = None,
    seed: int | str = 0,
) -> Injected | None:
    """``plan`` with fault ``kind`` at step ``index`` (module docstring); ``closing``: the final
    message a ``premature_end`` sends (tau2: the plan's own last action when None)."""
    if kind not in FAULT_KINDS:
        raise InjectionError(f"unknown fault kind {kind!r} (known: {', '.join(FAULT_KINDS)})")
    if not 0 <= index < len(plan):
        raise InjectionError(f"fault index {index} outside the plan's {len(plan)} steps")
    rng = random.Random(f"{seed}:{kind}:{index}")
    alternatives = alternatives or {}
    planned = plan[index]
    head, tail = list(plan[:index]), list(plan[index + 1 :])
    changed: str | None
    if kind == "skipped":
        if not tail:
            return None  # skipping the last planned step leaves nothing at ``index``
        return Injected((*head, *tail), kind, index, planned, tail[0])
    if kind == "repeated":
        if index == 0:
            return None
        return Injected((*head, plan[index - 1], planned, *tail), kind, index, planned, plan[index - 1])
    if kind == "premature_end":
        end = closing if closing is not None else plan[-1]
        if index == len(plan) - 1 or planned == end:
            return None  # the plan ends here anyway
        return Injected((*head, end), kind, index, planned, end)
    if kind == "wrong_item":
        changed = _wrong_item(planned, alternatives, rng)
    elif kind == "wrong_count":
        changed = _wrong_count(planned)
    elif kind == "wrong_argument":
        changed = _wrong_argument(planned, alternatives, rng)
    else:
        changed = _wrong_tool(planned, alternatives, rng)
    if changed is None or changed == planned:
        return None
    return Injected((*head, changed, *tail), kind, index, planned, changed)
