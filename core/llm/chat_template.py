"""Owns chat templates for training: per-message character spans of a rendered conversation, the
prefix-stability check, and the conversion of our messages (with tool calls) to the HF message shape.

Two ways to find where each assistant message lies in the rendered text:

* **Generation blocks.** When the template wraps assistant content in ``{% generation %} ...
  {% endgeneration %}`` (transformers' assistant-mask convention), the renderer reports one span per
  assistant message (``render_jinja_template(return_assistant_tokens_mask=True)``).
* **Incremental rendering** (every stock template: Llama-3.x, Qwen2.5, SmolLM2's ChatML, ...). For
  assistant message ``i`` we render the messages before it with ``add_generation_prompt=True`` (the
  text up to where the model starts writing) and the messages up to and including it without the
  prompt. The span is ``[len(head), len(upto.rstrip()))``: the reply, its end-of-turn token, nothing
  after it (trailing whitespace between turns is context). Every partial rendering must be a PREFIX
  of the whole conversation's rendering; a template that rewrites history (Qwen3 stripping earlier
  ``<think>`` blocks, a header that depends on the last message, ...) is refused with
  ``TemplateError`` naming the template and showing where the two renderings differ. A template that
  ignores ``add_generation_prompt`` is refused too (the reply's start cannot be told).

Tool calling goes through the template as the model was trained to see it: our
``Message.tool_calls`` (id, name, JSON arguments string) become HF's ``{"type": "function",
"function": {"name", "arguments"}}`` entries (arguments decoded to a dict when they are a JSON
object, which is what stock templates' ``| tojson`` expects), ``role="tool"`` messages carry
``tool_call_id`` (and the called function's ``name``), and ``TrainingSample.tools`` is passed as
``tools=``.

A template that ignores ``tool_calls`` (the tiny model's ChatML does) would train a revision's
corrective call as an empty reply, silently. ``tool_call_problem(tokenizer)`` renders a probe
conversation (system, user, an assistant call with JSON arguments, its tool result, a reply) through
``conversation_spans`` exactly as training does and says, naming the model, when the call's name or
arguments are not inside the assistant's trained span (``None`` when they are).

``folder_template_problem(folder)`` / ``run_template_problem(config)`` are the submission-time check
(API 422 naming the field, ``agentr run`` exit 2): the folder must carry a chat template, and, where
transformers is installed, a probe conversation must render prefix-stably; a run on a tool-calling
environment (``TOOL_ENV_SCHEMES``: ``tau2:*``) needs a template that passes the tool-call probe too.
The trainer checks the template and every sample again (``train_service.sft`` /
``train_service.tokenize``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

_GENERATION_BLOCK = re.compile(r"\{%-?\s*generation\s*-?%\}")
TOOL_ENV_SCHEMES = ("tau2",)  # environment URI schemes whose agents act by native tool calls
Span = tuple[int, int]


class TemplateError(ValueError):
    """The tokenizer's chat template cannot mark assistant spans for this conversation."""


