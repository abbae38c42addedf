"""Cancelling a run stops its running search (issue 26), on the real PostgreSQL store with the real
search handler (TextCraft, the noisy-expert policy): the search runs in the background with a
budget it would take minutes to spend; once it has expanded nodes, ``RunCancelled`` is appended to
the run's stream (as ``POST /v1/runs/{id}/cancel`` does). The handler returns within seconds with
``SearchFailed("run cancelled: ...")``, no NodesExpanded is appended after that, and a search
requested for the already-cancelled run does not start."""

from __future__ import annotations

import asyncio

from core.domain.events import (
    NewEvent,
    NodesExpanded,
    RunCancelled,
    SearchFailed,
    SearchRequested,
    TreeCompleted,
)
from core.domain.ids import new_id, run_stream, tree_stream
from core.domain.mcts import SearchConfig
from core.runtime.settings import load_settings
from core.store.factory import open_store
from search_service.service import build_service
from tests.integration.test_search_service import handle_like_the_worker

CONFIG = SearchConfig(iterations=5000, max_depth=12, n_candidates=4, alpha=1.0, beta=0.5).to_dict()


def _request(run_id: str) -> NewEvent:
    tree_id = new_id()
    event = SearchRequested(tree_id, run_id, 0, "textcraft", "200", "noisy-expert?mistake=0.6", CONFIG, 3)
    return NewEvent(tree_stream(tree_id), event)


async def test_cancel_reaches_a_running_search(pg_url: str) -> None:
    store = await open_store(pg_url, create_tables=True)
    service = build_service(load_settings(search_concurrency=1), store)
    try:
        run_id = new_id()
        (recorded,) = await store.append([_request(run_id)])
        tree_id = recorded.event.tree_id  # type: ignore[attr-defined]
        search = asyncio.create_task(handle_like_the_worker(store, recorded, service))

        async def expanded() -> int:
            return sum(
                isinstance(r.event, NodesExpanded) for r in await store.read_stream(tree_stream(tree_id))
            )

        while await expanded() < 5:
            assert not search.done(), "the search ended before it was cancelled"
            await asyncio.sleep(0.1)
        (cancel,) = await store.append([NewEvent(run_stream(run_id), RunCancelled(run_id, "enough"))])
        await asyncio.wait_for(search, timeout=120)
        recorded = await store.read_stream(tree_stream(tree_id))
        events = [r.event for r in recorded]
        assert isinstance(events[-1], SearchFailed) and events[-1].reason == "run cancelled: enough"
        assert not any(isinstance(e, TreeCompleted) for e in events)
        # the worker checks the run at most once a second, between expansions: its last expansion is
        # stored within seconds of the cancel (how MANY fit in that second depends on the machine)
        last = max(r.recorded_at for r in recorded if isinstance(r.event, NodesExpanded))
        assert (last - cancel.recorded_at).total_seconds() <= 10, last - cancel.recorded_at
        await asyncio.sleep(2)
        assert len(await store.read_stream(tree_stream(tree_id))) == len(events)  # nothing more

        # a search requested for the cancelled run does not start at all
        (again,) = await store.append([_request(run_id)])
        await handle_like_the_worker(store, again, service)
        fresh = [r.event for r in await store.read_stream(tree_stream(again.event.tree_id))]  # type: ignore[attr-defined]
        assert [type(e).__name__ for e in fresh] == ["SearchRequested", "SearchFailed"]
    finally:
        await service.on_close()  # type: ignore[misc]
        await store.close()
