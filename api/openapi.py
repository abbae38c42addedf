"""Owns the OpenAPI document's statement of the rules every request passes before any route: the
JSON sanitiser's text rule (api/sanitize.py) written into the schema of every string the server
refuses NUL in, so /openapi.json says what the server enforces.

``install_openapi(app)`` wraps ``app.openapi``: the document FastAPI builds from the routes and
pydantic models is post-processed once and cached. What it adds:

* every query and path parameter that is a string: ``pattern: NUL_FREE_PATTERN`` (the middleware
  refuses a NUL character in any of them, api/middleware.py ``_url_problem``);
* every string of a JSON request body, except the two trace uploads (``POST /v1/traces`` and the
  OTLP receiver keep a NUL as U+FFFD instead, api/sanitize.py ``replace_nul``): the same pattern
  (``allOf`` beside a pattern of its own), ``propertyNames`` with it on every object that takes
  keys it does not name, and free-form values (``runtime``, ``metadata``) as ``NulFreeJson``: any
  JSON value whose strings and keys hold no NUL. A component both kinds of route use is split: the
  uploads refer to an unchanged copy (``<Name>Upload``).

The cross-field rules of a model live beside its validators (``json_schema_extra`` of the models in
api/schemas/), not here.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

from api.sanitize import NUL_FREE_PATTERN

NUL_FREE_JSON = "NulFreeJson"
_REF_PREFIX = "#/components/schemas/"
UPLOADS = frozenset({("post", "/v1/traces"), ("post", "/v1/otlp/v1/traces")})
"""Operations whose bodies keep NUL characters (as U+FFFD): their strings carry no NUL rule."""

_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA = ("items", "not", "if", "then", "else", "contains", "additionalProperties")
_SUBSCHEMA_MAPS = ("properties", "dependentSchemas", "patternProperties", "$defs")


def _nul_free_json() -> dict[str, Any]:
    ref = {"$ref": _REF_PREFIX + NUL_FREE_JSON}
    return {
        "description": "Any JSON value whose strings and object keys hold no NUL (\\u0000) character.",
        "anyOf": [
            {"type": "string", "pattern": NUL_FREE_PATTERN},
            {"type": "number"},
            {"type": "boolean"},
            {"type": "null"},
            {"type": "array", "items": ref},
            {"type": "object", "propertyNames": {"pattern": NUL_FREE_PATTERN}, "additionalProperties": ref},
        ],
    }


def _is_string(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    return kind == "string" or (isinstance(kind, list) and "string" in kind)


def _state_nul_rule(schema: Any, on_ref: Callable[[str], None]) -> Any:
    """``schema`` with the NUL rule stated on every string in it (in place; the free-form ``{}``
    comes back as a reference to ``NulFreeJson``). ``on_ref`` gets each component it refers to."""
    if not isinstance(schema, dict):
        return schema
    if not schema or set(schema) <= {"title", "description", "default", "examples"}:
        return {**schema, "$ref": _REF_PREFIX + NUL_FREE_JSON}  # any JSON value
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith(_REF_PREFIX):
        on_ref(ref.removeprefix(_REF_PREFIX))
    if _is_string(schema) and "enum" not in schema and "const" not in schema and "format" not in schema:
        if "pattern" not in schema:
            schema["pattern"] = NUL_FREE_PATTERN
        elif schema["pattern"] != NUL_FREE_PATTERN:
            rules = schema.setdefault("allOf", [])
            if {"pattern": NUL_FREE_PATTERN} not in rules:
                rules.append({"pattern": NUL_FREE_PATTERN})
    if schema.get("type") == "object" or "properties" in schema or "additionalProperties" in schema:
        if schema.get("additionalProperties") is not False:
            schema.setdefault("propertyNames", {"pattern": NUL_FREE_PATTERN})
        if schema.get("additionalProperties") is True:
            schema["additionalProperties"] = {"$ref": _REF_PREFIX + NUL_FREE_JSON}
    for key in _SUBSCHEMA_LISTS:
        if isinstance(schema.get(key), list):
            schema[key] = [_state_nul_rule(item, on_ref) for item in schema[key]]
    for key in _SUBSCHEMA:
        if isinstance(schema.get(key), dict):
            schema[key] = _state_nul_rule(schema[key], on_ref)
    for key in _SUBSCHEMA_MAPS:
        if isinstance(schema.get(key), dict):
            schema[key] = {name: _state_nul_rule(sub, on_ref) for name, sub in schema[key].items()}
    return schema


def _refs(node: Any, found: set[str]) -> set[str]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF_PREFIX):
            found.add(ref.removeprefix(_REF_PREFIX))
        for value in node.values():
            _refs(value, found)
    elif isinstance(node, list):
        for value in node:
            _refs(value, found)
    return found


def _closure(components: dict[str, Any], names: set[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen or name not in components:
            continue
        seen.add(name)
        todo.extend(_refs(components[name], set()))
    return seen


def _renamed_refs(node: Any, names: dict[str, str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.removeprefix(_REF_PREFIX) in names:
            node["$ref"] = _REF_PREFIX + names[ref.removeprefix(_REF_PREFIX)]
        for value in node.values():
            _renamed_refs(value, names)
    elif isinstance(node, list):
        for value in node:
            _renamed_refs(value, names)


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, operation)
        for path, item in document.get("paths", {}).items()
        for method, operation in item.items()
        if isinstance(operation, dict) and method in ("get", "post", "put", "patch", "delete")
    ]


def _body_schemas(operation: dict[str, Any]) -> list[dict[str, Any]]:
    content = operation.get("requestBody", {}).get("content", {})
    return [media["schema"] for kind, media in content.items() if "json" in kind and "schema" in media]


def state_request_rules(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` (FastAPI's OpenAPI dict) with the sanitiser's NUL rule stated on every request
    string it applies to (see the module docstring); changed in place and returned."""
    components: dict[str, Any] = document.setdefault("components", {}).setdefault("schemas", {})
    operations = _operations(document)
    upload_names: set[str] = set()
    other_names: set[str] = set()
    for method, path, operation in operations:
        for schema in _body_schemas(operation):
            (upload_names if (method, path) in UPLOADS else other_names).update(_refs(schema, set()))
    uploads, others = _closure(components, upload_names), _closure(components, other_names)
    shared = {name: f"{name}Upload" for name in sorted(uploads & others)}
    for name, copy_name in shared.items():
        components[copy_name] = copy.deepcopy(components[name])
    for name in [*shared.values(), *(uploads - others)]:
        _renamed_refs(components[name], shared)  # the uploads refer to the unchanged copies
    stated: set[str] = set()
    todo: list[str] = []
    for method, path, operation in operations:
        for parameter in operation.get("parameters", []):
            if parameter.get("in") in ("query", "path") and isinstance(parameter.get("schema"), dict):
                parameter["schema"] = _state_nul_rule(parameter["schema"], lambda _name: None)
        for media in operation.get("requestBody", {}).get("content", {}).values():
            if not isinstance(media, dict) or not isinstance(media.get("schema"), dict):
                continue
            if (method, path) in UPLOADS:
                _renamed_refs(media["schema"], shared)
            else:
                media["schema"] = _state_nul_rule(media["schema"], todo.append)
    while todo:
        name = todo.pop()
        if name in stated or name not in components or name == NUL_FREE_JSON:
            continue
        stated.add(name)
        components[name] = _state_nul_rule(components[name], todo.append)
    components[NUL_FREE_JSON] = _nul_free_json()
    return document


def install_openapi(app: FastAPI) -> None:
    """Make ``app.openapi()`` (and /openapi.json) answer the document with the request rules stated."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = build()
        app.openapi_schema = state_request_rules(document)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
