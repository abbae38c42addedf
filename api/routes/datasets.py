"""Owns the dataset download route: one iteration's training data, streamed in an export format."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import StreamingResponse
from sqlalchemy import select

from api.datasets import iter_dataset, jsonl_bytes, parquet_bytes
from api.deps import ApiServices, Principal, require, services
from api.errors import ApiError, not_found
from api.routes.runs import RunId, run_row
from api.schemas import ERROR_RESPONSES, ExportFormat
from core.store.tables import iterations

router = APIRouter(prefix="/v1", tags=["datasets"], responses=ERROR_RESPONSES)

_MEDIA = {
    "openai": ("application/x-ndjson", "jsonl"),
    "sharegpt": ("application/x-ndjson", "jsonl"),
    "parquet": ("application/vnd.apache.parquet", "parquet"),
}


@router.get(
    "/runs/{run_id}/iterations/{iteration}/dataset",
    response_class=StreamingResponse,
    summary="Download an iteration's dataset (streamed)",
    responses={
        200: {
            "description": "OpenAI fine-tuning JSONL (assistant `weight` 0/1), ShareGPT JSONL "
            "(`loss` flags) or Parquet, streamed.",
            "content": {
                "application/x-ndjson": {"schema": {"type": "string"}},
                "application/vnd.apache.parquet": {"schema": {"type": "string", "format": "binary"}},
            },
        }
    },
)
async def download_dataset(
    run_id: str = RunId,
    iteration: int = Path(ge=0, le=10_000, description="0-based iteration."),
    format: ExportFormat = Query("openai", description="openai, sharegpt or parquet."),
    partial: bool = Query(False, description="Export what exists before the dataset is ready."),
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> Any:
    project_id = principal.project()
    await run_row(svc, project_id, run_id)
    async with svc.store.engine.connect() as conn:
        it = (
            (
                await conn.execute(
                    select(iterations).where(
                        iterations.c.run_id == run_id, iterations.c.iteration == iteration
                    )
                )
            )
            .mappings()
            .first()
        )
    if it is None:
        raise not_found("iteration", iteration)
    if it["dataset_id"] is None and not partial:
        raise ApiError(
            409,
            f"the dataset of iteration {iteration} is not ready (iteration status {it['status']}); "
            "pass partial=true to export what exists so far",
        )
    samples = iter_dataset(
        svc.store.engine, project_id=project_id, run_id=run_id, iteration=iteration, alpha=it["alpha"]
    )
    media_type, suffix = _MEDIA[format]
    counted = _count(samples, svc, format)
    body = parquet_bytes(counted) if format == "parquet" else jsonl_bytes(counted, format)
    name = f"{run_id}-iteration{iteration}-{format}.{suffix}"
    headers = {"Content-Disposition": f'attachment; filename="{name}"'}
    if it["dataset_id"] is not None:
        headers["X-Dataset-Id"] = it["dataset_id"]
    return StreamingResponse(body, media_type=media_type, headers=headers)


async def _count(samples: Any, svc: ApiServices, fmt: str) -> Any:
    counter = svc.metrics.export_rows.labels(fmt)
    async for sample in samples:
        counter.inc()
        yield sample
