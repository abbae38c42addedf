"""Owns the record shapes of the chat formats: one TrainingSample <-> one OpenAI or ShareGPT record.

* OpenAI fine-tuning (``openai_record``): ``{"messages": [...], "tools": [...]?}``. System and user
  messages are ``{role, content}``; every assistant message carries ``weight`` 0/1; an assistant
  message that calls tools has ``tool_calls: [{"id", "type": "function", "function": {"name",
  "arguments"}}]`` with ``arguments`` as a JSON string (and ``content`` only when it has text);
  a ``tool`` message is ``{role: "tool", tool_call_id, content}``. A system, user or assistant message
  with a speaker carries OpenAI's ``name`` (multi-agent group chats). ``tools`` (the OpenAI function
  definitions) is present only when the sample has some. This is the published chat fine-tuning
  format with tool calling and per-message ``weight``.
* ShareGPT (``sharegpt_record``): samples without tools keep the AgentGym shape
  ``{"id", "conversations": [{"from", "value", "loss"}]}`` with ``from`` in system / human / gpt
  and ``loss`` true/false on gpt turns, null elsewhere. Samples with tools use the LLaMA-Factory
  convention: ``{"id", "system", "tools", "conversations"}`` where ``tools`` is a JSON STRING of
  the function objects (``{"name", "description", "parameters"}``), the system prompt is the
  ``system`` field, an assistant tool call is a ``function_call`` turn whose value is the JSON
  ``{"name", "arguments": {...}}`` (a JSON list for parallel calls) and the tool results are one
  ``observation`` turn (several results joined by newlines). Assistant text beside a call (its
  thought, or the reflection) is sent as a ``<think>...</think>`` prefix of the function_call
  value, the form LLaMA-Factory's function formatter keeps (its ``thought_words``).
  ``loss`` is set on gpt and function_call turns. A turn whose message has a speaker carries its
  ``name`` (both shapes; tool results excepted).
* ``fold_reasoning`` (a dataset built with ``include_reasoning``): each assistant message's
  reasoning becomes a ``<think>\n{reasoning}\n</think>\n\n`` prefix of its content (the
  DeepSeek-R1 / Qwen3 chat-template form), so it is trained exactly when that message has weight 1;
  a ShareGPT function_call turn whose content already opens with that block is not wrapped again.
* ``general_record_to_sample`` reads either shape back (tool calls included) as a ``general``
  sample, so an exported file can be mixed in as general data.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

from core.domain import json_input
from core.domain.ids import derived_id
from core.domain.serde import to_dict
from core.domain.trajectory import Message, ToolCall, TrainingSample
from core.formats.errors import shown


class FormatError(ValueError):
    """A file or record is not in the expected format; the message names the file and line."""


_TO_SHAREGPT = {"system": "system", "user": "human", "assistant": "gpt", "tool": "observation"}
_FROM_SHAREGPT = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "function_call": "assistant",
    "observation": "tool",
    "tool": "tool",
}
_THINK = re.compile(r"^\s*<think>(.*?)</think>\s*", re.DOTALL)


def _has_tools(sample: TrainingSample) -> bool:
    return bool(sample.tools) or any(m.tool_calls or m.role == "tool" for m in sample.messages)


def _arguments_object(call: ToolCall) -> Any:
    text = call.arguments.strip()
    if not text:
        return {}
    try:
        return json_input.loads(text)
    except json.JSONDecodeError:
        raise FormatError(
            f"tool call {shown(call.call_id)} ({shown(call.name, quoted=False)}): "
            f"arguments are not valid JSON: {shown(text)}"
        ) from None


def fold_reasoning(sample: TrainingSample) -> TrainingSample:
    """``sample`` with every assistant message's reasoning moved into its content as a
    ``<think>\\n{reasoning}\\n</think>\\n\\n`` prefix (``reasoning`` then empty, so no format
    renders it twice); messages without reasoning are unchanged."""
    if not any(m.role == "assistant" and m.reasoning for m in sample.messages):
        return sample
    messages = tuple(
        replace(m, content=f"<think>\n{m.reasoning}\n</think>\n\n{m.content}", reasoning="")
        if m.role == "assistant" and m.reasoning
        else m
        for m in sample.messages
    )
    return replace(sample, messages=messages)


def openai_record(sample: TrainingSample) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = []
    for m in sample.messages:
        rec: dict[str, Any] = {"role": m.role}
        if m.role == "assistant" and m.tool_calls:
            if m.content:
                rec["content"] = m.content
            rec["tool_calls"] = [
                {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in m.tool_calls
            ]
        elif m.role == "tool":
            rec["tool_call_id"] = m.tool_call_id or ""
            rec["content"] = m.content
        else:
            rec["content"] = m.content
        if m.name and m.role in ("system", "user", "assistant"):
            rec["name"] = m.name  # the speaker (OpenAI `name`: a group chat's participant)
        if m.role == "assistant":
            rec["weight"] = 1 if m.weight else 0
        msgs.append(rec)
    out: dict[str, Any] = {"messages": msgs}
    if sample.tools:
        out["tools"] = [dict(t) for t in sample.tools]
    return out


def _function_object(tool: dict[str, Any]) -> dict[str, Any]:
    inner = tool.get("function")
    return dict(inner) if tool.get("type") == "function" and isinstance(inner, dict) else dict(tool)


def _sharegpt_tools(sample: TrainingSample) -> dict[str, Any]:
    conv: list[dict[str, Any]] = []
    system = ""
    for m in sample.messages:
        if m.role == "system" and not conv and not system:
            system = m.content
            continue
        if m.role == "tool":
            if conv and conv[-1]["from"] == "observation":
                conv[-1]["value"] += "\n" + m.content
                continue
            conv.append({"from": "observation", "value": m.content, "loss": None})
        elif m.role == "assistant" and m.tool_calls:
            calls = [{"name": c.name, "arguments": _arguments_object(c)} for c in m.tool_calls]
            value = json.dumps(calls[0] if len(calls) == 1 else calls, ensure_ascii=False)
            if _THINK.match(m.content):  # folded reasoning (fold_reasoning): already a think block
                value = f"{m.content.strip()}{value}"
            elif m.content.strip():
                value = f"<think>{m.content.strip()}</think>{value}"
            conv.append(_named({"from": "function_call", "value": value, "loss": bool(m.weight)}, m))
        else:
            loss = bool(m.weight) if m.role == "assistant" else None
            conv.append(_named({"from": _TO_SHAREGPT[m.role], "value": m.content, "loss": loss}, m))
    tools = [_function_object(t) for t in sample.tools]
    return {
        "id": sample.sample_id,
        "system": system,
        "tools": json.dumps(tools, ensure_ascii=False),
        "conversations": conv,
    }


def _named(turn: dict[str, Any], m: Message) -> dict[str, Any]:
    """A ShareGPT turn with its speaker's ``name`` when the message has one (not on tool results)."""
    if m.name and m.role != "tool":
        turn["name"] = m.name
    return turn


