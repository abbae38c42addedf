"""Round two of review over the real app on PostgreSQL: a reviewer accepts a pair's t' as it is
(``POST /v1/pairs/{id}/accept``, ``FirstErrorAccepted``), which counts the pair as reviewed without a
re-splice, and the review queue is ordered by priority (critic-oracle disagreement, verdict margin,
distance between strategies), keyset-paginated in that order."""

from __future__ import annotations

from typing import Any

from core.domain import events as ev
from core.domain.events import NewEvent
from core.domain.ids import new_id, pair_stream
from core.domain.review import ReviewSignals, review_priority
from tests.api.conftest import ApiHarness
from tests.api.seed import meta
from tests.api.test_api_review import spliced_pair
from tests.e2e.ui_seed import pair_events


async def _queue(api: ApiHarness, headers: dict[str, str], **params: Any) -> dict[str, Any]:
    response = await api.client.get("/v1/review/queue", params=params, headers=headers)
    assert response.status_code == 200, response.text
    return dict(response.json())


async def test_accepting_a_pair_marks_it_reviewed_and_keeps_its_sample(api: ApiHarness) -> None:
    project = await api.project("accept")
    reader = api.auth(await api.key(project, "read"))
    reviewer = api.auth(await api.key(project, "read", "review"))
    pair_id, _ = await spliced_pair(api, project)  # critic t'=2, oracle 1: in the queue (disagree)
    before = (await api.client.get(f"/v1/pairs/{pair_id}", headers=reader)).json()
    assert before["reviewed"] is False and before["accepts"] == []
    queue = await _queue(api, reader)
    assert (queue["total"], queue["reviewed"], queue["remaining"]) == (1, 0, 1)

    # the read key cannot accept; a bad body names its field
    denied = await api.client.post(f"/v1/pairs/{pair_id}/accept", json={}, headers=reader)
    assert denied.status_code == 403
    bad = await api.client.post(f"/v1/pairs/{pair_id}/accept", json={"note": "x" * 501}, headers=reviewer)
    assert bad.status_code == 422 and "note" in bad.text
    unknown = await api.client.post(f"/v1/pairs/{new_id()}/accept", json={}, headers=reviewer)
    assert unknown.status_code == 404

    response = await api.client.post(
        f"/v1/pairs/{pair_id}/accept", json={"note": "the critic is right"}, headers=reviewer
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert (
        body["pair_id"] == pair_id and body["transition_index"] == 2 and body["note"] == "the critic is right"
    )
    assert body["reviewer"].startswith("agr_")
    stream = await api.store.read_stream(pair_stream(pair_id))
    assert stream[-1].event_type == "FirstErrorAccepted"
    assert stream[-1].data["acceptance_id"] == body["acceptance_id"]

    after = (await api.client.get(f"/v1/pairs/{pair_id}", headers=reader)).json()
    assert after["reviewed"] is True
    assert [a["acceptance_id"] for a in after["accepts"]] == [body["acceptance_id"]]
    assert after["sample_id"] == before["sample_id"] and after["transition_index"] == 2
    assert after["corrections"] == []
    sample_before = (await api.client.get(f"/v1/samples/{before['sample_id']}", headers=reader)).json()
    assert sample_before["sample"]["provenance"].get("origin") != "human-corrected"

    queue = await _queue(api, reader)
    assert (queue["total"], queue["reviewed"], queue["remaining"]) == (1, 1, 0)
    (item,) = queue["items"]
    assert (item["accepts"], item["corrections"], item["reviewed"]) == (1, 0, True)
    assert (await _queue(api, reader, reviewed="false"))["items"] == []


async def test_accept_is_refused_before_the_critic_judged_the_pair(api: ApiHarness) -> None:
    project = await api.project("accept-early")
    reviewer = api.auth(await api.key(project, "read", "review"))
    pair_id, events = pair_events(project, None, "k", critic_index=2, oracle_index=3)
    await api.store.append(events[:1])  # PairFound only
    response = await api.client.post(f"/v1/pairs/{pair_id}/accept", json={}, headers=reviewer)
    assert response.status_code == 422 and "not judged" in response.text
    assert [r.event_type for r in await api.store.read_stream(pair_stream(pair_id))] == ["PairFound"]


def test_priority_orders_disagreement_margin_and_strategy_distance() -> None:
    base = ReviewSignals(critic_index=3, oracle_index=3, fallback=False, uncertain=0, margin=None)
    far = ReviewSignals(critic_index=3, oracle_index=0, fallback=False, uncertain=0, margin=None)
    near = ReviewSignals(critic_index=3, oracle_index=2, fallback=False, uncertain=0, margin=None)
    tight = ReviewSignals(critic_index=3, oracle_index=3, fallback=False, uncertain=0, margin=0.05)
    wide = ReviewSignals(critic_index=3, oracle_index=3, fallback=False, uncertain=0, margin=3.0)
    split = ReviewSignals(critic_index=3, oracle_index=3, fallback=False, uncertain=0, margin=None, spread=4)
    assert review_priority(base) == 0.0
    assert review_priority(far) > review_priority(near) > review_priority(base)
    assert review_priority(tight) > review_priority(wide) > review_priority(base)
    assert review_priority(split) > review_priority(base)
    assert abs(review_priority(far) - 0.8) < 1e-9 and abs(review_priority(near) - 0.6) < 1e-9


async def test_queue_is_ordered_by_priority_across_pages(api: ApiHarness) -> None:
    project = await api.project("priority")
    reader = api.auth(await api.key(project, "read"))
    seeded: dict[str, str] = {}
    for name, kwargs in {
        "near": {"critic_index": 3, "oracle_index": 2},  # 0.6 + margin term of the wide verdicts
        "far": {"critic_index": 5, "oracle_index": 1},  # 0.9 + ...
        "tight": {"critic_index": 4, "oracle_index": 4, "margin": 0.01},  # ~0.99 + ...
        "fallback": {"critic_index": 5, "oracle_index": None, "fallback": True},
        "uncertain": {"critic_index": 2, "oracle_index": 2, "uncertain": True},
    }.items():
        pair_id, events = pair_events(project, None, "k", **kwargs)  # type: ignore[arg-type]
        seeded[name] = pair_id
        await api.store.append(events)
    # a pair whose baseline critic chose 4 steps away from the critic (distance between strategies)
    pair_id, events = pair_events(project, None, "k", critic_index=1, oracle_index=None, uncertain=True)
    marked = events[1].event
    assert isinstance(marked, ev.FirstErrorMarked)
    split = ev.FirstErrorMarked(
        pair_id, "model", 1, marked.verdicts, oracle_index=None, baselines={"reflect": 5, "model": 1}
    )
    await api.store.append([events[0], NewEvent(pair_stream(pair_id), split, meta(project))])
    seeded["split"] = pair_id

    body = await _queue(api, reader)
    priorities = [i["priority"] for i in body["items"]]
    assert priorities == sorted(priorities, reverse=True) and len(priorities) == 6
    by_id = {i["pair_id"]: i for i in body["items"]}
    assert by_id[seeded["split"]]["spread"] == 4
    assert by_id[seeded["far"]]["priority"] > by_id[seeded["near"]]["priority"]
    assert by_id[seeded["tight"]]["priority"] > by_id[seeded["uncertain"]]["priority"]
    assert by_id[seeded["split"]]["priority"] > by_id[seeded["uncertain"]]["priority"]
    assert body["items"][0]["pair_id"] in (seeded["far"], seeded["tight"], seeded["split"])

    paged: list[str] = []
    cursor = None
    while True:
        page = await _queue(api, reader, limit=2, **({"cursor": cursor} if cursor else {}))
        paged += [i["pair_id"] for i in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert paged == [i["pair_id"] for i in body["items"]]
    # a pair-id cursor is not a priority cursor
    id_page = await _queue(api, reader, limit=2, sort="pair_id")
    wrong = await api.client.get(
        "/v1/review/queue", params={"cursor": id_page["next_cursor"]}, headers=reader
    )
    assert wrong.status_code == 422
