"""Tool-calling production traces written for these tests (OpenAI chat format with ``tools``).

A support agent refunds an order: the FAILED trace looks the customer up, then refunds a mistyped
order id (the tool answers with an error) and apologises; the SUCCESSFUL trace of the same task
key refunds the right order and confirms. They share the first tool call, so the pair diverges
at step 1 and the first error is that refund call.
"""

from __future__ import annotations

import json
from typing import Any

TASK_KEY = "refund-order-1234"
SYSTEM = "You are a support agent. Use the tools to act on the customer's request."
TASK = "Please refund order 1234 for ann@example.com."

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "lookup_customer",
            "description": "Find a customer and their orders by email.",
            "parameters": {
                "type": "object",
                "properties": {"email": {"type": "string"}},
                "required": ["email"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "refund_order",
            "description": "Refund one order by its id.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    },
]


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def _lookup(prefix: str) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": "I will look the customer up first.",
            "tool_calls": [_call(f"{prefix}_1", "lookup_customer", {"email": "ann@example.com"})],
        },
        {
            "role": "tool",
            "tool_call_id": f"{prefix}_1",
            "content": json.dumps({"customer_id": "c-17", "orders": ["1234", "1299"]}),
        },
    ]


def failed_trace() -> dict[str, Any]:
    return {
        "id": "ext-failed",
        "task_key": TASK_KEY,
        "outcome": "failure",
        "tools": TOOLS,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": TASK},
            *_lookup("fa"),
            {
                "role": "assistant",
                "content": "Now I refund the order.",
                "tool_calls": [_call("fa_2", "refund_order", {"order_id": "1243"})],
            },
            {
                "role": "tool",
                "tool_call_id": "fa_2",
                "content": "Error: order 1243 not found for customer c-17",
            },
            {"role": "assistant", "content": "Sorry, I could not refund your order."},
        ],
    }


def successful_trace() -> dict[str, Any]:
    return {
        "id": "ext-ok",
        "task_key": TASK_KEY,
        "outcome": "success",
        "tools": TOOLS,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": TASK},
            *_lookup("ok"),
            {
                "role": "assistant",
                "content": "Order 1234 is theirs; refunding it.",
                "tool_calls": [_call("ok_2", "refund_order", {"order_id": "1234"})],
            },
            {"role": "tool", "tool_call_id": "ok_2", "content": json.dumps({"status": "refunded"})},
            {"role": "assistant", "content": "Done: order 1234 has been refunded."},
        ],
    }
