"""Owns the ShareGPT / AgentGym conversations import: ``{"conversations": [{from, value}]}`` -> turns.

Speakers: ``system``; ``human`` / ``user``; ``gpt`` / ``assistant`` / ``function_call``; ``observation``
/ ``tool`` / ``function_response``. AgentGym conversations open with the instruction as a human turn
answered by a bare "OK" from gpt: that opening exchange is read as the system instruction.
"""

from __future__ import annotations

from typing import Any

from core.formats.importing import TraceFormatError, Turn, require

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


def parse_turns(item: dict[str, Any], path: str) -> list[Turn]:
    conversations = require(item, "conversations", path, list)
    turns: list[Turn] = []
    for index, entry in enumerate(conversations):
        cpath = f"{path}.conversations[{index}]"
        speaker = require(entry, "from", cpath, str)
        if speaker not in _SPEAKERS:
            raise TraceFormatError(f"{cpath}.from", f"unknown speaker {speaker!r}")
        value = require(entry, "value", cpath, str)
        turns.append(Turn(_SPEAKERS[speaker], value, cpath))  # type: ignore[arg-type]
    # AgentGym: [human: instruction, gpt: "OK", human: task, ...]
    if (
        len(turns) >= 3
        and turns[0].role == "user"
        and turns[1].role == "assistant"
        and _is_ok(turns[1].text)
        and turns[2].role == "user"
    ):
        turns = [Turn("system", turns[0].text, turns[0].path), *turns[2:]]
    return turns
