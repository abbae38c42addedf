"""The review queue (``GET /v1/review/queue``) over the real app on PostgreSQL: which critiqued pairs
need a human (critic t' != oracle, fallback, uncertain, low margin), the filters, the counts,
keyset pages and the project boundary. The pairs are appended to the store as the search and
critic workers write them (PairFound + FirstErrorMarked), a correction as the review route does."""

from __future__ import annotations

from typing import Any

from core.domain import events as ev
from core.domain.events import NewEvent
from core.domain.ids import new_id, run_stream
from tests.api.conftest import ApiHarness
from tests.api.seed import meta
from tests.e2e.ui_seed import correction_event, pair_events


async def _seed(api: ApiHarness, project: str, run_id: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    batches: list[list[NewEvent]] = []
    for name, kwargs in {
        "agree": {"critic_index": 3, "oracle_index": 3},
        "no_oracle": {"critic_index": 3, "oracle_index": None},
        "disagree": {"critic_index": 3, "oracle_index": 2},
        "fallback": {"critic_index": 5, "oracle_index": None, "fallback": True},
        "uncertain": {"critic_index": 2, "oracle_index": 2, "uncertain": True},
        "low": {"critic_index": 4, "oracle_index": 4, "margin": 0.1},
        "other_task": {"critic_index": 2, "oracle_index": 4, "task": "other"},
        "iter1": {"critic_index": 2, "oracle_index": 3, "iteration": 1},
    }.items():
        task = str(kwargs.pop("task", "craft"))
        pair_id, events = pair_events(project, run_id, task, **kwargs)  # type: ignore[arg-type]
        pairs[name] = pair_id
        batches.append(events)
    found_only, events = pair_events(project, run_id, "craft", critic_index=3, oracle_index=1)
    batches.append(events[:1])  # PairFound, not judged yet: not in the queue
    pairs["not_judged"] = found_only
    for batch in batches:
        await api.store.append(batch)
    await api.store.append([correction_event(project, pairs["disagree"], 3, 2)])
    return pairs


async def _queue(api: ApiHarness, headers: dict[str, str], **params: Any) -> dict[str, Any]:
    response = await api.client.get("/v1/review/queue", params=params, headers=headers)
    assert response.status_code == 200, response.text
    return dict(response.json())


def _names(body: dict[str, Any], pairs: dict[str, str]) -> set[str]:
    by_id = {v: k for k, v in pairs.items()}
    return {by_id[item["pair_id"]] for item in body["items"]}


async def test_review_queue_lists_the_pairs_that_need_a_human(api: ApiHarness) -> None:
    project = await api.project("queue")
    reader = api.auth(await api.key(project, "read"))
    run_id = new_id()
    await api.store.append(
        [NewEvent(run_stream(run_id), ev.RunRequested(run_id, project, {"model": "m"}), meta(project))]
    )
    pairs = await _seed(api, project, run_id)

    body = await _queue(api, reader)
    assert _names(body, pairs) == {"disagree", "fallback", "uncertain", "low", "other_task", "iter1"}
    assert (body["total"], body["reviewed"], body["remaining"]) == (6, 1, 5)
    reasons = {item["pair_id"]: item["reasons"] for item in body["items"]}
    assert reasons[pairs["disagree"]] == ["disagree"]
    assert reasons[pairs["fallback"]] == ["fallback"]
    assert reasons[pairs["uncertain"]] == ["uncertain"]
    assert reasons[pairs["low"]] == ["low_margin"]
    item = next(i for i in body["items"] if i["pair_id"] == pairs["disagree"])
    assert (item["critic_index"], item["oracle_index"], item["corrections"], item["reviewed"]) == (
        3,
        2,
        1,
        True,
    )
    low = next(i for i in body["items"] if i["pair_id"] == pairs["low"])
    assert abs(low["margin"] - 0.1) < 1e-9 and low["fallback"] is False and low["uncertain"] == 0

    assert _names(await _queue(api, reader, reason="disagree"), pairs) == {"disagree", "other_task", "iter1"}
    assert _names(await _queue(api, reader, reason="fallback"), pairs) == {"fallback"}
    assert _names(await _queue(api, reader, reason="uncertain"), pairs) == {"uncertain"}
    assert _names(await _queue(api, reader, reason="low_margin"), pairs) == {"low"}
    assert _names(await _queue(api, reader, reason="low_margin", max_margin=0.05), pairs) == set()
    # a wide threshold makes every scored verdict low-margin (the seeded margins are 2.8-2.9)
    wide = await _queue(api, reader, reason="low_margin", max_margin=5)
    assert _names(wide, pairs) == set(pairs) - {"not_judged"}
    assert _names(await _queue(api, reader, task_key="other"), pairs) == {"other_task"}
    assert _names(await _queue(api, reader, iteration=1), pairs) == {"iter1"}
    assert _names(await _queue(api, reader, run_id=new_id()), pairs) == set()
    assert _names(await _queue(api, reader, source="trace"), pairs) == set()

    remaining = await _queue(api, reader, reviewed="false")
    assert "disagree" not in _names(remaining, pairs) and len(remaining["items"]) == 5
    assert (remaining["total"], remaining["reviewed"], remaining["remaining"]) == (6, 1, 5)
    assert _names(await _queue(api, reader, reviewed="true"), pairs) == {"disagree"}

    # keyset pages: every pair once, in pair id order
    seen: list[str] = []
    cursor = None
    while True:
        page = await _queue(api, reader, limit=2, sort="pair_id", **({"cursor": cursor} if cursor else {}))
        seen += [i["pair_id"] for i in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted(i["pair_id"] for i in body["items"])


async def test_review_queue_is_project_scoped_and_checked(api: ApiHarness) -> None:
    mine, other = await api.project("mine"), await api.project("other")
    pair_id, events = pair_events(other, None, "k", critic_index=2, oracle_index=3)
    await api.store.append(events)
    reader = api.auth(await api.key(mine, "read"))
    assert (await _queue(api, reader))["items"] == []
    theirs = await _queue(api, api.auth(await api.key(other, "read")))
    assert [i["pair_id"] for i in theirs["items"]] == [pair_id]
    ingest_only = api.auth(await api.key(mine, "ingest"))
    assert (await api.client.get("/v1/review/queue", headers=ingest_only)).status_code == 403
    for params in (
        {"reason": "wrong"},
        {"max_margin": -1},
        {"colour": "red"},
        {"cursor": "!!"},
        {"sort": "margin"},
    ):
        response = await api.client.get("/v1/review/queue", params=params, headers=reader)
        assert response.status_code == 422, (params, response.text)
