"""Owns the project and API-key routes: create/list projects, issue/list/revoke keys.

The bootstrap admin (AGENTR_ADMIN_KEY) creates projects and issues keys for any project; a project
key with the ``admin`` scope manages the keys of its own project only. A project key never sees
another project: asking for one answers 404.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, TypeVar

from fastapi import APIRouter, Depends, Path
from sqlalchemy.ext.asyncio import AsyncConnection

from api.deps import ApiServices, Principal, require, services
from api.errors import ApiError, field_error, not_found
from api.idempotency import Idempotency, idempotency
from api.keys import generate_key
from api.schemas import ERROR_RESPONSES, ID_PATTERN, KeyIn, KeyIssuedOut, KeyOut, ProjectIn, ProjectOut
from api.writes import append, new_event
from core.domain.config import is_served_model
from core.domain.events import ApiKeyIssued, ApiKeyRevoked, ProjectCreated
from core.domain.ids import project_stream
from core.store.queries import projects as reads
from core.store.queries.projects import KeyRow, ProjectRow

router = APIRouter(prefix="/v1/projects", tags=["projects"], responses=ERROR_RESPONSES)

T = TypeVar("T")
ProjectId = Path(pattern=ID_PATTERN, description="The project id.")


async def _written(read: Awaitable[T | None]) -> T:
    """The row a write of this request just made (it exists: the projection is in its transaction)."""
    row = await read
    if row is None:
        raise RuntimeError("the row this request wrote is missing from its read model")
    return row


def _visible(principal: Principal, project_id: str) -> None:
    """404 unless the caller is the bootstrap admin or a key of this very project."""
    if not principal.is_bootstrap_admin and principal.project_id != project_id:
        raise not_found("project", project_id)


async def _project_row(svc: ApiServices, project_id: str) -> ProjectRow:
    row = await reads.project(svc.store, project_id)
    if row is None:
        raise not_found("project", project_id)
    return row


def _key_out(row: KeyRow) -> KeyOut:
    return KeyOut(
        key_id=row["key_id"],
        project_id=row["project_id"],
        prefix=row["prefix"],
        scopes=list(row["scopes"]),
        label=row["label"],
        revoked=bool(row["revoked"]),
        created_at=row["created_at"],
    )


@router.post("", status_code=201, response_model=ProjectOut, summary="Create a project (bootstrap admin)")
async def create_project(
    body: ProjectIn,
    principal: Principal = Depends(require("admin")),
    idem: Idempotency = Depends(idempotency),
    svc: ApiServices = Depends(services),
) -> Any:
    if not principal.is_bootstrap_admin:
        raise ApiError(403, "only the bootstrap admin key (AGENTR_ADMIN_KEY) creates projects")
    project_id = idem.new_id("project")
    critic = body.critic
    if critic is not None and critic.strategy == "model" and not critic.model:
        raise field_error("body.critic.model", "strategy model needs a critic model: send critic.model")
    if critic is not None and critic.model and is_served_model(critic.model):
        refused = svc.settings.egress.model_problem(critic.model)  # the critic worker checks it again
        if refused is not None:
            raise field_error("body.critic.model", refused)
    event = ProjectCreated(
        project_id=project_id,
        name=body.name,
        critic_strategy=critic.strategy if critic is not None else None,
        critic_model=critic.model if critic is not None else None,
    )

    async def answer(conn: AsyncConnection) -> tuple[int, Any]:
        return 201, ProjectOut(**await _written(reads.project(conn, project_id))).model_dump(mode="json")

    await append(
        svc,
        [new_event(project_stream(project_id), event, project_id=project_id, event_id=idem.new_id("event"))],
        idem=idem,
        answer=answer,
    )
    return ProjectOut(**await _project_row(svc, project_id)).model_dump(mode="json")


@router.get("", response_model=list[ProjectOut], summary="List the projects the caller can see")
async def list_projects(
    principal: Principal = Depends(require("read")), svc: ApiServices = Depends(services)
) -> Any:
    only = None if principal.is_bootstrap_admin else principal.project_id
    return [ProjectOut(**row) for row in await reads.list_projects(svc.store, only)]


@router.get("/{project_id}", response_model=ProjectOut, summary="One project")
async def get_project(
    project_id: str = ProjectId,
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> Any:
    _visible(principal, project_id)
    return ProjectOut(**await _project_row(svc, project_id))


@router.post(
    "/{project_id}/keys",
    status_code=201,
    response_model=KeyIssuedOut,
    summary="Issue an API key (its secret is shown once)",
)
async def issue_key(
    body: KeyIn,
    project_id: str = ProjectId,
    principal: Principal = Depends(require("admin")),
    idem: Idempotency = Depends(idempotency),
    svc: ApiServices = Depends(services),
) -> Any:
    _visible(principal, project_id)
    await _project_row(svc, project_id)
    key_id = idem.new_id("key")
    issued = generate_key()
    event = ApiKeyIssued(
        project_id=project_id,
        key_id=key_id,
        prefix=issued.prefix,
        salt=issued.salt,
        key_hash=issued.key_hash,
        scopes=tuple(body.scopes),
        label=body.label,
    )
    # A retry with the same Idempotency-Key is told which key was issued, never its secret again.
    conflict: dict[str, Any] = {
        "error": "conflict",
        "detail": f"this Idempotency-Key already issued key {key_id!r} (prefix {issued.prefix}); "
        "its secret is shown only once: revoke it and issue a new key if it was lost",
        "fields": [],
        "request_id": None,
    }
    new = await append(
        svc,
        [new_event(project_stream(project_id), event, project_id=project_id, event_id=idem.new_id("event"))],
        idem=idem,
        answer=(409, conflict),
    )
    if not new:  # cannot happen with a key (the claim above answers); without one ids are fresh
        raise ApiError(409, f"key {key_id!r} was already issued; its secret is shown only once")
    row = await _written(reads.key(svc.store, key_id))
    return KeyIssuedOut(**_key_out(row).model_dump(), key=issued.key)


@router.get("/{project_id}/keys", response_model=list[KeyOut], summary="List a project's keys (no secrets)")
async def list_keys(
    project_id: str = ProjectId,
    principal: Principal = Depends(require("admin")),
    svc: ApiServices = Depends(services),
) -> Any:
    _visible(principal, project_id)
    await _project_row(svc, project_id)
    return [_key_out(row) for row in await reads.project_keys(svc.store, project_id)]


@router.post(
    "/{project_id}/keys/{key_id}/revoke",
    response_model=KeyOut,
    summary="Revoke a key (it stops working at once)",
)
async def revoke_key(
    project_id: str = ProjectId,
    key_id: str = Path(pattern=ID_PATTERN),
    principal: Principal = Depends(require("admin")),
    idem: Idempotency = Depends(idempotency),
    svc: ApiServices = Depends(services),
) -> Any:
    _visible(principal, project_id)
    row = await reads.key(svc.store, key_id, project_id)
    if row is None:
        raise not_found("key", key_id)

    async def answer(conn: AsyncConnection) -> tuple[int, Any]:
        return 200, _key_out(await _written(reads.key(conn, key_id))).model_dump(mode="json")

    if not row["revoked"]:
        event = ApiKeyRevoked(project_id=project_id, key_id=key_id)
        await append(
            svc,
            [
                new_event(
                    project_stream(project_id), event, project_id=project_id, event_id=idem.new_id("event")
                )
            ],
            idem=idem,
            answer=answer,
        )
    else:
        await idem.save(200, _key_out(row).model_dump(mode="json"))
    svc.verified.forget(key_id)  # the capture proxy mounted here trusts it no more
    return _key_out(await _written(reads.key(svc.store, key_id))).model_dump(mode="json")
