"""Trees, pairs, samples, dataset export (streamed, larger than one page), traces and SSE events."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

import asyncpg.cursor
import pyarrow.parquet as pq
import pytest
from sqlalchemy import event, func, select, text

from api.datasets import DEFAULT_PAGE_SIZE, dataset_batches, jsonl_bytes
from core.domain.events import event_class
from core.formats.export import iter_parquet
from core.store.tables import events, traces
from tests.api.conftest import ApiHarness, make_settings, running
from tests.api.seed import critique_trace, mark_dataset_ready, seed_revisions, seed_search


async def _project_with_run(api: ApiHarness) -> tuple[str, dict[str, str], str]:
    project = await api.project()
    key = api.auth(await api.key(project, "read", "run", "ingest"))
    run = (await api.client.post("/v1/runs", json={"model": "m"}, headers=key)).json()["run_id"]
    return project, key, run


async def test_tree_nodes_carry_visits_and_q_derived_from_rollouts(api: ApiHarness) -> None:
    project, key, run = await _project_with_run(api)
    seeded = await seed_search(api.store, project, run)
    tree = (await api.client.get(f"/v1/trees/{seeded.tree_id}", headers=key)).json()
    assert tree["status"] == "completed" and tree["node_count"] == 4 and tree["rollouts"] == 3
    by_id = {n["node_id"]: n for n in tree["nodes"]}
    root, a, b, c = seeded.node_ids
    assert [by_id[n]["visits"] for n in (root, a, b, c)] == [3, 2, 1, 2]
    assert by_id[root]["q"] == 2 / 3 and by_id[c]["q"] == 1.0 and by_id[b]["q"] == 0.0
    assert by_id[c]["action"] == "craft 4 oak planks" and by_id[c]["parent_id"] == a
    assert tree["nodes"][0]["node_id"] == root  # parents before children

    run_view = (await api.client.get(f"/v1/runs/{run}", headers=key)).json()
    assert run_view["status"] == "running"
    (iteration,) = run_view["iterations"]
    assert iteration["trees_expected"] == 1 and iteration["trees_done"] == 1
    assert iteration["pairs"] == 1 and iteration["goods"] == 2 and iteration["alpha"] == 0.7

    trees = (await api.client.get(f"/v1/runs/{run}/trees", headers=key)).json()
    assert [t["tree_id"] for t in trees["items"]] == [seeded.tree_id] and trees["next_cursor"] is None
    pairs = (await api.client.get(f"/v1/runs/{run}/pairs", params={"iteration": 0}, headers=key)).json()
    assert [p["pair_id"] for p in pairs["items"]] == [seeded.pair_id]
    assert pairs["items"][0]["status"] == "found"


async def test_samples_pagination_walks_every_sample_once(api: ApiHarness) -> None:
    project, key, run = await _project_with_run(api)
    seeded = await seed_search(api.store, project, run)
    revision_ids = await seed_revisions(api.store, project, run, seeded.pair_id, 23)
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": 5, "kind": "revision"} | ({"cursor": cursor} if cursor else {})
        page = (await api.client.get(f"/v1/runs/{run}/samples", params=params, headers=key)).json()
        seen += [s["sample_id"] for s in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == revision_ids
    goods = (await api.client.get(f"/v1/runs/{run}/samples", params={"kind": "good"}, headers=key)).json()
    assert [s["sample_id"] for s in goods["items"]] == seeded.good_ids
    assert goods["items"][0]["sample"]["kind"] == "good"  # served as a TrainingSample
    assert goods["items"][0]["sample"]["messages"][2]["weight"] == 1


async def test_dataset_export_streams_more_than_one_page_in_every_format(
    api: ApiHarness, tmp_path: Path
) -> None:
    project, key, run = await _project_with_run(api)
    seeded = await seed_search(api.store, project, run)
    count = DEFAULT_PAGE_SIZE * 2 + 101
    revision_ids = await seed_revisions(api.store, project, run, seeded.pair_id, count)
    url = f"/v1/runs/{run}/iterations/0/dataset"

    not_ready = await api.client.get(url, headers=key)
    assert not_ready.status_code == 409 and "partial=true" in not_ready.json()["detail"]
    partial = await api.client.get(url, params={"partial": "true"}, headers=key)
    assert partial.status_code == 200 and len(partial.text.splitlines()) == count + 1

    dataset_id = await mark_dataset_ready(api.store, project, run, 0, revisions=count)
    expected_ids = [seeded.good_ids[0], *revision_ids]  # the 0.5-reward good trajectory is below alpha 0.7

    async with api.client.stream("GET", url, params={"format": "openai"}, headers=key) as response:
        assert response.status_code == 200 and response.headers["x-dataset-id"] == dataset_id
        assert response.headers["content-type"].startswith("application/x-ndjson")
        chunks = [chunk async for chunk in response.aiter_bytes()]
    lines = [json.loads(line) for line in b"".join(chunks).decode().splitlines()]
    assert len(lines) == count + 1
    assert lines[1]["messages"][2] == {
        "role": "assistant",
        "content": "Thought: go\nAction: get 1 oak logs",
        "weight": 0,
    }
    assert lines[1]["messages"][4]["weight"] == 1 and "weight" not in lines[1]["messages"][1]

    sharegpt = await api.client.get(url, params={"format": "sharegpt"}, headers=key)
    records = [json.loads(line) for line in sharegpt.text.splitlines()]
    assert [r["id"] for r in records] == expected_ids
    assert [t["loss"] for t in records[1]["conversations"]] == [None, None, False, None, True]

    parquet = await api.client.get(url, params={"format": "parquet"}, headers=key)
    assert parquet.status_code == 200
    table_file = pq.ParquetFile(io.BytesIO(parquet.content))
    assert table_file.metadata.num_rows == count + 1 and table_file.num_row_groups >= 3

    path = tmp_path / "dataset.parquet"  # read back with the training side's own Parquet reader
    path.write_bytes(parquet.content)
    back = list(iter_parquet(path))
    assert [s.sample_id for s in back] == expected_ids and back[5].messages[4].weight == 1

    unknown = await api.client.get(url, params={"format": "csv"}, headers=key)
    assert unknown.status_code == 422 and unknown.json()["fields"][0]["field"] == "query.format"
    missing = await api.client.get(f"/v1/runs/{run}/iterations/7/dataset", headers=key)
    assert missing.status_code == 404


async def test_dataset_rows_are_streamed_in_batches_from_one_cursor(
    api: ApiHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The export never loads the dataset at once: one statement, whose rows come through a
    server-side cursor a batch at a time, the first batch encoded before the last is fetched."""
    project, _key, run = await _project_with_run(api)
    seeded = await seed_search(api.store, project, run)
    await seed_revisions(api.store, project, run, seeded.pair_id, 250)
    queries: list[str] = []
    fetches: list[int] = []  # rows per cursor fetch, as they complete
    real_fetch = asyncpg.cursor.Cursor.fetch

    async def fetch(self, n, **options):  # type: ignore[no-untyped-def]
        rows = await real_fetch(self, n, **options)
        fetches.append(len(rows))
        return rows

    def count_sample_queries(_conn, _cursor, statement, *_args) -> None:  # type: ignore[no-untyped-def]
        if "FROM samples" in statement:
            queries.append(statement)

    monkeypatch.setattr(asyncpg.cursor.Cursor, "fetch", fetch)
    sync_engine = api.store.engine.sync_engine
    event.listen(sync_engine, "before_cursor_execute", count_sample_queries)
    try:
        batches = dataset_batches(
            api.store.engine, project_id=project, run_id=run, iteration=0, alpha=0.7, batch=100
        )
        fetched_at_batch: list[int] = []
        chunks = []
        async for chunk in jsonl_bytes(_tap(batches, fetches, fetched_at_batch), "openai"):
            chunks.append(chunk)
    finally:
        event.remove(sync_engine, "before_cursor_execute", count_sample_queries)
    assert fetches == [100, 100, 52]  # 252 rows (250 revisions, 2 goods) in batches of 100
    assert queries == []  # no query per page: the rows come from the one cursor
    assert fetched_at_batch[0] <= 2  # batch 1 handed on with at most batch 2 read ahead
    assert sum(len(c.splitlines()) for c in b"".join(chunks).split(b"\n") if c) == 251
    assert len(chunks) >= 2  # sent in several pieces, not one buffer


