"""Fault injection (core/domain/fault_injection.py) and the decisive-step search on its output: a
plan with one named fault at step i gives a failed action sequence whose decisive step is i, and the
binary search over a 0/1 expert value finds exactly i."""

from __future__ import annotations

import json

import pytest

from core.domain.decisive_step import Probe, find_decisive_step
from core.domain.fault_injection import FAULT_KINDS, InjectionError, inject, tool_call

TEXTCRAFT_PLAN = [
    "get 2 oak logs",
    "craft 4 oak planks using 1 oak logs",
    "craft 4 oak planks using 1 oak logs",
    "craft 4 stick using 2 oak planks",
    "craft 1 wooden pickaxe using 3 oak planks, 2 stick",
]
ITEMS = {"items": ["oak logs", "birch logs", "cobblestone"], "craftable": ["stick", "oak planks", "ladder"]}
TAU2_PLAN = [
    'find_user_id_by_email({"email": "a@x.com"})',
    'get_order_details({"order_id": "#W1"})',
    'cancel_pending_order({"order_id": "#W1", "reason": "no longer needed"})',
    "Your order is cancelled. Is there anything else? ###STOP###",
]
TAU2_ALTERNATIVES = {
    "cancel_pending_order.order_id": [json.dumps("#W1"), json.dumps("#W2")],
    "cancel_pending_order": ["return_delivered_order_items"],
}


def test_textcraft_faults_change_exactly_one_planned_step() -> None:
    item = inject(TEXTCRAFT_PLAN, "wrong_item", 0, alternatives=ITEMS, seed=1)
    assert item is not None and item.index == 0 and item.original == "get 2 oak logs"
    assert item.injected.startswith("get 2 ") and item.injected != item.original
    assert item.actions[1:] == tuple(TEXTCRAFT_PLAN[1:])  # the plan goes on after the fault
    count = inject(TEXTCRAFT_PLAN, "wrong_count", 0)
    assert count is not None and count.injected == "get 1 oak logs"
    craft_count = inject(TEXTCRAFT_PLAN, "wrong_count", 3)
    assert craft_count is not None and craft_count.injected == "craft 4 stick using 3 oak planks"
    crafted = inject(TEXTCRAFT_PLAN, "wrong_item", 3, alternatives=ITEMS, seed=1)
    assert crafted is not None and crafted.injected.endswith("using 2 oak planks")
    assert " stick " not in crafted.injected
    skipped = inject(TEXTCRAFT_PLAN, "skipped", 1)
    assert skipped is not None and skipped.actions == (TEXTCRAFT_PLAN[0], *TEXTCRAFT_PLAN[2:])
    assert skipped.injected == TEXTCRAFT_PLAN[2]
    repeated = inject(TEXTCRAFT_PLAN, "repeated", 1)
    assert repeated is not None and repeated.actions[:3] == (
        TEXTCRAFT_PLAN[0],
        TEXTCRAFT_PLAN[0],
        TEXTCRAFT_PLAN[1],
    )
    assert inject(TEXTCRAFT_PLAN, "repeated", 0) is None  # nothing before the first step
    assert inject(TEXTCRAFT_PLAN, "skipped", 4) is None  # nothing after the last
    # the same seed gives the same fault
    assert inject(TEXTCRAFT_PLAN, "wrong_item", 0, alternatives=ITEMS, seed=1) == item


def test_tau2_faults_keep_calls_well_formed() -> None:
    argument = inject(TAU2_PLAN, "wrong_argument", 2, alternatives=TAU2_ALTERNATIVES)
    assert argument is not None
    assert tool_call(argument.injected) == (
        "cancel_pending_order",
        {"order_id": "#W2", "reason": "no longer needed"},
    )
    tool = inject(TAU2_PLAN, "wrong_tool", 2, alternatives=TAU2_ALTERNATIVES)
    assert tool is not None and tool_call(tool.injected)[0] == "return_delivered_order_items"  # type: ignore[index]
    end = inject(TAU2_PLAN, "premature_end", 1)
    assert end is not None and end.actions == (TAU2_PLAN[0], TAU2_PLAN[-1])
    assert inject(TAU2_PLAN, "premature_end", 3) is None  # the plan ends there anyway
    assert inject(TAU2_PLAN, "wrong_argument", 0, alternatives=TAU2_ALTERNATIVES) is None  # no alternative
    assert inject(TAU2_PLAN, "wrong_tool", 3, alternatives=TAU2_ALTERNATIVES) is None  # a message
    with pytest.raises(InjectionError, match="unknown fault kind"):
        inject(TAU2_PLAN, "typo", 0)  # type: ignore[arg-type]
    with pytest.raises(InjectionError, match="outside the plan"):
        inject(TAU2_PLAN, "skipped", 9)


def test_the_search_finds_every_injected_step_under_a_step_limited_expert() -> None:
    """A toy deterministic world: the expert succeeds from a prefix when every action so far is the
    plan's (a wasted step cannot be made up under a step limit equal to the plan's length). Each
    injected fault the expert confirms (V(i) = 1, V(i + 1) = 0) has its index as the decisive step,
    and the search finds it; a harmless one (skipping or repeating one of two identical crafts) is dropped."""
    found, dropped = 0, []
    for kind in FAULT_KINDS:
        for index in range(len(TEXTCRAFT_PLAN)):
            alternatives = ITEMS if kind != "wrong_argument" else TAU2_ALTERNATIVES
            fault = inject(TEXTCRAFT_PLAN, kind, index, alternatives=alternatives)
            if fault is None:
                continue

            def probe(k: int, actions: tuple[str, ...] = fault.actions) -> Probe:
                on_plan = list(actions[:k]) == TEXTCRAFT_PLAN[:k]
                return Probe(k, int(on_plan), 1, 1)

            if (probe(fault.index).successes, probe(fault.index + 1).successes) != (1, 0):
                dropped.append((kind, index))
                continue
            verdict = find_decisive_step(probe, len(fault.actions), budget=32)
            assert (verdict.status, verdict.decisive_step) == ("decisive", fault.index), (kind, index)
            found += 1
    assert found >= 15 and dropped == [("skipped", 1), ("repeated", 2)]  # the two identical crafts