def sharegpt_record(sample: TrainingSample) -> dict[str, Any]:
    if _has_tools(sample):
        return _sharegpt_tools(sample)
    conv = [
        _named(
            {
                "from": _TO_SHAREGPT[m.role],
                "value": m.content,
                "loss": bool(m.weight) if m.role == "assistant" else None,
            },
            m,
        )
        for m in sample.messages
    ]
    return {"id": sample.sample_id, "conversations": conv}


def samples_record(sample: TrainingSample) -> dict[str, Any]:
    data: dict[str, Any] = to_dict(sample)
    return data


# --------------------------------------------------------------------------------------------
# Plain stored samples: records straight from the decoded JSON (dataset downloads)
# --------------------------------------------------------------------------------------------
# Most stored samples are plain: text messages of system / user / assistant, no tool calls, no
# tool definitions. A download turns those into records directly from the dict the store holds,
# without building a TrainingSample and its Messages first; the ``*_plain`` builders give exactly
# the record ``openai_record`` / ``sharegpt_record`` / ``samples_record`` give for the decoded
# sample (tests/unit/test_plain_records.py compares them). Anything else is not plain and takes
# the TrainingSample path.

_PLAIN_ROLES = frozenset({"system", "user", "assistant"})
_PLAIN_SAMPLE_KEYS = frozenset({"sample_id", "kind", "messages", "reward", "provenance", "tools"})
_PLAIN_MESSAGE_KEYS = frozenset(
    {"role", "content", "weight", "tool_call_id", "name", "reasoning", "tool_calls", "why"}
)


