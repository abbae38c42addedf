"""Production logs as they arrive (issue 27), through the real API over PostgreSQL and the real critic
and splice workers over Redis: pairing by task key, why a trace did not pair, the good sample of a
successful trace."""

from __future__ import annotations

from typing import Any

from tests.api.logs_stack import LogsStack, logs  # noqa: F401 (fixture)


def _balance(
    task: str, final: str, result: str, key: str = "balance-7", args: str = '{"account": 7}', **extra: Any
) -> dict[str, Any]:
    call = {"id": "c1", "type": "function", "function": {"name": "balance", "arguments": args}}
    return {
        "task_key": key,
        "messages": [
            {"role": "system", "content": "You are a bank agent."},
            {"role": "user", "content": task},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": result},
            {"role": "assistant", "content": final},
        ],
        **extra,
    }


async def test_traces_of_one_task_key_pair_although_their_task_texts_differ(logs: LogsStack) -> None:
    failed_text, good_text = "Hi, what is the balance of account 7?", "Hi! What's the balance of account 7?"
    bad = _balance(failed_text, "Sorry, I cannot tell.", '{"error": "timeout"}', outcome="failure")
    good = _balance(
        good_text, "It is 3.", '{"balance": 3}', args='{"account": 7, "fresh": true}', outcome="success"
    )
    (failed,) = (await logs.post("openai", bad))["trace_ids"]
    (succeeded,) = (await logs.post("openai", good))["trace_ids"]
    await logs.settle()
    view = await logs.trace(failed)
    assert (view["status"], view["reason"]) == ("revised", None), view
    assert view["pair_id"] is not None and view["transition_index"] == 0
    messages = view["sample"]["messages"]
    # the documented rule: the failed trace's own task text (and instruction) stay in the sample
    assert [m["content"] for m in messages[:2]] == ["You are a bank agent.", failed_text]
    assert view["sample"]["provenance"]["good_task"] == good_text
    # a success trace shows its good sample
    good_view = await logs.trace(succeeded)
    assert good_view["sample_id"] is not None and good_view["sample"]["sample_id"] == good_view["sample_id"]


async def test_a_failed_trace_that_cannot_pair_says_why(logs: LogsStack) -> None:
    bad = _balance("Balance of 7?", "Sorry.", '{"error": "timeout"}', key="k-alone", outcome="failure")
    (failed,) = (await logs.post("openai", bad))["trace_ids"]
    await logs.settle()
    view = await logs.trace(failed)
    assert view["status"] == "unpaired"
    assert "no successful trace with task key 'k-alone'" in view["reason"]
    # a success with the very same actions: still nothing to revise, and the reason says so
    same = _balance("Balance of 7?", "Sorry.", '{"balance": 3}', key="k-alone", outcome="success")
    await logs.post("openai", same)
    await logs.settle()
    view = await logs.trace(failed)
    assert view["status"] == "unpaired" and "1 successful trace(s)" in view["reason"]
    assert "no step after the divergence" in view["reason"]
    listed = (await logs.api.client.get("/v1/traces?status=unpaired", headers=logs.key)).json()["items"]
    assert [(t["trace_id"], t["reason"]) for t in listed] == [(failed, view["reason"])]
    # then a success that diverges pairs it, and the reason is gone
    fresh = '{"account": 7, "fresh": true}'
    other = _balance(
        "Balance of 7?", "It is 3.", '{"balance": 3}', key="k-alone", args=fresh, outcome="success"
    )
    await logs.post("openai", other)
    await logs.settle()
    view = await logs.trace(failed)
    assert (view["status"], view["reason"]) == ("revised", None), view


def _tool_trace(task: str, name: str, args: str, result: str, final: str, outcome: str) -> dict[str, Any]:
    """One conversation whose only call has the id ``call_1`` (ids restart in every conversation)."""
    call = {"id": "call_1", "type": "function", "function": {"name": name, "arguments": args}}
    return {
        "task_key": "order-7",
        "outcome": outcome,
        "messages": [
            {"role": "user", "content": task},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": result},
            {"role": "assistant", "content": final},
        ],
    }


async def test_spliced_traces_from_separate_conversations_get_unique_tool_call_ids(logs: LogsStack) -> None:
    bad = _tool_trace(
        "Where is order 7?",
        "lookup_customer",
        '{"name": "Ann"}',
        '{"error": "unknown customer"}',
        "Sorry.",
        "failure",
    )
    good = _tool_trace(
        "Where is order 7?", "get_order", '{"id": 7}', '{"status": "shipped"}', "Shipped.", "success"
    )
    (failed,) = (await logs.post("openai", bad))["trace_ids"]
    await logs.post("openai", good)
    await logs.settle()
    view = await logs.trace(failed)
    assert view["status"] == "revised", view
    messages = view["sample"]["messages"]
    calls = [(c["call_id"], c["name"]) for m in messages for c in m.get("tool_calls") or []]
    assert calls == [("call_1", "lookup_customer"), ("call_1_2", "get_order")]
    answers = [(m["tool_call_id"], m["content"]) for m in messages if m["role"] == "tool"]
    assert answers == [("call_1", '{"error": "unknown customer"}'), ("call_1_2", '{"status": "shipped"}')]
