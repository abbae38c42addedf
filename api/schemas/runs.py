"""Owns the shapes of the run routes (``/v1/runs``): accepted, run, iteration and summary pages,
cancel."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import (
    BaseModel,
    Field,
)

from api.schemas.common import (
    _Strict,
)


class RunAccepted(BaseModel):
    run_id: str
    status: str


class IterationOut(BaseModel):
    iteration: int
    status: str
    model_ref: str
    alpha: float
    trees_expected: int
    trees_done: int
    trees_failed: int
    pairs: int
    revisions: int
    goods: int
    dataset_id: str | None = None
    checkpoint: str | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)
    revision_length_mean: float | None = None
    reason: str | None = None


class RunOut(BaseModel):
    run_id: str
    project_id: str
    status: str
    config: dict[str, Any]
    current_iteration: int
    final_model_ref: str | None = None
    reason: str | None = None
    summary: dict[str, Any] | None = None
    created_at: datetime
    updated_at: datetime
    iterations: list[IterationOut] = Field(default_factory=list)


class RunSummaryOut(BaseModel):
    run_id: str
    status: str
    current_iteration: int
    created_at: datetime
    updated_at: datetime


class RunPage(BaseModel):
    items: list[RunSummaryOut]
    next_cursor: str | None = Field(None, description="Pass as `cursor` for the next page; null at the end.")


class CancelIn(_Strict):
    reason: str = Field("cancelled by user", min_length=1, max_length=500)
