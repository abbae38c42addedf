"""Owns the API's error responses: one JSON shape (``ErrorBody``) for every failure, no stack traces.

``ApiError`` is what routes raise; the handlers installed by ``install_error_handlers`` turn it,
FastAPI's validation errors (422, each naming its field as a dotted path) and any unexpected
exception (500, logged server-side with its frames and exception types but no message, since
messages can quote SQL parameters and user content; answered with only a request id) into
``{"error", "detail", "fields", "request_id"}``.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from core.runtime.logging import redacted_traceback

log = logging.getLogger("agentr.api")

_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "rate_limited",
    500: "internal_error",
    503: "unavailable",
}


ERROR_LOGGED = "agentr_error_logged"
"""Request-state flag: the 500 handler logged this request's exception (redacted)."""

_HTTP_METHODS = frozenset({"GET", "PUT", "POST", "DELETE", "OPTIONS", "HEAD", "PATCH", "TRACE"})


class ApiError(Exception):
    """An expected failure with its HTTP status, e.g. ``ApiError(404, "run 'x' not found")``."""

    def __init__(
        self,
        status_code: int,
        detail: str,
        *,
        code: str | None = None,
        fields: list[dict[str, str]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status_code = status_code
        self.detail = detail
        self.code = code or _CODES.get(status_code, "error")
        self.fields = fields or []
        self.headers = headers


def not_found(kind: str, ident: object) -> ApiError:
    return ApiError(404, f"{kind} {ident!r} not found")


def field_error(field: str, message: str) -> ApiError:
    """A 422 about one named field."""
    return ApiError(422, f"{field}: {message}", fields=[{"field": field, "message": message}])


def error_response(
    request: Request | None,
    status_code: int,
    detail: str,
    *,
    code: str | None = None,
    fields: list[dict[str, str]] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    request_id = getattr(request.state, "request_id", None) if request is not None else None
    if status_code == 422 and not fields:  # a 422 always names what to fix (ErrorBody says so)
        fields = [{"field": "request", "message": detail}]
    body = {
        "error": code or _CODES.get(status_code, "error"),
        "detail": detail,
        "fields": fields or [],
        "request_id": request_id,
    }
    return JSONResponse(body, status_code=status_code, headers=headers)


_MISSING = object()


def _without_union_tags(loc: tuple[Any, ...] | list[Any], body: Any, missing: bool) -> list[Any]:
    """``loc`` with pydantic's union markers dropped (``body.openai.traces[0]`` -> ``body.traces[0]``).

    pydantic puts the chosen member of a union (a discriminator tag, a type name) into the location;
    walking the request body along it tells those apart from real keys. A missing field's own name
    (the last element of a ``missing`` error) is kept although the body lacks it.
    """
    if not loc or loc[0] != "body":
        return list(loc)
    kept: list[Any] = [loc[0]]
    current: Any = body
    for index, part in enumerate(loc[1:], start=1):
        last = index == len(loc) - 1
        if isinstance(current, dict) and isinstance(part, str):
            if part in current:
                current = current[part]
            elif not (last and missing):
                continue  # a union marker
            else:
                current = _MISSING
        elif isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current):
            current = current[part]
        elif isinstance(part, str) and current is not _MISSING and not (last and missing):
            continue  # a union marker on a scalar value (e.g. "int" of str | int)
        else:
            current = _MISSING
        kept.append(part)
    return kept


def validation_fields(errors: list[Any], body: Any) -> list[dict[str, str]]:
    """pydantic ``errors()`` of a value validated as ``body`` -> ``[{field, message}]`` as a 422 names
    them (union markers dropped), e.g. for one trace of a partial batch."""
    fields = []
    for err in errors:
        loc = _without_union_tags(["body", *err.get("loc", ())], body, err.get("type") == "missing")
        fields.append({"field": _location(loc[1:]), "message": str(err.get("msg", "invalid value"))})
    return fields


def _location(loc: tuple[Any, ...] | list[Any]) -> str:
    parts: list[str] = []
    for part in loc:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        else:
            parts.append(("." if parts else "") + str(part))
    return "".join(parts)


def _path_methods(app: Any) -> list[tuple[re.Pattern[str], frozenset[str]]]:
    """(path regex, methods) for every path of the app's OpenAPI document, built once per app."""
    cached = getattr(app.state, "allowed_methods", None)
    if cached is None:
        cached = []
        for template, operations in app.openapi().get("paths", {}).items():
            pattern = re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template))
            methods = frozenset(m.upper() for m in operations if m.upper() in _HTTP_METHODS)
            cached.append((re.compile(f"^{pattern}$"), methods))
        app.state.allowed_methods = cached
    return list(cached)


def _allowed_methods(request: Request) -> list[str]:
    """Every method the API documents at this request's path (HEAD with GET), sorted."""
    methods: set[str] = set()
    for pattern, documented in _path_methods(request.app):
        if pattern.match(request.url.path):
            methods |= documented
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)


_LIBRARY_PREFIXES = ("Value error, ", "Assertion failed, ")


def _message(err: dict[str, Any]) -> str:
    """A validation error's message in the API's words: pydantic's wrapper prefix ("Value error, ")
    dropped, and no class names of the server's models ("... or instance of SearchSettings")."""
    kind = err.get("type", "")
    if kind in ("model_type", "model_attributes_type", "dataclass_type", "dict_type"):
        return "Input should be an object"
    message = str(err.get("msg", "invalid value"))
    for prefix in _LIBRARY_PREFIXES:
        message = message.removeprefix(prefix)
    return message


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(
            request, exc.status_code, exc.detail, code=exc.code, fields=exc.fields, headers=exc.headers
        )

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        fields = []
        for err in exc.errors():
            loc = _without_union_tags(err.get("loc", ()), exc.body, err.get("type") == "missing")
            fields.append({"field": _location(loc), "message": _message(err)})
        summary = "; ".join(f"{f['field']}: {f['message']}" for f in fields[:5]) or "invalid request"
        return error_response(request, 422, summary, fields=fields)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else "request failed"
        headers = dict(getattr(exc, "headers", None) or {})
        if exc.status_code == 405:
            # Starlette names only the first route matching the path; RFC 9110 wants them all.
            allowed = _allowed_methods(request)
            if allowed:
                headers["Allow"] = ", ".join(allowed)
                detail = f"method {request.method} is not allowed here; allowed: {headers['Allow']}"
        return error_response(request, exc.status_code, detail, headers=headers or None)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # Never the exception's message or the raw path: they may quote SQL parameters or content.
        route = getattr(request.scope.get("route"), "path", "<unmatched>")
        log.error(
            "unhandled %s on %s %s (request %s)\n%s",
            type(exc).__name__,
            request.method,
            route,
            getattr(request.state, "request_id", "?"),
            redacted_traceback(exc),
        )
        request.scope.setdefault("state", {})[ERROR_LOGGED] = True  # api.app stops it here
        # Starlette answers this outside the app's middleware: add the request id header here.
        request_id = getattr(request.state, "request_id", None)
        headers = {"x-request-id": request_id} if request_id else None
        return error_response(
            request, 500, "internal error; see the server log for this request id", headers=headers
        )
