"""The database-rendered download lines (core.store.export_lines) give the bytes Python renders.

On PostgreSQL, openai / sharegpt / samples downloads take their lines from the SQL renderer and
leave to Python only the rows it cannot vouch for. These tests build datasets of every shape
(plain revisions, good trajectories, tool calls, speakers, reasoning, weights other than 0/1,
non-ASCII and control characters, floats Python writes differently from jsonb, nested and flat
provenance, no messages) and compare each download, byte for byte, with the old Python rendering
(``jsonl_bytes`` over the plain-dict batches and over TrainingSamples only). They also check that
the SQL really rendered the plain rows (so the comparison is not Python against itself) and that
the chunked, multi-connection read gives the same rows whatever the chunk size.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncGenerator
from typing import Any

from sqlalchemy import text

from api.datasets import _item, dataset_batches, iteration_body, jsonl_bytes, parquet_bytes, rendered_parquet
from api.trace_datasets import _SAMPLE_EVENTS, dataset_sample_batches, read_manifest, rendered_dataset
from core.domain.ids import new_id
from core.domain.trajectory import Message, ToolCall, TrainingSample
from core.formats.export import loads
from core.formats.parquet import parquet_schema, rendered_batch
from core.store import export_lines
from tests.api.conftest import ApiHarness
from tests.api.seed import mark_dataset_ready, revision_event, seed_revisions, seed_search

FORMATS = ("openai", "sharegpt", "samples", "parquet")
ODD = 'Sé\u0001\u001f\u007f \u2028 😀 \\ "q" / \n\t\r\b\f </think> ünï'


def _samples() -> list[TrainingSample]:
    tool = {"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}
    shapes: list[dict[str, Any]] = [
        {  # plain: speakers, reasoning, reasons, odd text, flat provenance
            "messages": (
                Message("system", ODD),
                Message("user", "ü", name="Ålice"),
                Message("assistant", "A " + ODD, 1, reasoning="thinking é", why="fixed"),
                Message("user", "", name=""),
                Message("assistant", "B", 0, name="Bob"),
            ),
            "reward": 0.30000000000000004,
            "provenance": {"b": 1, "a": 'x"é', "é": True, "n": None, "f": 0.25, "neg": -3},
        },
        {  # tool calls and tools: Python's
            "messages": (
                Message("user", "call it"),
                Message("assistant", "", 1, tool_calls=(ToolCall("c1", "get", '{"q": "é"}'),)),
                Message("tool", "result ü", tool_call_id="c1", name="get"),
                Message("assistant", "done", 1),
            ),
            "tools": (tool,),
            "reward": 1.0,
        },
        {  # a weight other than 0/1 and floats Python writes with an exponent
            "messages": (Message("user", "u"), Message("assistant", "a", 2)),
            "reward": 1e-05,
            "provenance": {"nested": {"z": 1e-07, "l": [1, 2.5]}},
        },
        {"messages": (Message("user", "u"), Message("assistant", "a", 1)), "reward": None, "provenance": {}},
        {
            "messages": (Message("user", "u"), Message("assistant", "a", 1)),
            "reward": 100.0,
            "provenance": {"big": 12345678901234567890123, "x": 1e16},
        },
        {"messages": (), "reward": 0.5},
        {  # reasoning only on a user message: nothing to fold
            "messages": (Message("user", "u", reasoning="r"), Message("assistant", "a", 1, reasoning="")),
            "reward": -0.75,
            "provenance": {"pair_id": "p", "index": 7},
        },
        {  # tool calls without tools: Python's in JSONL, pyarrow's reader reads them for Parquet
            "messages": (
                Message("user", "call"),
                Message(
                    "assistant",
                    "",
                    1,
                    tool_calls=(ToolCall("c2", "get", "{}"), ToolCall("c3", "p", '{"é": 1}')),
                ),
                Message("tool", "ok", tool_call_id="c2", name="get"),
            ),
            "reward": 0.5,
        },
        {  # plain, but a reason that is not a string (set in SQL below): pyarrow refuses the chunk
            "messages": (Message("user", "u"), Message("assistant", "a", 1)),
            "reward": 0.5,
        },
    ]
    return [
        TrainingSample(
            sample_id=new_id(),
            kind="revision",
            messages=shape["messages"],
            reward=shape["reward"],
            provenance=shape.get("provenance", {}),
            tools=shape.get("tools", ()),
        )
        for shape in shapes
    ]


async def _seed(api: ApiHarness) -> tuple[str, dict[str, str], str, list[TrainingSample]]:
    project = await api.project()
    key = api.auth(await api.key(project, "read", "run"))
    run = (await api.client.post("/v1/runs", json={"model": "m"}, headers=key)).json()["run_id"]
    seeded = await seed_search(api.store, project, run)
    await seed_revisions(api.store, project, run, seeded.pair_id, 3)
    odd = _samples()
    await api.store.append([revision_event(project, seeded.pair_id, run, s) for s in odd])
    await seed_revisions(api.store, project, run, seeded.pair_id, 2)
    # numbers jsonb keeps as written, which Python reads back and writes otherwise (1.50 -> 1.5)
    target = odd[3].sample_id
    async with api.store.engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE events SET data = jsonb_set(jsonb_set(data, '{sample,reward}', '1.50'), "
                '\'{sample,provenance}\', \'{"p": 1.50, "q": 0.0, "r": 10.0}\') '
                "WHERE data->'sample'->>'sample_id' = :id"
            ),
            {"id": target},
        )
        await conn.execute(
            text(
                "UPDATE samples SET data = jsonb_set(jsonb_set(data, '{reward}', '1.50'), "
                '\'{provenance}\', \'{"p": 1.50, "q": 0.0, "r": 10.0}\') WHERE sample_id = :id'
            ),
            {"id": target},
        )
        for table, path in (("events", "{sample,messages,0,why}"), ("samples", "{messages,0,why}")):
            column = "data->'sample'->>'sample_id'" if table == "events" else "sample_id"
            await conn.execute(
                text(f"UPDATE {table} SET data = jsonb_set(data, '{path}', '5') WHERE {column} = :id"),
                {"id": odd[8].sample_id},
            )
    await mark_dataset_ready(api.store, project, run, 0, revisions=len(odd) + 5)
    return project, key, run, odd


class _Counter:
    """The export_rows metric's child, counting."""

    def __init__(self) -> None:
        self.count = 0

    def inc(self, amount: int = 1) -> None:
        self.count += amount


