"""Owns the trace assembly from spans: the spans of ONE trace -> one Conversation.

Spans come from OTLP (core.formats.otlp). They are ordered by parent, then start time (a parent before
its children; siblings by ``startTimeUnixNano``, or as sent when one lacks a timestamp). Every model-call
span is read:

- OpenTelemetry GenAI conventions (core.formats.genai): input / output messages, system
  instructions, tool definitions; reasoning parts are kept on the step, not trained on unless asked;
- GenAI content on span events: the ``gen_ai.client.inference.operation.details`` event, or the
  legacy per-message events (``gen_ai.user.message``, ..., ``gen_ai.choice``; core.formats.genai);
- OpenInference attributes, flat or nested (core.formats.openinference);
- OpenLLMetry ``gen_ai.prompt.N.*`` / ``gen_ai.completion.N.*`` (core.formats.openllmetry).

Each span's input replays the history, so messages are de-duplicated by identity (role, text, tool
calls, tool call id; the n-th copy of a message in a span's input is the n-th copy already read). Several
output messages are n>1 choices: the one the next span's input continues with is the step, the others are
kept as its ``alternatives`` (the first choice when no later span tells).

``execute_tool`` spans (``gen_ai.operation.name``; OpenInference ``TOOL``) are joined to the call they
executed by ``gen_ai.tool.call.id`` (else the oldest not-yet-joined call of that ``gen_ai.tool.name``):
a span with ERROR status (or ``error.type``) marks the result ``is_error``; a result that no chat span
replayed is taken from ``gen_ai.tool.call.result`` (or the error message).

Envelope hints read from the spans (root span first, then the others, then resource attributes):
``agentr.outcome`` (success | failure | unknown, a reward number, true/false, or the JSON text of
``{"success", "reward"}``), ``agentr.reward``, ``agentr.task_key`` (else ``gen_ai.conversation.id``);
with no outcome attribute the statuses decide: the root span's, and the agent spans' (``invoke_agent``,
OpenInference AGENT: under a web framework's server span, UNSET on any 200, the agent span speaks for
the run): any ERROR -> failure, else OK -> success, else unknown. Tool definitions are read from the
span attributes or the ``gen_ai.client.inference.operation.details`` event.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from core.domain import json_input
from core.domain.trajectory import tool_action
from core.formats import genai, import_openai, openinference, openllmetry
from core.formats.errors import TraceFormatError, require, shown
from core.formats.otlp import SpanRecord, group_by_trace, json_text, span_from_json, spans_from_otlp_json
from core.formats.turns import Conversation, Turn

OPERATION = "gen_ai.operation.name"
OUTCOME_KEY, REWARD_KEY, TASK_KEY = "agentr.outcome", "agentr.reward", "agentr.task_key"
CONVERSATION_KEY = "gen_ai.conversation.id"


# --------------------------------------------------------------------------------------------
# Spans -> conversation
# --------------------------------------------------------------------------------------------


def ordered(spans: Sequence[SpanRecord]) -> list[SpanRecord]:
    """Parent before children; siblings by start time (as sent when any of them lacks one)."""
    ids = {s.span_id for s in spans if s.span_id}
    children: dict[str, list[tuple[int, SpanRecord]]] = {}
    roots: list[tuple[int, SpanRecord]] = []
    for index, span in enumerate(spans):
        if span.parent_span_id and span.parent_span_id in ids and span.parent_span_id != span.span_id:
            children.setdefault(span.parent_span_id, []).append((index, span))
        else:
            roots.append((index, span))

    def sort(group: list[tuple[int, SpanRecord]]) -> list[tuple[int, SpanRecord]]:
        if all(s.start_ns is not None for _, s in group):
            return sorted(group, key=lambda x: (x[1].start_ns, x[1].end_ns or 0, x[0]))
        return sorted(group, key=lambda x: x[0])

    out: list[SpanRecord] = []
    seen: set[int] = set()
    pending = list(roots)
    if not pending and spans:
        pending = [(0, spans[0])]
    while pending:  # spans in a parent cycle have no root: they follow, in the order sent
        stack = list(reversed(sort(pending)))
        while stack:
            index, span = stack.pop()
            if index in seen:
                continue
            seen.add(index)
            out.append(span)
            stack.extend(reversed(sort(children.get(span.span_id, []))))
        pending = [(i, s) for i, s in enumerate(spans) if i not in seen][:1]
    return out


def _is_tool_span(span: SpanRecord) -> bool:
    return span.attributes.get(OPERATION) == "execute_tool" or openinference.is_tool_span(span.attributes)


def _span_turns(span: SpanRecord) -> tuple[list[Turn], list[Turn]] | None:
    """(input turns incl. system instructions, output turns) of a model-call span, or None.

    Read in this order: GenAI message attributes on the span, else on its
    ``gen_ai.client.inference.operation.details`` event; OpenInference (flat or nested); OpenLLMetry
    ``gen_ai.prompt.N.*`` / ``gen_ai.completion.N.*``; the legacy per-message GenAI events."""
    attrs = span.attributes
    path = f"{span.path}.attributes"
    if genai.INPUT not in attrs and genai.OUTPUT not in attrs:
        details = genai.details_attributes(span.events)
        if details:
            attrs, path = details, f"{span.path}.events.{genai.DETAILS_EVENT}.attributes"
    if genai.INPUT in attrs or genai.OUTPUT in attrs:
        inputs = genai.system_turns(attrs, path) + genai.messages(attrs, genai.INPUT, path)
        return inputs, genai.messages(attrs, genai.OUTPUT, path)
    if openinference.has_messages(attrs):
        return (
            openinference.messages(attrs, "input", path),
            openinference.messages(attrs, "output", path),
        )
    if openllmetry.has_messages(attrs):
        return openllmetry.messages(attrs, "prompt", path), openllmetry.messages(attrs, "completion", path)
    inputs_raw, outputs_raw = genai.legacy_event_messages(span.events)
    if inputs_raw or outputs_raw:
        epath = f"{span.path}.events"
        inputs = import_openai.parse({"messages": inputs_raw}, epath).turns if inputs_raw else []
        outputs = import_openai.parse({"messages": outputs_raw}, epath).turns if outputs_raw else []
        return inputs, outputs
    return None


def _alternative_text(turn: Turn) -> str:
    if turn.tool_calls:
        calls = tool_action(turn.tool_calls)
        return f"{turn.text.strip()}\n{calls}" if turn.text.strip() else calls
    return turn.text.strip()


def _error_text(span: SpanRecord) -> str:
    for event in span.events:
        if event.get("name") == "exception":
            attrs = event.get("attributes", {})
            kind, message = attrs.get("exception.type", ""), attrs.get("exception.message", "")
            if kind or message:
                return f"{kind}: {message}".strip(": ")
    return span.status_message or str(span.attributes.get("error.type") or "tool error")


def _assemble(chat_spans: list[tuple[SpanRecord, list[Turn], list[Turn]]]) -> list[Turn]:
    conversation: list[Turn] = []
    counts: Counter[tuple[Any, ...]] = Counter()
    for position, (_span, inputs, outputs) in enumerate(chat_spans):
        seen_here: Counter[tuple[Any, ...]] = Counter()
        for turn in inputs:
            key = turn.identity()
            seen_here[key] += 1
            if seen_here[key] > counts[key]:
                if turn.role == "system":  # instructions first seen on a later span go first
                    at = next(
                        (i for i, t in enumerate(conversation) if t.role != "system"), len(conversation)
                    )
                    conversation.insert(at, turn)
                else:
                    conversation.append(turn)
                counts[key] += 1
        assistant = [t for t in outputs if t.role == "assistant"]
        if len(assistant) > 1:
            chosen = assistant[0]
            if position + 1 < len(chat_spans):
                later = {t.identity() for t in chat_spans[position + 1][1]}
                chosen = next((t for t in assistant if t.identity() in later), assistant[0])
            others = tuple(_alternative_text(t) for t in assistant if t is not chosen)
            outputs = [replace(chosen, alternatives=others)] + [t for t in outputs if t.role != "assistant"]
        for turn in outputs:
            conversation.append(turn)
            counts[turn.identity()] += 1
    return conversation


def _pair_ids(conversation: list[Turn]) -> list[Turn]:
    """Tool turns without an id get the id of the oldest call still waiting (pairing by order)."""
    pending: list[str] = []
    out = []
    for turn in conversation:
        if turn.role == "assistant":
            pending.extend(c.call_id for c in turn.tool_calls)
        elif turn.role == "tool":
            if turn.tool_call_id is None and pending:
                turn = replace(turn, tool_call_id=pending.pop(0))
            elif turn.tool_call_id in pending:
                pending.remove(turn.tool_call_id)
        out.append(turn)
    return out


def _join_tool_spans(conversation: list[Turn], tool_spans: list[SpanRecord]) -> list[Turn]:
    calls = [(i, c) for i, t in enumerate(conversation) if t.role == "assistant" for c in t.tool_calls]
    joined: set[str] = set()
    for span in tool_spans:
        attrs = span.attributes
        if _is_tool_span(span) and attrs.get(OPERATION) == "execute_tool":
            call_id = attrs.get("gen_ai.tool.call.id")
            name = str(attrs.get("gen_ai.tool.name") or "")
            result = attrs.get("gen_ai.tool.call.result")
            result_text = None if result is None else json_text(result)
        else:
            call_id, name, _, result_text = openinference.tool_execution(attrs)
        failed = span.status_code == "ERROR" or bool(attrs.get("error.type"))
        target = None
        if call_id not in (None, ""):
            target = next(((i, c) for i, c in calls if c.call_id == str(call_id)), None)
        if target is None:
            target = next(((i, c) for i, c in calls if c.call_id not in joined and c.name == name), None)
        if target is None:
            raise TraceFormatError(
                f"{span.path}",
                f"an execute_tool span ({shown(name, quoted=False) if name else 'unnamed tool'}, "
                f"call id {shown(call_id)}) for a call no chat "
                "span made (send the chat span whose output holds the tool call, with content captured)",
            )
        where, call = target
        joined.add(call.call_id)
        answer = next(
            (k for k, t in enumerate(conversation) if t.role == "tool" and t.tool_call_id == call.call_id),
            None,
        )
        if answer is not None:
            turn = conversation[answer]
            text = turn.text if turn.text.strip() or not result_text else result_text
            conversation[answer] = replace(
                turn, text=text, is_error=turn.is_error or failed, name=turn.name or call.name
            )
            continue
        text = result_text if result_text not in (None, "") else (_error_text(span) if failed else "")
        insert_at = where + 1
        while insert_at < len(conversation) and conversation[insert_at].role == "tool":
            insert_at += 1
        conversation.insert(
            insert_at,
            Turn("tool", text or "", span.path, tool_call_id=call.call_id, name=call.name, is_error=failed),
        )
        calls = [(i + (1 if i >= insert_at else 0), c) for i, c in calls]
    return conversation


def _hints(spans: list[SpanRecord], trace_id: str) -> dict[str, Any]:
    roots = [s for s in spans if not s.parent_span_id or s.parent_span_id not in {x.span_id for x in spans}]
    hints: dict[str, Any] = {}
    sources: list[tuple[dict[str, Any], str]] = [(s.attributes, f"{s.path}.attributes") for s in roots]
    sources += [(s.attributes, f"{s.path}.attributes") for s in spans if s not in roots]
    sources += [(s.resource, f"{s.path}.resource") for s in spans[:1]]
    for attrs, path in sources:
        if "outcome" not in hints and OUTCOME_KEY in attrs:
            value = attrs[OUTCOME_KEY]
            if isinstance(value, str) and value.strip().startswith("{"):
                try:
                    value = json_input.loads(value)
                except json.JSONDecodeError as exc:
                    raise TraceFormatError(f"{path}.{OUTCOME_KEY}", f"not valid JSON ({exc.msg})") from None
            hints["outcome"] = value
            hints["path"] = f"{path}.{OUTCOME_KEY}".rsplit(".outcome", 1)[0]
        if "reward" not in hints and REWARD_KEY in attrs:
            hints["reward"] = attrs[REWARD_KEY]
        if "task_key" not in hints and TASK_KEY in attrs:
            hints["task_key"] = attrs[TASK_KEY]
    if "task_key" not in hints:  # the GenAI conversation id groups the traces of one task by default
        for attrs, _path in sources:
            if isinstance(attrs.get(CONVERSATION_KEY), str) and attrs[CONVERSATION_KEY].strip():
                hints["default_task_key"] = attrs[CONVERSATION_KEY]  # an id: used as it is
                break
    if "outcome" not in hints and "reward" not in hints and roots:
        hints["outcome"] = _status_outcome(roots[0], spans)
    if trace_id:
        hints["id"] = trace_id
    metadata = _metadata(roots, spans)
    if metadata:
        hints["metadata"] = metadata
    return hints


def _is_agent_span(span: SpanRecord) -> bool:
    attrs = span.attributes
    return (
        attrs.get(OPERATION) in ("invoke_agent", "create_agent")
        or str(attrs.get(openinference.SPAN_KIND, "")).upper() == "AGENT"
    )


def _status_outcome(root: SpanRecord, spans: list[SpanRecord]) -> str:
    """The outcome the statuses tell: an agent span (``invoke_agent``, OpenInference AGENT) that ended
    in ERROR, or an ERROR root, is a failure; else an OK root or outermost agent span is a success;
    else unknown. A web framework's server span is often the root, UNSET on a 200 whatever the agent
    inside did: the agent span's own status is the one that speaks for the run."""
    agents = [s for s in spans if _is_agent_span(s)]
    if root.status_code == "ERROR" or any(s.status_code == "ERROR" for s in agents):
        return "failure"
    if root.status_code == "OK" or (agents and agents[0].status_code == "OK"):
        return "success"
    return "unknown"


