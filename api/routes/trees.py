"""Owns the search-result routes: a tree with its nodes, and a run's trees, pairs and samples.

All lists are keyset-paginated (``limit`` + ``cursor``) and filtered by the caller's project.
Node statistics N and Q come from the ``nodes`` read model, which derives them from the
RolloutFinished and LeafRecorded events (they are never stored as mutable truth). A tree carries
the event-log ``position`` its snapshot includes, so a page can follow the tree's growth from
``GET /v1/events?after=position`` without reloading it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import APIRouter, Depends, Path, Query

from api.datasets import row_to_sample
from api.deps import ApiServices, Principal, require, services
from api.pagination import CURSOR_DESCRIPTION, CURSOR_PATTERN, fetch_page, known_query_only, limit_param
from api.reads import found
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
from core.store.queries import pairs as pair_reads
from core.store.queries import samples as sample_reads
from core.store.queries import trees as tree_reads
from core.store.queries.paging import Page, PageRequest
from core.store.queries.samples import SampleRow
from core.store.queries.trees import TreeRow

router = APIRouter(prefix="/v1", tags=["trees"], responses=ERROR_RESPONSES)

T = TypeVar("T")
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
        self, types: Sequence[type], fetch: Callable[[str, PageRequest], Awaitable[Page[T]]]
    ) -> tuple[list[T], str | None]:
        """One page of the run's rows that ``fetch(project_id, request)`` reads (404 for a run
        outside the caller's project)."""
        project_id = self.principal.project()
        await run_row(self.svc, project_id, self.run_id)
        return await fetch_page(types, self.cursor, self.limit, lambda request: fetch(project_id, request))


async def run_listing(
    run_id: str = RunId,
    iteration: int | None = Iteration,
    cursor: str | None = Cursor,
    limit: int = Depends(limit_param),
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> RunListing:
    return RunListing(run_id, iteration, cursor, limit, principal, svc)


def _tree_summary(row: TreeRow) -> dict[str, Any]:
    data = dict(row)
    data["node_count"] = data.pop("nodes")
    return data


@router.get("/trees/{tree_id}", response_model=TreeOut, summary="A search tree with every node's N and Q")
async def get_tree(
    tree_id: str = Path(pattern=ID_PATTERN),
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> Any:
    # the tree stream's last position is read with the nodes (one snapshot), so a client following
    # /v1/events?after=position neither misses nor double-counts an event
    snapshot = found(await tree_reads.tree(svc.store, principal.project(), tree_id), "tree", tree_id)
    node_list = [
        NodeOut.model_validate({**n, "q": (n["value_sum"] / n["visits"]) if n["visits"] else None})
        for n in snapshot.nodes
    ]
    return TreeOut(**_tree_summary(snapshot.tree), nodes=node_list, position=snapshot.position)


@router.get(
    "/runs/{run_id}/trees",
    response_model=TreePage,
    dependencies=[Depends(known_query_only)],
    summary="A run's trees",
)
async def list_trees(listing: RunListing = Depends(run_listing)) -> Any:
    page, next_cursor = await listing.page(
        tree_reads.RUN_PAGE_KEY,
        lambda project_id, request: tree_reads.run_trees(
            listing.svc.store, project_id, listing.run_id, listing.iteration, request
        ),
    )
    return TreePage(items=[TreeSummaryOut(**_tree_summary(r)) for r in page], next_cursor=next_cursor)


@router.get(
    "/runs/{run_id}/pairs",
    response_model=PairPage,
    dependencies=[Depends(known_query_only)],
    summary="A run's bad/good pairs",
)
async def list_pairs(listing: RunListing = Depends(run_listing)) -> Any:
    page, next_cursor = await listing.page(
        pair_reads.RUN_PAGE_KEY,
        lambda project_id, request: pair_reads.run_pairs(
            listing.svc.store, project_id, listing.run_id, listing.iteration, request
        ),
    )
    return PairPage(
        items=[PairOut.model_validate(r) for r in page],
        next_cursor=next_cursor,
    )


def sample_out(row: SampleRow) -> SampleOut:
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
    page, next_cursor = await listing.page(
        sample_reads.RUN_PAGE_KEY,
        lambda project_id, request: sample_reads.run_samples(
            listing.svc.store, project_id, listing.run_id, listing.iteration, kind, request
        ),
    )
    return SamplePage(items=[sample_out(r) for r in page], next_cursor=next_cursor)