def _python(batches: Any, fmt: str, row_group_size: int | None = None) -> Any:
    """The old rendering: ``jsonl_bytes`` / ``parquet_bytes`` over ``batches``."""
    if fmt != "parquet":
        return jsonl_bytes(batches, fmt)
    return parquet_bytes(batches) if row_group_size is None else parquet_bytes(batches, row_group_size)


async def _joined(chunks: Any) -> bytes:
    return b"".join([chunk async for chunk in chunks])


async def _rows(chunks: Any, fmt: str) -> list[tuple[Any, ...]]:
    """Each row of the database's chunks, in order: (its line (for Parquet its NDJSON line), None,
    None, None) when rendered, (None, a, b, data text) when left to Python."""
    rows: list[tuple[Any, ...]] = []
    async for chunk in chunks:
        left = {place: (None, a, b, data) for place, a, b, data in chunk.left}
        if fmt == "parquet":
            lines = iter(chunk.block.decode().split("\n") if chunk.block else [])
            rows += [left[p] if p in left else (next(lines), None, None, None) for p in range(chunk.count)]
            assert next(lines, None) is None
        else:
            lines = chunk.block.decode().split("\n")
            assert len(lines) == chunk.count + 1 and lines[-1] == ""
            for place in range(chunk.count):
                assert (lines[place] == "") == (place in left)
                rows.append(left.get(place, (lines[place] + "\n", None, None, None)))
    return rows


async def _order(api: ApiHarness, run: str) -> list[str]:
    """The iteration's sample ids in the order its downloads read them."""
    async with api.store.engine.connect() as conn:
        found = await conn.execute(
            text("SELECT sample_id FROM samples WHERE run_id = :run ORDER BY position, sample_id"),
            {"run": run},
        )
        return [row[0] for row in found]


