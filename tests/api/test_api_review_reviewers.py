"""Several reviewers over the real app on PostgreSQL: claiming, assigning and releasing a pair, each
reviewer's verdict kept with the agreement shown (queue, pair view, the project's figures), the
splicer following the majority, undoing one's own last review (the sample restored by the real
correction handler, new datasets without the undone correction's sample) and "my reviews"."""

from __future__ import annotations

from typing import Any

from core.domain import events as ev
from core.domain.events import NewEvent
from core.domain.ids import pair_stream
from splice_service.corrections import CorrectionHandlers
from splice_service.service import SpliceHandlers
from tests.api.conftest import ApiHarness, make_settings
from tests.api.seed import meta
from tests.api.test_api_review import build_dataset, download, resplice, spliced_pair
from tests.e2e.ui_seed import pair_events


async def _me(api: ApiHarness, headers: dict[str, str]) -> str:
    return str((await api.client.get("/v1/keys/me", headers=headers)).json()["key_id"])


async def _queue_item(api: ApiHarness, headers: dict[str, str], pair_id: str, **params: Any) -> Any:
    response = await api.client.get("/v1/review/queue", params=params, headers=headers)
    assert response.status_code == 200, response.text
    return next((i for i in response.json()["items"] if i["pair_id"] == pair_id), None)


async def test_claim_assign_and_release(api: ApiHarness) -> None:
    project = await api.project("claims")
    reader = api.auth(await api.key(project, "read"))
    ann = api.auth(await api.key(project, "read", "review"))
    bob = api.auth(await api.key(project, "read", "review"))
    admin = api.auth(await api.key(project, "admin"))
    ann_id, bob_id, reader_id = await _me(api, ann), await _me(api, bob), await _me(api, reader)
    pair_id, _ = await spliced_pair(api, project)
    url = f"/v1/pairs/{pair_id}"

    assert (await api.client.post(f"{url}/claim", json={}, headers=reader)).status_code == 403
    claimed = await api.client.post(f"{url}/claim", json={}, headers=ann)
    assert claimed.status_code == 201, claimed.text
    assert claimed.json()["reviewer_key"] == ann_id and claimed.json()["claimed"] is True
    again = await api.client.post(f"{url}/claim", json={}, headers=ann)
    assert again.status_code == 200 and again.json()["reviewer_key"] == ann_id
    taken = await api.client.post(f"{url}/claim", json={}, headers=bob)
    assert taken.status_code == 409 and "is claimed by agr_" in taken.json()["detail"]
    assert "release or assign" in taken.json()["detail"]
    item = await _queue_item(api, reader, pair_id)
    assert item["claimed_key"] == ann_id and item["claimed_by"].startswith("agr_")
    assert (await api.client.get(url, headers=reader)).json()["claim"]["reviewer_key"] == ann_id

    # only an admin or the holder assigns; only to an active key that may review
    refused = await api.client.post(f"{url}/assign", json={"key_id": bob_id}, headers=bob)
    assert refused.status_code == 403 and "only an admin key or its holder" in refused.json()["detail"]
    read_only = await api.client.post(f"{url}/assign", json={"key_id": reader_id}, headers=admin)
    assert read_only.status_code == 422 and read_only.json()["fields"][0]["field"] == "body.key_id"
    assert "lacks the 'review' scope" in read_only.text
    assigned = await api.client.post(f"{url}/assign", json={"key_id": bob_id}, headers=ann)
    assert assigned.status_code == 201 and assigned.json()["reviewer_key"] == bob_id
    assert assigned.json()["by"] == claimed.json()["reviewer"]
    assert (await api.client.post(f"{url}/release", json={}, headers=ann)).status_code == 403
    released = await api.client.post(f"{url}/release", json={}, headers=bob)
    assert released.status_code == 200 and released.json()["claimed"] is False
    nothing = await api.client.post(f"{url}/release", json={}, headers=admin)
    assert nothing.status_code == 409 and "not claimed" in nothing.json()["detail"]
    assert (await _queue_item(api, reader, pair_id))["claimed_key"] is None
    types = [r.event_type for r in await api.store.read_stream(pair_stream(pair_id))]
    assert types[-3:] == ["PairClaimed", "PairClaimed", "PairReleased"]


