"""Owns what every route family's shapes share: id and timestamp types, the strict base model (unknown
fields and NUL characters refused), the error body and the documented error responses, health."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    model_validator,
)

from api.model_refs import MODEL_REF_PATTERN, path_shape_problem

Scope = Literal["read", "ingest", "run", "review", "admin"]
TraceFormat = Literal["openai", "openai-legacy", "otel", "otlp", "sharegpt"]
ExportFormat = Literal["openai", "sharegpt", "parquet", "dpo", "prm", "prm-values", "tokenized", "hf"]


ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,64}$"


def _rfc3339_text(value: Any) -> Any:
    # pydantic would read a number (or numeric text such as "0.5") as Unix seconds: refuse it,
    # so what is accepted is what the document says (format: date-time).
    if isinstance(value, bool | int | float) or (isinstance(value, str) and not _DATE_START.match(value)):
        raise ValueError("expected an RFC 3339 date-time such as 2026-01-31T12:00:00Z")
    return value


def _in_utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        return value
    try:
        return value.astimezone(UTC)
    except OverflowError:  # e.g. 9999-12-31T23:59:59-05:00: past what a timestamp column holds
        raise ValueError("date-time out of range once converted to UTC") from None


_DATE_START = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]")
Timestamp = Annotated[datetime, BeforeValidator(_rfc3339_text), AfterValidator(_in_utc)]
"""A date-time given as RFC 3339 text (not Unix seconds), normalised to UTC; use for every
timestamp the API accepts (query parameters and body fields)."""
# at least one non-whitespace character (the run config's validators reject a blank id; the schema
# says so, so that generated clients and fuzzers agree with the server)
TaskId = Annotated[
    str,
    Field(min_length=1, max_length=1000, pattern=r"\S", description="A task id of the environment."),
]


def _path_shape(value: str) -> str:
    problem = path_shape_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


ModelRef = Annotated[
    str,
    # the pattern is checked by _path_shape (with a message that says which rule); stated here
    Field(min_length=1, max_length=1000, json_schema_extra={"pattern": MODEL_REF_PATTERN}),
    AfterValidator(_path_shape),
]
"""A model reference: an http(s) URL or a folder (inside the server's model roots: api/model_refs.py
checks that at the route). Its shape is bounded here: no path component over 255 bytes."""


def _nul_path(value: Any, path: str) -> str | None:
    """The location of the first string holding a NUL character (PostgreSQL cannot store one)."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            found = _nul_path(key, path) or _nul_path(item, f"{path}.{key}" if path else str(key))
            if found is not None:
                return found
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = _nul_path(item, f"{path}[{index}]")
            if found is not None:
                return found
    return None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _no_nul_characters(cls, data: Any) -> Any:
        where = _nul_path(data, "")
        if where is not None:
            raise ValueError(f"{where or 'value'}: text must not contain NUL (\\u0000) characters")
        return data

    @model_validator(mode="before")
    @classmethod
    def _whole_floats_are_integers(cls, data: Any) -> Any:
        # JSON Schema's "integer" is any number without a fractional part (5.0 is one); a strict int
        # field would refuse it. Booleans and text stay refused, as the schema says.
        if not isinstance(data, dict):
            return data
        whole = {
            name: int(value)
            for name, value in data.items()
            if isinstance(value, float)
            and value.is_integer()
            and name in cls.model_fields
            and cls.model_fields[name].annotation in _INT_ANNOTATIONS
        }
        return {**data, **whole} if whole else data


_INT_ANNOTATIONS: tuple[Any, ...] = (int, int | None)


# ------------------------------------------------------------------------------------------------
# Errors and pages
# ------------------------------------------------------------------------------------------------


class FieldError(BaseModel):
    field: str = Field(description="Dotted location of the offending value, e.g. body.search.max_depth.")
    message: str


class ErrorBody(BaseModel):
    """Every error response: a machine code, a human sentence, and field errors for 422."""

    error: str = Field(description="Short machine-readable code, e.g. not_found, validation_error.")
    detail: str
    fields: list[FieldError] = Field(default_factory=list)
    request_id: str | None = None


class ValidationErrorBody(ErrorBody):
    """A 422: ``fields`` names at least one offending value."""

    fields: list[FieldError] = Field(min_length=1)


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ValidationErrorBody if code == 422 else ErrorBody, "description": text}
    for code, text in (
        (400, "Malformed request"),
        (401, "Missing or invalid API key"),
        (403, "The key lacks the scope this route needs"),
        (404, "Not found (or belongs to another project)"),
        (409, "Conflicts with the current state"),
        (413, "Request body too large"),
        (422, "Validation error naming the field"),
        (429, "Rate limited: see the Retry-After header"),
    )
}


class HealthOut(BaseModel):
    status: str
    checks: dict[str, str] = Field(default_factory=dict)