async def _tap(batches, fetches, seen):  # type: ignore[no-untyped-def]
    async for batch in batches:
        seen.append(len(fetches))
        yield batch


async def test_trace_batches_are_all_or_nothing_and_read_back_with_critique(api: ApiHarness) -> None:
    project, key, _run = await _project_with_run(api)
    good = {
        "id": "ext-1",
        "outcome": "failure",
        "task_key": "shop/42",
        "messages": [
            {"role": "system", "content": "You shop."},
            {"role": "user", "content": "Buy a red mug."},
            {"role": "assistant", "content": "Thought: search\nAction: search[red mug]"},
            {"role": "user", "content": "Results: ..."},
            {"role": "assistant", "content": "Action: click[blue mug]"},
        ],
    }
    broken = {"messages": [{"role": "user", "content": "x"}, {"role": "robot", "content": "y"}]}
    rejected = await api.client.post(
        "/v1/traces", json={"format": "openai", "traces": [good, broken]}, headers=key
    )
    assert rejected.status_code == 422
    assert rejected.json()["fields"][0]["field"].startswith("body.traces[1].messages[1]")
    async with api.store.engine.connect() as conn:
        assert await conn.scalar(select(func.count()).select_from(traces)) == 0
        before = await conn.scalar(select(func.count()).select_from(events))

    # two traces (each producer id once: the same id twice in one batch is a 422, issue 27)
    accepted = await api.client.post(
        "/v1/traces", json={"format": "openai", "traces": [good, {**good, "id": "ext-2"}]}, headers=key
    )
    assert accepted.status_code == 202
    trace_ids = accepted.json()["trace_ids"]
    assert len(set(trace_ids)) == 2
    async with api.store.engine.connect() as conn:
        assert await conn.scalar(select(func.count()).select_from(events)) == before + 2

    trace = (await api.client.get(f"/v1/traces/{trace_ids[0]}", headers=key)).json()
    assert trace["status"] == "ingested" and trace["outcome"] == "failure" and trace["external_id"] == "ext-1"
    assert [s["action"] for s in trace["trajectory"]["steps"]] == ["search[red mug]", "click[blue mug]"]
    assert trace["critique"] is None and trace["sample"] is None

    sample_id = await critique_trace(api.store, project, trace_ids[0])
    trace = (await api.client.get(f"/v1/traces/{trace_ids[0]}", headers=key)).json()
    assert trace["status"] == "revised" and trace["critique"]["transition_index"] == 1
    assert [v["label"] for v in trace["critique"]["verdicts"]] == ["good", "bad"]
    assert trace["sample"]["sample_id"] == sample_id

    empty = await api.client.post("/v1/traces", json={"format": "otel", "traces": []}, headers=key)
    assert empty.status_code == 422 and empty.json()["fields"][0]["field"] == "body.traces"