async def test_the_reviewers_a_pair_can_go_to(api: ApiHarness) -> None:
    project = await api.project("who-reviews")
    other = await api.project("who-reviews-elsewhere")
    reader = api.auth(await api.key(project, "read"))
    ann = api.auth(await api.key(project, "read", "review"))
    admin = api.auth(await api.key(project, "admin"))
    gone = api.auth(await api.key(project, "read", "review"))
    await api.key(other, "review")
    ann_id, admin_id, gone_id = await _me(api, ann), await _me(api, admin), await _me(api, gone)
    revoked = await api.client.post(f"/v1/projects/{project}/keys/{gone_id}/revoke", headers=api.admin)
    assert revoked.status_code == 200, revoked.text

    assert (await api.client.get("/v1/reviewers", headers=reader)).status_code == 403
    listed = await api.client.get("/v1/reviewers", headers=ann)
    assert listed.status_code == 200, listed.text
    # the live keys that may review, oldest first: no read-only, revoked or other project's key
    assert [r["key_id"] for r in listed.json()] == [ann_id, admin_id]
    assert all(r["name"].startswith("agr_") for r in listed.json())
    pair_id, _ = await spliced_pair(api, project)
    # what the list names is what assign takes
    assigned = await api.client.post(
        f"/v1/pairs/{pair_id}/assign", json={"key_id": listed.json()[0]["key_id"]}, headers=admin
    )
    assert assigned.status_code == 201 and assigned.json()["reviewer"] == listed.json()[0]["name"]


async def test_reviewers_verdicts_agreement_and_the_majority(api: ApiHarness) -> None:
    project = await api.project("agreement")
    reader = api.auth(await api.key(project, "read"))
    ann, bob, cy = [api.auth(await api.key(project, "read", "review")) for _ in range(3)]
    pair_id, splicer = await spliced_pair(api, project)  # critic t'=2, steps 1..3
    url = f"/v1/pairs/{pair_id}"
    empty = (await api.client.get("/v1/review/agreement", headers=reader)).json()
    assert (empty["reviewed"], empty["compared"], empty["percent"]) == (0, 0, None)

    assert (await api.client.post(f"{url}/corrections", json={"transition_index": 3}, headers=ann)).is_success
    (done,) = await resplice(api, splicer, pair_id)
    assert isinstance(done, ev.SampleRespliced)
    assert (await api.client.post(f"{url}/accept", json={}, headers=bob)).status_code == 201
    detail = (await api.client.get(url, headers=reader)).json()
    assert detail["agreement"] == "2 of 2 agree on step 3" and detail["agreed_index"] == 3
    assert sorted(v["kind"] for v in detail["verdicts"]) == ["acceptance", "correction"]
    figures = (await api.client.get("/v1/review/agreement", headers=reader)).json()
    assert (figures["compared"], figures["agreeing"], figures["percent"]) == (1, 1, 100.0)
    assert len(figures["kappa_reviewers"]) == 2

    # Cy disagrees: outvoted, so the splicer keeps the sample at Ann and Bob's t'
    assert (await api.client.post(f"{url}/corrections", json={"transition_index": 1}, headers=cy)).is_success
    (outvoted,) = await resplice(api, splicer, pair_id)
    assert isinstance(outvoted, ev.CorrectionRejected) and outvoted.reason.startswith("outvoted: 2 of 3")
    detail = (await api.client.get(url, headers=reader)).json()
    assert detail["transition_index"] == 3 and detail["agreement"] == "2 of 3 agree on step 3"
    item = await _queue_item(api, reader, pair_id)
    assert (item["reviewers"], item["agree"], item["agreed_index"], item["disputed"]) == (3, 2, 3, False)
    assert item["agreement"] == "2 of 3 agree on step 3"
    figures = (await api.client.get("/v1/review/agreement", headers=reader)).json()
    assert (figures["compared"], figures["agreeing"], figures["percent"], figures["kappa"]) == (
        1,
        0,
        0.0,
        None,
    )

    # Bob takes his acceptance back: 1 vs 1, the pair is disputed
    undo = await api.client.post(f"{url}/undo", json={}, headers=bob)
    assert undo.status_code == 201 and undo.json()["target_kind"] == "acceptance"
    assert undo.json()["resplice"] is None
    item = await _queue_item(api, reader, pair_id, disputed="true")
    assert item is not None and item["disputed"] and item["agreement"].startswith("disputed")
    assert await _queue_item(api, reader, pair_id, disputed="false") is None