async def test_named_dataset_downloads_equal_the_python_rendering(api: ApiHarness) -> None:
    _project, key, run, odd = await _seed(api)
    for include_reasoning in (False, True):
        query = {"run_ids": [run], "include_reasoning": include_reasoning}
        built = await api.client.post("/v1/datasets", json={"name": "d", "query": query}, headers=key)
        assert built.status_code == 201, built.text
        dataset_id = built.json()["dataset_id"]
        manifest = await read_manifest(api.store, dataset_id)
        assert len(manifest.entries) == 2 + 5 + len(odd)  # two goods, the plain and the odd revisions
        async with api.store.engine.connect() as conn:
            position = (
                await conn.execute(
                    text("SELECT position FROM datasets WHERE dataset_id = :d"), {"d": dataset_id}
                )
            ).scalar_one()
        read = await rendered_dataset(api.store, api.store.engine, dataset_id, position)
        assert read.manifest == dataclasses.replace(manifest, entries=())  # the entries read in SQL
        assert list(read.positions) == [e.position for e in manifest.entries]
        assert list(read.sample_ids) == [e.sample_id for e in manifest.entries]
        for fmt in FORMATS:
            response = await api.client.get(
                f"/v1/datasets/{dataset_id}/download", params={"format": fmt}, headers=key
            )
            assert response.status_code == 200, response.text
            plain = await _joined(
                _python(dataset_sample_batches(api.store.engine, manifest, plain=True), fmt)
            )
            samples = await _joined(_python(dataset_sample_batches(api.store.engine, manifest), fmt))
            assert response.content == plain == samples, (fmt, include_reasoning)
            if fmt != "parquet":
                assert len(response.content.splitlines()) == len(manifest.entries)

        # the SQL rendered the plain rows itself and left the others to Python
        ids = [e.sample_id for e in manifest.entries]
        positions = [e.position for e in manifest.entries]
        reader = export_lines.event_lines(
            api.store.engine, positions, ids, "openai", _SAMPLE_EVENTS, include_reasoning
        )
        rows = await _rows(reader, "openai")
        by_id = dict(zip(ids, rows, strict=True))
        assert (
            by_id[odd[0].sample_id][0] is None
            if include_reasoning
            else by_id[odd[0].sample_id][0] is not None
        )
        assert by_id[odd[1].sample_id][0] is None  # tool calls
        assert by_id[odd[2].sample_id][0] is None  # weight 2
        assert by_id[odd[5].sample_id][0] == '{"messages":[]}\n'
        assert sum(row[0] is not None for row in rows) >= 8  # the plain revisions and the simple odd ones


async def test_iteration_downloads_equal_the_python_rendering(api: ApiHarness) -> None:
    project, key, run, odd = await _seed(api)
    engine = api.store.engine
    async with engine.connect() as conn:
        found = await conn.execute(
            text("SELECT sample_id FROM samples WHERE run_id = :r AND kind = 'good'"), {"r": run}
        )
        goods = {row[0] for row in found}

    def batches(plain: bool) -> AsyncGenerator[list[Any], None]:
        return dataset_batches(engine, project_id=project, run_id=run, iteration=0, alpha=0.7, plain=plain)

    for fmt in FORMATS:
        if fmt == "samples":  # not offered by the route; the renderer is shared
            counter = _Counter()
            content = await _joined(
                iteration_body(
                    engine, project_id=project, run_id=run, iteration=0, alpha=0.7, fmt=fmt, counter=counter
                )
            )
            assert counter.count == 1 + 5 + len(odd)
        else:
            url = f"/v1/runs/{run}/iterations/0/dataset"
            response = await api.client.get(url, params={"format": fmt}, headers=key)
            assert response.status_code == 200, response.text
            content = response.content
        plain = await _joined(_python(batches(True), fmt))
        samples = await _joined(_python(batches(False), fmt))
        assert content == plain == samples, fmt
        if fmt != "parquet":
            assert len(content.splitlines()) == 1 + 5 + len(odd)  # one good is below alpha

        rows = await _rows(export_lines.iteration_lines(engine, project, run, 0, fmt), fmt)
        order = await _order(api, run)
        rendered = {sample_id for sample_id, row in zip(order, rows, strict=True) if row[0] is not None}
        if fmt == "parquet":  # pyarrow's reader takes the blocks, but for the chunk with the odd reason
            refused = 0
            async for chunk in export_lines.iteration_lines(engine, project, run, 0, fmt, 3):
                if not chunk.block:  # every row of the chunk left to Python
                    continue
                try:
                    rendered_batch(chunk.block, parquet_schema())
                except ValueError:
                    refused += 1
                    assert odd[8].sample_id.encode() in chunk.block
            assert refused == 1
        if fmt == "parquet":  # the NDJSON of a rendered row holds its sample
            assert all(
                loads(row[0])["s"]["sample_id"] == sample_id
                for sample_id, row in zip(order, rows, strict=True)
                if row[0] is not None
            )
        assert odd[0].sample_id in rendered and odd[1].sample_id not in rendered
        assert all(row[2] == "good" for row in rows if row[1] in goods)  # goods are Python's
        assert goods and not goods & rendered
        assert (odd[3].sample_id in rendered) == (fmt in ("openai", "sharegpt"))  # 1.50 is Python's

    # Parquet row groups of a few samples: cut where the old writer cuts them, across chunks
    def item_of(_place: int, sample_id: Any, kind: Any, data: Any) -> Any:  # as iteration_body does
        return _item(sample_id, kind, loads(data), 0.7, True)

    for group, chunk in ((3, 4), (5, 2), (2, 1000), (1000, 3)):
        old = await _joined(_python(batches(True), "parquet", group))
        reader = export_lines.iteration_lines(engine, project, run, 0, "parquet", chunk)
        assert await _joined(rendered_parquet(reader, item_of, _Counter(), group)) == old, (group, chunk)