def _parse_sse(text: str) -> list[dict[str, str]]:
    out = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":"))
        if fields:
            out.append(fields)
    return out


async def test_events_stream_is_project_scoped_resumable_and_live(api: ApiHarness) -> None:
    project, key, run = await _project_with_run(api)
    other_key = api.auth(await api.key(await api.project("other"), "read", "run"))
    await api.client.post("/v1/runs", json={"model": "theirs"}, headers=other_key)
    await seed_search(api.store, project, run)

    response = await api.client.get("/v1/events", params={"follow": "false"}, headers=key)
    assert response.headers["content-type"].startswith("text/event-stream")
    sent = _parse_sse(response.text)
    types = [s["event"] for s in sent]
    # a key without the admin scope never receives key-management events (test_api_events_scope.py)
    assert types[:2] == ["ProjectCreated", "RunRequested"] and "TreeCompleted" in types
    positions = [int(s["id"]) for s in sent]
    assert positions == sorted(positions)
    assert all(json.loads(s["data"])["data"].get("project_id", project) == project for s in sent)
    # the stored schema version: the event class's current one (TreeCompleted is v2 since `exhausted`)
    assert all(json.loads(s["data"])["event_version"] == event_class(s["event"]).event_version for s in sent)
    assert "theirs" not in response.text

    middle = positions[4]
    resumed = await api.client.get(
        "/v1/events", params={"follow": "false"}, headers={**key, "Last-Event-ID": str(middle)}
    )
    assert [int(s["id"]) for s in _parse_sse(resumed.text)] == positions[5:]
    only = await api.client.get(
        "/v1/events", params={"follow": "false", "types": "RolloutFinished"}, headers=key
    )
    assert [s["event"] for s in _parse_sse(only.text)] == ["RolloutFinished"] * 3

    # live: the stream waits for new commits and delivers them
    live = asyncio.create_task(
        api.client.get("/v1/events", params={"after": positions[-1], "limit": 1}, headers=key)
    )
    await asyncio.sleep(0.3)
    assert not live.done()
    cancel = await api.client.post(f"/v1/runs/{run}/cancel", headers=key)
    assert cancel.status_code == 202
    streamed = _parse_sse((await asyncio.wait_for(live, 10)).text)
    assert [s["event"] for s in streamed] == ["RunCancelled"]


