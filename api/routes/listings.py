"""Owns the project-wide listings of production traces and bad/good pairs (filters, keyset pages).

``GET /v1/traces``: the project's traces, newest first, filtered by task key, outcome, status,
source format, the producer's id (``external_id``), creation time and metadata
(``?metadata.KEY=VALUE``). ``GET /v1/pairs``: every pair of the project (from traces and from runs),
filtered by source, task key, status, critic strategy and run. Both read the ``traces`` / ``pairs``
read models, one keyset page per request. A query parameter neither route defines is a 422 naming it
(``known_query_only``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query
from sqlalchemy import select

from api.dataset_schemas import TracePage, TraceSummaryOut
from api.deps import ApiServices, Principal, require, services
from api.pagination import cursor_param, keyset_page, known_query_only, limit_param, prefixed_query
from api.schemas import ERROR_RESPONSES, ID_PATTERN, PairOut, PairPage, Timestamp
from core.store.tables import pairs, traces

router = APIRouter(prefix="/v1", responses=ERROR_RESPONSES, dependencies=[Depends(known_query_only)])

TraceStatus = Literal[
    "waiting_for_outcome", "ingested", "critiqued", "no_error_found", "unpaired", "rejected", "revised"
]
"""Every status a trace row takes (core.store.projectors.samples); another is a 422 listing these."""

_KEY = Query(None, min_length=1, max_length=200, description="Only this task key.")


@router.get("/traces", response_model=TracePage, tags=["traces"], summary="List traces, newest first")
async def list_traces(
    cursor: str | None = Depends(cursor_param),
    task_key: str | None = _KEY,
    outcome: str | None = Query(
        None, pattern="^(success|failure|unknown)$", description="Only this outcome."
    ),
    status: TraceStatus | None = Query(None, description="Only traces in this status."),
    source_format: str | None = Query(None, pattern="^[a-z0-9_-]{1,32}$", description="Only this format."),
    external_id: str | None = Query(
        None,
        min_length=1,
        max_length=200,
        description="Only the trace the producer sent with this id (`id`; OTLP: the 32-hex trace id).",
    ),
    since: Timestamp | None = Query(None, description="Only traces created at or after this time."),
    until: Timestamp | None = Query(None, description="Only traces created before this time."),
    metadata: dict[str, str] = Depends(prefixed_query("metadata.")),
    limit: int = Depends(limit_param),
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> Any:
    """``?metadata.KEY=VALUE`` (up to 10, all must hold): only traces whose metadata has KEY with that
    value, compared as text (a number matches its decimal text, ``true``/``false`` a boolean)."""
    query = select(traces).where(traces.c.project_id == principal.project())
    for key, wanted in metadata.items():
        query = query.where(traces.c.metadata[key].as_string() == wanted)
    for column, value in (
        (traces.c.task_key, task_key),
        (traces.c.outcome, outcome),
        (traces.c.status, status),
        (traces.c.source_format, source_format),
        (traces.c.external_id, external_id),
    ):
        if value is not None:
            query = query.where(column == value)
    if since is not None:
        query = query.where(traces.c.created_at >= since)
    if until is not None:
        query = query.where(traces.c.created_at < until)
    page, next_cursor = await keyset_page(
        svc.store.engine,
        query,
        [traces.c.created_at, traces.c.trace_id],
        (datetime, str),
        cursor,
        limit,
        descending=True,
    )
    items = [
        TraceSummaryOut(
            **{k: row[k] for k in TraceSummaryOut.model_fields if k != "metadata"},
            metadata=row["metadata"] or {},
        )
        for row in page
    ]
    return TracePage(items=items, next_cursor=next_cursor)


@router.get("/pairs", response_model=PairPage, tags=["runs"], summary="List the project's bad/good pairs")
async def list_project_pairs(
    cursor: str | None = Depends(cursor_param),
    source: str | None = Query(None, pattern="^(trace|search)$", description="trace or search pairs."),
    task_key: str | None = _KEY,
    status: str | None = Query(
        None, pattern="^[a-z_]{1,32}$", description="found, critiqued, revised, rejected."
    ),
    strategy: str | None = Query(None, pattern="^(model|direct|rules)$", description="The critic strategy."),
    run_id: str | None = Query(None, pattern=ID_PATTERN, description="Only pairs of this run."),
    limit: int = Depends(limit_param),
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> Any:
    query = select(pairs).where(pairs.c.project_id == principal.project())
    for column, value in (
        (pairs.c.source, source),
        (pairs.c.task_key, task_key),
        (pairs.c.status, status),
        (pairs.c.strategy, strategy),
        (pairs.c.run_id, run_id),
    ):
        if value is not None:
            query = query.where(column == value)
    page, next_cursor = await keyset_page(svc.store.engine, query, [pairs.c.pair_id], (str,), cursor, limit)
    return PairPage(
        items=[PairOut(**{k: row[k] for k in PairOut.model_fields}) for row in page], next_cursor=next_cursor
    )
