"""Issue 44 item 1 and issue 45 item 5 through the ASGI app: a run or ingest key cannot aim the
workers at a URL the operator did not allow (AGENTR_ALLOWED_MODEL_URLS / AGENTR_ALLOWED_ENV_URLS,
422 naming the setting, nothing stored), an allowed one is accepted, and a run's model folder that
does not exist is a 422 naming it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.conftest import MODEL, ApiHarness, make_settings, running
from tests.api.test_api_idempotency import _stored

ALLOWED = "http://vllm:8000/v1"
ATTACKS = [
    "http://attacker/v1#m",
    "http://169.254.169.254/latest/meta-data#m",
    "http://localhost:6379/v1#m",
    "http://vllm:8000@attacker/v1#m",  # userinfo: the host is attacker
    "http://vllm:8000.attacker/v1#m",
    "http://vllm.attacker:8000/v1#m",  # host suffix
    "http://VLLM:8000/v10#m",  # /v1 is a path segment, not a text prefix
    "http://vllm:8000/v1/../../admin#m",
    "https://vllm:8000/v1#m",  # another scheme
]
TRACES = [{"messages": [{"role": "user", "content": "Goal: x"}], "outcome": "failure"}]


@pytest.fixture
async def guarded(pg_url: str) -> Any:
    async with running(
        make_settings(pg_url, allowed_model_urls=ALLOWED, allowed_env_urls="http://envs:36001")
    ) as api:
        yield api


async def _keys(api: ApiHarness) -> dict[str, str]:
    return api.auth(await api.key(await api.project(), "run", "ingest", "read"))


def _refused(response: Any, field: str, setting: str) -> None:
    assert response.status_code == 422, response.text
    [named] = response.json()["fields"]
    assert named["field"] == field, named
    assert setting in named["message"], named


async def test_a_run_cannot_name_a_model_url_outside_the_allow_list(guarded: ApiHarness) -> None:
    key = await _keys(guarded)
    for url in ATTACKS:
        response = await guarded.client.post("/v1/runs", json={"model": url, "data_only": True}, headers=key)
        _refused(response, "body.model", "AGENTR_ALLOWED_MODEL_URLS")
        assert url.split("#")[0] in response.json()["detail"]
    served = {"model": ATTACKS[0], "train": {"model_path": MODEL}}  # trains from local weights
    _refused(await guarded.client.post("/v1/runs", json=served, headers=key), "body.model", "ALLOWED_MODEL")
    assert await _stored(guarded, "RunRequested") == []
    # the allowed server is accepted, and stored as given
    accepted = await guarded.client.post(
        "/v1/runs", json={"model": f"{ALLOWED}#agent", "data_only": True}, headers=key
    )
    assert accepted.status_code == 202, accepted.text
    assert [e["config"]["model"] for e in await _stored(guarded, "RunRequested")] == [f"{ALLOWED}#agent"]


async def test_a_run_cannot_name_a_remote_environment_outside_the_allow_list(guarded: ApiHarness) -> None:
    key = await _keys(guarded)
    for env in (
        "agentgym+http://169.254.169.254/textcraft",
        "agentgym+http://localhost:6379/textcraft",
        "agentgym+http://envs:36001@attacker/textcraft",
        "agentgym+https://envs:36001/textcraft",
    ):
        response = await guarded.client.post("/v1/runs", json={"model": MODEL, "env": env}, headers=key)
        _refused(response, "body.env", "AGENTR_ALLOWED_ENV_URLS")
    assert await _stored(guarded, "RunRequested") == []
    ok = {"model": MODEL, "env": "agentgym+http://envs:36001/textcraft", "data_only": True}
    assert (await guarded.client.post("/v1/runs", json=ok, headers=key)).status_code == 202


async def test_an_ingest_key_cannot_aim_the_critic_at_a_url(guarded: ApiHarness) -> None:
    key = await _keys(guarded)
    for url in ATTACKS:
        body = {"format": "openai", "traces": TRACES, "critic": {"strategy": "model", "model": url}}
        response = await guarded.client.post("/v1/traces", json=body, headers=key)
        _refused(response, "body.critic.model", "AGENTR_ALLOWED_MODEL_URLS")
    assert await _stored(guarded, "TraceIngested") == []
    body = {
        "format": "openai",
        "traces": TRACES,
        "critic": {"strategy": "model", "model": f"{ALLOWED}#judge"},
    }
    assert (await guarded.client.post("/v1/traces", json=body, headers=key)).status_code == 202
    [ingested] = await _stored(guarded, "TraceIngested")
    assert ingested["critic_model"] == f"{ALLOWED}#judge"


async def test_a_project_critic_url_outside_the_allow_list_is_refused(guarded: ApiHarness) -> None:
    for url in ATTACKS[:3]:
        body = {"name": "p", "critic": {"strategy": "model", "model": url}}
        response = await guarded.client.post("/v1/projects", json=body, headers=guarded.admin)
        _refused(response, "body.critic.model", "AGENTR_ALLOWED_MODEL_URLS")
    body = {"name": "p", "critic": {"strategy": "model", "model": f"{ALLOWED}#judge"}}
    assert (await guarded.client.post("/v1/projects", json=body, headers=guarded.admin)).status_code == 201


async def test_by_default_no_served_model_or_remote_environment_is_allowed(pg_url: str) -> None:
    async with running(make_settings(pg_url, allowed_model_urls=None)) as api:
        key = await _keys(api)
        response = await api.client.post(
            "/v1/runs", json={"model": "http://127.0.0.1:8000/v1#m", "data_only": True}, headers=key
        )
        _refused(response, "body.model", "AGENTR_ALLOWED_MODEL_URLS")
        env = "agentgym+http://127.0.0.1:36001/textcraft"
        response = await api.client.post("/v1/runs", json={"model": MODEL, "env": env}, headers=key)
        _refused(response, "body.env", "AGENTR_ALLOWED_ENV_URLS")


async def test_a_model_folder_that_does_not_exist_is_refused_naming_it(api: ApiHarness) -> None:
    key = await _keys(api)
    for body, field, name in (
        ({"model": "no-such-model"}, "body.model", "no-such-model"),
        ({"model": "no-such-model", "data_only": True}, "body.model", "no-such-model"),
        (
            {"model": f"{ALLOWED.replace('vllm', 'm')}#x", "train": {"model_path": "gone"}},
            "body.train.model_path",
            "gone",
        ),
        (
            {"model": MODEL, "critic": {"strategy": "value", "value_model": "gone/ckpt"}},
            "body.critic.value_model",
            "gone/ckpt",
        ),
    ):
        response = await api.client.post("/v1/runs", json=body, headers=key)
        assert response.status_code == 422, response.text
        [named] = response.json()["fields"]
        assert named["field"] == field
        assert f"model folder {name!r} does not exist" in named["message"], named
    assert await _stored(api, "RunRequested") == []
    assert (await api.client.post("/v1/runs", json={"model": MODEL}, headers=key)).status_code == 202
