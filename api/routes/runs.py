"""Owns the run routes: submit, read (with per-iteration progress), list, cancel.

Submitting appends RunRequested to the run's stream (the workers take it from there); cancelling
appends RunCancelled. Reads come from the ``runs`` and ``iterations`` read models, always filtered
by the caller's project.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Path, Query

from api.deps import ApiServices, Principal, require, services
from api.errors import ApiError, field_error
from api.idempotency import Idempotency, idempotency
from api.model_refs import rooted_run_config
from api.pagination import cursor_param, fetch_page, known_query_only, limit_param
from api.reads import found
from api.schemas import (
    ERROR_RESPONSES,
    ID_PATTERN,
    CancelIn,
    IterationOut,
    RunAccepted,
    RunConfigIn,
    RunOut,
    RunPage,
    RunSummaryOut,
)
from api.writes import append, new_event
from core.domain.config import TRAIN_MODEL_PATH, RunConfig
from core.domain.events import DomainEvent, RunCancelled, RunRequested
from core.domain.ids import run_stream
from core.llm.chat_template import run_template_problem
from core.store.queries import runs as run_reads
from core.store.queries.runs import RunRow

router = APIRouter(prefix="/v1/runs", tags=["runs"], responses=ERROR_RESPONSES)

RunId = Path(pattern=ID_PATTERN, description="The run id.")
TERMINAL = frozenset({"completed", "cancelled", "failed"})


async def run_row(svc: ApiServices, project_id: str, run_id: str) -> RunRow:
    """The run's read-model row, 404 when missing or in another project."""
    return found(await run_reads.run(svc.store, project_id, run_id), "run", run_id)


async def _accept(
    svc: ApiServices, idem: Idempotency, project_id: str, run_id: str, event: DomainEvent, status: str
) -> dict[str, Any]:
    """Append ``event`` to the run's stream and answer (and remember, for retries) 202 ``status``."""
    out = RunAccepted(run_id=run_id, status=status).model_dump(mode="json")
    await append(
        svc,
        [
            new_event(
                run_stream(run_id),
                event,
                project_id=project_id,
                event_id=idem.new_id("event"),
                correlation_id=run_id,
            )
        ],
        idem=idem,
        answer=(202, out),
    )
    return out


def _as_sent(message: str, rooted: RunConfig, sent: RunConfig) -> str:
    """``message`` naming the model folders as the caller sent them, not as resolved inside the
    server's model roots (a 422 never shows the server's paths)."""
    for resolved, given in (
        (rooted.model, sent.model),
        (rooted.train.get(TRAIN_MODEL_PATH), sent.train.get(TRAIN_MODEL_PATH)),
    ):
        if isinstance(resolved, str) and isinstance(given, str) and resolved != given:
            message = message.replace(resolved, repr(given))
    return message


@router.post("", status_code=202, response_model=RunAccepted, summary="Submit a run")
async def submit_run(
    body: RunConfigIn,
    principal: Principal = Depends(require("run")),
    idem: Idempotency = Depends(idempotency),
    svc: ApiServices = Depends(services),
) -> Any:
    project_id = principal.project()
    run_id = idem.new_id("run")
    sent = body.to_domain()
    config, refused = rooted_run_config(sent, svc.settings.model_root_paths, svc.settings.egress)
    if refused is not None:  # outside the roots: the same answer whether or not the path exists
        raise field_error(f"body.{refused[0]}", refused[1])
    problem = await asyncio.to_thread(run_template_problem, config)  # reads the model folder
    if problem is not None:
        raise field_error(f"body.{problem[0]}", _as_sent(problem[1], config, sent))
    event = RunRequested(run_id=run_id, project_id=project_id, config=config.to_data())
    return await _accept(svc, idem, project_id, run_id, event, "requested")


@router.get(
    "", response_model=RunPage, dependencies=[Depends(known_query_only)], summary="List runs, newest first"
)
async def list_runs(
    cursor: str | None = Depends(cursor_param),
    status: str | None = Query(None, pattern="^[a-z_]{1,32}$", description="Only runs in this status."),
    limit: int = Depends(limit_param),
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> Any:
    project_id = principal.project()
    page, next_cursor = await fetch_page(
        run_reads.RUNS_PAGE_KEY,
        cursor,
        limit,
        lambda request: run_reads.runs_page(svc.store, project_id, status, request),
    )
    return RunPage(items=[RunSummaryOut.model_validate(row) for row in page], next_cursor=next_cursor)


@router.get("/{run_id}", response_model=RunOut, summary="A run with its per-iteration progress and metrics")
async def get_run(
    run_id: str = RunId,
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> Any:
    row = await run_row(svc, principal.project(), run_id)
    its = await run_reads.run_iterations(svc.store, run_id)
    return RunOut(
        **row, iterations=[IterationOut.model_validate({**it, "metrics": it["metrics"] or {}}) for it in its]
    )


@router.post("/{run_id}/cancel", status_code=202, response_model=RunAccepted, summary="Cancel a run")
async def cancel_run(
    body: CancelIn | None = None,
    run_id: str = RunId,
    principal: Principal = Depends(require("run")),
    idem: Idempotency = Depends(idempotency),
    svc: ApiServices = Depends(services),
) -> Any:
    project_id = principal.project()
    row = await run_row(svc, project_id, run_id)
    if row["status"] in TERMINAL:
        raise ApiError(409, f"run {run_id!r} is already {row['status']}")
    reason = body.reason if body is not None else "cancelled by user"
    return await _accept(
        svc, idem, project_id, run_id, RunCancelled(run_id=run_id, reason=reason), "cancelled"
    )
