"""Owns the shapes of the project and API-key routes (``/v1/projects``, ``/v1/keys``)."""

from __future__ import annotations

from datetime import datetime

from pydantic import (
    BaseModel,
    Field,
    field_validator,
)

from api.schemas.common import Scope, _Strict
from api.schemas.traces import TraceCriticIn


class ProjectIn(_Strict):
    name: str = Field(min_length=1, max_length=200, description="Human-readable project name.")
    critic: TraceCriticIn | None = Field(
        None, description="The critic for this project's failed traces (an upload's own critic wins)."
    )


class ProjectOut(BaseModel):
    project_id: str
    name: str
    created_at: datetime | None = None


class KeyIn(_Strict):
    scopes: list[Scope] = Field(
        min_length=1,
        description="read: GET routes; ingest: POST /v1/traces; run: submit and cancel runs; "
        "review: correct pairs' and traces' first errors and reflections; "
        "admin: manage this project's keys (and implies every other scope).",
    )
    label: str = Field("", max_length=200, description="Free text shown in key listings.")

    @field_validator("scopes")
    @classmethod
    def _dedupe(cls, scopes: list[str]) -> list[str]:
        return sorted(set(scopes))


class KeyOut(BaseModel):
    key_id: str
    project_id: str
    prefix: str = Field(description="The public part of the key (agr_<prefix>_...).")
    scopes: list[str]
    label: str
    revoked: bool = False
    created_at: datetime | None = None


class KeyIssuedOut(KeyOut):
    key: str = Field(description="The full key. Shown once: only a salted hash is stored.")
