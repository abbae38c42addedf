"""``GET /v1/runs/{run_id}/progress`` over the real app on PostgreSQL: the start model (iteration 0's
``eval.start``) and each evaluated iteration, as projected from IterationEvaluated, with the counts
and Wilson intervals of ``core.domain.training_progress``; project-scoped."""

from __future__ import annotations

from core.domain import events as ev
from core.domain.events import NewEvent
from core.domain.ids import new_id, run_stream
from core.domain.stats import wilson_interval
from tests.api.conftest import ApiHarness
from tests.api.seed import meta
from tests.unit.test_training_progress import START, evaluated


async def test_progress_shows_the_start_model_then_each_iteration(api: ApiHarness) -> None:
    project, other = await api.project("progress"), await api.project("progress-other")
    reader = api.auth(await api.key(project, "read"))
    run_id = new_id()
    stream = run_stream(run_id)
    m = meta(project)
    await api.store.append(
        [
            NewEvent(stream, ev.RunRequested(run_id, project, {"model": "m", "iterations": 2}), m),
            NewEvent(stream, ev.IterationStarted(run_id, 0, "m", 0.5, ()), m),
        ]
    )
    empty = await api.client.get(f"/v1/runs/{run_id}/progress", headers=reader)
    assert empty.status_code == 200 and empty.json()["models"] == [] and empty.json()["points"] == []
    await api.store.append(
        [
            NewEvent(stream, ev.IterationEvaluated(run_id, 0, "m0", evaluated(0.5, 0.4, start=START)), m),
            NewEvent(stream, ev.IterationStarted(run_id, 1, "m0", 0.5, ()), m),
            NewEvent(stream, ev.IterationEvaluated(run_id, 1, "m1", evaluated(0.65, 0.6)), m),
        ]
    )
    response = await api.client.get(f"/v1/runs/{run_id}/progress", headers=reader)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["models"] == ["start", "iteration 0", "iteration 1"]
    assert [x["key"] for x in body["metrics"]] == ["success", "recovery", "dead_loops", "invalid_actions"]
    by = {(p["model"], p["metric"]): p for p in body["points"]}
    it1 = by[("iteration 1", "success")]
    interval = wilson_interval(13, 20)
    assert (it1["count"], it1["n"], it1["rate"]) == (13, 20, 0.65)
    assert abs(it1["low"] - interval.low) < 1e-9 and abs(it1["high"] - interval.high) < 1e-9
    assert by[("start", "success")]["count"] == 5 and ("start", "recovery") not in by

    theirs = api.auth(await api.key(other, "read"))
    assert (await api.client.get(f"/v1/runs/{run_id}/progress", headers=theirs)).status_code == 404