_METADATA_PREFIXES = ("agentr.metadata.", "metadata.")
_METADATA_KEYS = ("user.id", "session.id", "tag.tags", "service.name", "deployment.environment")


def _scalar(value: Any) -> bool:
    if isinstance(value, list):
        return all(isinstance(v, str | int | float | bool) for v in value)
    return isinstance(value, str | int | float | bool) and not (isinstance(value, str) and len(value) > 2000)


def _metadata(roots: list[SpanRecord], spans: list[SpanRecord]) -> dict[str, Any]:
    """What the spans say about the trace beyond its messages: the first span's resource attributes
    (``service.name``, ...), and the root span's ``agentr.metadata.KEY`` / ``metadata.KEY`` attributes,
    OpenInference's ``metadata`` (a JSON object as text), ``user.id``, ``session.id`` and ``tag.tags``.
    Scalars (and lists of them) only: message content never lands here."""
    out: dict[str, Any] = {}
    for key, value in (spans[0].resource if spans else {}).items():
        if _scalar(value):
            out[key] = value
    for span in roots[:1]:
        attrs = span.attributes
        raw = attrs.get("metadata")
        if isinstance(raw, str) and raw.strip().startswith("{"):
            try:
                decoded = json.loads(raw)
            except json.JSONDecodeError:
                decoded = None
            if isinstance(decoded, dict):
                out.update(decoded)
        for key, value in attrs.items():
            prefix = next((p for p in _METADATA_PREFIXES if key.startswith(p)), None)
            if prefix is not None and _scalar(value):
                out[key[len(prefix) :]] = value
            elif key in _METADATA_KEYS and _scalar(value):
                out[key] = value
    return out


