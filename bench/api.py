"""Dataset downloads through the HTTP API vs a raw SELECT of the same rows (PostgreSQL).

Both sides read the same N revision samples of one iteration from a fresh throwaway database:

* ``dataset export FORMAT`` (openai, sharegpt, parquet, samples): ours is
  ``GET /v1/datasets/{id}/download?format=...`` of a named dataset holding the N samples (read
  from the EVENT LOG by position; on PostgreSQL the lines, or the Parquet columns, are rendered by
  the database in chunks on three connections sharing one snapshot: core/store/export_lines.py);
  the baseline is one raw asyncpg ``SELECT data FROM events WHERE position = ANY(...) ORDER BY
  position`` of the same N event rows (no decoding, no formatting, no HTTP).
* ``iteration export FORMAT`` (openai, sharegpt, parquet): ours is
  ``GET /v1/runs/{id}/iterations/0/dataset?format=...`` (the samples read model, rendered the same
  way); the baseline one raw ``SELECT data FROM samples ... ORDER BY position`` of the same rows.

The server is the real app served by uvicorn over TCP, read by a streaming httpx client. The
baselines are lower bounds, so a ratio below 1 is expected (issue 50's target: >= 0.5).

Each side is timed ``REPEATS`` times, interleaved, and its best run is kept (the machine is shared,
so single runs are noisy). Every export is checked: JSONL must have one line per row, Parquet must
read back with one row per sample.

Prints one JSON line per format: {"metric", "ours", "baseline", "unit": "rows/s", "ratio"}.
``--quick`` uses 3,000 rows (about a minute); the default is 100,000 (the most a named dataset
holds); ``--rows N`` any count up to that. The rows are seeded through the store, projections
included, which dominates a large run (about 10,000 rows in 6 minutes on the shared 2-core
machine: the default run takes about an hour there). ``--store-rows N`` seeds N rows through the
store and copies them in SQL up to ``--rows`` (each copy its own sample, event and samples row,
as the projection writes it: 100,000 rows in minutes); ``--keep-db NAME`` keeps the seeded
database for the next run (``--seed-only``: seed and stop).

Rejected-auth cost (issue 18): the same server answers requests presenting a WRONG secret, on a
known key prefix (ours: one scrypt against the stored hash) and on an unknown prefix (baseline:
before, a database miss and no hashing at all, 3 ms against 43-54 ms; now a dummy scrypt). Interleaved,
median per request; ratio = baseline time / ours, which should be close to 1 (no prefix oracle, no
cheap path). The failed-auth rate limit is off for this server so every request reaches the check.

Per-key request limit (issue 26): a second server configured with a SMALL limit
(``AGENTR_KEY_REQUESTS_PER_S`` = ``KEY_LIMIT``, burst ``KEY_BURST``) is flooded by ``FLOOD_CLIENTS``
concurrent clients sending ``GET /v1/runs`` with one key for a fixed time. ours = requests admitted
per second (200s counted by completion time, from 2 s into the flood, once the burst is spent, to
its end), baseline = the configured limit, ratio = ours / limit (target close to 1: the limit is
what is admitted, neither more nor starved); the offered rate and 429 count are in the metric text.
``--limit-only`` runs just this part (``--quick``: an 8 s flood, else 20 s).

``--only dataset`` (or ``iteration``) prints just those export lines (no request-limit or auth
lines).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ADMIN_DSN = os.environ.get("AGENTR_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
REPEATS = 3
FORMATS = ("openai", "sharegpt", "parquet", "samples")  # named dataset downloads
ITERATION_FORMATS = ("openai", "sharegpt", "parquet")  # the iteration endpoint has no samples


async def _admin(sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(ADMIN_DSN)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _seed(url: str, rows: int) -> tuple[str, str]:
    """Project, key, run, and ``rows`` revision samples of iteration 0 marked ready."""
    from api.keys import generate_key
    from core.domain import events as ev
    from core.domain.events import Metadata, NewEvent
    from core.domain.ids import new_id, pair_stream, project_stream, run_stream
    from core.domain.trajectory import Message, TrainingSample
    from core.store.factory import open_store

    store = await open_store(url, create_tables=True)
    try:
        project_id, run_id, pair_id = new_id(), new_id(), new_id()
        issued = generate_key()
        meta = Metadata(producer="bench", project_id=project_id)
        await store.append(
            [
                NewEvent(project_stream(project_id), ev.ProjectCreated(project_id, "bench"), meta),
                NewEvent(
                    project_stream(project_id),
                    ev.ApiKeyIssued(
                        project_id, new_id(), issued.prefix, issued.salt, issued.key_hash, ("read", "run")
                    ),
                    meta,
                ),
                NewEvent(run_stream(run_id), ev.RunRequested(run_id, project_id, {"model": "m"}), meta),
                NewEvent(run_stream(run_id), ev.IterationStarted(run_id, 0, "m", 0.5, ()), meta),
            ]
        )
        batch = []
        for index in range(rows):
            sample_id = new_id()
            sample = TrainingSample(
                sample_id=sample_id,
                kind="revision",
                messages=(
                    Message("system", "You craft Minecraft items. Answer with Thought: ... Action: ..."),
                    Message("user", f"Crafting commands: ... Goal: craft item number {index}."),
                    Message("assistant", "Thought: I need logs.\nAction: get 1 oak logs", 0),
                    Message("user", "Got 1 oak logs"),
                    Message(
                        "assistant", "Thought: wrong item, let me fix it.\nAction: craft 4 oak planks", 1
                    ),
                    Message("user", "Crafted 4 minecraft:oak_planks"),
                    Message(
                        "assistant", "Thought: done.\nAction: craft 1 crafting table using 4 oak planks", 1
                    ),
                ),
                reward=1.0,
                provenance={"index": index},
            )
            batch.append(
                NewEvent(
                    pair_stream(pair_id),
                    ev.RevisionMaterialized(sample_id, pair_id, run_id, 0, sample, "r01", 1, True),
                    meta,
                )
            )
            if len(batch) == 500:
                await store.append(batch)
                batch = []
        if batch:
            await store.append(batch)
        await store.append(
            [NewEvent(run_stream(run_id), ev.IterationDatasetReady(run_id, 0, new_id(), rows, 0, 0), meta)]
        )
    finally:
        await store.close()
    return issued.key, run_id


# copies of the store-seeded revision events, each with its own sample id, event id and place in
# the pair's stream, and its samples row (what the projection writes for it): one statement
_CLONE_SQL = """
WITH src AS (
    SELECT e.stream_id, e.event_type, e.event_version, e.data, e.metadata, s.project_id,
           row_number() OVER (ORDER BY e.position) AS rn
    FROM events e JOIN samples s ON s.position = e.position
    WHERE e.event_type = 'RevisionMaterialized' AND s.run_id = $1
), top AS (
    SELECT stream_id, max(stream_version) AS version FROM events GROUP BY stream_id
), gen AS (
    SELECT g, src.*, gen_random_uuid()::text AS sample_id
    FROM generate_series(1, $2::int) AS g JOIN src ON src.rn = (g - 1) % $3::int + 1
), stored AS (
    INSERT INTO events (event_id, stream_id, stream_version, event_type, event_version, data, metadata,
                        recorded_at)
    SELECT gen_random_uuid()::text, gen.stream_id, top.version + gen.g, gen.event_type, gen.event_version,
           jsonb_set(jsonb_set(jsonb_set(gen.data, '{sample_id}', to_jsonb(gen.sample_id)),
                               '{sample,sample_id}', to_jsonb(gen.sample_id)),
                     '{sample,provenance}', jsonb_build_object('index', $3::int + gen.g - 1)),
           gen.metadata, now()
    FROM gen JOIN top ON top.stream_id = gen.stream_id
    ORDER BY gen.g
    RETURNING position, data
), projected AS (
    SELECT stored.position, stored.data, src.project_id
    FROM stored JOIN src ON src.rn = 1
)
INSERT INTO samples (sample_id, run_id, project_id, iteration, kind, pair_id, tree_id, position, data,
                     verified, template_id, revision_length)
