"""Owns the action space of a tool-calling environment as a grammar: what the ``Action:`` line of a
ReAct answer may be when the environment acts by tool calls (``env.tools``: tau2's domains), written
as a Lark grammar for llguidance (core.llm.hf_tool_guide runs it). Pure: stdlib only, no I/O.

The Action line is either

* a call of one of the tools in the canonical form of ``ToolCall.canonical`` (what
  ``core.envs.tau2.parse_call`` reads and the warm start teaches): ``name({"arg": value, ...})``,
  its arguments a JSON object that validates against the tool's ``parameters`` schema, its keys
  in sorted order as ``ToolCall.canonical`` writes them (llguidance writes an object's properties
  in the schema's order, so the schema given to it lists them sorted), compact
  separators ``", "`` / ``": "`` and no other whitespace (so the call stays on its line), objects
  closed to the keys their schema lists (``additionalProperties: false`` where the schema does not
  say: a tool's function takes no other keyword); a tool whose schema requires nothing may also be
  called as ``name()``;
* or, when the environment allows it (``ToolCalls.messages``), a message to the user: one line that
  cannot be read as a call, i.e. it does not start with ``{``, with a quote, backtick, bracket or
  asterisk (``parse_action`` strips those), nor with ``identifier(``.

``prefix`` is the part of the ``Action:`` marker not yet emitted when the constraint starts (see
core/llm/action_trie.py); one optional space may follow it.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
"""llguidance's ``x-guidance`` options: the separators of ``json.dumps`` (the canonical calls)."""

# a message: not ``{``, not a wrapper parse_action strips (nor a period: "." alone unwraps to
# nothing), not ``identifier(``, no control character (Python reads \x1c-\x1f as whitespace)
_WORD = "[A-Za-z_][A-Za-z0-9_]*"
_CHAR = r"[^\x00-\x1f\x7f\x85\u2028\u2029]"
MESSAGE_REGEX = (
    r"[^A-Za-z_{\s`\"'\[\]*.\x00-\x1f\x7f\x85\u2028\u2029]" + _CHAR + "*"
    + "|" + _WORD + r"([ \t]+[^(\s\x00-\x1f\x7f]" + _CHAR + r"*|[^A-Za-z0-9_(\s\x00-\x1f\x7f]" + _CHAR + "*)?"
)  # fmt: skip
"""One line that ``core.envs.tau2.parse_call`` reads as a message, never as a call."""


@dataclass(frozen=True)
class ToolCalls:
    """The action space of a tool-calling state: the tools' OpenAI function schemas and whether a
    message to the user is an action too."""

    tools: tuple[dict[str, Any], ...]
    messages: bool = True

    def __post_init__(self) -> None:
        if not self.tools:
            raise ValueError("a tool-call constraint needs at least one tool schema")
        for tool in self.tools:
            name = function_of(tool).get("name")
            if not isinstance(name, str) or not name.isidentifier():
                raise ValueError(f"a tool's name must be an identifier, got {name!r}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(str(function_of(t)["name"]) for t in self.tools)

    def key(self) -> str:
        """A stable text naming this action space (a cache key)."""
        return json.dumps([self.tools, self.messages], sort_keys=True, default=str)


def function_of(tool: dict[str, Any]) -> dict[str, Any]:
    """The function object of an OpenAI tool schema (``{"type": "function", "function": {...}}``) or
    of a bare function object."""
    inner = tool.get("function")
    return inner if isinstance(inner, dict) else tool


def tool_calls_of(env: object, messages: bool = True) -> ToolCalls | None:
    """The tool-call action space of ``env`` (its ``tools``), or None for an environment without."""
    tools = getattr(env, "tools", None)
    if not tools:
        return None
    return ToolCalls(tuple(dict(t) for t in tools), messages)


def closed_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with ``additionalProperties: false`` on every object that lists its properties and
    says nothing of others, and every object's properties in sorted key order (module docstring);
    the rest unchanged."""
    out = copy.deepcopy(schema)

    def close(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("properties"), dict):
                node["properties"] = dict(sorted(node["properties"].items()))
            if "properties" in node and "additionalProperties" not in node:
                node["additionalProperties"] = False
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    close(out)
    return out


def parameters_of(tool: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema of a tool's arguments (an object; an empty one when the tool takes none)."""
    params = function_of(tool).get("parameters")
    if not isinstance(params, dict) or not params:
        return {"type": "object", "properties": {}}
    return params


def _literal(text: str) -> str:
    return json.dumps(text)  # a Lark string literal: JSON's escapes are Lark's


def lark_grammar(space: ToolCalls, prefix: str = "") -> str:
    """The Lark grammar (llguidance's dialect) of ``prefix``, an optional space and one action of
    ``space`` (module docstring)."""
    head = f"{_literal(prefix)} " if prefix else ""
    alternatives: list[str] = []
    rules: list[str] = []
    for index, tool in enumerate(space.tools):
        name = str(function_of(tool)["name"])
        schema = {**closed_schema(parameters_of(tool)), "x-guidance": JSON_STYLE}
        args = f"args_{index}"
        rules.append(f"{args}: %json {json.dumps(schema)}")
        empty = f" | {_literal(name + '()')}" if not schema.get("required") else ""
        rules.append(f"call_{index}: {_literal(name + '(')} {args} {_literal(')')}{empty}")
        alternatives.append(f"call_{index}")
    if space.messages:
        rules.append(f"message: MESSAGE\nMESSAGE: /{MESSAGE_REGEX}/")
        alternatives.append("message")
    lines = [f'start: {head}" "? action', f"action: {' | '.join(alternatives)}", *rules]
    return "\n".join(lines) + "\n"


def _least(schema: dict[str, Any], empty: dict[str, Any]) -> Any:
    """The shortest value ``schema`` allows, roughly: its shortest enum value or its type's empty one."""
    if schema.get("enum"):
        return min(schema["enum"], key=lambda v: len(json.dumps(v)))
    return empty.get(str(schema.get("type")), "")


def skeleton(tool: dict[str, Any]) -> str:
    """The shortest-looking call of ``tool``: its required keys with empty values (the shortest enum
    value for an enum), keys sorted as the constraint writes them (a size estimate
    for the token budget of a forced Action line, never sent to an environment)."""
    params = parameters_of(tool)
    required = params.get("required") or []
    properties = params.get("properties") or {}
    name = str(function_of(tool)["name"])
    if not required:
        return f"{name}()"
    empty = {"string": "", "array": [], "object": {}, "integer": 0, "number": 0, "boolean": False}
    arguments = {key: _least(properties.get(key) or {}, empty) for key in required}
    return f"{name}({json.dumps(arguments, sort_keys=True)})"