def check_span(span: SpanRecord) -> None:
    """Validate one span on its own (its messages, parts and tool definitions), as far as that can be
    done before the rest of its trace has arrived; raises TraceFormatError naming the field."""
    if not _is_tool_span(span):
        _span_turns(span)
        genai.tools(span.attributes, f"{span.path}.attributes")
        genai.tools(
            genai.details_attributes(span.events), f"{span.path}.events.{genai.DETAILS_EVENT}.attributes"
        )
        openinference.tools(span.attributes, f"{span.path}.attributes")


def conversation_from_spans(spans: Sequence[SpanRecord], path: str, trace_id: str = "") -> Conversation:
    """The spans of one trace -> its conversation, tool definitions and envelope hints."""
    if not spans:
        raise TraceFormatError(path, "no spans")
    spans = ordered(spans)
    chat: list[tuple[SpanRecord, list[Turn], list[Turn]]] = []
    tool_spans: list[SpanRecord] = []
    tools: dict[str, dict[str, Any]] = {}
    for span in spans:
        if _is_tool_span(span):
            tool_spans.append(span)
            continue
        got = _span_turns(span)
        if got is not None:
            chat.append((span, *got))
        apath = f"{span.path}.attributes"
        found = genai.tools(span.attributes, apath) + openinference.tools(span.attributes, apath)
        details = genai.details_attributes(span.events)  # the opt-in event may carry them instead
        found += genai.tools(details, f"{span.path}.events.{genai.DETAILS_EVENT}.attributes")
        for tool in found + openllmetry.tools(span.attributes, apath):
            tools.setdefault(tool["function"]["name"], tool)
    if not chat:
        first = spans[0]
        raise TraceFormatError(
            f"{first.path}.attributes.{genai.INPUT}",
            "missing: no span carries model messages, so this is not an agent trace agentr models; send "
            "gen_ai.input.messages / gen_ai.output.messages (OpenTelemetry GenAI, content capture on, as "
            "attributes or on the gen_ai.client.inference.operation.details event), OpenInference "
            "llm.input_messages / llm.output_messages, or OpenLLMetry gen_ai.prompt.N.* / "
            "gen_ai.completion.N.*",
        )
    conversation = _pair_ids(_assemble(chat))
    conversation = _join_tool_spans(conversation, tool_spans)
    return Conversation(
        turns=conversation, tools=tuple(tools.values()), envelope=_hints(list(spans), trace_id), path=path
    )


