"""Cancelling a run stops its search (issue 26): over the real services (``agentr serve`` and the
workers as OS processes, PostgreSQL and Redis), a run with a long search (500 rollouts per tree,
a small untrained model built into the deployment's model store)
is cancelled once its first tree has expanded nodes; the search worker sees the cancel between two
expansions, appends no NodesExpanded for the run's trees after it (a few seconds of grace for the
expansion in flight and the worker's once-a-second check), and records why in ``SearchFailed``."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select

from core.llm.tiny import build_tiny_model
from core.store.factory import open_store
from core.store.tables import events
from tests.e2e.helpers import wait_until
from tests.e2e.services import Deployment

GRACE = timedelta(seconds=5)


async def _run_events(database_url: str, run_id: str) -> list[dict[str, Any]]:
    """(type, stream, recorded_at, data) of every event in the streams of ``run_id``'s trees."""
    store = await open_store(database_url)
    try:
        async with store.engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(events.c.stream_id, events.c.data).where(events.c.event_type == "TreeStarted")
                )
            ).all()
            streams = [stream for stream, data in rows if data.get("run_id") == run_id]
            found = (
                await conn.execute(
                    select(events.c.event_type, events.c.stream_id, events.c.recorded_at, events.c.data)
                    .where(events.c.stream_id.in_(streams))
                    .order_by(events.c.position)
                )
            ).all()
    finally:
        await store.close()
    return [{"type": t, "stream": s, "at": at, "data": d} for t, s, at, d in found]


def test_cancel_stops_a_running_search(deployment: Deployment) -> None:
    client = deployment.client
    # a small untrained model in the deployment's own model store (a default model root): its
    # actions are mostly invalid, but every rollout expands nodes, and 500 of them take minutes
    texts = ["Goal: craft stick.", "Thought: planks.\nAction: get 2 oak planks"] * 20
    folder = build_tiny_model(
        deployment.home / "models" / "cancel-tiny", texts, hidden=32, layers=1, heads=2, vocab_size=300
    )
    config = {
        "model": str(folder),
        "max_tasks": 1,
        "iterations": 1,
        "data_only": True,
        "search": {"iterations": 500, "n_candidates": 2, "max_depth": 8},
    }
    run_id = client.submit_run(config)

    def expanding() -> bool | None:
        found = asyncio.run(_run_events(deployment.database_url, run_id))
        return True if sum(e["type"] == "NodesExpanded" for e in found) >= 3 else None

    wait_until(expanding, timeout=240, what="the search to expand nodes", check=deployment.group.check_alive)
    cancelled_at = datetime.now(UTC)
    response = client.http.post(
        f"/v1/runs/{run_id}/cancel", json={"reason": "e2e cancel"}, headers=client.headers
    )
    assert response.status_code == 202, response.text

    def stopped() -> list[dict[str, Any]] | None:
        found = asyncio.run(_run_events(deployment.database_url, run_id))
        return found if any(e["type"] == "SearchFailed" for e in found) else None

    found = wait_until(stopped, timeout=60, what="the search to stop", check=deployment.group.check_alive)
    time.sleep(3)  # anything still being appended would show now
    found = asyncio.run(_run_events(deployment.database_url, run_id))
    failed = [e for e in found if e["type"] == "SearchFailed"]
    assert failed and all(e["data"]["reason"] == "run cancelled: e2e cancel" for e in failed), failed
    late = [e for e in found if e["type"] == "NodesExpanded" and e["at"] > cancelled_at + GRACE]
    assert not late, [(e["stream"], e["at"].isoformat(), cancelled_at.isoformat()) for e in late]
    assert not any(e["type"] == "TreeCompleted" for e in found)  # no tree ran its 500 rollouts
    assert client.run(run_id)["status"] == "cancelled"