SELECT data->>'sample_id', data->>'run_id', project_id, (data->>'iteration')::int, 'revision',
       data->>'pair_id', NULL, position, data->'sample', (data->>'verified')::bool, data->>'template_id',
       (data->>'revision_length')::int
FROM projected
"""


async def _clone(dsn: str, run_id: str, seeded: int, rows: int) -> None:
    """Grow the ``seeded`` store-seeded revisions of ``run_id`` to ``rows`` by copying them in SQL
    (``_CLONE_SQL``): the same event and samples rows the store would write, each copy its own
    sample; the content cycles through the seeded ones."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            await conn.execute(_CLONE_SQL, run_id, rows - seeded, seeded)
        await conn.execute("ANALYZE")
    finally:
        await conn.close()


async def _raw_select(dsn: str, run_id: str) -> tuple[float, int]:
    """Seconds and rows of the raw SELECT of the iteration's samples rows."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        started = time.perf_counter()
        records = await conn.fetch(
            "SELECT data FROM samples WHERE run_id = $1 AND iteration = 0 ORDER BY position, sample_id",
            run_id,
        )
        return time.perf_counter() - started, len(records)
    finally:
        await conn.close()


async def _raw_events(dsn: str, positions: list[int]) -> tuple[float, int]:
    """Seconds and rows of the raw SELECT of the dataset's event rows (by position)."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        started = time.perf_counter()
        records = await conn.fetch(
            "SELECT data FROM events WHERE position = ANY($1::bigint[]) ORDER BY position", positions
        )
        return time.perf_counter() - started, len(records)
    finally:
        await conn.close()


