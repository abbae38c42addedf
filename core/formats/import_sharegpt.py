"""Owns the ShareGPT / AgentGym conversations import: ``{"conversations": [{from, value}]}`` -> turns.

Speakers: ``system``; ``human`` / ``user``; ``gpt`` / ``assistant``; ``function_call`` (LLaMA-Factory:
the value is JSON ``{"name", "arguments"}`` or a list of them; calls get ids ``sharegpt-<turn>-<n>``);
``observation`` / ``tool`` / ``function_response`` (a tool result, paired with the oldest call waiting;
after a text action it is that action's observation). The item may carry ``system`` (the instruction)
and ``tools`` (a JSON string or list of function definitions), as LLaMA-Factory datasets do.
AgentGym conversations open with the instruction as a human turn answered by a bare "OK" from gpt:
that opening exchange is read as the system instruction.
"""

from __future__ import annotations

import json
from typing import Any

from core.domain import json_input
from core.domain.trajectory import ToolCall
from core.formats.errors import TraceFormatError, require, shown
from core.formats.import_openai import arguments_text
from core.formats.turns import Conversation, Turn, check_tools

_SPEAKERS = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "function_call": "assistant",
    "observation": "tool",
    "tool": "tool",
    "function_response": "tool",
}


def _is_ok(text: str) -> bool:
    return text.strip().strip(".!").lower() == "ok"


def _calls(value: str, path: str, index: int) -> tuple[ToolCall, ...]:
    try:
        data = json_input.loads(value)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(
            f"{path}.value", f'not valid JSON ({exc.msg}); send {{"name": ..., "arguments": {{...}}}}'
        ) from None
    items = data if isinstance(data, list) else [data]
    calls = []
    for n, call in enumerate(items):
        cpath = f"{path}.value" + (f"[{n}]" if isinstance(data, list) else "")
        name = require(call, "name", cpath, str)
        arguments = arguments_text(call.get("arguments"), f"{cpath}.arguments")
        calls.append(ToolCall(call_id=f"sharegpt-{index}-{n}", name=name, arguments=arguments))
    if not calls:
        raise TraceFormatError(f"{path}.value", "an empty list of calls")
    return tuple(calls)


def parse(item: dict[str, Any], path: str) -> Conversation:
    conversations = require(item, "conversations", path, list)
    tools_raw = item.get("tools")
    if isinstance(tools_raw, str):
        try:
            tools_raw = json_input.loads(tools_raw) if tools_raw.strip() else None
        except json.JSONDecodeError as exc:
            raise TraceFormatError(f"{path}.tools", f"not valid JSON ({exc.msg})") from None
    tools = check_tools(tools_raw, f"{path}.tools")
    turns: list[Turn] = []
    system = item.get("system")
    if system is not None:
        if not isinstance(system, str):
            raise TraceFormatError(f"{path}.system", "expected a string")
        turns.append(Turn("system", system, f"{path}.system"))
    for index, entry in enumerate(conversations):
        cpath = f"{path}.conversations[{index}]"
        speaker = require(entry, "from", cpath, str)
        if speaker not in _SPEAKERS:
            raise TraceFormatError(
                f"{cpath}.from",
                f"unknown speaker {shown(speaker)} (send system, human, gpt, function_call or observation)",
            )
        value = require(entry, "value", cpath, str)
        if speaker == "function_call":
            turns.append(Turn("assistant", "", cpath, _calls(value, cpath, index)))
        else:
            turns.append(Turn(_SPEAKERS[speaker], value, cpath))  # type: ignore[arg-type]
    # AgentGym: [human: instruction, gpt: "OK", human: task, ...]
    start = 1 if system is not None else 0
    body = turns[start:]
    if (
        len(body) >= 3
        and body[0].role == "user"
        and body[1].role == "assistant"
        and not body[1].tool_calls
        and _is_ok(body[1].text)
        and body[2].role == "user"
    ):
        turns = [*turns[:start], Turn("system", body[0].text, body[0].path), *body[2:]]
    return Conversation(turns=turns, tools=tools, path=path)
