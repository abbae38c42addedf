"""Datasets built from a selection of individual samples, over the real API (PostgreSQL) (issue 30,
item 3): ``query.exclude_sample_ids`` leaves samples out, ``query.sample_ids`` takes only those; an
id the query's other filters do not take (unknown, another project's, filtered out), an id in both
lists or a malformed one is a 422 naming the field; the stored query rebuilds identically, and a
dataset's next version without the exclusion takes the sample back."""

from __future__ import annotations

import dataclasses
from typing import Any

from api.dataset_schemas import DatasetQueryIn
from core.domain.trace_datasets import DatasetQuery
from tests.api.conftest import ApiHarness
from tests.api.seed import seed_revisions, seed_search


async def _seeded(api: ApiHarness, name: str) -> tuple[dict[str, str], str, list[str]]:
    project = await api.project(name)
    key = api.auth(await api.key(project, "read", "run"))
    submitted = await api.client.post("/v1/runs", json={"model": "tiny"}, headers=key)
    assert submitted.status_code == 202, submitted.text
    run_id = submitted.json()["run_id"]
    seeded = await seed_search(api.store, project, run_id)
    revisions = await seed_revisions(api.store, project, run_id, seeded.pair_id, 4)
    return key, run_id, revisions


async def _create(api: ApiHarness, key: dict[str, str], name: str, query: dict[str, Any]) -> Any:
    return await api.client.post("/v1/datasets", json={"name": name, "query": query}, headers=key)


def _ids(body: dict[str, Any]) -> list[str]:
    return [e["sample_id"] for e in body["entries"]]


async def test_exclude_and_select_individual_samples(api: ApiHarness) -> None:
    key, run_id, revisions = await _seeded(api, "selection")
    base = {"sources": ["runs"], "kinds": ["revision"], "run_ids": [run_id]}
    everything = await _create(api, key, "all", base)
    assert everything.status_code == 201, everything.text
    assert sorted(_ids(everything.json())) == sorted(revisions)

    dropped = revisions[1]
    excluded = await _create(api, key, "some", {**base, "exclude_sample_ids": [dropped, dropped]})
    assert excluded.status_code == 201, excluded.text
    body = excluded.json()
    assert sorted(_ids(body)) == sorted(set(revisions) - {dropped})
    assert body["query"]["exclude_sample_ids"] == [dropped]  # stored de-duplicated, sorted
    rebuilt = await api.client.post(f"/v1/datasets/{body['dataset_id']}/rebuild", headers=key)
    assert rebuilt.status_code == 200 and rebuilt.json()["identical"] is True, rebuilt.text

    chosen = sorted(revisions[:2])
    selected = await _create(api, key, "picked", {**base, "sample_ids": list(reversed(chosen))})
    assert selected.status_code == 201, selected.text
    assert sorted(_ids(selected.json())) == chosen and selected.json()["query"]["sample_ids"] == chosen

    # the next version of "some" without the exclusion takes the sample back
    again = await _create(api, key, "some", base)
    assert again.json()["version"] == 2 and dropped in _ids(again.json())


async def test_sample_ids_the_query_does_not_take_are_refused_by_name(api: ApiHarness) -> None:
    key, run_id, revisions = await _seeded(api, "selection-refusals")
    _, other_run, others = await _seeded(api, "selection-other")
    base = {"sources": ["runs"], "kinds": ["revision"], "run_ids": [run_id]}

    async def refused(query: dict[str, Any]) -> dict[str, Any]:
        response = await _create(api, key, "bad", query)
        assert response.status_code == 422, response.text
        [field] = response.json()["fields"]
        return dict(field)

    unknown = await refused({**base, "exclude_sample_ids": ["no-such-sample"]})
    assert unknown["field"] == "body.query.exclude_sample_ids" and "no-such-sample" in unknown["message"]
    foreign = await refused({**base, "sample_ids": [others[0]]})  # another project's sample
    assert foreign["field"] == "body.query.sample_ids" and others[0] in foreign["message"]
    filtered = await refused({**base, "kinds": ["good"], "exclude_sample_ids": [revisions[0]]})
    assert filtered["field"] == "body.query.exclude_sample_ids"  # left out by kinds already
    both = await refused({**base, "sample_ids": [revisions[0]], "exclude_sample_ids": [revisions[0]]})
    assert both["field"] == "body.query.exclude_sample_ids" and "also in query.sample_ids" in both["message"]
    malformed = await refused({**base, "exclude_sample_ids": ["not an id!"]})
    assert malformed["field"].startswith("body.query.exclude_sample_ids")
    excluding_all = await refused({**base, "exclude_sample_ids": revisions})
    assert "no sample matches" in excluding_all["message"]
    listed = await api.client.get("/v1/datasets", params={"name": "bad"}, headers=key)
    assert listed.json()["items"] == [] and other_run


def test_the_api_query_mirrors_the_domain_query() -> None:
    assert set(DatasetQueryIn.model_fields) == {f.name for f in dataclasses.fields(DatasetQuery)}
    assert DatasetQueryIn(sample_ids=["a"], exclude_sample_ids=["b"]).to_domain().exclude_sample_ids == ("b",)
