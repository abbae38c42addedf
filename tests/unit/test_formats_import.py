"""Production-log import: the same conversation in OpenAI, OTel GenAI and ShareGPT form gives the
same Trajectory; malformed input names the field and index."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from core.formats.importing import TraceFormatError, parse_traces

SYSTEM = "You are a shopping agent. Use the tools."
TASK = "Buy a red mug under $10."
ARGS = {"query": "red mug", "max_price": 10}

OPENAI: dict[str, Any] = {
    "task_key": "mug",
    "outcome": "failure",
    "id": "run-7",
    "messages": [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": TASK},
        {
            "role": "assistant",
            "content": "I should search first.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "search", "arguments": json.dumps(ARGS)},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "3 results: mug A $12, mug B $8, cup C $5"},
        {"role": "assistant", "content": "Thought: Mug A looks nice.\nAction: buy[mug A]"},
        {"role": "user", "content": [{"type": "text", "text": "Purchased mug A for $12."}]},
    ],
}

OTEL: dict[str, Any] = {
    "task_key": "mug",
    "outcome": "failure",
    "id": "run-7",
    "spans": [
        {  # an earlier model call: its input is a prefix of the later one's
            "start_time_unix_nano": 1,
            "attributes": {
                "gen_ai.input.messages": json.dumps(
                    [{"role": "user", "parts": [{"type": "text", "content": TASK}]}]
                )
            },
        },
        {
            "start_time_unix_nano": 2,
            "attributes": [
                {
                    "key": "gen_ai.system_instructions",
                    "value": {"stringValue": json.dumps([{"type": "text", "content": SYSTEM}])},
                },
                {
                    "key": "gen_ai.input.messages",
                    "value": {
                        "stringValue": json.dumps(
                            [
                                {"role": "user", "parts": [{"type": "text", "content": TASK}]},
                                {
                                    "role": "assistant",
                                    "parts": [
                                        {"type": "text", "content": "I should search first."},
                                        {
                                            "type": "tool_call",
                                            "id": "c1",
                                            "name": "search",
                                            "arguments": ARGS,
                                        },
                                    ],
                                },
                                {
                                    "role": "tool",
                                    "parts": [
                                        {
                                            "type": "tool_call_response",
                                            "id": "c1",
                                            "response": "3 results: mug A $12, mug B $8, cup C $5",
                                        }
                                    ],
                                },
                            ]
                        )
                    },
                },
                {
                    "key": "gen_ai.output.messages",
                    "value": {
                        "stringValue": json.dumps(
                            [
                                {
                                    "role": "assistant",
                                    "parts": [
                                        {
                                            "type": "text",
                                            "content": "Thought: Mug A looks nice.\nAction: buy[mug A]",
                                        }
                                    ],
                                }
                            ]
                        )
                    },
                },
            ],
        },
    ],
}

SHAREGPT: dict[str, Any] = {
    "task_key": "mug",
    "outcome": "failure",
    "id": "run-7",
    "conversations": [
        {"from": "human", "value": SYSTEM},
        {"from": "gpt", "value": "OK"},
        {"from": "human", "value": TASK},
        {"from": "function_call", "value": json.dumps({"name": "search", "arguments": ARGS})},
        {"from": "observation", "value": "3 results: mug A $12, mug B $8, cup C $5"},
        {"from": "gpt", "value": "Thought: Mug A looks nice.\nAction: buy[mug A]"},
        {"from": "human", "value": "Purchased mug A for $12."},
    ],
}


def test_three_formats_give_the_same_trajectory() -> None:
    (a,) = parse_traces({"traces": [OPENAI]}, "openai")
    (b,) = parse_traces([OTEL], "otel")
    (c,) = parse_traces({"traces": [SHAREGPT]}, "sharegpt")
    ta = a.trajectory
    assert ta.instruction == SYSTEM and ta.task == TASK
    assert [(s.thought, s.action, s.observation) for s in ta.steps] == [
        (
            "I should search first.",
            'search({"max_price": 10, "query": "red mug"})',
            "3 results: mug A $12, mug B $8, cup C $5",
        ),
        ("Mug A looks nice.", "buy[mug A]", "Purchased mug A for $12."),
    ]
    assert ta.reward == 0.0 and a.outcome == "failure" and a.task_key == "mug" and a.external_id == "run-7"
    # OTel ends with the model's last output: its observation never reached a span
    assert b.trajectory.steps[:1] == ta.steps[:1]
    assert (b.trajectory.steps[1].action, b.trajectory.steps[1].observation) == ("buy[mug A]", "")
    # LLaMA-Factory ShareGPT has no call ids and no text beside a call: same calls, same results
    sc, sa = c.trajectory.steps, ta.steps
    assert [(s.kind, s.action, s.observation) for s in sc] == [(s.kind, s.action, s.observation) for s in sa]
    assert [r.content for r in sc[0].tool_results] == [r.content for r in sa[0].tool_results]
    assert sa[0].kind == "tool" and sa[0].tool_calls[0].call_id == "c1" and sa[1].kind == "action"
    for got in (b, c):
        assert (got.trajectory.task, got.trajectory.instruction) == (TASK, SYSTEM)
        assert (got.task_key, got.outcome, got.trajectory.reward) == ("mug", "failure", 0.0)


def test_otel_with_observation_in_a_final_user_message_matches_openai() -> None:
    span = OTEL["spans"][1]
    attrs = {a["key"]: a["value"]["stringValue"] for a in span["attributes"]}
    inputs = json.loads(attrs["gen_ai.input.messages"]) + json.loads(attrs["gen_ai.output.messages"])
    inputs.append({"role": "user", "parts": [{"type": "text", "content": "Purchased mug A for $12."}]})
    trace = {
        "task_key": "mug",
        "outcome": "failure",
        "id": "run-7",
        "spans": [
            {
                "attributes": {
                    "gen_ai.system_instructions": [{"type": "text", "content": SYSTEM}],
                    "gen_ai.input.messages": inputs,
                }
            }
        ],
    }
    (b,) = parse_traces([trace], "otel")
    (a,) = parse_traces([OPENAI], "openai")
    assert replace(b.trajectory, provenance={}) == replace(a.trajectory, provenance={})
    assert b.trajectory.provenance["source_format"] == "otel"


def test_outcome_defaults_and_task_key_from_task() -> None:
    item = {"messages": OPENAI["messages"]}
    (unknown,) = parse_traces([item], "openai")
    assert unknown.outcome == "unknown" and unknown.trajectory.reward is None
    (again,) = parse_traces([item], "openai")
    assert unknown.task_key == again.task_key  # derived from the task text, deterministic
    (ok,) = parse_traces([{**item, "outcome": "success"}], "openai")
    assert ok.trajectory.reward == 1.0
    (partial,) = parse_traces([{**item, "outcome": "failure", "reward": 0.25}], "openai")
    assert partial.trajectory.reward == 0.25


def _broken(path_fn: Any) -> dict[str, Any]:
    item = json.loads(json.dumps(OPENAI))
    path_fn(item)
    return item


@pytest.mark.parametrize(
    ("fmt", "item", "message"),
    [
        (
            "openai",
            _broken(lambda t: t["messages"][5].update(role="robot")),
            "traces[3].messages[5].role: unknown role 'robot'",
        ),
        (
            "openai",
            _broken(lambda t: t["messages"][2]["tool_calls"][0]["function"].update(arguments=5)),
            "traces[3].messages[2].tool_calls[0].function.arguments: must be a JSON string or an object",
        ),
        (
            "openai",
            _broken(lambda t: t["messages"][3].update(tool_call_id="zz")),
            "traces[3].messages[3]: tool response to unknown or already answered call 'zz'",
        ),
        ("openai", _broken(lambda t: t.pop("messages")), "traces[3].messages: missing"),
        (
            "openai",
            _broken(lambda t: t.update(outcome="meh")),
            "traces[3].outcome: must be success, failure or unknown",
        ),
        ("openai", _broken(lambda t: t.update(reward=1.5)), "traces[3].reward: must be a number in [0, 1]"),
        (
            "sharegpt",
            {"conversations": [{"from": "alien", "value": "x"}]},
            "traces[3].conversations[0].from: unknown speaker 'alien'",
        ),
        ("sharegpt", {"conversations": [{"from": "human"}]}, "traces[3].conversations[0].value: missing"),
        (
            "otel",
            {"spans": [{"attributes": {"gen_ai.input.messages": "[{"}}]},
            "traces[3].spans[0].attributes.gen_ai.input.messages: not valid JSON",
        ),
        (
            "otel",
            {
                "spans": [
                    {
                        "attributes": {
                            "gen_ai.input.messages": [{"role": "user", "parts": [{"type": "hologram"}]}]
                        }
                    }
                ]
            },
            "traces[3].spans[0].attributes.gen_ai.input.messages[0].parts[0].type: "
            "unsupported part type 'hologram'",
        ),
        (
            "openai",
            {"messages": [{"role": "system", "content": "x"}]},
            "traces[3]: no user message holding the task",
        ),
    ],
)
def test_malformed_trace_names_field_and_index(fmt: str, item: dict[str, Any], message: str) -> None:
    good = {"openai": OPENAI, "otel": OTEL, "sharegpt": SHAREGPT}[fmt]
    batch = [good, good, good, item]
    with pytest.raises(TraceFormatError) as info:
        parse_traces({"traces": batch}, fmt)
    assert str(info.value).startswith(message)


def test_batch_level_errors() -> None:
    with pytest.raises(TraceFormatError, match="unknown format 'csv'"):
        parse_traces([OPENAI], "csv")
    with pytest.raises(TraceFormatError, match="the batch is empty"):
        parse_traces({"traces": []}, "openai")
    with pytest.raises(TraceFormatError, match=r"body.traces: missing"):
        parse_traces({"items": []}, "openai")