async def _create_dataset(base: str, key: str, run_id: str) -> tuple[str, list[int]]:
    """A named dataset of the run's samples: its id and its entries' event positions."""
    import httpx

    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=base, timeout=600) as client:
        response = await client.post(
            "/v1/datasets", json={"name": "bench", "query": {"run_ids": [run_id]}}, headers=headers
        )
        if response.status_code != 201:
            raise SystemExit(f"POST /v1/datasets: {response.status_code}: {response.text[:300]}")
        body = response.json()
    return body["dataset_id"], [entry["position"] for entry in body["entries"]]


async def _through_api(base: str, key: str, path: str, fmt: str) -> tuple[float, int, int]:
    """Seconds, bytes and exported rows (JSONL lines, or the Parquet file's row count) of one
    download of ``path``."""
    import httpx
    import pyarrow as pa
    import pyarrow.parquet as pq

    url = f"{base}{path}"
    async with httpx.AsyncClient(timeout=600) as client:
        started = time.perf_counter()
        size = 0
        newlines = 0
        parquet = bytearray()
        async with client.stream(
            "GET", url, params={"format": fmt}, headers={"Authorization": f"Bearer {key}"}
        ) as response:
            response.raise_for_status()
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if fmt == "parquet":
                    parquet += chunk
                else:
                    newlines += chunk.count(b"\n")
        elapsed = time.perf_counter() - started
    if fmt == "parquet":
        return elapsed, size, pq.ParquetFile(pa.BufferReader(bytes(parquet))).metadata.num_rows
    return elapsed, size, newlines


