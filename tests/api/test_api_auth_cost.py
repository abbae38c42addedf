"""Authentication under attack (issue 18, points 4 and 5): rejection cost, rate limits, /metrics, logs.

* a wrong secret costs one scrypt whether its prefix is known, unknown or revoked (no prefix
  oracle): counted by the hashes actually computed, not by timing;
* failed authentications per client address and requests per key are limited with 429 and
  Retry-After; a locked-out address is refused before any hashing;
* /metrics needs AGENTR_METRICS_TOKEN when set and carries no project or key labels;
* a 500's log line has no SQL parameters or user content.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from sqlalchemy.exc import DBAPIError

import api.keys
from api.keys import generate_key
from tests.api.conftest import ApiHarness, make_settings, running


@pytest.fixture
def hashes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The salts of every scrypt the API computes from here on."""
    seen: list[str] = []
    real = api.keys.hash_secret

    def counting(secret: str, salt_hex: str) -> str:
        seen.append(salt_hex)
        return real(secret, salt_hex)

    monkeypatch.setattr(api.keys, "hash_secret", counting)
    return seen


def _wrong_secret(key: str) -> str:
    prefix = key.split("_")[1]
    return f"agr_{prefix}_{'w' * 43}"


async def test_wrong_secret_costs_one_scrypt_for_known_unknown_and_revoked_prefixes(
    api: ApiHarness, hashes: list[str]
) -> None:
    project = await api.project()
    known = await api.key(project, "read")
    revoked = (
        await api.client.post(f"/v1/projects/{project}/keys", json={"scopes": ["read"]}, headers=api.admin)
    ).json()
    await api.client.post(f"/v1/projects/{project}/keys/{revoked['key_id']}/revoke", headers=api.admin)
    unknown = generate_key().key
    hashes.clear()
    for presented in (_wrong_secret(known), _wrong_secret(unknown), _wrong_secret(revoked["key"])):
        before = len(hashes)
        response = await api.client.get("/v1/runs", headers=api.auth(presented))
        assert response.status_code == 401
        assert response.json()["detail"] == "invalid API key"  # the same answer for every case
        assert len(hashes) == before + 1, presented
    # the right key: one scrypt the first time, none once verified (cache)
    hashes.clear()
    assert (await api.client.get("/v1/runs", headers=api.auth(known))).status_code == 200
    assert (await api.client.get("/v1/runs", headers=api.auth(known))).status_code == 200
    assert len(hashes) == 1


async def test_failed_authentications_per_address_are_limited_before_hashing(
    pg_url: str, hashes: list[str]
) -> None:
    settings = make_settings(pg_url, auth_failures_per_min=0.001, auth_failure_burst=3)
    async with running(settings) as api:
        project = await api.project()
        good = await api.key(project, "read")
        hashes.clear()
        wrong = api.auth(_wrong_secret(good))
        statuses = [(await api.client.get("/v1/runs", headers=wrong)).status_code for _ in range(3)]
        assert statuses == [401, 401, 401] and len(hashes) == 3
        limited = await api.client.get("/v1/runs", headers=wrong)
        assert limited.status_code == 429
        assert int(limited.headers["Retry-After"]) >= 1
        assert limited.json()["error"] == "rate_limited"
        assert len(hashes) == 3  # refused without running scrypt
        # the address is locked out, whatever key it presents
        assert (await api.client.get("/v1/runs", headers=api.auth(good))).status_code == 429


async def test_requests_per_key_are_limited(pg_url: str) -> None:
    settings = make_settings(pg_url, key_requests_per_s=0.001, key_request_burst=5)
    async with running(settings) as api:
        project = await api.project()
        key = api.auth(await api.key(project, "read"))
        other = api.auth(await api.key(project, "read"))
        statuses = [(await api.client.get("/v1/runs", headers=key)).status_code for _ in range(6)]
        assert statuses == [200] * 5 + [429]
        assert "Retry-After" in (await api.client.get("/v1/runs", headers=key)).headers
        assert (await api.client.get("/v1/runs", headers=other)).status_code == 200  # per key


async def test_metrics_behind_an_optional_token_without_tenant_labels(pg_url: str) -> None:
    async with running(make_settings(pg_url, metrics_token="m-token")) as api:
        project = await api.project("secret-project-name")
        key = await api.key(project, "read", "run")
        await api.client.post("/v1/runs", json={"model": "private-model-path"}, headers=api.auth(key))
        assert (await api.client.get("/metrics")).status_code == 401
        assert (await api.client.get("/metrics", headers={"Authorization": "Bearer nope"})).status_code == 401
        text = (await api.client.get("/metrics", headers={"Authorization": "Bearer m-token"})).text
        assert "agentr_api_requests_total" in text
        for private in (project, key.split("_")[1], "secret-project-name", "private-model-path"):
            assert private not in text
    async with running(make_settings(pg_url)) as api:  # no token configured: open, as before
        assert (await api.client.get("/metrics")).status_code == 200


async def test_500_logs_carry_no_sql_parameters_or_content(
    api: ApiHarness, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    project = await api.project()
    key = api.auth(await api.key(project, "run"))

    async def broken_append(*_args: Any, **_kwargs: Any) -> Any:
        raise DBAPIError(
            "INSERT INTO events VALUES ($1)", ["USER-CONTENT-1234"], Exception("boom USER-CONTENT-1234")
        )

    monkeypatch.setattr(api.store, "append", broken_append)
    with caplog.at_level(logging.ERROR, logger="agentr.api"):
        response = await api.client.post("/v1/runs", json={"model": "USER-CONTENT-1234"}, headers=key)
    assert response.status_code == 500
    assert "USER-CONTENT" not in response.text
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "DBAPIError" in logged and "submit_run" in logged  # where it happened is kept
    assert "USER-CONTENT" not in logged and "INSERT INTO" not in logged
    assert all(record.exc_info is None for record in caplog.records)
