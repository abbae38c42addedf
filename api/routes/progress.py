"""Owns ``GET /v1/runs/{run_id}/progress`` (``read``): did training help? The starting model
(iteration 0's ``eval.start``) and each evaluated iteration's model on the held-out tasks: success,
recovery, dead loops and invalid actions, each with the counts behind it and a 95% Wilson interval
(``core.domain.training_progress``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from api.deps import ApiServices, Principal, require, services
from api.routes.runs import RunId, run_row
from api.schemas import ERROR_RESPONSES
from core.domain.training_progress import PROGRESS_METRICS, training_progress
from core.store.queries.progress import iteration_evaluations

router = APIRouter(prefix="/v1", tags=["runs"], responses=ERROR_RESPONSES)


class MetricOut(BaseModel):
    key: str
    label: str
    higher_is_better: bool


class PointOut(BaseModel):
    model: str = Field(description='"start" (the model before training) or "iteration N".')
    iteration: int | None
    metric: str
    rate: float | None
    count: int = Field(description="Successes, recovered prefixes, looping episodes or invalid actions.")
    n: int = Field(description="Episodes, recovery prefixes or actions the rate is over.")
    low: float | None = Field(description="95% Wilson interval of count / n (null without n).")
    high: float | None


class ProgressOut(BaseModel):
    run_id: str
    metrics: list[MetricOut]
    models: list[str] = Field(description="The models in order: start, then each evaluated iteration.")
    points: list[PointOut]


@router.get(
    "/runs/{run_id}/progress",
    response_model=ProgressOut,
    summary="Did training help: the start model and each iteration on held-out tasks, with intervals",
)
async def run_progress(
    run_id: str = RunId,
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> Any:
    await run_row(svc, principal.project(), run_id)
    points = training_progress(await iteration_evaluations(svc.store.engine, run_id))
    models = list(dict.fromkeys(p.model for p in points))
    return ProgressOut(
        run_id=run_id,
        metrics=[MetricOut(key=k, label=label, higher_is_better=up) for k, label, up in PROGRESS_METRICS],
        models=models,
        points=[PointOut(**p.__dict__) for p in points],
    )
