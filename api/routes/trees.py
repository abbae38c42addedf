"""Owns the search-result routes: a tree with its nodes, and a run's trees, pairs and samples.

All lists are keyset-paginated (``limit`` + ``cursor``) and filtered by the caller's project.
Node statistics N and Q come from the ``nodes`` read model, which derives them from the
RolloutFinished and LeafRecorded events (they are never stored as mutable truth). A tree carries
the event-log ``position`` its snapshot includes, so a page can follow the tree's growth from
``GET /v1/events?after=position`` without reloading it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Depends, Path, Query
from sqlalchemy import RowMapping, Table, func, select

from api.datasets import row_to_sample
from api.deps import ApiServices, Principal, require, services
from api.pagination import CURSOR_DESCRIPTION, CURSOR_PATTERN, keyset_page, known_query_only, limit_param
from api.reads import owned_row
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
from core.domain.ids import tree_stream
from core.domain.serde import to_dict
from core.store.tables import events, nodes, pairs, samples, trees

router = APIRouter(prefix="/v1", tags=["trees"], responses=ERROR_RESPONSES)

Cursor = Query(None, min_length=1, max_length=500, pattern=CURSOR_PATTERN, description=CURSOR_DESCRIPTION)
Iteration = Query(None, ge=0, le=10_000, description="Only this iteration.")


@dataclass(frozen=True)
class RunListing:
    """The parameters every list of a run's rows shares: which run, iteration and page, and for whom."""

    run_id: str
    iteration: int | None
    cursor: str | None
    limit: int
    principal: Principal
    svc: ApiServices

    async def page(
        self, table: Table, keys: list[Any], *, kind: str | None = None
    ) -> tuple[Sequence[RowMapping], str | None]:
        """One keyset page of the run's rows in ``table`` (404 for a run outside the caller's project)."""
        project_id = self.principal.project()
        await run_row(self.svc, project_id, self.run_id)
        query = select(table).where(table.c.run_id == self.run_id, table.c.project_id == project_id)
        if self.iteration is not None:
            query = query.where(table.c.iteration == self.iteration)
        if kind is not None:
            query = query.where(table.c.kind == kind)
        return await keyset_page(self.svc.store.engine, query, keys, (int, str), self.cursor, self.limit)


async def run_listing(
    run_id: str = RunId,
    iteration: int | None = Iteration,
    cursor: str | None = Cursor,
    limit: int = Depends(limit_param),
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> RunListing:
    return RunListing(run_id, iteration, cursor, limit, principal, svc)


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
    # the tree stream's last position is read in the SAME statement as the nodes (one snapshot), so
    # a client following /v1/events?after=position neither misses nor double-counts an event
    position = (
        select(func.coalesce(func.max(events.c.position), 0))
        .where(events.c.stream_id == tree_stream(tree_id))
        .scalar_subquery()
    )
    async with svc.store.engine.connect() as conn:
        row = await owned_row(conn, trees, "tree_id", tree_id, principal.project(), "tree")
        node_rows = (
            (
                await conn.execute(
                    select(nodes, position.label("stream_position"))
                    .where(nodes.c.tree_id == tree_id)
                    .order_by(nodes.c.depth, nodes.c.node_id)
                )
            )
            .mappings()
            .all()
        )
        if node_rows:
            last = node_rows[0]["stream_position"]
        else:
            last = (await conn.execute(select(position))).scalar()
    node_list = [
        NodeOut(
            **{k: v for k, v in n.items() if k not in ("tree_id", "stream_position")},
            q=(n["value_sum"] / n["visits"]) if n["visits"] else None,
        )
        for n in node_rows
    ]
    return TreeOut(**_tree_summary(row), nodes=node_list, position=int(last or 0))


@router.get(
    "/runs/{run_id}/trees",
    response_model=TreePage,
    dependencies=[Depends(known_query_only)],
    summary="A run's trees",
)
async def list_trees(listing: RunListing = Depends(run_listing)) -> Any:
    page, next_cursor = await listing.page(trees, [trees.c.iteration, trees.c.tree_id])
    return TreePage(items=[TreeSummaryOut(**_tree_summary(r)) for r in page], next_cursor=next_cursor)


@router.get(
    "/runs/{run_id}/pairs",
    response_model=PairPage,
    dependencies=[Depends(known_query_only)],
    summary="A run's bad/good pairs",
)
async def list_pairs(listing: RunListing = Depends(run_listing)) -> Any:
    page, next_cursor = await listing.page(pairs, [pairs.c.iteration, pairs.c.pair_id])
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


@router.get(
    "/runs/{run_id}/samples",
    response_model=SamplePage,
    dependencies=[Depends(known_query_only)],
    summary="A run's samples (revision, good)",
)
async def list_samples(
    listing: RunListing = Depends(run_listing),
    kind: str | None = Query(None, pattern="^(revision|good)$", description="revision or good."),
) -> Any:
    page, next_cursor = await listing.page(samples, [samples.c.position, samples.c.sample_id], kind=kind)
    return SamplePage(items=[sample_out(r) for r in page], next_cursor=next_cursor)
