"""Benchmark: node-event append throughput through SqlEventStore vs raw asyncpg COPY, on PostgreSQL.

Both sides write the same NodesExpanded-sized events (one per expansion, ``--nodes`` children with
realistic observation text) into the same ``events`` table, each in a fresh throwaway database
created through the admin DSN the tests use (``AGENTR_TEST_PG``). Ours goes through the full append
path (advisory lock, duplicate-id and version checks, one multi-row INSERT ... RETURNING, and the
nodes projection in the same transaction); the baseline is asyncpg ``copy_records_to_table`` of the
already-built rows (JSON encoded inside the timed region), which is the lower bound of what
PostgreSQL can ingest. Prints one JSON line: {"metric", "ours", "baseline", "unit", "ratio"}.

    python bench/store_append.py [--quick] [--events N] [--batch B] [--rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.domain.events import Metadata, NewEvent, NodeRecord, NodesExpanded  # noqa: E402
from core.domain.ids import new_id, tree_stream  # noqa: E402
from core.domain.serde import to_dict  # noqa: E402
from core.store.factory import open_store  # noqa: E402

ADMIN_DSN = os.environ.get("AGENTR_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")

OBSERVATION = (
    "Crafting commands:\ncraft 4 oak planks using 1 oak logs\ncraft 1 crafting table using 4 oak planks\n"
    "craft 4 stick using 2 oak planks\nGoal: craft wooden pickaxe.\nGot 1 oak logs. Inventory: [oak logs] (1)"
)


async def _admin(sql: str) -> None:
    conn = await asyncpg.connect(ADMIN_DSN)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def _fresh_db() -> tuple[str, str, str]:
    name = "agentr_bench_" + uuid.uuid4().hex[:10]
    await _admin(f'CREATE DATABASE "{name}"')
    base = ADMIN_DSN.rsplit("/", 1)[0]
    return name, f"{base}/{name}".replace("postgresql://", "postgresql+asyncpg://"), f"{base}/{name}"


def make_events(count: int, nodes_per_event: int) -> list[NewEvent]:
    tree_ids = [new_id() for _ in range(max(1, count // 50))]
    out = []
    for i in range(count):
        tree_id = tree_ids[i % len(tree_ids)]
        parent = new_id()
        nodes = tuple(
            NodeRecord(
                node_id=new_id(),
                parent_id=parent,
                depth=3,
                action=f"craft {k + 1} oak planks using 1 oak logs",
                thought="I need planks first, so I craft them from the logs I have.",
                observation=OBSERVATION,
                reward=0.0,
            )
            for k in range(nodes_per_event)
        )
        out.append(
            NewEvent(
                tree_stream(tree_id),
                NodesExpanded(tree_id=tree_id, nodes=nodes),
                Metadata(correlation_id=tree_id, producer="search", project_id="bench"),
            )
        )
    return out


async def bench_store(events: list[NewEvent], batch: int) -> float:
    name, url, _ = await _fresh_db()
    try:
        store = await open_store(url, create_tables=True)
        try:
            await store.append(make_events(4, 4))  # warm the pool and statement cache
            start = time.perf_counter()
            for i in range(0, len(events), batch):
                await store.append(events[i : i + batch])
            elapsed = time.perf_counter() - start
        finally:
            await store.close()
    finally:
        await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return len(events) / elapsed


async def bench_raw_copy(events: list[NewEvent], batch: int) -> float:
    name, url, dsn = await _fresh_db()
    try:
        store = await open_store(url, create_tables=True)  # same schema
        await store.close()
        conn = await asyncpg.connect(dsn)
        try:
            columns = [
                "event_id",
                "stream_id",
                "stream_version",
                "event_type",
                "event_version",
                "data",
                "metadata",
                "recorded_at",
            ]
            versions: dict[str, int] = {}
            start = time.perf_counter()
            for i in range(0, len(events), batch):
                now = datetime.now(UTC)
                records = []
                for new in events[i : i + batch]:
                    version = versions.get(new.stream_id, -1) + 1
                    versions[new.stream_id] = version
                    records.append(
                        (
                            new.event_id,
                            new.stream_id,
                            version,
                            new.event.event_type,
                            new.event.event_version,
                            json.dumps(new.event.to_data()),
                            json.dumps({k: v for k, v in to_dict(new.metadata).items() if v is not None}),
                            now,
                        )
                    )
                async with conn.transaction():
                    await conn.copy_records_to_table("events", records=records, columns=columns)
            elapsed = time.perf_counter() - start
        finally:
            await conn.close()
    finally:
        await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return len(events) / elapsed


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small run (well under a minute)")
    parser.add_argument("--events", type=int, default=None, help="events per side")
    parser.add_argument("--batch", type=int, default=250, help="events per append / COPY")
    parser.add_argument("--nodes", type=int, default=4, help="nodes per NodesExpanded event")
    parser.add_argument("--rounds", type=int, default=None, help="alternating rounds per side (median kept)")
    args = parser.parse_args()
    count = args.events or (2000 if args.quick else 10000)
    rounds = args.rounds or 3
    events = make_events(count, args.nodes)
    # Alternate the sides and keep each side's median, so load from other processes on the
    # machine hits both alike.
    ours_runs, baseline_runs = [], []
    for _ in range(rounds):
        ours_runs.append(await bench_store(events, args.batch))
        baseline_runs.append(await bench_raw_copy(events, args.batch))
    ours, baseline = statistics.median(ours_runs), statistics.median(baseline_runs)
    print(
        json.dumps(
            {
                "metric": f"NodesExpanded append throughput ({args.nodes} nodes/event, batch {args.batch})",
                "ours": round(ours, 1),
                "baseline": round(baseline, 1),
                "unit": "events/s",
                "ratio": round(ours / baseline, 3),
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
