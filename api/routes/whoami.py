"""Owns ``GET /v1/keys/me``: the calling key's project, id, prefix and scopes.

A client (the web UI) asks it once to show only what the key may do: a read-only key gets no
correction form, no Accept button and no Create dataset button, instead of a form that fails with a
403 after it is sent. ``admin`` implies every other scope (``Principal.allows``); ``may`` lists, per
scope, whether the key holds it that way. Needs ``read``, like every page of the UI.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from api.deps import Principal, require
from api.schemas import ERROR_RESPONSES
from api.schemas.common import Scope

router = APIRouter(prefix="/v1", tags=["projects"], responses=ERROR_RESPONSES)

SCOPES: tuple[Scope, ...] = ("read", "ingest", "run", "review", "admin")


class KeyMeOut(BaseModel):
    project_id: str
    key_id: str | None
    prefix: str | None
    scopes: list[Scope] = Field(description="The scopes the key was issued with, sorted.")
    may: dict[Scope, bool] = Field(description="Per scope: whether the key holds it (admin implies all).")


@router.get("/keys/me", response_model=KeyMeOut, summary="The calling key: its project and scopes")
async def key_me(principal: Principal = Depends(require("read"))) -> Any:
    return KeyMeOut(
        project_id=principal.project(),
        key_id=principal.key_id,
        prefix=principal.prefix,
        scopes=sorted(s for s in principal.scopes if s in SCOPES),  # type: ignore[misc]
        may={scope: principal.allows(scope) for scope in SCOPES},
    )