async def _rejected_auth(base: str, key: str, requests: int) -> tuple[float, float]:
    """Median seconds to answer 401 to a wrong secret on the known prefix of ``key``, and on an
    unknown prefix, interleaved."""
    import statistics

    import httpx

    prefix = key.split("_")[1]
    unknown = "0" * 12 if prefix != "0" * 12 else "1" * 12
    known_s: list[float] = []
    unknown_s: list[float] = []
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        for i in range(requests):
            for which, times in ((prefix, known_s), (unknown, unknown_s)):
                presented = f"agr_{which}_{'w' * 42}{i % 10}"
                started = time.perf_counter()
                response = await client.get("/v1/runs", headers={"Authorization": f"Bearer {presented}"})
                times.append(time.perf_counter() - started)
                if response.status_code != 401:
                    raise SystemExit(f"wrong secret answered {response.status_code}, not 401")
    return statistics.median(known_s), statistics.median(unknown_s)


KEY_LIMIT = 5.0
KEY_BURST = 5
FLOOD_CLIENTS = 32


async def _key_flood(base: str, key: str, seconds: float) -> tuple[list[float], int, float]:
    """``FLOOD_CLIENTS`` clients sending ``GET /v1/runs`` with ``key`` as fast as they are answered
    for ``seconds``: (completion times of the 200s, counted from the start; how many got 429; the
    seconds until the last answer)."""
    import httpx

    admitted: list[float] = []
    refused = 0
    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=FLOOD_CLIENTS, max_keepalive_connections=FLOOD_CLIENTS)
    async with httpx.AsyncClient(base_url=base, timeout=30, limits=limits) as client:
        # one request first: the key's scrypt is paid once (then cached), not by 32 at once
        warm = await client.get("/v1/runs", params={"limit": 1}, headers=headers)
        if warm.status_code != 200:
            raise SystemExit(f"flood warm-up: {warm.status_code}: {warm.text[:200]}")
        await asyncio.sleep(KEY_BURST / KEY_LIMIT)  # the warm-up's token is back: a full burst
        started = time.perf_counter()
        deadline = started + seconds

        async def one_client() -> None:
            nonlocal refused
            while time.perf_counter() < deadline:
                response = await client.get("/v1/runs", params={"limit": 1}, headers=headers)
                if response.status_code == 200:
                    admitted.append(time.perf_counter() - started)
                elif response.status_code == 429:
                    refused += 1
                else:
                    raise SystemExit(f"flood: unexpected {response.status_code}: {response.text[:200]}")

        await asyncio.gather(*(one_client() for _ in range(FLOOD_CLIENTS)))
        elapsed = time.perf_counter() - started
    return admitted, refused, elapsed


async def _serve(app: object) -> tuple[object, asyncio.Task[None], str]:
    import uvicorn

    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    )  # type: ignore[arg-type]
    serving = asyncio.create_task(server.serve())
    for _ in range(200):  # uvicorn exposes no start event; wait up to 10 s for it to bind
        if server.started:
            break
        await asyncio.sleep(0.05)  # noqa: ASYNC110
    return server, serving, f"http://127.0.0.1:{port}"


async def key_limit(url: str, key: str, quick: bool) -> None:
    """Print the per-key limit line: admitted requests per second under a flood vs the limit."""
    from api.app import create_app
    from core.runtime.settings import Settings

    settings = Settings(
        database_url=url,
        redis_url=None,
        log_level="WARNING",
        auth_failures_per_min=0,
        key_requests_per_s=KEY_LIMIT,
        key_request_burst=KEY_BURST,
    )
    app = create_app(settings)
    server, serving, base = await _serve(app)
    seconds = 8.0 if quick else 20.0
    settle = 2.0  # the burst is spent and answered by then: count the steady state only
    try:
        admitted, refused, elapsed = await _key_flood(base, key, seconds)
    finally:
        server.should_exit = True  # type: ignore[attr-defined]
        await serving
    steady = [at for at in admitted if settle <= at < seconds]
    rate = len(steady) / (seconds - settle)
    offered = (len(admitted) + refused) / elapsed
    print(
        json.dumps(
            {
                "metric": f"per-key request limit: 200s per second in the steady state ({settle:.0f}-"
                f"{seconds:.0f} s) of a flood from {FLOOD_CLIENTS} clients ({offered:.0f} requests/s "
                f"offered, {refused} answered 429; burst {KEY_BURST}) vs the configured "
                "AGENTR_KEY_REQUESTS_PER_S",
                "ours": round(rate, 2),
                "baseline": KEY_LIMIT,
                "unit": "requests/s",
                "ratio": round(rate / KEY_LIMIT, 3),
            }
        ),
        flush=True,
    )


