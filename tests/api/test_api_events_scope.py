"""The event stream holds scopes (issue 18, point 3): no key material in any event a key can read.

``ApiKeyIssued`` carries the salt and scrypt hash of a key (the ``api_keys`` read model is rebuilt
from it). A ``read`` key must not receive key-management events at all; an ``admin`` key receives
them without the salt and hash. A catalog test makes sure any future event field that looks like
key material is listed in ``NEVER_SENT``, so a new event cannot leak by default.
"""

from __future__ import annotations

import dataclasses
import json

from sqlalchemy import select

from api.routes.events import ADMIN_ONLY, NEVER_SENT
from core.domain.events import all_event_types
from core.store.tables import api_keys
from tests.api.conftest import ApiHarness

SECRET_WORDS = ("salt", "hash", "secret", "password", "token_value", "api_key")


def _events(text: str) -> list[dict[str, object]]:
    out = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":"))
        if "data" in fields:
            out.append(json.loads(fields["data"]))
    return out


async def test_read_key_stream_has_no_key_material(api: ApiHarness) -> None:
    project = await api.project()
    admin_response = await api.client.post(
        f"/v1/projects/{project}/keys", json={"scopes": ["admin"], "label": "ops"}, headers=api.admin
    )
    admin_key = admin_response.json()["key"]
    read_key = await api.key(project, "read")
    revoked = await api.client.post(
        f"/v1/projects/{project}/keys", json={"scopes": ["read"]}, headers=api.admin
    )
    await api.client.post(f"/v1/projects/{project}/keys/{revoked.json()['key_id']}/revoke", headers=api.admin)
    stored_salts = []
    async with api.store.engine.connect() as conn:
        for row in (await conn.execute(select(api_keys.c.salt, api_keys.c.key_hash))).all():
            stored_salts.extend(row)
    assert len(stored_salts) == 6

    as_reader = await api.client.get("/v1/events", params={"follow": "false"}, headers=api.auth(read_key))
    assert as_reader.status_code == 200
    sent = _events(as_reader.text)
    assert [e["event_type"] for e in sent] == ["ProjectCreated"]
    for secret in stored_salts:
        assert secret not in as_reader.text
    assert "ApiKeyIssued" not in as_reader.text and "ApiKeyRevoked" not in as_reader.text
    asked = await api.client.get(
        "/v1/events", params={"follow": "false", "types": "ApiKeyIssued"}, headers=api.auth(read_key)
    )
    assert _events(asked.text) == []

    as_admin = await api.client.get("/v1/events", params={"follow": "false"}, headers=api.auth(admin_key))
    admin_sent = _events(as_admin.text)
    issued = [e for e in admin_sent if e["event_type"] == "ApiKeyIssued"]
    assert len(issued) == 3 and [e["event_type"] for e in admin_sent].count("ApiKeyRevoked") == 1
    for event in issued:
        data = event["data"]
        assert isinstance(data, dict)
        assert "salt" not in data and "key_hash" not in data
        assert {"key_id", "prefix", "scopes", "label"} <= set(data)
    for secret in stored_salts:
        assert secret not in as_admin.text


def test_every_event_field_that_looks_like_key_material_is_never_sent() -> None:
    for name, cls in all_event_types().items():
        for field in dataclasses.fields(cls):
            if any(word in field.name for word in SECRET_WORDS):
                assert field.name in NEVER_SENT.get(name, ()), f"{name}.{field.name} would reach the stream"
    assert {"ApiKeyIssued", "ApiKeyRevoked"} <= ADMIN_ONLY