async def test_chunked_reads_give_the_same_rows_whatever_the_chunk(api: ApiHarness) -> None:
    project, key, run, odd = await _seed(api)
    engine = api.store.engine

    async def rows(**options: int) -> list[Any]:
        return await _rows(
            export_lines.iteration_lines(engine, project, run, 0, "samples", **options), "samples"
        )

    whole = await rows(chunk=1000, workers=1)
    assert len(whole) == 2 + 5 + len(odd)
    for chunk, workers in ((1, 1), (2, 3), (3, 2), (5, 4)):
        assert await rows(chunk=chunk, workers=workers) == whole, (chunk, workers)

    built = await api.client.post(
        "/v1/datasets", json={"name": "d", "query": {"run_ids": [run]}}, headers=key
    )
    manifest = await read_manifest(api.store, built.json()["dataset_id"])
    entries = [(e.position, e.sample_id) for e in manifest.entries]
    twice = [*entries, *entries[:3], (10**12, "missing")]  # a position twice; one without an event

    async def events(**options: int) -> list[Any]:
        positions, ids = [p for p, _ in twice], [s for _, s in twice]
        reader = export_lines.event_lines(
            engine, positions, ids, "sharegpt", _SAMPLE_EVENTS, False, **options
        )
        return await _rows(reader, "sharegpt")

    one = await events(chunk=1000, workers=1)
    assert len(one) == len(twice) and one[-1] == (None, None, None, None)
    assert one[: len(entries)][:3] == one[len(entries) : len(entries) + 3]
    for chunk, workers in ((1, 2), (4, 3)):
        assert await events(chunk=chunk, workers=workers) == one, (chunk, workers)


async def test_an_empty_iteration_and_dataset_render_nothing(api: ApiHarness) -> None:
    project = await api.project()
    rows = [b async for b in export_lines.iteration_lines(api.store.engine, project, "no-run", 0, "openai")]
    assert rows == []
    assert [
        b async for b in export_lines.event_lines(api.store.engine, [], [], "openai", _SAMPLE_EVENTS, False)
    ] == []


_OTHER_SESSIONS = (
    "SELECT state, query FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
)


async def test_a_rendered_download_left_early_leaves_no_transaction_or_query_behind(api: ApiHarness) -> None:
    """A client that goes away mid-download: the chunks in flight on the other connections are
    cancelled, every snapshot transaction ends, and the pool serves the next download."""
    project, _key, run, odd = await _seed(api)
    engine = api.store.engine
    left = export_lines.iteration_lines(engine, project, run, 0, "openai", chunk=2, workers=3)
    assert (await anext(left)).count == 2
    async with engine.connect() as conn:
        during = (await conn.execute(text(_OTHER_SESSIONS))).all()
    assert sum(row.state.startswith("idle in transaction") or row.state == "active" for row in during) >= 3
    await left.aclose()
    async with engine.connect() as conn:
        after = (await conn.execute(text(_OTHER_SESSIONS))).all()
    assert {row.state for row in after} <= {"idle"}, after
    rows = await _rows(export_lines.iteration_lines(engine, project, run, 0, "openai"), "openai")
    assert len(rows) == 2 + 5 + len(odd)


async def test_a_download_takes_fewer_connections_when_the_pool_is_short(api: ApiHarness) -> None:
    """With one connection left in the pool, a download reads on that one alone (and the same
    rows) instead of waiting for a second one while it holds the first."""
    project, _key, run, _odd = await _seed(api)
    engine = api.store.engine
    whole = await _rows(export_lines.iteration_lines(engine, project, run, 0, "openai"), "openai")
    async with contextlib.AsyncExitStack() as held:
        pool: Any = engine.sync_engine.pool
        while export_lines._spare(engine) > 1:
            await held.enter_async_context(engine.connect())
        assert pool.checkedout() >= 2
        short = export_lines.iteration_lines(engine, project, run, 0, "openai", chunk=3, workers=3)
        rows = await asyncio.wait_for(_collect(short), timeout=60)
    assert rows == whole


async def _collect(chunks: Any) -> list[Any]:
    return await _rows(chunks, "openai")
