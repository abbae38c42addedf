"""schemathesis hooks for tests/api/test_api_schemathesis_cli.py (``SCHEMATHESIS_HOOKS``).

``positive_data_acceptance_stated`` is schemathesis's own ``positive_data_acceptance`` check (a
schema-valid request must not be refused; expected statuses in the run's config file, which do NOT
include 422) with the only 422s it lets through listed in ``UNSTATED``: rules JSON Schema cannot
state, each named by operation and field, each also documented in docs/security.md. Any other 422
for a request the document admits fails the run, as does a 422 that names any other field beside
one of these. The built-in check is excluded on the command line and this one runs in its place.
"""

from __future__ import annotations

import json
import re
from typing import Any

import schemathesis
from schemathesis.openapi.checks import RejectedPositiveData
from schemathesis.specs.openapi.checks import positive_data_acceptance

UNSTATED: tuple[tuple[str, str, str], ...] = (
    # a cursor must be one the list returned: provenance, not shape (the pattern states the shape)
    ("GET", r".*", r"query\.cursor"),
    # since before until: JSON Schema cannot compare two values
    ("POST", r"/v1/datasets", r"body\.query\.since"),
    # each producer id once per batch: unique by key (uniqueItems compares whole items)
    ("POST", r"/v1/traces", r"body\.traces\[\d+\]\.id"),
    # a reward beside outcome.reward (or a numeric outcome) must agree with it: JSON Schema cannot
    # compare two values
    ("PATCH", r"/v1/traces(/\{trace_id\})?", r"body(\.outcomes\[\d+\])?\.(reward|outcome)"),
    # state, not shape: a dataset query that matches no sample (allow_empty), a correction of a
    # trace that has no pair (api/routes/review.py)
    ("POST", r"/v1/datasets", r"body\.query"),
    ("POST", r"/v1/traces/\{trace_id\}/corrections", r"trace_id"),
    # a model folder inside the server's model roots: server configuration, not stated publicly
    # (the message is api.model_refs.OUTSIDE_ROOTS)
    ("POST", r"/v1/(runs|traces)", r"body\.(model|train\.model_path|critic\.value_model|critic\.model)"),
    # the importers' per-format conversation rules (core.formats: order of system / user /
    # assistant / tool turns, tool-call ids, ReAct action lines, OTLP/JSON AnyValue and hex ids):
    # issue 26 point 6 (e), not yet in the document
    ("POST", r"/v1/traces", r"body\.traces\[\d+\]([.\[].+)?"),
    ("POST", r"/v1/otlp/v1/traces", r"body\.resourceSpans\[\d+\].+"),
)


def _fields(body: str) -> list[str]:
    try:
        data: Any = json.loads(body)
    except ValueError:
        return []
    fields = data.get("fields") if isinstance(data, dict) else None
    return [f.get("field", "") for f in fields or [] if isinstance(f, dict)]


def unstated(method: str, path: str, fields: list[str]) -> bool:
    """Whether a 422 naming ``fields`` on ``method path`` is one of the rules in ``UNSTATED``."""
    return bool(fields) and all(
        any(method == m and re.fullmatch(p, path) and re.fullmatch(f, field) for m, p, f in UNSTATED)
        for field in fields
    )


@schemathesis.check
def positive_data_acceptance_stated(ctx: Any, response: Any, case: Any) -> bool | None:
    try:
        return positive_data_acceptance(ctx, response, case)
    except RejectedPositiveData:
        if response.status_code == 422 and unstated(
            case.method.upper(), case.operation.path, _fields(response.text)
        ):
            return None
        raise