def is_plain(data: Any) -> bool:
    """Whether a stored TrainingSample dict is plain (see above): every message a dict of the known
    keys with a system / user / assistant role and content, no tool calls, no tools."""
    if not isinstance(data, dict) or not data.keys() <= _PLAIN_SAMPLE_KEYS or data.get("tools"):
        return False
    messages = data.get("messages")
    if "sample_id" not in data or "kind" not in data or not isinstance(messages, list):
        return False
    for m in messages:
        if (
            not isinstance(m, dict)
            or m.get("role") not in _PLAIN_ROLES
            or "content" not in m
            or m.get("tool_calls")
            or not m.keys() <= _PLAIN_MESSAGE_KEYS
        ):
            return False
    return True


def openai_plain(data: dict[str, Any]) -> dict[str, Any]:
    """``openai_record`` of a plain stored sample (``is_plain``)."""
    msgs: list[dict[str, Any]] = []
    for m in data["messages"]:
        role = m["role"]
        rec: dict[str, Any] = {"role": role, "content": m["content"]}
        if m.get("name"):
            rec["name"] = m["name"]
        if role == "assistant":
            rec["weight"] = 1 if m.get("weight", 0) else 0
        msgs.append(rec)
    return {"messages": msgs}


def sharegpt_plain(data: dict[str, Any]) -> dict[str, Any]:
    """``sharegpt_record`` of a plain stored sample (``is_plain``)."""
    conv: list[dict[str, Any]] = []
    for m in data["messages"]:
        role = m["role"]
        turn = {
            "from": _TO_SHAREGPT[role],
            "value": m["content"],
            "loss": bool(m.get("weight", 0)) if role == "assistant" else None,
        }
        if m.get("name"):
            turn["name"] = m["name"]
        conv.append(turn)
    return {"id": data["sample_id"], "conversations": conv}


def samples_plain(data: dict[str, Any]) -> dict[str, Any]:
    """``samples_record`` of a plain stored sample (``is_plain``): every field, defaults filled in."""
    return {
        "sample_id": data["sample_id"],
        "kind": data["kind"],
        "messages": [
            {
                "role": m["role"],
                "content": m["content"],
                "weight": m.get("weight", 0),
                "tool_calls": [],
                "tool_call_id": m.get("tool_call_id"),
                "name": m.get("name"),
                "reasoning": m.get("reasoning", ""),
                "why": m.get("why", ""),
            }
            for m in data["messages"]
        ],
        "reward": data.get("reward"),
        "provenance": data.get("provenance") or {},
        "tools": [],
    }


PLAIN_RECORD = {"openai": openai_plain, "sharegpt": sharegpt_plain, "samples": samples_plain}


# --------------------------------------------------------------------------------------------
# Reading records back (general chat data)
# --------------------------------------------------------------------------------------------


def _weight(value: Any, where: str) -> int:
    if value is None:
        return 1
    if value in (0, 1) or isinstance(value, bool):
        return int(value)
    raise FormatError(f"{where}: loss flag must be 0/1 or true/false, got {shown(value)}")


def _openai_calls(raw: Any, where: str) -> tuple[ToolCall, ...]:
    if not isinstance(raw, list):
        raise FormatError(f"{where}: tool_calls must be a list")
    calls = []
    for index, call in enumerate(raw):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise FormatError(f"{where}: tool_calls[{index}] needs function.name")
        arguments = fn.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        calls.append(ToolCall(str(call.get("id") or f"call_{index}"), fn["name"], arguments))
    return tuple(calls)


def _openai_messages(record: dict[str, Any], where: str) -> list[Message]:
    msgs: list[Message] = []
    for m in record["messages"]:
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ("system", "user", "assistant", "tool"):
            raise FormatError(
                f"{where}: unsupported message role {shown(role)} (system, user, assistant, tool)"
            )
        content = m.get("content")
        calls = _openai_calls(m["tool_calls"], where) if role == "assistant" and m.get("tool_calls") else ()
        if content is None and (calls or role == "tool"):
            content = ""
        if not isinstance(content, str):
            raise FormatError(f"{where}: message content must be text, got {type(content).__name__}")
        w = _weight(m.get("weight"), where) if role == "assistant" else 0
        tool_call_id = m.get("tool_call_id") if role == "tool" else None
        name = m.get("name") if role != "tool" and isinstance(m.get("name"), str) else None
        msgs.append(Message(role, content, w, tool_calls=calls, tool_call_id=tool_call_id, name=name or None))
    return msgs