async def test_undo_restores_the_sample_and_my_reviews(api: ApiHarness) -> None:
    project = await api.project("undo")
    reader = api.auth(await api.key(project, "read"))
    ann = api.auth(await api.key(project, "read", "review", "run"))
    bob = api.auth(await api.key(project, "read", "review"))
    pair_id, splicer = await spliced_pair(api, project)
    url = f"/v1/pairs/{pair_id}"
    before = (await api.client.get(url, headers=reader)).json()

    nothing = await api.client.post(f"{url}/undo", json={}, headers=ann)
    assert nothing.status_code == 409 and "nothing to undo" in nothing.json()["detail"]
    assert (await api.client.post(f"{url}/undo", json={}, headers=reader)).status_code == 403

    reflection = "I should have crafted planks before anything else."
    body = {"transition_index": 1, "reflection": reflection}
    correction = (await api.client.post(f"{url}/corrections", json=body, headers=ann)).json()
    pending = await api.client.post(f"{url}/undo", json={}, headers=ann)
    assert pending.status_code == 409 and "still being re-spliced" in pending.json()["detail"]
    await resplice(api, splicer, pair_id)
    with_correction = await build_dataset(api, ann, "with-correction")
    assert reflection in await download(api, reader, with_correction)
    assert (await _queue_item(api, ann, pair_id, mine="true")) is not None
    assert (await _queue_item(api, bob, pair_id, mine="true")) is None

    undone = await api.client.post(f"{url}/undo", json={}, headers=ann)
    assert undone.status_code == 201, undone.text
    assert (undone.json()["target_id"], undone.json()["resplice"]) == (correction["correction_id"], "restore")
    recorded = (await api.store.read_stream(pair_stream(pair_id)))[-1]
    assert recorded.event_type == "ReviewUndone"
    result = await CorrectionHandlers(splicer).on_undo(recorded)
    (restored,) = [e.event for e in result.events]
    assert isinstance(restored, ev.SampleRespliced) and restored.correction_id == undone.json()["undo_id"]
    await api.store.append(list(result.events))

    after = (await api.client.get(url, headers=reader)).json()
    assert (after["transition_index"], after["reflection"], after["sample_origin"]) == (
        before["transition_index"],
        before["reflection"],
        "splice",
    )
    assert after["reviewed"] is False and after["corrections"][0]["undone"] is True
    sample = (await api.client.get(f"/v1/samples/{after['sample_id']}", headers=reader)).json()["sample"]
    assert sample["provenance"].get("origin") != "human-corrected"
    assert sample["provenance"]["restored_by_undo"] == undone.json()["undo_id"]
    text = await download(api, reader, await build_dataset(api, ann, "after-undo"))
    assert reflection not in text and before["reflection"] in text
    assert reflection in await download(api, reader, with_correction)  # a dataset built before keeps it
    item = await _queue_item(api, reader, pair_id)
    assert (item["reviewed"], item["corrections"], item["reviewers"]) == (False, 0, 0)
    again = await api.client.post(f"{url}/undo", json={}, headers=ann)
    assert again.status_code == 409 and "nothing to undo" in again.json()["detail"]
    # "my reviews": the pair Ann claimed is hers again
    assert (await _queue_item(api, ann, pair_id, mine="true")) is None
    assert (await api.client.post(f"{url}/claim", json={}, headers=ann)).status_code == 201
    assert (await _queue_item(api, ann, pair_id, mine="true")) is not None


async def test_undoing_the_only_sample_withdraws_it(api: ApiHarness) -> None:
    """A pair the splicer rejected gets its first sample from a correction; undoing that correction
    withdraws the sample: the row leaves the read model and new datasets."""
    project = await api.project("withdraw")
    reader = api.auth(await api.key(project, "read"))
    ann = api.auth(await api.key(project, "read", "review", "run"))
    pair_id, events = pair_events(project, None, "k", critic_index=3, oracle_index=2)
    rejected = ev.RevisionRejected(pair_id, None, 0, "unverified: replay reward 0.000")
    await api.store.append([*events, NewEvent(pair_stream(pair_id), rejected, meta(project))])
    splicer = SpliceHandlers(make_settings("unused"), api.store, env_opener=lambda uri: None)  # type: ignore[arg-type,return-value]
    url = f"/v1/pairs/{pair_id}"
    assert (await api.client.get(url, headers=reader)).json()["sample_id"] is None

    reflection = "I should have checked the recipe before crafting."
    body = {"transition_index": 2, "reflection": reflection}
    assert (await api.client.post(f"{url}/corrections", json=body, headers=ann)).status_code == 202
    (done,) = await resplice(api, splicer, pair_id)
    assert isinstance(done, ev.SampleRespliced)
    corrected = (await api.client.get(url, headers=reader)).json()
    assert corrected["status"] == "revised" and corrected["sample_id"] == done.sample_id
    assert reflection in await download(api, reader, await build_dataset(api, ann, "with-it"))

    undone = await api.client.post(f"{url}/undo", json={}, headers=ann)
    assert undone.status_code == 201 and undone.json()["resplice"] == "withdraw"
    recorded = (await api.store.read_stream(pair_stream(pair_id)))[-1]
    result = await CorrectionHandlers(splicer).on_undo(recorded)
    (withdrawn,) = [e.event for e in result.events]
    assert isinstance(withdrawn, ev.SampleWithdrawn) and withdrawn.sample_id == done.sample_id
    await api.store.append(list(result.events))
    # a second delivery of the undo answers the same event id (the runtime appends it once)
    again = await CorrectionHandlers(splicer).on_undo(recorded)
    assert [e.event_id for e in again.events] == [e.event_id for e in result.events]

    after = (await api.client.get(url, headers=reader)).json()
    assert (after["status"], after["sample_id"], after["sample_origin"]) == ("rejected", None, "")
    assert after["reason"].startswith("undone:")
    assert (await api.client.get(f"/v1/samples/{done.sample_id}", headers=reader)).status_code == 404
    empty = await api.client.post("/v1/datasets", json={"name": "without-it"}, headers=ann)
    assert empty.status_code == 422 and "no sample" in empty.text
