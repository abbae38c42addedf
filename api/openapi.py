"""Owns the OpenAPI document's statement of the rule every request passes before any route: the JSON
sanitiser's NUL rule (api/sanitize.py), written into the schema of every string the server refuses a
NUL character in, so /openapi.json says what the server enforces.

``install_openapi(app)`` wraps ``app.openapi``: the document FastAPI builds from the routes and the
pydantic models is post-processed once and cached. What ``state_nul_rule`` adds:

* every string query or path parameter: ``pattern: NUL_FREE_PATTERN`` (the middleware refuses a NUL
  in the URL, api/middleware.py);
* every string of a JSON request body, except the two trace uploads (``POST /v1/traces`` and the
  OTLP receiver keep a NUL as U+FFFD, api/sanitize.py ``replace_nul``): the same pattern (under
  ``allOf`` beside a pattern of its own); ``propertyNames`` with it on every object that takes keys
  it does not name; and free-form values (``runtime``, ``metadata``: ``{}``) as ``NulFreeJson``, any
  JSON value whose strings and keys hold no NUL. A component both kinds of route use is split: the
  uploads refer to an unchanged copy named ``<Name>Upload``.

The cross-field rules of a model live beside its validators (``json_schema_extra`` in api/schemas/);
the rules JSON Schema cannot state are listed in docs/security.md ("Not in the schema").
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

from fastapi import FastAPI

from api.sanitize import NUL_FREE_PATTERN

NUL_FREE_JSON = "NulFreeJson"
REF = "#/components/schemas/"
UPLOADS = frozenset({("post", "/v1/traces"), ("post", "/v1/otlp/v1/traces")})
"""Operations whose bodies keep NUL characters (as U+FFFD): their strings carry no NUL rule."""
METHODS = ("get", "put", "post", "patch", "delete")
_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_ONE = ("items", "not", "if", "then", "else", "contains", "additionalProperties")
_MAPS = ("properties", "patternProperties", "dependentSchemas", "$defs")
_ANNOTATIONS = {"title", "description", "default", "examples"}


def nul_free_json() -> dict[str, Any]:
    """The ``NulFreeJson`` component: any JSON value whose strings and object keys hold no NUL."""
    ref = {"$ref": REF + NUL_FREE_JSON}
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


def _free_string(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    is_string = kind == "string" or (isinstance(kind, list) and "string" in kind)
    return is_string and not {"enum", "const", "format"} & set(schema)


def _stated(schema: Any, on_ref: Callable[[str], None]) -> Any:
    """``schema`` with the NUL rule on every string in it (changed in place; a free-form ``{}`` comes
    back as a reference to ``NulFreeJson``); ``on_ref`` gets the name of each component it refers to."""
    if not isinstance(schema, dict):
        return schema
    if set(schema) <= _ANNOTATIONS:
        return {**schema, "$ref": REF + NUL_FREE_JSON}
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith(REF):
        on_ref(ref.removeprefix(REF))
    if _free_string(schema):
        if "pattern" not in schema:
            schema["pattern"] = NUL_FREE_PATTERN
        elif schema["pattern"] != NUL_FREE_PATTERN and {"pattern": NUL_FREE_PATTERN} not in schema.get(
            "allOf", []
        ):
            schema.setdefault("allOf", []).append({"pattern": NUL_FREE_PATTERN})
    if schema.get("type") == "object" or "properties" in schema or "additionalProperties" in schema:
        if schema.get("additionalProperties") is not False:
            schema.setdefault("propertyNames", {"pattern": NUL_FREE_PATTERN})
        if schema.get("additionalProperties") is True:
            schema["additionalProperties"] = {"$ref": REF + NUL_FREE_JSON}
    for key in _LISTS:
        if isinstance(schema.get(key), list):
            schema[key] = [_stated(item, on_ref) for item in schema[key]]
    for key in _ONE:
        if isinstance(schema.get(key), dict):
            schema[key] = _stated(schema[key], on_ref)
    for key in _MAPS:
        if isinstance(schema.get(key), dict):
            schema[key] = {name: _stated(sub, on_ref) for name, sub in schema[key].items()}
    return schema


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def _refs(node: Any) -> set[str]:
    return {
        item["$ref"].removeprefix(REF)
        for item in _walk(node)
        if isinstance(item.get("$ref"), str) and item["$ref"].startswith(REF)
    }


def _closure(components: dict[str, Any], names: set[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name not in seen and name in components:
            seen.add(name)
            todo.extend(_refs(components[name]))
    return seen


def _rename_refs(node: Any, names: dict[str, str]) -> None:
    for item in _walk(node):
        ref = item.get("$ref")
        if isinstance(ref, str) and ref.removeprefix(REF) in names:
            item["$ref"] = REF + names[ref.removeprefix(REF)]


def _bodies(operation: dict[str, Any]) -> list[dict[str, Any]]:
    content = operation.get("requestBody", {}).get("content", {})
    return [
        media for kind, media in content.items() if "json" in kind and isinstance(media.get("schema"), dict)
    ]


def state_nul_rule(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` (FastAPI's OpenAPI dict) with the sanitiser's NUL rule stated on every request
    string it applies to (see the module docstring); changed in place and returned."""
    components: dict[str, Any] = document.setdefault("components", {}).setdefault("schemas", {})
    operations = [
        ((method, path), operation)
        for path, item in document.get("paths", {}).items()
        for method, operation in item.items()
        if method in METHODS and isinstance(operation, dict)
    ]
    uploads: set[str] = set()
    others: set[str] = set()
    for key, operation in operations:
        for media in _bodies(operation):
            (uploads if key in UPLOADS else others).update(_refs(media["schema"]))
    uploads, others = _closure(components, uploads), _closure(components, others)
    copies = {name: f"{name}Upload" for name in sorted(uploads & others)}
    for name, upload in copies.items():
        components[upload] = copy.deepcopy(components[name])
    for name in [*copies.values(), *(uploads - others)]:
        _rename_refs(components[name], copies)  # the uploads' components refer to the copies
    todo: list[str] = []
    for key, operation in operations:
        for parameter in operation.get("parameters", []):
            if parameter.get("in") in ("query", "path") and isinstance(parameter.get("schema"), dict):
                parameter["schema"] = _stated(parameter["schema"], lambda _name: None)
        for media in _bodies(operation):
            if key in UPLOADS:
                _rename_refs(media["schema"], copies)
            else:
                media["schema"] = _stated(media["schema"], todo.append)
    done: set[str] = set()
    while todo:
        name = todo.pop()
        if name not in done and name in components and name != NUL_FREE_JSON:
            done.add(name)
            components[name] = _stated(components[name], todo.append)
    components[NUL_FREE_JSON] = nul_free_json()
    return document


def install_openapi(app: FastAPI) -> None:
    """Make ``app.openapi()`` (and /openapi.json) answer the document with the NUL rule stated."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = state_nul_rule(build())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
