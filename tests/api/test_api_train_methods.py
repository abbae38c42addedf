"""POST /v1/runs with train.method: dpo / archer settings are typed and bounded, reach the run as
sent, and a field of another method's trainer (or archer under torchrun) is a 422 naming it,
with nothing written."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select

from core.store.tables import events
from tests.api.conftest import ApiHarness


async def _key(api: ApiHarness) -> dict[str, str]:
    project = await api.project()
    return api.auth(await api.key(project, "read", "run"))


async def _event_count(api: ApiHarness) -> int:
    async with api.store.engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(events))).scalar_one())


async def test_dpo_and_archer_settings_reach_the_run(api: ApiHarness) -> None:
    key = await _key(api)
    for train in (
        {"method": "dpo", "beta": 0.2, "reference": "none", "max_steps": 3},
        {"method": "archer", "mode": "online", "gamma": 0.9, "transitions": {"invalid_action_penalty": 0.1}},
        {"method": ["sft", "dpo", "archer"], "epochs": 2, "beta": 0.2, "gamma": 0.9},  # one per iteration
    ):
        response = await api.client.post("/v1/runs", json={"model": "m", "train": train}, headers=key)
        assert response.status_code == 202, response.text
        run = (await api.client.get(f"/v1/runs/{response.json()['run_id']}", headers=key)).json()
        assert run["config"]["train"] == train


@pytest.mark.parametrize(
    ("train", "needle"),
    [
        ({"method": "ppo"}, "body.train.method"),
        ({"method": "dpo", "beta": 0}, "body.train.beta"),
        ({"method": "archer", "tau": 2}, "body.train.tau"),
        ({"method": "archer", "transitions": {"invalid_action_penalty": 5}}, "body.train.transitions"),
        ({"beta": 0.1}, "do not apply to train.method 'sft'"),
        ({"method": "archer", "packing": True}, "do not apply to train.method 'archer'"),
        ({"method": "dpo", "transitions": {}}, "only applies to train.method 'archer'"),
        ({"method": "archer", "launcher": "torchrun"}, "train.launcher must be 'inline'"),
        ({"method": []}, "body.train.method"),
        ({"method": ["sft", "ppo"]}, "body.train.method"),
        ({"method": ["sft", "dpo"], "gamma": 0.9}, "do not apply to any method of train.method"),
        ({"method": ["sft", "archer"], "launcher": "torchrun"}, "'archer' trains in one process"),
    ],
)
async def test_bad_method_settings_are_422(api: ApiHarness, train: dict[str, Any], needle: str) -> None:
    key = await _key(api)
    before = await _event_count(api)
    response = await api.client.post("/v1/runs", json={"model": "m", "train": train}, headers=key)
    assert response.status_code == 422, response.text
    assert needle in response.text
    assert await _event_count(api) == before
