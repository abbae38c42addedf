"""Owns the PostgreSQL side of the fast dataset downloads: lines (and Parquet's NDJSON) rendered
by the database, a chunk of rows in one value.

A download of a plain stored sample (core.formats.records ``is_plain``: text messages of system /
user / assistant, no tool calls, no tools) in ``openai``, ``sharegpt`` or ``samples`` JSONL is a
fixed template around the sample's strings, so the database renders the whole line (one SQL
expression over the jsonb, ``_line_parts``) and joins a chunk's lines: no JSON is decoded or
encoded in Python, no object is made per row or message. A row the SQL cannot vouch for comes back
as its JSON text instead (an empty line in the block) and the caller renders it the old way
(api.datasets, api.trace_datasets), so the output is byte for byte what core.formats.records
gives (tests/api/test_fast_downloads.py compares the two on every shape).

Why the SQL matches Python's ``json.dumps(ensure_ascii=False, separators=(",", ":"))`` on the rows
it accepts (``_sample_ok`` / ``_message_ok``; the Python path reads the same jsonb as text, so
both start from the same values):

* strings are copied as jsonb writes them (``(x)::text`` of a jsonb string): PostgreSQL's
  ``escape_json`` escapes exactly what ``json.dumps`` does with ``ensure_ascii=False`` (``"``,
  ``\\``, ``\\b \\f \\n \\r \\t``, other controls as lowercase ``\\u00XX``), and nothing else;
* every number written verbatim is its float's shortest form, or that form and ``.0``
  (``_number_ok``: ``12``, ``1.0``, ``0.25``; not ``1.50`` or ``0.00001``, which Python would
  write as ``1.5`` / ``1e-05``, nor ``1e16``'s digits, whose float form has an exponent).
  PostgreSQL writes a float's shortest digits (the default ``extra_float_digits`` of 1; with a lower
  setting the test only rejects more), with no exponent from 1e-4 up to 1e15, where Python's
  ``repr`` writes the same digits with no exponent either (up to 1e16); an integer is written as
  its digits by both;
  message weights must be 0 or 1; a field the format does not write is not checked
  (``_message_ok``);
* key order is the template's (the records' order), except inside ``provenance``, which keeps the
  jsonb's key order as Python's dict does; only flat provenance objects (scalar values) are
  rendered here;
* messages come in their array's order, and a flat provenance in the jsonb's own key order: every
  aggregate orders its input by the element's ordinality (``WITH ORDINALITY ... ORDER BY i``), so
  the order is stated, not left to the plan.

Parquet (``PARQUET``) takes the same rows with an NDJSON line instead (``_parquet_parts``): the
stored sample's jsonb text without its provenance and tools, and the provenance's JSON text as
core.formats.parquet's ``_json`` writes it (sorted keys, ``", "`` and ``": "``); only sample-level
conditions are checked in SQL, and pyarrow's JSON reader, with an explicit schema, reads the
messages (core.formats.parquet ``rendered_batch``; a block it refuses goes to Python).

A download is a list of chunks (``CHUNK`` rows: a slice of the manifest's entries, or a key range
of the iteration's rows found first), each ONE statement that returns ONE row (``Chunk``): the
chunk's lines (or NDJSON) joined by the database into one bytea, and the rows left to Python as
arrays, so Python makes no object per row. The statements run on ``WORKERS`` connections side by
side: each connection is in a read-only REPEATABLE READ transaction on the snapshot the first one
exports (``pg_export_snapshot``), so the file is still one snapshot; at most ``WORKERS`` chunks are
in flight, and the rest wait for the client. JIT is off for these statements (they are costed high
enough to trigger it, and compiling costs more than it saves). The connections are the pool's.

Chunks (PostgreSQL only; ``renders_lines`` says whether the engine can):

* ``iteration_lines``: the ``samples`` rows of an iteration, in (position, sample_id) order; a
  row left to Python carries (sample_id, kind, data text); a ``good`` row (column or stored kind)
  is always left to Python (the alpha filter and the trajectory conversion are Python's).
* ``event_lines``: one row per given (position, sample id), in the order given; rendered only for a
  current-version revision event (``sample_events``) whose sample is the given one and plain (and,
  with ``fold``, has no assistant reasoning to fold); a row left to Python carries (event_type,
  event_version, data text), all None when there is no event at the position.
* ``manifest_entries``: a dataset manifest's entries as two lists (positions, sample ids) read by
  the database from its DatasetCreated event, so a 100,000-entry manifest is not decoded into
  Python objects for a download.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import orjson
from sqlalchemy.ext.asyncio import AsyncEngine

LINE_FORMATS = ("openai", "sharegpt", "samples")
PARQUET = "parquet"
CHUNK = 1000  # rows per statement
WORKERS = 3  # connections per download, rendering chunks side by side

_SAMPLE_KEYS = "{sample_id,kind,messages,reward,provenance,tools}"
_MESSAGE_KEYS = "{role,content,weight,tool_call_id,name,reasoning,tool_calls,why}"


def _number_ok(t: str) -> str:
    """``t`` (a jsonb number's text: digits, maybe a point and digits, never an exponent) is
    written by Python as it stands: it is the float's shortest form, or that form and ``.0``."""
    return f"({t}::float8::text = {t} OR {t}::float8::text || '.0' = {t})"


def _scalar_ok(v: str) -> str:
    return (
        f"CASE jsonb_typeof({v}) WHEN 'number' THEN {_number_ok(f'{v}::text')} "
        f"WHEN 'object' THEN false WHEN 'array' THEN false ELSE true END"
    )


def _typed(j: str, key: str, types: str) -> str:
    """``key`` absent from ``j`` or of one of ``types`` (a SQL list of jsonb type names)."""
    return f"coalesce(jsonb_typeof({j}->'{key}') IN ({types}), true)"


def _message_ok(m: str, fold: bool, fmt: str) -> str:
    """Message ``m`` is plain, and its fields that ``fmt``'s record writes are of the types the
    SQL writes as Python does. openai and sharegpt write no tool_call_id, reasoning or why (but
    folding reads the reasoning), so their types are not checked there; Python's plain path
    (core.formats.records) ignores them too."""
    checks = [
        f"({m} - '{_MESSAGE_KEYS}'::text[]) = '{{}}'::jsonb",
        f"{m}->>'role' IN ('system', 'user', 'assistant')",
        f"jsonb_typeof({m}->'content') = 'string'",
        f"coalesce({m}->>'weight' IN ('0', '1'), NOT {m} ? 'weight')",
        _typed(m, "name", "'string', 'null'"),
        f"coalesce({m}->'tool_calls' IN ('null'::jsonb, '[]'::jsonb), NOT {m} ? 'tool_calls')",
    ]
    if fmt not in ("openai", "sharegpt") or fold:
        checks += [
            _typed(m, "tool_call_id", "'string', 'null'"),
            _typed(m, "reasoning", "'string'"),
            _typed(m, "why", "'string'"),
        ]
    if fold:  # a reasoning to fold into the content: Python's (core.formats.records.fold_reasoning)
        checks.append(f"NOT ({m}->>'role' = 'assistant' AND {m}->>'reasoning' <> '')")
    return (
        f"CASE WHEN jsonb_typeof({m}) = 'object' THEN coalesce({' AND '.join(checks)}, false) ELSE false END"
    )


def _sample_ok(d: str, fmt: str) -> str:
    checks = [
        f"({d} - '{_SAMPLE_KEYS}'::text[]) = '{{}}'::jsonb",
        f"jsonb_typeof({d}->'sample_id') = 'string'",
        f"jsonb_typeof({d}->'kind') = 'string'",
        f"{d}->>'kind' <> 'good'",
        f"jsonb_typeof({d}->'messages') = 'array'",
        f"coalesce({d}->'tools' IN ('null'::jsonb, '[]'::jsonb), NOT {d} ? 'tools')",
    ]
    if fmt == "samples":
        checks.append(
            f"(NOT {d} ? 'reward' OR jsonb_typeof({d}->'reward') = 'null' OR "
            f"(jsonb_typeof({d}->'reward') = 'number' AND {_number_ok(f'({d}->>{chr(39)}reward{chr(39)})')}))"
        )
        checks.append(_typed(d, "provenance", "'null', 'object'"))
    return (
        f"CASE WHEN jsonb_typeof({d}) = 'object' THEN coalesce({' AND '.join(checks)}, false) ELSE false END"
    )


def _message_sql(m: str, fmt: str) -> str:
    """The record of message ``m`` (core.formats.records ``*_plain``) as SQL text."""
    role = f"({m}->>'role')"
    content = f"({m}->'content')::text"
    named = f"CASE WHEN {m}->>'name' <> '' THEN ',\"name\":' || ({m}->'name')::text ELSE '' END"
    if fmt == "openai":
        return (
            f'\'{{"role":"\' || {role} || \'","content":\' || {content} || {named} || '
            f"CASE WHEN {role} = 'assistant' THEN CASE WHEN {m}->>'weight' = '1' THEN ',\"weight\":1}}' "
            f"ELSE ',\"weight\":0}}' END ELSE '}}' END"
        )
    if fmt == "sharegpt":
        return (
            f"'{{\"from\":\"' || CASE {role} WHEN 'system' THEN 'system' WHEN 'user' THEN 'human' "
            "ELSE 'gpt' END"
            f' || \'","value":\' || {content} || \',"loss":\' || '
            f"CASE WHEN {role} = 'assistant' THEN "
            f"CASE WHEN {m}->>'weight' = '1' THEN 'true' ELSE 'false' END "
            f"ELSE 'null' END || {named} || '}}'"
        )
    return (
        f'\'{{"role":"\' || {role} || \'","content":\' || {content} || \',"weight":\' || '
        f"coalesce({m}->>'weight', '0') || ',\"tool_calls\":[],\"tool_call_id\":' || "
        f"coalesce(({m}->'tool_call_id')::text, 'null') || ',\"name\":' || "
        f"coalesce(({m}->'name')::text, 'null')"
        f" || ',\"reasoning\":' || coalesce(({m}->'reasoning')::text, '\"\"') || ',\"why\":' || "
        f"coalesce(({m}->'why')::text, '\"\"') || '}}'"
    )


def _line_parts(d: str, fmt: str, fold: bool) -> tuple[str, str, str]:
    """(the laterals to join, the condition that the line is ours, the line) for sample ``d``."""
    messages = f"CASE WHEN jsonb_typeof({d}->'messages') = 'array' THEN {d}->'messages' ELSE '[]'::jsonb END"
    laterals = (
        f"CROSS JOIN LATERAL (SELECT bool_and({_message_ok('m', fold, fmt)}) AS ok, "
        f"string_agg({_message_sql('m', fmt)}, ',' ORDER BY i) AS body "
        f"FROM jsonb_array_elements({messages}) WITH ORDINALITY AS t(m, i)) r"
    )
    ok = f"{_sample_ok(d, fmt)} AND coalesce(r.ok, true)"
    body = "coalesce(r.body, '')"
    if fmt == "openai":
        line = f"'{{\"messages\":[' || {body} || ']}}' || chr(10)"
    elif fmt == "sharegpt":
        line = (
            f"'{{\"id\":' || ({d}->'sample_id')::text || ',\"conversations\":[' || {body} || ']}}' || chr(10)"
        )
    else:
        provenance = (
            f"CASE WHEN jsonb_typeof({d}->'provenance') = 'object' THEN {d}->'provenance' "
            "ELSE '{}'::jsonb END"
        )
        laterals += (
            f" CROSS JOIN LATERAL (SELECT bool_and({_scalar_ok('pv')}) AS ok, "
            "string_agg(to_json(pk)::text || ':' || pv::text, ',' ORDER BY i) AS body "
            f"FROM jsonb_each({provenance}) WITH ORDINALITY AS q(pk, pv, i)) p"
        )
        ok += " AND coalesce(p.ok, true)"
        line = (
            f"'{{\"sample_id\":' || ({d}->'sample_id')::text || ',\"kind\":' || ({d}->'kind')::text || "
            f"',\"messages\":[' || {body} || '],\"reward\":' || coalesce(({d}->'reward')::text, 'null') || "
            f"',\"provenance\":{{' || coalesce(p.body, '') || '}},\"tools\":[]}}' || chr(10)"
        )
    return laterals, ok, line


def _parquet_parts(d: str, fold: bool) -> tuple[str, str, str]:
    """For Parquet (``parquet``): (the lateral to join, the condition that the row is ours, its
    NDJSON line ``{"p": provenance, "s": sample}``): ``p`` is the provenance's JSON text as
    core.formats.parquet's ``_json`` writes it (sorted keys, ``", "`` and ``": "``; flat objects
    only) as a JSON string, ``s`` the stored sample without its provenance and tools (``null`` or
    ``[]``, checked), as jsonb writes it, for pyarrow's JSON reader (api.datasets). Only sample-level
    conditions are checked here; the messages' types and keys are checked by the reader's explicit
    schema, except for what it would read otherwise than Python: a ``null`` weight or reasoning (the
    reader cannot tell it from an absent one, which Python fills in), a message without content,
    and with ``fold`` an assistant reasoning to fold."""
    provenance = (
        f"CASE WHEN jsonb_typeof({d}->'provenance') = 'object' THEN {d}->'provenance' ELSE '{{}}'::jsonb END"
    )
    lateral = (
        f"CROSS JOIN LATERAL (SELECT bool_and({_scalar_ok('pv')}) AS ok, "
        "string_agg(to_json(pk)::text || ': ' || pv::text, ', ' ORDER BY pk COLLATE \"C\") AS body "
        f"FROM jsonb_each({provenance}) AS q(pk, pv)) p"
    )
    odd = "@.weight == null || @.reasoning == null || !exists(@.content)"
    if fold:  # a reasoning to fold into the content: Python's (core.formats.records.fold_reasoning)
        odd += ' || (@.role == "assistant" && @.reasoning != "")'
    ok = (
        f"{_sample_ok(d, 'samples')} AND coalesce(p.ok, true) AND "
        f"NOT jsonb_path_exists({d}, '$.messages[*] ? ({odd})')"
    )
    line = (
        "'{\"p\":' || to_json('{' || coalesce(p.body, '') || '}')::text || ',\"s\":' || "
        f"({d} - '{{provenance,tools}}'::text[])::text || '}}'"
    )
    return lateral, ok, line


def renders_lines(engine: AsyncEngine, fmt: str) -> bool:
    """Whether downloads of ``fmt`` from ``engine`` can take the rendered lines (or, for
    ``parquet``, the rendered columns)."""
    return engine.dialect.name == "postgresql" and (fmt in LINE_FORMATS or fmt == PARQUET)


def _chunk_sql(inner: str, fmt: str) -> str:
    """One chunk as ONE row (``Chunk``) from ``inner``'s rows (line or NULL, a, b, data, n: the
    row's 1-based place in the chunk): the lines joined in order into one bytea (for JSONL a row
    without a line is an empty line; for Parquet only the lines, newline-separated), and the rows
    without a line as arrays (their 0-based places, a, b and data text). ``OFFSET 0`` keeps the
    rows a subquery: pulled up, each aggregate and FILTER would compute the line again."""
    if fmt == PARQUET:
        block = "string_agg(x.line, chr(10) ORDER BY x.n) FILTER (WHERE x.line IS NOT NULL)"
    else:
        block = "string_agg(coalesce(x.line, chr(10)), '' ORDER BY x.n)"
    left = "ORDER BY x.n) FILTER (WHERE x.line IS NULL)"
    return (
        f"SELECT count(*)::int, convert_to(coalesce({block}, ''), 'UTF8'), array_agg((x.n - 1)::int {left}, "
        f"array_agg(x.a {left}, array_agg(x.b {left}, array_agg(x.data::text {left} FROM ({inner} OFFSET 0) x"
    )


def _parts(d: str, fmt: str, fold: bool) -> tuple[str, str, str]:
    return _parquet_parts(d, fold) if fmt == PARQUET else _line_parts(d, fmt, fold)


def _iteration_sql(fmt: str, bounded: bool) -> str:
    """One chunk of the iteration's rows: keys from ($4, $5) on, below ($6, $7) when ``bounded``;
    a is the sample id, b the row's kind."""
    upper = " AND (s.position, s.sample_id) < ($6, $7)" if bounded else ""
    laterals, ok, line = _parts("s.data", fmt, False)
    return _chunk_sql(
        f"SELECT CASE WHEN s.kind <> 'good' AND {ok} THEN {line} END AS line, s.sample_id AS a, "
        "s.kind AS b, s.data, row_number() OVER (ORDER BY s.position, s.sample_id) AS n "
        f"FROM samples s {laterals} WHERE s.project_id = $1 AND s.run_id = $2 AND s.iteration = $3 "
        f"AND (s.position, s.sample_id) >= ($4, $5){upper}",
        fmt,
    )


# every CHUNK-th key of the iteration's rows: where each chunk starts
_ITERATION_KEYS = """
SELECT position, sample_id FROM (
    SELECT position, sample_id, row_number() OVER (ORDER BY position, sample_id) AS rn
    FROM samples WHERE project_id = $1 AND run_id = $2 AND iteration = $3
) k WHERE (rn - 1) % $4 = 0 ORDER BY rn
"""


def _events_sql(fmt: str, fold: bool) -> str:
    """One chunk of entries ($1 positions, $2 sample ids); a is the event type, b its version."""
    rows = (
        "SELECT u.ord, u.sample_id AS want, e.event_type, e.event_version, e.data, e.data->'sample' AS d "
        "FROM unnest($1::bigint[], $2::text[]) WITH ORDINALITY AS u(position, sample_id, ord) "
        "LEFT JOIN LATERAL (SELECT event_type, event_version, data FROM events "
        "WHERE events.position = u.position) e ON true OFFSET 0"
    )
    held = "y.event_type || ':' || y.event_version = ANY($3::text[]) AND y.d->>'sample_id' = y.want"
    laterals, ok, line = _parts("y.d", fmt, fold)
    return _chunk_sql(
        f"SELECT CASE WHEN {held} AND {ok} THEN {line} END AS line, y.event_type AS a, "
        f"y.event_version AS b, y.data, y.ord AS n FROM ({rows}) y {laterals}",
        fmt,
    )


# a DatasetCreated event's manifest without its entries, and its entries' positions and sample
# ids (strict paths: an entry without either key, or not an object, makes the array NULL)
_MANIFEST_ENTRIES = """
SELECT ((data->'manifest') - 'entries')::text,
       jsonb_array_length(data->'manifest'->'entries'),
       jsonb_path_query_array(data, 'strict $.manifest.entries[*].position', '{}', true)::text,
       jsonb_path_query_array(data, 'strict $.manifest.entries[*].sample_id', '{}', true)::text
FROM events WHERE position = $1 AND event_type = $2 AND event_version = $3
  AND jsonb_typeof(data->'manifest') = 'object' AND jsonb_typeof(data->'manifest'->'entries') = 'array'
"""


@dataclasses.dataclass(frozen=True)
class Chunk:
    """One chunk's rows as the database rendered them: ``count`` rows; ``block``, for JSONL their
    lines in order (each ends with a newline; a row left to Python is an empty line), for Parquet
    the NDJSON lines of the rendered rows only (``_parquet_parts``), in order; ``left``, the rows
    left to Python as (0-based place in the chunk, a, b, data text or None): for an iteration a is
    the sample id and b the row's kind, for events the event type and version."""

    count: int
    block: bytes
    left: list[tuple[int, Any, Any, str | None]]

    @classmethod
    def of(cls, row: Sequence[Any]) -> Chunk:
        count, block, places, a, b, data = row
        return cls(count, block, list(zip(places, a, b, data, strict=True)) if places else [])


def _spare(engine: AsyncEngine) -> int:
    """Connections the engine's pool can still hand out without waiting (0 when it cannot say)."""
    pool: Any = engine.sync_engine.pool
    try:
        return int(pool.checkedin()) + int(getattr(pool, "_max_overflow", 0)) - int(pool.overflow())
    except (AttributeError, TypeError):
        return 0


async def _snapshot_workers(engine: AsyncEngine, workers: int, stack: contextlib.AsyncExitStack) -> list[Any]:
    """Up to ``workers`` asyncpg connections (fewer when the pool has no spare ones: a download
    never waits on the pool for its second connection while holding its first), each in a
    read-only REPEATABLE READ transaction on ONE snapshot (the first exports it, the others import
    it), with JIT off (these statements are costed high enough to trigger it, and compiling costs
    more than it saves)."""
    pgs: list[Any] = []
    snapshot = None
    for index in range(workers):
        if index and _spare(engine) < 2:  # leave the pool one connection: fewer workers, no wait
            break
        conn = await stack.enter_async_context(engine.connect())
        pg: Any = (await conn.get_raw_connection()).driver_connection  # asyncpg.Connection
        await stack.enter_async_context(pg.transaction(isolation="repeatable_read", readonly=True))
        if snapshot is None:
            if workers > 1:  # a snapshot for the others to share
                snapshot = await pg.fetchval("SELECT pg_export_snapshot()")
        else:
            await pg.execute(f"SET TRANSACTION SNAPSHOT '{snapshot}'")
        await pg.execute("SET LOCAL jit = off")
        pgs.append(pg)
    return pgs


async def _chunks(
    engine: AsyncEngine,
    plan: Callable[[Any], Awaitable[list[tuple[str, Sequence[Any]]]]],
    workers: int,
) -> AsyncGenerator[Chunk, None]:
    """Each planned (sql, args) chunk, in order; chunk i runs on connection
    i % ``workers`` and up to ``workers`` chunks are in flight (the database renders the next
    ones while the caller sends this one). ``plan`` gets the first connection (inside the
    snapshot) and returns the chunks."""
    async with contextlib.AsyncExitStack() as stack:
        pgs = await _snapshot_workers(engine, workers, stack)
        chunks = await plan(pgs[0])
        pending: collections.deque[asyncio.Future[Sequence[Any]]] = collections.deque()
        try:
            for index, (sql, args) in enumerate(chunks):
                if len(pending) == len(pgs):
                    yield Chunk.of(await pending.popleft())
                pending.append(asyncio.ensure_future(pgs[index % len(pgs)].fetchrow(sql, *args)))
            while pending:
                yield Chunk.of(await pending.popleft())
        finally:  # the client went away: do not leave the fetches behind
            for future in pending:
                future.cancel()
            for future in pending:
                with contextlib.suppress(BaseException):
                    await future


def iteration_lines(
    engine: AsyncEngine,
    project_id: str,
    run_id: str,
    iteration: int,
    fmt: str,
    chunk: int = CHUNK,
    workers: int = WORKERS,
) -> AsyncGenerator[Chunk, None]:
    """The iteration's ``samples`` rows in (position, sample_id) order, ``chunk`` rows a ``Chunk``
    (module docstring)."""
    if chunk < 1 or workers < 1:
        raise ValueError(f"chunk and workers must be >= 1, got {chunk} and {workers}")

    async def plan(pg: Any) -> list[tuple[str, Sequence[Any]]]:
        keys = [tuple(k) for k in await pg.fetch(_ITERATION_KEYS, project_id, run_id, iteration, chunk)]
        head = (project_id, run_id, iteration)
        return [
            (_iteration_sql(fmt, True), (*head, *key, *keys[i + 1]))
            if i + 1 < len(keys)
            else (_iteration_sql(fmt, False), (*head, *key))
            for i, key in enumerate(keys)
        ]

    return _chunks(engine, plan, workers)


def event_lines(
    engine: AsyncEngine,
    positions: Sequence[int],
    sample_ids: Sequence[str],
    fmt: str,
    sample_events: Mapping[str, int],
    fold: bool,
    chunk: int = CHUNK,
    workers: int = WORKERS,
) -> AsyncGenerator[Chunk, None]:
    """One row per entry (its event ``positions[i]``, which should hold ``sample_ids[i]``), in that
    order, ``chunk`` entries a ``Chunk`` (module docstring); ``sample_events``: the event types
    holding a stored sample under ``sample``, with their current versions."""
    if chunk < 1 or workers < 1:
        raise ValueError(f"chunk and workers must be >= 1, got {chunk} and {workers}")
    if len(positions) != len(sample_ids):
        raise ValueError(f"{len(positions)} positions but {len(sample_ids)} sample ids")
    kinds = [f"{name}:{version}" for name, version in sample_events.items()]
    sql = _events_sql(fmt, fold)

    async def plan(_pg: Any) -> list[tuple[str, Sequence[Any]]]:
        return [
            (sql, (positions[i : i + chunk], sample_ids[i : i + chunk], kinds))
            for i in range(0, len(positions), chunk)
        ]

    return _chunks(engine, plan, workers)


async def manifest_entries(
    engine: AsyncEngine, position: int, event_type: str, event_version: int
) -> tuple[dict[str, Any], list[int], list[str]] | None:
    """The manifest that the event at ``position`` (of ``event_type`` and ``event_version``) holds
    under ``manifest``, without its entries, and its entries' positions and sample ids, read by
    the database: no Python object per entry but its two values. None when there is no such
    event or an entry is not an object with an integer position and a string sample id (the
    caller decodes the manifest then)."""
    async with engine.connect() as conn:
        pg: Any = (await conn.get_raw_connection()).driver_connection  # asyncpg.Connection
        row = await pg.fetchrow(_MANIFEST_ENTRIES, position, event_type, event_version)
    if row is None or row[2] is None or row[3] is None:
        return None
    head, count = orjson.loads(row[0]), row[1]
    positions, sample_ids = orjson.loads(row[2]), orjson.loads(row[3])
    if not (
        len(positions) == len(sample_ids) == count
        and all(type(p) is int for p in positions)
        and all(type(s) is str for s in sample_ids)
    ):
        return None
    return head, positions, sample_ids


__all__ = [
    "CHUNK",
    "LINE_FORMATS",
    "PARQUET",
    "WORKERS",
    "Chunk",
    "event_lines",
    "iteration_lines",
    "manifest_entries",
    "renders_lines",
]