# --------------------------------------------------------------------------------------------
# Entry points (formats otel and otlp)
# --------------------------------------------------------------------------------------------


def parse_item(item: dict[str, Any], path: str) -> Conversation:
    """Format ``otel``: one trace per item, ``{"spans": [...]}`` or ``{"resourceSpans": [...]}``."""
    if "resourceSpans" in item:
        groups = group_by_trace(spans_from_otlp_json(item, path))
        if len(groups) != 1:
            raise TraceFormatError(
                f"{path}.resourceSpans",
                f"holds {len(groups)} trace ids; send one trace per item, "
                "or set format=otlp to split by trace id",
            )
        ((trace_id, spans),) = groups.items()
        return conversation_from_spans(spans, path, trace_id)
    if "spans" not in item:
        raise TraceFormatError(
            f"{path}.spans", "missing (send spans: [...], or an OTLP/JSON export with resourceSpans)"
        )
    raw = require(item, "spans", path, list)
    if not raw:
        raise TraceFormatError(f"{path}.spans", "no spans")
    spans = [span_from_json(span, f"{path}.spans[{i}]") for i, span in enumerate(raw)]
    trace_ids = sorted({span.trace_id for span in spans if span.trace_id})
    if len(trace_ids) > 1:
        raise TraceFormatError(
            f"{path}.spans",
            f"holds {len(trace_ids)} trace ids ({', '.join(trace_ids[:3])}); send one trace per item, "
            "or set format=otlp to split by trace id",
        )
    return conversation_from_spans(spans, path)


def parse_otlp_exports(items: list[Any]) -> list[tuple[dict[str, Any], Conversation]]:
    """Format ``otlp``: OTLP/JSON export requests; all their spans grouped by trace id."""
    spans: list[SpanRecord] = []
    for index, item in enumerate(items):
        spans.extend(spans_from_otlp_json(item, f"traces[{index}]"))
    return [
        ({}, conversation_from_spans(group, f"trace {trace_id}", trace_id))
        for trace_id, group in group_by_trace(spans).items()
    ]


def conversations_from_records(spans: Sequence[SpanRecord]) -> list[tuple[str, Conversation]]:
    """Decoded spans (e.g. from the OTLP/HTTP receiver) -> (trace id, conversation) per trace id."""
    return [
        (trace_id, conversation_from_spans(group, f"trace {trace_id}", trace_id))
        for trace_id, group in group_by_trace(spans).items()
    ]
