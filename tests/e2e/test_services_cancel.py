"""Cancelling a run stops its search (issue 26): over the real services (``agentr serve`` and the
workers as OS processes, PostgreSQL and Redis), a run with a long search (the warm-started tiny
model, 500 rollouts per tree on a 20-step horizon, so the tree cannot be exhausted first) is
cancelled once its tree has expanded nodes; the search worker sees the cancel between two
expansions, appends no NodesExpanded for the run's trees after it (a few seconds of grace for the
expansion in flight and the worker's once-a-second check), and records why in ``SearchFailed``."""

from __future__ import annotations

import asyncio
import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select

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


def test_cancel_stops_a_running_search(deployment: Deployment, run_config: dict[str, Any]) -> None:
    client = deployment.client
    # A search that cannot end on its own within the test: 500 rollouts on a 20-step horizon, 8
    # candidates a node drawn hot among the valid actions. The quick config's own search (6-step
    # episodes, the confident tiny model) is a tree the search closes completely (exhausted) in one
    # rollout, before any cancel could reach it: why this test once saw no SearchFailed.
    search = {
        **run_config.get("search", {}),
        "iterations": 500,
        "max_depth": 20,
        "n_candidates": 8,
        "temperature": 1.5,
        "constrain_actions": True,
    }
    env = re.sub(r"max_steps=\d+", "max_steps=20", run_config["env"])
    assert env != run_config["env"], run_config["env"]
    config = {**run_config, "env": env, "search": search, "data_only": True, "max_tasks": 1}
    run_id = client.submit_run(config)

    def expanding() -> bool | None:
        found = asyncio.run(_run_events(deployment.database_url, run_id))
        return True if sum(e["type"] == "NodesExpanded" for e in found) >= 3 else None

    try:
        wait_until(
            expanding, timeout=240, what="the search to expand nodes", check=deployment.group.check_alive
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nrun: {client.run(run_id)}\n{deployment.group.logs(80)}") from None
    cancelled_at = datetime.now(UTC)
    response = client.http.post(
        f"/v1/runs/{run_id}/cancel", json={"reason": "e2e cancel"}, headers=client.headers
    )
    assert response.status_code == 202, response.text

    def stopped() -> list[dict[str, Any]] | None:
        found = asyncio.run(_run_events(deployment.database_url, run_id))
        return found if any(e["type"] == "SearchFailed" for e in found) else None

    try:
        found = wait_until(stopped, timeout=60, what="the search to stop", check=deployment.group.check_alive)
    except AssertionError as exc:
        seen = [
            (e["type"], e["at"].isoformat())
            for e in asyncio.run(_run_events(deployment.database_url, run_id))
        ]
        logs = deployment.group.logs(80)
        when = cancelled_at.isoformat()
        raise AssertionError(f"{exc}\ncancelled at {when}; events {seen[-10:]}\n{logs}") from None
    time.sleep(3)  # anything still being appended would show now
    found = asyncio.run(_run_events(deployment.database_url, run_id))
    failed = [e for e in found if e["type"] == "SearchFailed"]
    assert failed and all(e["data"]["reason"] == "run cancelled: e2e cancel" for e in failed), failed
    late = [e for e in found if e["type"] == "NodesExpanded" and e["at"] > cancelled_at + GRACE]
    assert not late, [(e["stream"], e["at"].isoformat(), cancelled_at.isoformat()) for e in late]
    assert not any(e["type"] == "TreeCompleted" for e in found)  # no tree ran its 500 rollouts
    assert client.run(run_id)["status"] == "cancelled"