# ------------------------------------------------------------------------------ message conversion
def _arguments(raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    try:
        decoded = json.loads(raw)
    except json.JSONDecodeError:
        return raw
    return decoded if isinstance(decoded, dict) else raw


def _field(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def hf_messages(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """Our messages as the dicts chat templates read (see the module docstring for tool calls)."""
    out: list[dict[str, Any]] = []
    names_by_call: dict[str, str] = {}
    for m in messages:
        entry: dict[str, Any] = {"role": m.role, "content": m.content}
        calls = _field(m, "tool_calls") or ()
        if calls:
            converted = []
            for call in calls:
                call_id = _field(call, "call_id") or _field(call, "id") or ""  # ToolCall or a dict
                name = _field(call, "name")
                names_by_call[call_id] = name
                item: dict[str, Any] = {
                    "type": "function",
                    "function": {"name": name, "arguments": _arguments(_field(call, "arguments"))},
                }
                if call_id:
                    item["id"] = call_id
                converted.append(item)
            entry["tool_calls"] = converted
        call_id = _field(m, "tool_call_id")
        if m.role == "tool" and call_id:
            entry["tool_call_id"] = call_id
            name = _field(m, "name") or names_by_call.get(call_id)
            if name:
                entry["name"] = name
        out.append(entry)
    return out


def hf_tools(tools: Sequence[Any] | None) -> list[dict[str, Any]] | None:
    """OpenAI-style function definitions as ``tools=`` (None when there are none)."""
    if not tools:
        return None
    return [dict(t) for t in tools]


# ------------------------------------------------------------------------------ spans
def template_name(tokenizer: Any) -> str:
    template = getattr(tokenizer, "chat_template", None) or ""
    digest = hashlib.sha256(template.encode()).hexdigest()[:12]
    return f"{getattr(tokenizer, 'name_or_path', '?')!s} (template sha256 {digest})"


def _template(tokenizer: Any) -> str:
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # named templates: the default one
        template = template.get("default")
    if not template:
        raise TemplateError(
            f"tokenizer {getattr(tokenizer, 'name_or_path', '?')!r} has no chat template: the model folder "
            "needs one (chat_template.jinja, or chat_template in tokenizer_config.json) to train on chats"
        )
    return str(template)


def has_generation_blocks(tokenizer: Any) -> bool:
    return bool(_GENERATION_BLOCK.search(_template(tokenizer)))


def _render_generation(
    tokenizer: Any, template: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> tuple[str, list[Span]]:
    from transformers.utils.chat_template_utils import render_jinja_template

    try:
        rendered, spans = render_jinja_template(  # type: ignore[misc,str-unpack]
            conversations=[messages],
            tools=tools,  # type: ignore[arg-type]
            chat_template=template,
            return_assistant_tokens_mask=True,
            **tokenizer.special_tokens_map,
        )
    except Exception as exc:
        raise TemplateError(f"the chat template of {template_name(tokenizer)} failed: {exc}") from exc
    return rendered[0], [(int(s[0]), int(s[1])) for s in spans[0]]  # type: ignore[index]


def _apply(
    tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, prompt: bool
) -> str:
    try:
        text = tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=prompt
        )
    except Exception as exc:
        raise TemplateError(
            f"the chat template of {template_name(tokenizer)} cannot render {len(messages)} message(s): {exc}"
        ) from exc
    if not isinstance(text, str):
        raise TemplateError(f"the chat template of {template_name(tokenizer)} did not render text")
    return text


def _difference(part: str, whole: str) -> str:
    at = next(
        (i for i, (a, b) in enumerate(zip(part, whole, strict=False)) if a != b), min(len(part), len(whole))
    )
    lo = max(0, at - 30)
    return f"at character {at}: {part[lo : at + 40]!r} versus {whole[lo : at + 40]!r}"


def _render_incremental(
    tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> tuple[str, list[Span]]:
    whole = _apply(tokenizer, messages, tools, False)
    spans: list[Span] = []
    checked_prompt = False
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        if i == 0:
            raise TemplateError("a conversation cannot start with an assistant message")
        head = _apply(tokenizer, messages[:i], tools, True)
        if not checked_prompt:
            if head == _apply(tokenizer, messages[:i], tools, False):
                raise TemplateError(
                    f"the chat template of {template_name(tokenizer)} ignores add_generation_prompt, so "
                    "where an assistant reply starts cannot be told; add {% generation %} blocks"
                )
            checked_prompt = True
        upto = _apply(tokenizer, messages[: i + 1], tools, False)
        for part, count, what in ((head, i, " with the generation prompt"), (upto, i + 1, "")):
            if not whole.startswith(part):
                raise TemplateError(
                    f"the chat template of {template_name(tokenizer)} is not prefix-stable: the first "
                    f"{count} message(s){what} render differently "
                    f"from the same messages inside the whole conversation ({_difference(part, whole)}); "
                    "it rewrites earlier turns (e.g. strips reasoning or dates the last turn), so "
                    "per-message loss masks cannot be computed; wrap assistant content in "
                    "{% generation %} blocks or "
                    "use a template that renders history unchanged"
                )
        end = len(upto.rstrip())
        if end <= len(head):
            raise TemplateError(
                f"the chat template of {template_name(tokenizer)} rendered assistant message {i} as nothing"
            )
        spans.append((len(head), end))
    return whole, spans


def conversation_spans(
    tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
) -> tuple[str, list[Span]]:
    """The whole rendered conversation and one character span per assistant message, in order.

    ``messages`` are HF-shaped dicts (``hf_messages``). Raises ``TemplateError`` (module docstring).
    """
    template = _template(tokenizer)
    if _GENERATION_BLOCK.search(template):
        return _render_generation(tokenizer, template, messages, tools)
    return _render_incremental(tokenizer, messages, tools)


PROBE = (
    {"role": "system", "content": "You are an agent. Reply with Thought: ... then Action: ..."},
    {"role": "user", "content": "Goal: craft 1 stick."},
    {"role": "assistant", "content": "Thought: I need planks.\nAction: get 2 oak planks"},
    {"role": "user", "content": "Got 2 oak planks."},
    {"role": "assistant", "content": "Thought: now craft.\nAction: craft 4 stick using 2 oak planks"},
    {"role": "user", "content": "Crafted 4 minecraft:stick."},
)


def check_template(tokenizer: Any) -> None:
    """Raise ``TemplateError`` unless the template marks both replies of a probe ReAct conversation
    (generation blocks or prefix-stable incremental rendering) and each span holds its reply."""
    messages = [dict(m) for m in PROBE]
    text, spans = conversation_spans(tokenizer, messages)
    replies = [m["content"] for m in messages if m["role"] == "assistant"]
    if len(spans) != len(replies):
        raise TemplateError(
            f"the chat template of {template_name(tokenizer)} marked {len(spans)} span(s) for "
            f"{len(replies)} assistant message(s)"
        )
    for (start, end), reply in zip(spans, replies, strict=True):
        if reply.strip() not in text[start:end]:
            raise TemplateError(
                f"the chat template of {template_name(tokenizer)} marks a span that does not hold its reply"
            )


# ------------------------------------------------------------------------------ tool calls
TOOL_PROBE_NAME = "get_order_details"
TOOL_PROBE_ARGUMENTS = {"order_id": "#W2378156"}
TOOL_PROBE_TOOLS = (
    {
        "type": "function",
        "function": {
            "name": TOOL_PROBE_NAME,
            "description": "The status of an order.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
        },
    },
)


def calls_tools(messages: Iterable[Any]) -> bool:
    """True when any of ``messages`` (ours or HF dicts) is an assistant message with tool calls."""
    return any(_field(m, "role") == "assistant" and _field(m, "tool_calls") for m in messages)


def tool_call_problem(tokenizer: Any) -> str | None:
    """Why ``tokenizer``'s template would not train an assistant's tool call (the model named), or
    None when the probe call's name and arguments lie inside its assistant span (module docstring)."""
    from core.domain.trajectory import Message, ToolCall

    call = ToolCall("call_probe", TOOL_PROBE_NAME, json.dumps(TOOL_PROBE_ARGUMENTS))
    probe = (
        Message("system", "You are a retail agent. Call a tool when it helps."),
        Message("user", "Where is my order #W2378156?"),
        Message("assistant", "", 1, tool_calls=(call,)),
        Message("tool", '{"status": "delivered"}', tool_call_id="call_probe", name=TOOL_PROBE_NAME),
        Message("assistant", "Your order was delivered.", 1),
    )
    drops = (
        f"the chat template of {template_name(tokenizer)} drops tool calls: samples with tool calls "
        "would train without them (a revision's corrective call becomes an empty reply)"
    )
    fix = "; use a template that renders tool_calls (e.g. the model's published tool-calling template)"
    try:
        text, spans = conversation_spans(tokenizer, hf_messages(probe), hf_tools(TOOL_PROBE_TOOLS))
    except TemplateError as exc:
        return f"{drops}: it cannot render a tool-call conversation ({exc}){fix}"
    if len(spans) != 2:
        return f"{drops}: it marked {len(spans)} assistant span(s) for a probe with 2{fix}"
    trained = text[spans[0][0] : spans[0][1]]
    wanted = [TOOL_PROBE_NAME, *TOOL_PROBE_ARGUMENTS, *TOOL_PROBE_ARGUMENTS.values()]
    missing = [w for w in wanted if w not in trained]
    if missing:
        return (
            f"{drops}: a probe call {call.canonical()} trains as {trained!r}, without "
            f"{', '.join(repr(m) for m in missing)}{fix}"
        )
    return None


# ------------------------------------------------------------------------------ folders
def folder_has_template(folder: Path) -> bool:
    """True when a model folder carries a chat template (file or tokenizer_config.json entry)."""
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return True
    config = folder / "tokenizer_config.json"
    if not config.is_file():
        return False
    try:
        return bool(json.loads(config.read_text()).get("chat_template"))
    except (OSError, json.JSONDecodeError):
        return False


def folder_template_problem(folder: str | Path, *, masks: bool = True, tools: bool = False) -> str | None:
    """Why the model folder cannot be prompted (no template) or, with ``masks``, fine-tuned on chats
    (no per-message spans) or, with ``tools`` too, on tool calls (``tool_call_problem``), or None;
    also None when the folder is not on this machine (then only the workers can tell)."""
    path = Path(folder).expanduser()
    try:
        if not path.is_dir():
            return None
    except OSError:  # e.g. a name too long for the file system: no such folder here either
        return None
    if not folder_has_template(path):
        return (
            f"model folder {path} has no chat template (chat_template.jinja, or chat_template in "
            "tokenizer_config.json): prompts and training samples are rendered with the model's own "
            "template (agentr model import --chat-template FILE adds one)"
        )
    if not masks:
        return None
    try:
        from transformers import AutoTokenizer
    except ImportError:  # the API image has no ml extras: the trainer checks again
        return None
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except Exception as exc:
        return f"cannot load the tokenizer of model folder {path}: {exc}"
    try:
        check_template(tokenizer)
    except TemplateError as exc:
        return str(exc)
    return tool_call_problem(tokenizer) if tools else None


def run_template_problem(config: Any) -> tuple[str, str] | None:
    """``(field, problem)`` when a RunConfig's model folder cannot serve the run (checked at
    submission: API 422 on that field, ``agentr run`` exit 2), else None. The folder trained is
    ``train.model_path`` for a served model, else ``model``; data-only runs need a template only, and a
    run on a tool-calling environment (``TOOL_ENV_SCHEMES``) a template that trains tool calls."""
    from core.domain.config import TRAIN_MODEL_PATH, is_served_model

    served = is_served_model(config.model)
    if served and (config.data_only or not config.train.get(TRAIN_MODEL_PATH)):
        return None
    field = f"train.{TRAIN_MODEL_PATH}" if served else "model"
    folder = config.train[TRAIN_MODEL_PATH] if served else config.model
    tools = urlsplit(str(config.env or "").strip()).scheme in TOOL_ENV_SCHEMES
    problem = folder_template_problem(folder, masks=not config.data_only, tools=tools)
    return None if problem is None else (field, problem)