async def _compare(
    label: str, base: str, key: str, path: str, formats: tuple[str, ...], raw: Any, rows: int
) -> None:
    """Print one ``{label} export FORMAT`` line per format: best of ``REPEATS`` downloads of
    ``path`` against the best of as many raw SELECTs (``raw()``), interleaved."""
    baseline_s = float("inf")
    ours_s = {fmt: float("inf") for fmt in formats}
    sizes: dict[str, int] = {}
    for _ in range(REPEATS):
        seconds, baseline_rows = await raw()
        if baseline_rows != rows:
            raise SystemExit(f"{label} raw SELECT: expected {rows} rows, got {baseline_rows}")
        baseline_s = min(baseline_s, seconds)
        for fmt in formats:
            seconds, sizes[fmt], exported = await _through_api(base, key, path, fmt)
            if exported != rows:
                raise SystemExit(f"{label} {fmt}: expected {rows} rows, got {exported}")
            ours_s[fmt] = min(ours_s[fmt], seconds)
    baseline = rows / baseline_s
    source = "event" if label == "dataset" else "samples"
    for fmt in formats:
        ours = rows / ours_s[fmt]
        print(
            json.dumps(
                {
                    "metric": f"{label} export {fmt} ({rows} rows, {sizes[fmt] / 1e6:.1f} MB) via HTTP vs "
                    f"raw SELECT of the same {source} rows (best of {REPEATS})",
                    "ours": round(ours, 1),
                    "baseline": round(baseline, 1),
                    "unit": "rows/s",
                    "ratio": round(ours / baseline, 4),
                }
            ),
            flush=True,
        )


async def _kept_seed(dsn: str, rows: int) -> tuple[str, str] | None:
    """The key and run of a database kept by ``--keep-db`` and seeded with ``rows`` rows, or None."""
    import asyncpg

    try:
        conn = await asyncpg.connect(dsn)
    except asyncpg.InvalidCatalogNameError:
        return None
    try:
        row = (
            await conn.fetchrow("SELECT key, run_id, rows FROM bench_seed")
            if await conn.fetchval("SELECT to_regclass('bench_seed') IS NOT NULL")
            else None
        )
    finally:
        await conn.close()
    return (row["key"], row["run_id"]) if row is not None and row["rows"] == rows else None


async def _keep_seed(dsn: str, key: str, run_id: str, rows: int) -> None:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CREATE TABLE bench_seed (key text, run_id text, rows int)")
        await conn.execute("INSERT INTO bench_seed VALUES ($1, $2, $3)", key, run_id, rows)
    finally:
        await conn.close()


