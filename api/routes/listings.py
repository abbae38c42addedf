"""Owns the project-wide listings of production traces and bad/good pairs (filters, keyset pages).

``GET /v1/traces``: the project's traces, newest first, filtered by task key, outcome, status,
source format, the producer's id (``external_id``), creation time and metadata
(``?metadata.KEY=VALUE``). ``GET /v1/pairs``: every pair of the project (from traces and from runs),
filtered by source, task key, status, critic strategy and run. Both read the ``traces`` / ``pairs``
read models, one keyset page per request. A query parameter neither route defines is a 422 naming it
(``known_query_only``).
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Query

from api.dataset_schemas import TracePage, TraceSummaryOut
from api.deps import ApiServices, Principal, require, services
from api.pagination import cursor_param, fetch_page, known_query_only, limit_param, prefixed_query
from api.schemas import ERROR_RESPONSES, ID_PATTERN, PairOut, PairPage, Timestamp
from core.store.queries import pairs as pair_reads
from core.store.queries import traces as trace_reads
from core.store.queries.pairs import PairFilter
from core.store.queries.traces import TraceFilter

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
    project_id = principal.project()
    where = TraceFilter(task_key, outcome, status, source_format, external_id, since, until, metadata)
    page, next_cursor = await fetch_page(
        trace_reads.PAGE_KEY,
        cursor,
        limit,
        lambda request: trace_reads.traces_page(svc.store, project_id, where, request),
    )
    items = [TraceSummaryOut.model_validate({**row, "metadata": row["metadata"] or {}}) for row in page]
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
    project_id = principal.project()
    where = PairFilter(source, task_key, status, strategy, run_id)
    page, next_cursor = await fetch_page(
        pair_reads.PROJECT_PAGE_KEY,
        cursor,
        limit,
        lambda request: pair_reads.project_pairs(svc.store, project_id, where, request),
    )
    return PairPage(items=[PairOut.model_validate(row) for row in page], next_cursor=next_cursor)
