"""Owns the format-neutral conversation every trace parser produces: ``Turn`` (one message),
``Conversation`` (a trace's turns, tool definitions and envelope hints), ``check_tools`` (OpenAI
tool definitions, checked) and ``placeholder`` (the typed text kept for a non-text content part).
``core.formats.importing`` turns a ``Conversation`` into a trajectory; the parsers (``import_openai``,
``import_sharegpt``, ``import_responses``, ``import_langfuse``, ``import_otel`` with ``genai``,
``openinference`` and ``openllmetry``) build them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from core.domain.trajectory import ToolCall
from core.formats.errors import TraceFormatError, require, shown


@dataclass(frozen=True)
class Turn:
    """One message in a format-neutral shape.

    ``tool_call_id`` None on a tool turn means the format gave no id: it answers the oldest call still
    waiting for a result (pairing by order). ``alternatives`` are the n>1 choices not continued with.
    """

    role: Literal["system", "user", "assistant", "tool"]
    text: str
    path: str  # where it came from, for error messages
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str = ""  # tool turns: the function's name; user / assistant turns: the speaker's (OpenAI name)
    is_error: bool = False  # tool turns: the tool reported a failure
    reasoning: str = ""  # assistant turns: reasoning text (kept, not trained on unless asked)
    alternatives: tuple[str, ...] = ()

    def identity(self) -> tuple[Any, ...]:
        """What makes two turns the same message (for de-duplicating replayed history): a comparison
        key only (whitespace-normalised text); the turn itself keeps its text as sent."""
        calls = tuple((c.call_id, c.name, c.canonical()) for c in self.tool_calls)
        return (self.role, self.name, " ".join(self.text.split()), calls, self.tool_call_id)


@dataclass(frozen=True)
class Conversation:
    """What a format parser returns for one trace: its turns, tool definitions and envelope hints
    found inside the trace itself (e.g. OTLP attributes; the item's own fields take precedence)."""

    turns: list[Turn]
    tools: tuple[dict[str, Any], ...] = ()
    envelope: dict[str, Any] = field(default_factory=dict)
    path: str = ""


def check_tools(raw: Any, path: str) -> tuple[dict[str, Any], ...]:
    """OpenAI tool definitions ``[{"type": "function", "function": {"name", ...}}]`` (legacy bare
    function objects ``{"name", "parameters"}`` and flattened ``{"type": "function", "name", ...}``
    definitions are wrapped; a ``type`` key never stays inside the function object)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise TraceFormatError(path, 'expected a list of {"type": "function", "function": {...}} definitions')
    out = []
    for index, tool in enumerate(raw):
        tpath = f"{path}[{index}]"
        if not isinstance(tool, dict):
            raise TraceFormatError(tpath, "expected an object")
        if "function" not in tool and isinstance(tool.get("name"), str):
            # a flattened definition ({type, name, parameters}): its type belongs outside the function
            tool = {
                "type": tool.get("type", "function"),
                "function": {k: v for k, v in tool.items() if k != "type"},
            }
        function = require(tool, "function", tpath, dict)
        require(function, "name", f"{tpath}.function", str)
        if tool.get("type", "function") != "function":
            raise TraceFormatError(
                f"{tpath}.type", f"only function tools are supported, got {shown(tool['type'])}"
            )
        out.append({"type": "function", "function": {k: v for k, v in function.items() if k != "type"}})
    return tuple(out)


def placeholder(kind: str, detail: str = "") -> str:
    """The typed placeholder kept in the text for a content part agentr does not train on (an image,
    audio, a file): ``[image part: image/png]``. The part is kept as a marker of what the model saw,
    never dropped and never refused."""
    return f"[{kind} part: {detail}]" if detail else f"[{kind} part]"


def media_detail(part: dict[str, Any]) -> str:
    """A short description of a non-text part: its MIME type or an http(s) URL (data URLs and inline
    bytes are not kept)."""
    for key in ("mime_type", "mimeType", "media_type", "format"):
        if isinstance(part.get(key), str) and part[key]:
            return str(part[key])
    for key in ("image_url", "url", "uri", "file_url"):
        value = part.get(key)
        if isinstance(value, dict):
            value = value.get("url")
        if isinstance(value, str) and value.startswith(("http://", "https://")) and len(value) <= 300:
            return value
        if isinstance(value, str) and value.startswith("data:"):
            return value[5:].split(";", 1)[0].split(",", 1)[0] or "inline data"
    return ""
