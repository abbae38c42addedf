"""The data-quality route (``GET /v1/runs/{run}/iterations/{i}/quality``) over the real app on
PostgreSQL: the figures of a seeded iteration (tests/e2e/quality_seed.py; the expected numbers are
worked out by hand below from its table), the iteration boundary, 404 for another project's run
and for an unknown iteration, 401 without a key and 403 without the read scope."""

from __future__ import annotations

import pytest

from core.domain import events as ev
from core.domain.events import NewEvent
from core.domain.ids import new_id, run_stream
from tests.api.conftest import ApiHarness
from tests.api.seed import meta
from tests.e2e.quality_seed import quality_events


async def _run(api: ApiHarness, project: str) -> str:
    run_id = new_id()
    await api.store.append(
        [
            NewEvent(run_stream(run_id), ev.RunRequested(run_id, project, {"model": "m"}), meta(project)),
            NewEvent(run_stream(run_id), ev.IterationStarted(run_id, 0, "m", 0.5, ()), meta(project)),
        ]
    )
    return run_id


async def test_quality_figures_of_an_iteration(api: ApiHarness) -> None:
    project = await api.project("quality")
    reader = api.auth(await api.key(project, "read"))
    run_id = await _run(api, project)
    for batch in quality_events(project, run_id):
        await api.store.append(batch)

    response = await api.client.get(f"/v1/runs/{run_id}/iterations/0/quality", headers=reader)
    assert response.status_code == 200, response.text
    q = response.json()
    # pairs A (t'=2, oracle 2), B (t'=3, oracle 1), C (fallback), D (uncertain, agree) + one unjudged
    assert (q["pairs"], q["critiqued"], q["strategies"]) == (5, 4, ["model"])
    assert (q["oracle_pairs"], q["agree"]) == (3, 2)
    assert q["agreement"] == pytest.approx(2 / 3)
    assert q["mean_abs_distance"] == pytest.approx(2 / 3)  # |2-2| + |3-1| + |2-2|, over 3
    assert q["direct_exact_match"] == pytest.approx(1 / 3)  # only D's last action is its oracle's
    assert q["first_step_match"] == pytest.approx(2 / 3)  # B and D: the oracle blames the first action
    assert (q["fallback"], q["fallback_share"], q["uncertain"]) == (1, 0.25, 1)
    # k = t' - shared + 1: critic A 2, B 3, C 2, D 1; oracle A 2, B 1, D 1
    assert q["t_prime"] == [
        {"label": "1", "critic": 1, "oracle": 2},
        {"label": "2", "critic": 2, "oracle": 1},
        {"label": "3", "critic": 1, "oracle": 0},
    ]
    assert q["actions_after_divergence"] == [
        {"label": "1", "count": 1},
        {"label": "2", "count": 1},
        {"label": "3", "count": 2},
    ]
    # margins 0.1, 0.3, 2.8 (C has no label scores); the queue's threshold is 0.5
    assert (q["margin_pairs"], q["low_margin"], q["margin_threshold"]) == (3, 2, 0.5)
    assert [(b["label"], b["count"]) for b in q["margins"]] == [
        ("0-0.25", 1), ("0.25-0.5", 1), ("0.5-1", 0), ("1-2", 0), ("2-4", 1), ("4+", 0),
    ]  # fmt: skip
    # revisions of lengths 1, 2, 2, 4; verified True, True, False, unchecked
    assert (q["revision_samples"], q["revision_length_mean"]) == (4, 2.25)
    assert q["revision_lengths"] == [  # the empty bin 3 is kept
        {"label": "1", "count": 1},
        {"label": "2", "count": 2},
        {"label": "3", "count": 0},
        {"label": "4", "count": 1},
    ]
    assert (q["checked"], q["verified"]) == (3, 2)
    assert q["verified_share"] == pytest.approx(2 / 3)

    one = (await api.client.get(f"/v1/runs/{run_id}/iterations/1/quality", headers=reader)).json()
    assert (one["pairs"], one["critiqued"], one["agree"], one["agreement"]) == (1, 1, 0, 0.0)
    assert one["t_prime"] == [  # 1 and 5, with the empty 2, 3 and 4 between them
        {"label": "1", "critic": 0, "oracle": 1},
        {"label": "2", "critic": 0, "oracle": 0},
        {"label": "3", "critic": 0, "oracle": 0},
        {"label": "4", "critic": 0, "oracle": 0},
        {"label": "5", "critic": 1, "oracle": 0},
    ]
    assert (one["revision_samples"], one["revision_length_mean"], one["verified_share"]) == (0, None, None)
    assert one["margins"][-1] == {"label": "4+", "count": 1}

    missing = await api.client.get(f"/v1/runs/{run_id}/iterations/7/quality", headers=reader)
    assert missing.status_code == 404, missing.text


async def test_quality_is_project_scoped_and_needs_a_read_key(api: ApiHarness) -> None:
    project, other = await api.project("quality-a"), await api.project("quality-b")
    run_id = await _run(api, project)
    path = f"/v1/runs/{run_id}/iterations/0/quality"
    assert (await api.client.get(path)).status_code == 401
    assert (await api.client.get(path, headers={"Authorization": "Bearer agr_wrong"})).status_code == 401
    ingest = api.auth(await api.key(project, "ingest"))
    assert (await api.client.get(path, headers=ingest)).status_code == 403
    stranger = api.auth(await api.key(other, "read", "run", "review", "ingest"))
    response = await api.client.get(path, headers=stranger)
    assert response.status_code == 404, response.text
    owner = api.auth(await api.key(project, "read"))
    empty = (await api.client.get(path, headers=owner)).json()
    assert (empty["pairs"], empty["critiqued"], empty["agreement"], empty["fallback_share"]) == (
        0,
        0,
        None,
        None,
    )
    assert empty["t_prime"] == [] and empty["margins"] == [] and empty["revision_lengths"] == []