def _sharegpt_call_turn(value: str, where: str, turn_index: int) -> tuple[str, tuple[ToolCall, ...]]:
    thought = ""
    match = _THINK.match(value)
    if match:
        thought, value = match.group(1).strip(), value[match.end() :]
    try:
        parsed = json_input.loads(value)
    except json.JSONDecodeError:
        raise FormatError(f"{where}: function_call value is not JSON {{name, arguments}}") from None
    items = parsed if isinstance(parsed, list) else [parsed]
    calls = []
    for index, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise FormatError(f"{where}: function_call needs a name")
        arguments = json.dumps(item.get("arguments", {}), ensure_ascii=False)
        calls.append(ToolCall(f"call_{turn_index}_{index}", item["name"], arguments))
    return thought, tuple(calls)


def _sharegpt_messages(record: dict[str, Any], where: str) -> list[Message]:
    msgs: list[Message] = []
    if isinstance(record.get("system"), str) and record["system"]:
        msgs.append(Message("system", record["system"]))
    pending: tuple[ToolCall, ...] = ()
    for index, turn in enumerate(record["conversations"]):
        who = turn.get("from") if isinstance(turn, dict) else None
        role = _FROM_SHAREGPT.get(who) if isinstance(who, str) else None
        if role is None:
            raise FormatError(f"{where}: unsupported ShareGPT speaker {shown(who)}")
        value = turn.get("value")
        if not isinstance(value, str):
            raise FormatError(f"{where}: conversation value must be text")
        w = _weight(turn.get("loss"), where) if role == "assistant" else 0
        if who == "function_call":
            thought, pending = _sharegpt_call_turn(value, where, index)
            msgs.append(Message("assistant", thought, w, tool_calls=pending))
        elif role == "tool":
            call = pending[0] if pending else None
            msgs.append(
                Message(
                    "tool",
                    value,
                    0,
                    tool_call_id=call.call_id if call else None,
                    name=call.name if call else None,
                )
            )
            pending = ()
        else:
            name = turn.get("name") if isinstance(turn.get("name"), str) else None
            msgs.append(Message(role, value, w, name=name or None))  # type: ignore[arg-type]
    return msgs


def _record_tools(record: dict[str, Any], where: str) -> tuple[dict[str, Any], ...]:
    tools = record.get("tools")
    if tools in (None, "", []):
        return ()
    if isinstance(tools, str):
        try:
            tools = json_input.loads(tools)
        except json.JSONDecodeError:
            raise FormatError(f"{where}: tools is not a JSON list of function definitions") from None
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise FormatError(f"{where}: tools must be a list of function definitions")
    return tuple(t if t.get("type") == "function" else {"type": "function", "function": t} for t in tools)


def general_record_to_sample(record: Any, where: str) -> TrainingSample:
    """An OpenAI-messages or ShareGPT-conversations record as a ``general`` training sample.

    Assistant turns are trained on unless the record says otherwise (``weight`` / ``loss``).
    The sample id is derived from the record's content, so re-reading a file gives the same ids.
    """
    if not isinstance(record, dict):
        raise FormatError(f"{where}: expected a JSON object, got {type(record).__name__}")
    if isinstance(record.get("messages"), list):
        msgs = _openai_messages(record, where)
    elif isinstance(record.get("conversations"), list):
        msgs = _sharegpt_messages(record, where)
    else:
        raise FormatError(f"{where}: neither 'messages' (OpenAI) nor 'conversations' (ShareGPT) found")
    if not any(m.role == "assistant" for m in msgs):
        raise FormatError(f"{where}: conversation has no assistant turn")
    sid = derived_id("general", json.dumps(record, sort_keys=True, ensure_ascii=False))
    return TrainingSample(
        sample_id=sid,
        kind="general",
        messages=tuple(msgs),
        provenance={"source": where},
        tools=_record_tools(record, where),
    )
