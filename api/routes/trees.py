"""Owns the search-result routes: a tree with its nodes, and a run's trees, pairs and samples.

All lists are keyset-paginated (``limit`` + ``cursor``) and filtered by the caller's project.
Node statistics N and Q come from the ``nodes`` read model, which derives them from the
RolloutFinished events (they are never stored as mutable truth).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Path, Query
from sqlalchemy import select

from api.datasets import row_to_sample
from api.deps import ApiServices, Principal, require, services
from api.errors import not_found
from api.pagination import after, decode_cursor, encode_cursor, limit_param
from api.routes.runs import RunId, run_row
from api.schemas import (
    ERROR_RESPONSES,
    ID_PATTERN,
    NodeOut,
    PairOut,
    PairPage,
    SampleOut,
    SamplePage,
    TreeOut,
    TreePage,
    TreeSummaryOut,
)
from core.domain.serde import to_dict
from core.store.tables import nodes, pairs, samples, trees

router = APIRouter(prefix="/v1", tags=["trees"], responses=ERROR_RESPONSES)

Cursor = Query(None, max_length=500, description="From the previous page's next_cursor.")


def _tree_summary(row: Any) -> dict[str, Any]:
    data = dict(row)
    data["node_count"] = data.pop("nodes")
    return data


@router.get("/trees/{tree_id}", response_model=TreeOut, summary="A search tree with every node's N and Q")
async def get_tree(
    tree_id: str = Path(pattern=ID_PATTERN),
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> Any:
    project_id = principal.project()
    async with svc.store.engine.connect() as conn:
        row = (
            (
                await conn.execute(
                    select(trees).where(trees.c.tree_id == tree_id, trees.c.project_id == project_id)
                )
            )
            .mappings()
            .first()
        )
        if row is None:
            raise not_found("tree", tree_id)
        node_rows = (
            (
                await conn.execute(
                    select(nodes).where(nodes.c.tree_id == tree_id).order_by(nodes.c.depth, nodes.c.node_id)
                )
            )
            .mappings()
            .all()
        )
    node_list = [
        NodeOut(
            **{k: v for k, v in n.items() if k != "tree_id"},
            q=(n["value_sum"] / n["visits"]) if n["visits"] else None,
        )
        for n in node_rows
    ]
    return TreeOut(**_tree_summary(row), nodes=node_list)


@router.get("/runs/{run_id}/trees", response_model=TreePage, summary="A run's trees")
async def list_trees(
    run_id: str = RunId,
    iteration: int | None = Query(None, ge=0, le=10_000, description="Only this iteration."),
    cursor: str | None = Cursor,
    limit: int = Depends(limit_param),
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> Any:
    project_id = principal.project()
    await run_row(svc, project_id, run_id)
    query = select(trees).where(trees.c.run_id == run_id, trees.c.project_id == project_id)
    if iteration is not None:
        query = query.where(trees.c.iteration == iteration)
    position = decode_cursor(cursor, (int, str))
    if position is not None:
        query = query.where(after([trees.c.iteration, trees.c.tree_id], position))
    query = query.order_by(trees.c.iteration, trees.c.tree_id).limit(limit + 1)
    async with svc.store.engine.connect() as conn:
        rows = (await conn.execute(query)).mappings().all()
    page = rows[:limit]
    next_cursor = encode_cursor([page[-1]["iteration"], page[-1]["tree_id"]]) if len(rows) > limit else None
    return TreePage(items=[TreeSummaryOut(**_tree_summary(r)) for r in page], next_cursor=next_cursor)


@router.get("/runs/{run_id}/pairs", response_model=PairPage, summary="A run's bad/good pairs")
async def list_pairs(
    run_id: str = RunId,
    iteration: int | None = Query(None, ge=0, le=10_000, description="Only this iteration."),
    cursor: str | None = Cursor,
    limit: int = Depends(limit_param),
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> Any:
    project_id = principal.project()
    await run_row(svc, project_id, run_id)
    query = select(pairs).where(pairs.c.run_id == run_id, pairs.c.project_id == project_id)
    if iteration is not None:
        query = query.where(pairs.c.iteration == iteration)
    position = decode_cursor(cursor, (int, str))
    if position is not None:
        query = query.where(after([pairs.c.iteration, pairs.c.pair_id], position))
    query = query.order_by(pairs.c.iteration, pairs.c.pair_id).limit(limit + 1)
    async with svc.store.engine.connect() as conn:
        rows = (await conn.execute(query)).mappings().all()
    page = rows[:limit]
    next_cursor = encode_cursor([page[-1]["iteration"], page[-1]["pair_id"]]) if len(rows) > limit else None
    return PairPage(
        items=[PairOut(**{k: v for k, v in r.items() if k != "project_id"}) for r in page],
        next_cursor=next_cursor,
    )


def sample_out(row: Any) -> SampleOut:
    return SampleOut(
        sample_id=row["sample_id"],
        run_id=row["run_id"],
        iteration=row["iteration"],
        kind=row["kind"],
        pair_id=row["pair_id"],
        tree_id=row["tree_id"],
        verified=row["verified"],
        template_id=row["template_id"],
        revision_length=row["revision_length"],
        sample=to_dict(row_to_sample(row)),
    )


@router.get("/runs/{run_id}/samples", response_model=SamplePage, summary="A run's samples (revision, good)")
async def list_samples(
    run_id: str = RunId,
    iteration: int | None = Query(None, ge=0, le=10_000, description="Only this iteration."),
    kind: str | None = Query(None, pattern="^(revision|good)$", description="revision or good."),
    cursor: str | None = Cursor,
    limit: int = Depends(limit_param),
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> Any:
    project_id = principal.project()
    await run_row(svc, project_id, run_id)
    query = select(samples).where(samples.c.run_id == run_id, samples.c.project_id == project_id)
    if iteration is not None:
        query = query.where(samples.c.iteration == iteration)
    if kind is not None:
        query = query.where(samples.c.kind == kind)
    position = decode_cursor(cursor, (int, str))
    if position is not None:
        query = query.where(after([samples.c.position, samples.c.sample_id], position))
    query = query.order_by(samples.c.position, samples.c.sample_id).limit(limit + 1)
    async with svc.store.engine.connect() as conn:
        rows = (await conn.execute(query)).mappings().all()
    page = rows[:limit]
    next_cursor = encode_cursor([page[-1]["position"], page[-1]["sample_id"]]) if len(rows) > limit else None
    return SamplePage(items=[sample_out(r) for r in page], next_cursor=next_cursor)