async def main(
    quick: bool,
    limit_only: bool = False,
    rows: int | None = None,
    keep_db: str | None = None,
    seed_only: bool = False,
    store_rows: int | None = None,
    only: str | None = None,
) -> None:
    import uvicorn

    from api.app import create_app
    from core.runtime.settings import Settings

    rows = rows or (3_000 if quick else 100_000)
    if limit_only:
        rows = 10
    name = keep_db or "agentr_bench_" + uuid.uuid4().hex[:10]
    base_dsn = ADMIN_DSN.rsplit("/", 1)[0]
    dsn = f"{base_dsn}/{name}"
    url = dsn.replace("postgresql://", "postgresql+asyncpg://")
    seeded = await _kept_seed(dsn, rows) if keep_db else None
    if seeded is None:
        if keep_db:
            await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # a half-seeded one
        await _admin(f'CREATE DATABASE "{name}"')
    try:
        if seeded is None:
            through_store = min(rows, store_rows or rows)
            seeded = await _seed(url, through_store)
            if through_store < rows:
                await _clone(dsn, seeded[1], through_store, rows)
            if keep_db:
                await _keep_seed(dsn, *seeded, rows)
        key, run_id = seeded
        if seed_only:
            return
        if only is None:
            await key_limit(url, key, quick)
        if limit_only:
            return
        port = _free_port()
        app = create_app(
            Settings(database_url=url, redis_url=None, log_level="WARNING", auth_failures_per_min=0)
        )
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
        )
        serving = asyncio.create_task(server.serve())
        for _ in range(200):  # uvicorn exposes no start event; wait up to 10 s for it to bind
            if server.started:
                break
            await asyncio.sleep(0.05)  # noqa: ASYNC110
        base = f"http://127.0.0.1:{port}"
        try:
            dataset_id, positions = await _create_dataset(base, key, run_id)
            named = f"/v1/datasets/{dataset_id}/download"
            iteration = f"/v1/runs/{run_id}/iterations/0/dataset"
            await _through_api(base, key, named, "openai")  # warm-up (connections, caches)
            await _through_api(base, key, iteration, "openai")
            for label, path, formats, raw in (
                ("dataset", named, FORMATS, lambda: _raw_events(dsn, positions)),
                ("iteration", iteration, ITERATION_FORMATS, lambda: _raw_select(dsn, run_id)),
            ):
                if only in (None, label):
                    await _compare(label, base, key, path, formats, raw, rows)
            if only is not None:
                return
            known_s, unknown_s = await _rejected_auth(base, key, 20 if quick else 60)
            print(
                json.dumps(
                    {
                        "metric": "rejected auth: wrong secret on an unknown key prefix (ours) vs on a "
                        "known prefix (baseline), median time per 401",
                        "ours": round(unknown_s * 1000, 2),
                        "baseline": round(known_s * 1000, 2),
                        "unit": "ms",
                        "ratio": round(known_s / unknown_s, 3),
                    }
                ),
                flush=True,
            )
        finally:
            server.should_exit = True
            await serving
    finally:
        if not keep_db:
            await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="3,000 rows; finishes in about a minute.")
    parser.add_argument("--limit-only", action="store_true", help="Only the per-key request limit line.")
    parser.add_argument(
        "--rows", type=int, default=None, help="Rows to seed and export (default 3,000 quick, else 100,000)."
    )
    parser.add_argument(
        "--keep-db",
        metavar="NAME",
        help="Seed into (and keep) database NAME, or reuse it when it already holds the same --rows: "
        "seeding 100,000 rows takes about an hour on the shared machine, the comparison minutes.",
    )
    parser.add_argument("--seed-only", action="store_true", help="Seed (with --keep-db) and stop.")
    parser.add_argument(
        "--store-rows",
        type=int,
        default=None,
        help="Seed only this many rows through the store (projections included) and copy them in SQL "
        "up to --rows (each copy its own sample, event and samples row): 100,000 rows in minutes.",
    )
    parser.add_argument(
        "--only",
        choices=("dataset", "iteration"),
        default=None,
        help="Only the `dataset export` or the `iteration export` lines (no request-limit or auth lines).",
    )
    arguments = parser.parse_args()
    if arguments.seed_only and not arguments.keep_db:
        parser.error("--seed-only needs --keep-db NAME (else the seeded database is dropped)")
    if arguments.rows is not None and not 1 <= arguments.rows <= 100_000:
        parser.error("--rows must be between 1 and 100000 (the most a named dataset holds)")
    asyncio.run(
        main(
            arguments.quick,
            arguments.limit_only,
            arguments.rows,
            arguments.keep_db,
            arguments.seed_only,
            arguments.store_rows,
            arguments.only,
        )
    )
