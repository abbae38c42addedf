"""The tool-call action space as a grammar (core.llm.tool_grammar), pure: the message rule never
admits text that tau2's parser reads as a call, objects are closed to their listed keys, every tool
gets its call rule, and an environment without tools has no tool-call space."""

from __future__ import annotations

import json
import re

import pytest

from core.envs.tau2 import parse_call
from core.llm.tool_grammar import (
    MESSAGE_REGEX,
    ToolCalls,
    closed_schema,
    lark_grammar,
    skeleton,
    tool_calls_of,
)

TOOLS = (
    {
        "type": "function",
        "function": {
            "name": "get_order",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}, "items": {"type": "array", "items": {
                    "type": "object", "properties": {"id": {"type": "integer"}}}}},
                "required": ["order_id"],
            },
        },
    },
    {"type": "function", "function": {"name": "list_all", "parameters": {"type": "object"}}},
)  # fmt: skip
NAMES = frozenset({"get_order", "list_all"})


@pytest.mark.parametrize(
    "text",
    [
        "Your order is on its way.",
        "Hello",
        "Sure, (order #W1) is delivered",
        "#1 thing",
        "get_order is the tool I would call",
        "3 items: done ###STOP###",
        "Done, anything else? ###STOP###",
    ],
)
def test_a_message_the_rule_admits_is_a_message_to_tau2(text: str) -> None:
    assert re.fullmatch(MESSAGE_REGEX, text)
    assert parse_call(f"Action: {text}", NAMES) is None  # a message, never a (malformed) call


@pytest.mark.parametrize(
    "text",
    [
        'get_order({"order_id": "1"})',
        "get_order(",
        "get_order (x",
        "unknown_tool(1)",
        '{"name": "get_order", "arguments": {}}',
        '"get_order()"',
        "`list_all()`",
        " leading space",
        "two\nlines",
        "\x1e",
        "...",
        "word\x1c",
        "",
    ],
)
def test_the_message_rule_refuses_what_could_read_as_a_call(text: str) -> None:
    assert re.fullmatch(MESSAGE_REGEX, text) is None


def test_objects_are_closed_to_their_listed_keys_and_the_original_is_untouched() -> None:
    params = TOOLS[0]["function"]["parameters"]
    closed = closed_schema(params)
    assert closed["additionalProperties"] is False
    assert closed["properties"]["items"]["items"]["additionalProperties"] is False
    assert "additionalProperties" not in params
    assert list(closed_schema({"properties": {"b": {}, "a": {}}})["properties"]) == ["a", "b"]  # canonical
    kept = closed_schema({"type": "object", "properties": {}, "additionalProperties": True})
    assert kept["additionalProperties"] is True  # a schema that says so keeps it


def test_the_grammar_has_a_call_rule_per_tool_and_the_canonical_json_style() -> None:
    grammar = lark_grammar(ToolCalls(TOOLS), prefix=":")
    assert grammar.startswith('start: ":" " "? action\n')
    assert "action: call_0 | call_1 | message" in grammar
    assert 'call_0: "get_order(" args_0 ")"\n' in grammar  # order_id is required: no empty call
    assert 'call_1: "list_all(" args_1 ")" | "list_all()"' in grammar
    args = json.loads(grammar.split("args_0: %json ", 1)[1].split("\n", 1)[0])
    assert args["x-guidance"] == {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
    without = lark_grammar(ToolCalls(TOOLS, messages=False))
    assert "message" not in without and without.startswith('start: " "? action\n')


def test_skeletons_tool_call_spaces_and_bad_names() -> None:
    assert skeleton(TOOLS[0]) == 'get_order({"order_id": ""})' and skeleton(TOOLS[1]) == "list_all()"
    assert ToolCalls(TOOLS).names == ("get_order", "list_all")

    class NoTools:
        tools: tuple[dict, ...] = ()

    assert tool_calls_of(NoTools()) is None
    with pytest.raises(ValueError, match="identifier"):
        ToolCalls(({"type": "function", "function": {"name": "bad name"}},))
    with pytest.raises(ValueError, match="at least one"):
        ToolCalls(())
