"""Owns the JSON Schema statements of the run configuration's cross-field rules, built from the same
constants the validators read (``core.domain.config``: ``TRAINER_FIELDS``, ``TRAIN_METHODS``,
``LAUNCHERS``), so /openapi.json refuses what ``launch_problem``, ``method_problem`` and
``RunConfig.training_problem`` refuse, and admits the rest.

The models in run_config.py / train_settings.py attach these with ``json_schema_extra``; the
validators stay where they were (the 422 names the field). tests/api/test_api_schema_rules.py
checks each statement against its validator (a request violating it is a 422, one satisfying it is
accepted), and that the whitespace and URL patterns agree with ``str.strip`` / ``is_served_model``
on every code point.
"""

from __future__ import annotations

from typing import Any

from api.schemas.common import SPACE_CLASS
from core.domain.config import TRAIN_METHODS, TRAINER_FIELDS, TRANSITIONS_KEY

SERVED_MODEL_PATTERN = f"^{SPACE_CLASS}*[Hh][Tt][Tt][Pp][Ss]?://"
"""``core.domain.config.is_served_model``: an http(s) URL once stripped, in any letter case."""
ENV_URI_RULE: dict[str, Any] = {"anyOf": [{"pattern": "^agentgym\\+http"}, {"not": {"pattern": "://"}}]}
"""``RunConfigIn._env_uri_shape``: a URI scheme only as agentgym+http(s)://HOST:PORT/NAME."""


def _const(value: Any) -> dict[str, Any]:
    return {"const": value}


def _schedule_with(methods: list[str], *, absent_is_sft: bool) -> dict[str, Any]:
    """``train.method`` naming at least one of ``methods`` (a name, or a schedule holding one)."""
    branches: list[dict[str, Any]] = [
        {"type": "string", "enum": methods},
        {"type": "array", "contains": {"enum": methods}},
    ]
    if absent_is_sft:
        branches.append({"type": "null"})
    return {"anyOf": branches}


def _method_dependencies() -> list[dict[str, Any]]:
    """``method_problem``: a trainer field (even as null) only with a scheduled method that takes
    it; ``transitions`` only with archer."""
    owners: dict[str, list[str]] = {}
    for method in TRAIN_METHODS:
        for name in TRAINER_FIELDS[method]:
            owners.setdefault(name, []).append(method)
    owners[TRANSITIONS_KEY] = ["archer"]
    rules: list[dict[str, Any]] = []
    for name, methods in sorted(owners.items()):
        if len(methods) == len(TRAIN_METHODS):
            continue  # every trainer takes it
        sft = "sft" in methods
        rule: dict[str, Any] = {"properties": {"method": _schedule_with(methods, absent_is_sft=sft)}}
        if not sft:
            rule["required"] = ["method"]  # unset means sft
        rules.append({"if": {"required": [name]}, "then": rule})  # dependentSchemas, which
    return rules  # schemathesis cannot generate from


def _needs_torchrun(condition: dict[str, Any], name: str) -> dict[str, Any]:
    return {
        "if": {"required": [name], "properties": {name: condition}},
        "then": {"required": ["launcher"], "properties": {"launcher": _const("torchrun")}},
    }


TRAIN_RULES: dict[str, Any] = {
    "allOf": [
        # launch_problem: accelerate_config and nproc_per_node > 1 need launcher torchrun
        _needs_torchrun({"type": "string"}, "accelerate_config"),
        _needs_torchrun({"type": "integer", "minimum": 2}, "nproc_per_node"),
        # method_problem: dpo and archer train in one process
        {
            "if": {"required": ["launcher"], "properties": {"launcher": _const("torchrun")}},
            "then": {
                "properties": {
                    "method": {
                        "anyOf": [
                            {"type": "null"},
                            _const("sft"),
                            {"type": "array", "items": _const("sft")},
                        ]
                    }
                }
            },
        },
        # method_problem: bf16 and mixed_bf16 exclude each other
        {
            "not": {
                "required": ["bf16", "mixed_bf16"],
                "properties": {"bf16": _const(True), "mixed_bf16": _const(True)},
            }
        },
        *_method_dependencies(),
    ],
}
"""Stated on ``TrainSettings`` (``train`` of a run)."""

_SERVED = {
    "required": ["model"],
    "properties": {"model": {"type": "string", "pattern": SERVED_MODEL_PATTERN}},
}

RUN_RULES: dict[str, Any] = {
    "allOf": [
        {  # training_problem: a served model trains from train.model_path, unless data_only
            "if": {**_SERVED, "not": {"required": ["data_only"], "properties": {"data_only": _const(True)}}},
            "then": {
                "required": ["train"],
                "properties": {
                    "train": {"required": ["model_path"], "properties": {"model_path": {"type": "string"}}}
                },
            },
        },
        {  # training_problem: model_path only with a served model (a local folder trains itself)
            "if": {"not": _SERVED},
            "then": {"properties": {"train": {"properties": {"model_path": {"type": "null"}}}}},
        },
    ]
}
"""Stated on ``RunConfigIn`` (the body of POST /v1/runs)."""
