"""schemathesis hooks for tests/api/test_api_schemathesis_cli.py (loaded through ``SCHEMATHESIS_HOOKS``).

``positive_data_acceptance_stated`` is schemathesis's own ``positive_data_acceptance`` check (a
request the document admits must not be refused; the expected statuses in the run's config file do
NOT include 422) that lets through only the 422s listed in ``UNSTATED``: rules JSON Schema cannot
state (or that schemathesis's canonicaliser cannot take beside the rest), each named by operation,
field and the server's message, each documented in docs/security.md ("Not in the schema"). Any other
422 for a request the document admits fails the run, as does a 422 that names any other field beside
one of these, or the same field with another message. The built-in check is excluded on the command
line and this one runs in its place.
"""

from __future__ import annotations

import json
import re
from typing import Any

import schemathesis
from schemathesis.openapi.checks import RejectedPositiveData
from schemathesis.specs.openapi.checks import positive_data_acceptance

_LISTS = r"/v1/(runs|datasets|pairs|traces|review/queue|runs/\{run_id\}/(trees|pairs|samples))"
UNSTATED: tuple[tuple[str, str, str, str], ...] = (
    # a cursor must be one this list returned: provenance (the pattern states its alphabet and length)
    ("GET", _LISTS, r"query\.cursor", r"not a cursor returned by this list"),
    # since before until: JSON Schema cannot compare two values
    ("POST", r"/v1/datasets", r"body\.query\.since", r"must be before query\.until"),
    # each trace once per batch: uniqueItems compares whole items, not one key of them
    ("PATCH", r"/v1/traces", r"body\.outcomes\[\d+\]\.(trace_id|external_id)", r"appears twice"),
    ("POST", r"/v1/traces", r"body\.traces\[\d+\]\.id", r"appears twice in the batch"),
    # a reward beside the outcome must agree with it: JSON Schema cannot compare two values
    (
        "PATCH",
        r"/v1/traces(/\{trace_id\})?",
        r"body(\.outcomes\[\d+\])?\.(outcome|reward)",
        r"disagree|contradict each other",
    ),
    # partial batches name each refused item; an OTLP batch merges its items by trace id, so it has
    # no item to name (format otlp with partial: true is refused; the OTLP receiver answers partially)
    ("POST", r"/v1/traces", r"body\.partial", r"format otlp splits export requests"),
    # the launch rules of train (core.domain.config.launch_problem / method_problem): stated beside the
    # trainer-field rule they make the schema more than schemathesis's canonicaliser models
    (
        "POST",
        r"/v1/runs",
        r"body(\.train)?",
        r"needs train\.launcher 'torchrun'|trains in one process|exclude each other",
    ),
    # a served model trains from train.model_path unless data_only; a local one trains itself
    ("POST", r"/v1/runs", r"body", r"train\.model_path (is required|only applies)"),
    # a model folder inside the server's model roots: server configuration, not stated publicly
    # (the message is api.model_refs.OUTSIDE_ROOTS)
    (
        "POST",
        r"/v1/(runs|traces)",
        r"body\.(model|train\.model_path|critic\.value_model|critic\.model)",
        r"inside the server's model roots",
    ),
    # served models and remote environments the operator allows (AGENTR_ALLOWED_MODEL_URLS /
    # AGENTR_ALLOWED_ENV_URLS, core/domain/egress.py): server configuration, like the model roots
    (
        "POST",
        r"/v1/(runs|traces|projects)",
        r"body\.(model|env|train\.model_path|critic\.value_model|critic\.model)",
        r"AGENTR_ALLOWED_(MODEL|ENV)_URLS",
    ),
    # state, not shape: a dataset query that matches no sample (allow_empty false), a correction or
    # an acceptance of a trace without a pair, a sample's tokens with no model of the project's runs
    # to render with
    ("POST", r"/v1/datasets", r"body\.query", r"matches no sample|no sample"),
    ("POST", r"/v1/traces/\{trace_id\}/(corrections|accept)", r"trace_id", r".*"),
    # a pair is assigned to an active key of the project that may review: state, not shape
    ("POST", r"/v1/pairs/\{pair_id\}/assign", r"body\.key_id", r"no active key|lacks the 'review' scope"),
    ("GET", r"/v1/samples/\{sample_id\}/tokens", r"query\.model", r"name a model|is not a model of"),
    # the importers' per-format rules (core.formats: the order of system / user / assistant / tool
    # turns, tool-call ids, ReAct action lines, Langfuse GENERATION observations, OTLP span ids and
    # AnyValue attributes): not yet in the document (docs/security.md)
    ("POST", r"/v1/traces", r"body\.traces\[\d+\]([.\[].+)?", r".*"),
    ("POST", r"/v1/otlp/v1/traces", r"body\.resourceSpans\[\d+\]\..+", r".*"),
    # the capture proxy refuses a message the trace importer cannot read (content parts, tool calls:
    # the openai importer's rules; the roles are in the document) before forwarding it
    ("POST", r"/v1/proxy/openai/v1/chat/completions", r"body\.(messages|tools|functions)([.\[].+)?", r".*"),
)


def named_fields(body: str) -> list[tuple[str, str]]:
    """The (field, message) pairs of a 422 body (none when it is not one)."""
    try:
        data: Any = json.loads(body)
    except ValueError:
        return []
    fields = data.get("fields") if isinstance(data, dict) else None
    return [(str(f.get("field", "")), str(f.get("message", ""))) for f in fields or [] if isinstance(f, dict)]


def unstated(method: str, path: str, fields: list[tuple[str, str]]) -> bool:
    """Whether a 422 naming ``fields`` on ``method path`` is one of the rules in ``UNSTATED``: every
    field it names is listed for that operation with that message (and it names at least one)."""
    return bool(fields) and all(
        any(
            method == m and re.fullmatch(p, path) and re.fullmatch(f, field) and re.search(msg, message)
            for m, p, f, msg in UNSTATED
        )
        for field, message in fields
    )


@schemathesis.check
def positive_data_acceptance_stated(ctx: Any, response: Any, case: Any) -> bool | None:
    try:
        return positive_data_acceptance(ctx, response, case)
    except RejectedPositiveData:
        if response.status_code == 422 and unstated(
            case.method.upper(), case.operation.path, named_fields(response.text)
        ):
            return None
        raise
