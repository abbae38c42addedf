"""Over the real app on PostgreSQL: ``GET /v1/events/position``, the position of the caller's
project's newest event, where a page that has read its data starts following
``GET /v1/events?after=`` (instead of replaying the stream from 0; another project's events never
move it); and ``GET /v1/keys/me``, the calling key's project and scopes (what the UI shows a
read-only key)."""

from __future__ import annotations

from core.domain import events as ev
from core.domain.events import NewEvent
from core.domain.ids import new_id, run_stream
from tests.api.conftest import ApiHarness
from tests.api.seed import meta


async def test_position_is_the_projects_newest_event_and_following_from_it_sends_only_newer(
    api: ApiHarness,
) -> None:
    project, other = await api.project("position"), await api.project("position-other")
    reader = api.auth(await api.key(project, "read"))
    start = await api.client.get("/v1/events/position", headers=reader)
    assert start.status_code == 200, start.text
    first = start.json()["position"]
    assert first > 0  # the project's creation and its keys are its events
    everything = await api.client.get("/v1/events", params={"follow": "false"}, headers=reader)
    positions = [int(line[4:]) for line in everything.text.splitlines() if line.startswith("id: ")]
    assert positions and first >= max(positions)

    run_id = new_id()
    (recorded,) = await api.store.append(
        [NewEvent(run_stream(run_id), ev.RunRequested(run_id, project, {"model": "m"}), meta(project))]
    )
    theirs = new_id()
    await api.store.append(
        [NewEvent(run_stream(theirs), ev.RunRequested(theirs, other, {"model": "m"}), meta(other))]
    )
    now = (await api.client.get("/v1/events/position", headers=reader)).json()["position"]
    assert now == recorded.position  # the other project's later event does not count

    after = await api.client.get("/v1/events", params={"follow": "false", "after": first}, headers=reader)
    sent = [line for line in after.text.splitlines() if line.startswith("event: ")]
    assert sent == ["event: RunRequested"]
    assert f'"run_id":"{run_id}"' in after.text and theirs not in after.text
    nothing = await api.client.get("/v1/events", params={"follow": "false", "after": now}, headers=reader)
    assert "event: " not in nothing.text


async def test_the_position_needs_a_key_with_read(api: ApiHarness) -> None:
    project = await api.project("position-scopes")
    ingest = api.auth(await api.key(project, "ingest"))
    assert (await api.client.get("/v1/events/position", headers=ingest)).status_code == 403
    assert (await api.client.get("/v1/events/position")).status_code == 401


async def test_keys_me_names_the_calling_keys_project_and_scopes(api: ApiHarness) -> None:
    project = await api.project("keys-me")
    reader, reviewer = await api.key(project, "read"), await api.key(project, "read", "review")
    admin = await api.key(project, "admin")
    mine = (await api.client.get("/v1/keys/me", headers=api.auth(reader))).json()
    assert mine["project_id"] == project and mine["scopes"] == ["read"]
    assert mine["may"] == {"read": True, "ingest": False, "run": False, "review": False, "admin": False}
    assert reader.startswith(f"agr_{mine['prefix']}_")
    both = (await api.client.get("/v1/keys/me", headers=api.auth(reviewer))).json()
    assert both["scopes"] == ["read", "review"] and both["may"]["review"] and not both["may"]["run"]
    boss = (await api.client.get("/v1/keys/me", headers=api.auth(admin))).json()
    assert boss["scopes"] == ["admin"] and all(boss["may"].values())
    assert (await api.client.get("/v1/keys/me")).status_code == 401
