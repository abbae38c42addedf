"""Idempotency-Key under concurrency (issue 18, point 2): exactly one effect, every answer truthful.

Requests race for real: 20 at once over one app on PostgreSQL, each on its own pooled connection.
Of requests with the same key exactly one commits its events; the others answer from its recorded
response (same body) or 422 (different body). The store is then read directly to prove that the
one accepted body is the one stored, and that nothing else was.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import select

from core.store.tables import events
from tests.api.conftest import ApiHarness

PARALLEL = 20


async def _stored(api: ApiHarness, event_type: str) -> list[dict[str, Any]]:
    async with api.store.engine.connect() as conn:
        rows = (await conn.execute(select(events.c.data).where(events.c.event_type == event_type))).all()
    return [row[0] for row in rows]


async def _setup(api: ApiHarness) -> dict[str, str]:
    project = await api.project()
    return api.auth(await api.key(project, "read", "run", "ingest"))


async def test_parallel_runs_with_one_key_and_different_bodies_store_exactly_the_accepted_one(
    api: ApiHarness,
) -> None:
    key = await _setup(api)
    headers = {**key, "Idempotency-Key": "race-1"}
    responses = await asyncio.gather(
        *(api.client.post("/v1/runs", json={"model": f"model-{i}"}, headers=headers) for i in range(PARALLEL))
    )
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [202] + [422] * (PARALLEL - 1), [r.text for r in responses]
    winner = next(i for i, r in enumerate(responses) if r.status_code == 202)
    stored = await _stored(api, "RunRequested")
    assert len(stored) == 1
    # a relative model name is the folder of the first model root, stored as that path
    root = api.app.state.services.settings.model_root_paths[0]
    assert stored[0]["config"]["model"] == str(root / f"model-{winner}")
    assert stored[0]["run_id"] == responses[winner].json()["run_id"]
    for response in responses:
        if response.status_code == 422:
            assert response.json()["fields"][0]["field"] == "header.Idempotency-Key"
    # a later retry of the winner's body gets the stored answer; another body still 422
    again = await api.client.post("/v1/runs", json={"model": f"model-{winner}"}, headers=headers)
    assert again.status_code == 202 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == responses[winner].json()


async def test_parallel_identical_retries_all_get_the_one_answer(api: ApiHarness) -> None:
    key = await _setup(api)
    headers = {**key, "Idempotency-Key": "race-2"}
    responses = await asyncio.gather(
        *(api.client.post("/v1/runs", json={"model": "same"}, headers=headers) for _ in range(PARALLEL))
    )
    assert [r.status_code for r in responses] == [202] * PARALLEL
    assert len({r.json()["run_id"] for r in responses}) == 1
    replayed = [r for r in responses if r.headers.get("Idempotent-Replayed") == "true"]
    assert len(replayed) == PARALLEL - 1
    assert len(await _stored(api, "RunRequested")) == 1


async def test_parallel_trace_batches_with_one_key_store_one_batch(api: ApiHarness) -> None:
    key = await _setup(api)
    headers = {**key, "Idempotency-Key": "race-3"}

    def batch(i: int) -> dict[str, Any]:
        messages = [{"role": "user", "content": f"Goal: {i}"}, {"role": "assistant", "content": "Action: a"}]
        return {"format": "openai", "traces": [{"messages": messages, "id": f"t{i}"}]}

    responses = await asyncio.gather(
        *(api.client.post("/v1/traces", json=batch(i), headers=headers) for i in range(PARALLEL))
    )
    assert sorted(r.status_code for r in responses) == [202] + [422] * (PARALLEL - 1)
    winner = next(i for i, r in enumerate(responses) if r.status_code == 202)
    stored = await _stored(api, "TraceIngested")
    assert [s["external_id"] for s in stored] == [f"t{winner}"]
    assert [s["trace_id"] for s in stored] == responses[winner].json()["trace_ids"]


async def test_parallel_key_issuance_with_one_key_issues_one_key(api: ApiHarness) -> None:
    project = await api.project()
    headers = {**api.admin, "Idempotency-Key": "race-4"}
    responses = await asyncio.gather(
        *(
            api.client.post(f"/v1/projects/{project}/keys", json={"scopes": ["read"]}, headers=headers)
            for _ in range(10)
        )
    )
    assert sorted(r.status_code for r in responses) == [201] + [409] * 9
    issued = await _stored(api, "ApiKeyIssued")
    winner = next(r for r in responses if r.status_code == 201).json()
    assert [i["key_id"] for i in issued] == [winner["key_id"]]
    works = await api.client.get(f"/v1/projects/{project}", headers=api.auth(winner["key"]))
    assert works.status_code == 200


async def test_parallel_dataset_builds_with_one_key_build_one_dataset(api: ApiHarness) -> None:
    key = await _setup(api)
    headers = {**key, "Idempotency-Key": "race-5"}
    responses = await asyncio.gather(
        *(
            api.client.post("/v1/datasets", json={"name": f"d{i % 2}", "allow_empty": True}, headers=headers)
            for i in range(10)
        )
    )
    created = [r for r in responses if r.status_code == 201]
    assert sorted(r.status_code for r in responses) == [201] * len(created) + [422] * (10 - len(created))
    assert len({r.json()["dataset_id"] for r in created}) == 1  # same body: the one answer, replayed
    stored = await _stored(api, "DatasetCreated")
    assert [s["dataset_id"] for s in stored] == [created[0].json()["dataset_id"]]
    assert {r.json()["name"] for r in created} == {stored[0]["manifest"]["name"]}