async def test_embedded_sqlite_streams_the_same_downloads(sqlite_url: str, api: ApiHarness) -> None:
    """SQLite (no server-side cursor: SQLAlchemy's streamed result) gives the bytes PostgreSQL gives,
    for an iteration and for a named dataset read back from the event log."""
    downloads: list[dict[str, bytes]] = []
    for harness_of in (lambda: running(make_settings(sqlite_url)), None):
        harness_cm = harness_of() if harness_of is not None else contextlib.nullcontext(api)
        async with harness_cm as harness:
            project = await harness.project()
            key = harness.auth(await harness.key(project, "read", "run"))
            run = (await harness.client.post("/v1/runs", json={"model": "m"}, headers=key)).json()["run_id"]
            seeded = await seed_search(harness.store, project, run)
            await seed_revisions(harness.store, project, run, seeded.pair_id, 30)
            await mark_dataset_ready(harness.store, project, run, 0, revisions=30)
            built = await harness.client.post(
                "/v1/datasets", json={"name": "d", "query": {"run_ids": [run]}}, headers=key
            )
            assert built.status_code == 201, built.text
            named = f"/v1/datasets/{built.json()['dataset_id']}/download"
            got: dict[str, bytes] = {}
            for fmt in ("openai", "sharegpt", "samples", "parquet"):
                response = await harness.client.get(named, params={"format": fmt}, headers=key)
                assert response.status_code == 200, response.text
                got[f"named {fmt}"] = response.content
            for fmt in ("openai", "parquet"):
                url = f"/v1/runs/{run}/iterations/0/dataset"
                response = await harness.client.get(url, params={"format": fmt}, headers=key)
                assert response.status_code == 200, response.text
                got[f"iteration {fmt}"] = response.content
            downloads.append(got)
    sqlite, postgres = downloads
    assert len(sqlite["named openai"].splitlines()) == 32  # 30 revisions and 2 goods
    assert len(sqlite["iteration openai"].splitlines()) == 31  # the 0.5-reward good is below alpha

    def _ids_blanked(data: bytes) -> bytes:  # the two databases made different ids
        return re.sub(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", b"ID", data)

    for name in ("named openai", "named sharegpt", "named samples", "iteration openai"):
        assert _ids_blanked(sqlite[name]) == _ids_blanked(postgres[name]), name
    for name in ("named parquet", "iteration parquet"):
        left = pq.read_table(io.BytesIO(sqlite[name])).to_pylist()
        right = pq.read_table(io.BytesIO(postgres[name])).to_pylist()
        assert [r["messages"] for r in left] == [r["messages"] for r in right], name


async def test_a_download_left_early_leaves_no_transaction_or_query_behind(api: ApiHarness) -> None:
    """A client that goes away mid-download closes the cursor: its transaction ends, the fetch read
    ahead is cancelled, and the pooled connection serves the next download."""
    project, _key, run = await _project_with_run(api)
    seeded = await seed_search(api.store, project, run)
    await seed_revisions(api.store, project, run, seeded.pair_id, 250)

    def batches() -> Any:
        engine = api.store.engine
        return dataset_batches(engine, project_id=project, run_id=run, iteration=0, alpha=0.7, batch=10)

    left = batches()
    assert len(await anext(left)) == 9  # the first 10 rows hold the good below alpha
    async with api.store.engine.connect() as conn:
        during = (await conn.execute(text(_OTHER_SESSIONS))).all()
    # the cursor's transaction is open (idle in it, or fetching the batch read ahead)
    assert [row.state for row in during if "FROM samples" in row.query and row.state != "idle"]
    await left.aclose()
    async with api.store.engine.connect() as conn:
        after = (await conn.execute(text(_OTHER_SESSIONS))).all()
    assert {row.state for row in after} <= {"idle"}, after
    assert sum([len(batch) async for batch in batches()]) == 251


_OTHER_SESSIONS = (
    "SELECT state, query FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
)
