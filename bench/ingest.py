"""OTLP trace ingest: decoding + assembling agent traces vs the raw protobuf parse of the same bytes.

Both sides take the same OTLP/protobuf ``ExportTraceServiceRequest`` holding N agent traces of six
spans each (an ``invoke_agent`` root, three chat spans replaying the growing history in
``gen_ai.input.messages``, two ``execute_tool`` spans, one with ERROR status):

* ours: ``core.formats.otlp.spans_from_protobuf`` (AnyValue decoding, JSON-ready checks) and, per
  trace id, ``conversation_from_spans`` + ``imported`` (parent/time order, every chat span parsed and
  de-duplicated, tool spans joined, the Trajectory built) — what ``POST /v1/otlp/v1/traces`` runs
  before it writes;
* baseline: ``ExportTraceServiceRequest.FromString`` plus reading every span's attribute values into
  Python (``WhichOneof`` + the value), the least any Python consumer of the spans does (no JSON
  decoding of the messages, no assembly): a lower bound, so a ratio below 1 is expected. It tells
  what message decoding and trace assembly cost on top of reading the wire format.

Each side is timed ``REPEATS`` times, interleaved, best run kept. Every assembled trace is checked
(three steps, the first tool result ``is_error``). Prints one JSON line
``{"metric", "ours", "baseline", "unit": "spans/s", "ratio"}``. ``--quick``: 300 traces (a few
seconds); the default is 3,000.

Stored ingest (issue 27), traces/s through the real API into PostgreSQL on a throwaway database,
side by side with a raw INSERT of the same rows, interleaved, best of ``REPEATS``:

* ours: the app (``api.app.create_app``, lifespan started, in-process ASGI client) answering
  ``POST /v1/otlp/v1/traces`` (one protobuf export per batch of ``BATCH`` traces) and, separately,
  ``POST /v1/traces`` with format ``openai`` (the same conversations as OpenAI chat messages, batches
  of ``BATCH``): parsing, validation, authentication, the TraceIngested events and the ``traces``
  projection, in one transaction per request;
* baseline: asyncpg ``executemany`` of the same rows, already serialised (the event payload JSON and
  the projection row per trace), into two bare tables of the same columns: a lower bound (no parsing,
  no validation, no HTTP). Prints ``{"metric": "stored_ingest_<door>", ..., "unit": "traces/s"}``.
  ``--skip-store`` leaves it out (it needs PostgreSQL at ``AGENTR_TEST_PG``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REPEATS = 3
SPANS_PER_TRACE = 6
BATCH = 100


def build_request(n_traces: int, first: int = 0) -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

    def attrs(values: dict[str, object]) -> list[KeyValue]:
        out = []
        for key, value in values.items():
            text = value if isinstance(value, str) else json.dumps(value)
            out.append(KeyValue(key=key, value=AnyValue(string_value=text)))
        return out

    user = {
        "role": "user",
        "parts": [{"type": "text", "content": "Refund the duplicate charge on INV-2231."}],
    }
    calls, results = [], []
    for k in (1, 2):
        call = {
            "type": "tool_call",
            "id": f"c{k}",
            "name": "get_invoice",
            "arguments": {"invoice_id": "INV-2231"},
        }
        calls.append({"role": "assistant", "parts": [call]})
        response = {"type": "tool_call_response", "id": f"c{k}", "response": {"error": "timeout"}}
        results.append({"role": "tool", "parts": [response]})
    final = {"role": "assistant", "parts": [{"type": "text", "content": "Sorry, billing is down."}]}
    spans = []
    for t in range(first, first + n_traces):
        trace_id = (t + 1).to_bytes(16, "big")

        def make(n: int, parent: int | None, name: str, values: dict[str, object], code: int = 0) -> Span:
            return Span(
                trace_id=trace_id,  # noqa: B023 (used at once)
                span_id=(n + 1).to_bytes(8, "big"),
                parent_span_id=b"" if parent is None else (parent + 1).to_bytes(8, "big"),
                name=name,
                start_time_unix_nano=1_700_000_000_000_000_000 + n,
                end_time_unix_nano=1_700_000_000_000_000_000 + n + 1,
                attributes=attrs(values),
                status=Status(code=code),
            )

        spans += [
            make(0, None, "invoke_agent", {"gen_ai.operation.name": "invoke_agent"}, code=2),
            make(1, 0, "chat", {"gen_ai.input.messages": [user], "gen_ai.output.messages": [calls[0]]}),
            make(
                2,
                0,
                "execute_tool",
                {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.call.id": "c1",
                    "gen_ai.tool.name": "get_invoice",
                },
                code=2,
            ),  # fmt: skip
            make(
                3,
                0,
                "chat",
                {"gen_ai.input.messages": [user, calls[0], results[0]], "gen_ai.output.messages": [calls[1]]},
            ),  # fmt: skip
            make(
                4,
                0,
                "execute_tool",
                {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.call.id": "c2",
                    "gen_ai.tool.name": "get_invoice",
                },
            ),  # fmt: skip
            make(
                5,
                0,
                "chat",
                {
                    "gen_ai.input.messages": [user, calls[0], results[0], calls[1], results[1]],
                    "gen_ai.output.messages": [final],
                },
            ),  # fmt: skip
        ]
    request = ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])])
    return request.SerializeToString()


def ours(body: bytes) -> int:
    from core.formats.import_otel import conversation_from_spans
    from core.formats.importing import imported
    from core.formats.otlp import group_by_trace, spans_from_protobuf

    spans = spans_from_protobuf(body)
    for trace_hex, group in group_by_trace(spans).items():
        trace = imported({}, conversation_from_spans(group, trace_hex, trace_hex), "otlp")
        steps = trace.trajectory.steps
        assert len(steps) == 3 and steps[0].tool_results[0].is_error, trace_hex
    return len(spans)


def baseline(body: bytes) -> int:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest.FromString(body)
    count = 0
    for block in request.resource_spans:
        for scope in block.scope_spans:
            for span in scope.spans:
                values = [
                    getattr(kv.value, kv.value.WhichOneof("value") or "string_value")
                    for kv in span.attributes
                ]
                count += 1 if values is not None else 0
    return count


def openai_traces(n_traces: int, first: int = 0) -> list[dict[str, object]]:
    """The same agent conversation as ``build_request``'s, as OpenAI chat messages (own ids)."""
    call = {
        "type": "function",
        "function": {"name": "get_invoice", "arguments": '{"invoice_id": "INV-2231"}'},
    }
    out = []
    for t in range(first, first + n_traces):
        out.append(
            {
                "id": f"bench-{t}",
                "outcome": "failure",
                "messages": [
                    {"role": "user", "content": "Refund the duplicate charge on INV-2231."},
                    {"role": "assistant", "content": None, "tool_calls": [{**call, "id": "c1"}]},
                    {"role": "tool", "tool_call_id": "c1", "content": '{"error": "timeout"}'},
                    {"role": "assistant", "content": None, "tool_calls": [{**call, "id": "c2"}]},
                    {"role": "tool", "tool_call_id": "c2", "content": '{"error": "timeout"}'},
                    {"role": "assistant", "content": "Sorry, billing is down."},
                ],
            }
        )
    return out


async def _stored(n_traces: int) -> list[dict[str, object]]:
    """traces/s stored through the API (OTLP protobuf; OpenAI JSON) vs raw INSERT of the same rows."""
    import asyncpg
    import httpx
    from sqlalchemy import select

    from api.app import create_app
    from bench.api import ADMIN_DSN, _admin
    from core.runtime.settings import Settings
    from core.store.tables import events, traces

    name = "agentr_bench_ingest_" + uuid.uuid4().hex[:10]
    await _admin(f'CREATE DATABASE "{name}"')
    dsn = f"{ADMIN_DSN.rsplit('/', 1)[0]}/{name}"
    admin_key = "bench-admin-key-" + "x" * 16
    settings = Settings(
        database_url=dsn.replace("postgresql://", "postgresql+asyncpg://"),
        redis_url=None,
        admin_key=admin_key,
        log_level="WARNING",
        auth_failures_per_min=0,
        key_requests_per_s=0,
        max_body_bytes=64_000_000,
    )
    results = []
    try:
        app = create_app(settings, create_tables=True)
        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://bench") as client,
        ):
            admin = {"Authorization": f"Bearer {admin_key}"}

            async def fresh_key() -> dict[str, str]:
                project = (await client.post("/v1/projects", json={"name": "b"}, headers=admin)).json()
                made = await client.post(
                    f"/v1/projects/{project['project_id']}/keys", json={"scopes": ["ingest"]}, headers=admin
                )
                return {"Authorization": f"Bearer {made.json()['key']}"}

            async def via_otlp(round_: int) -> float:
                key = {**await fresh_key(), "Content-Type": "application/x-protobuf"}
                bodies = [build_request(BATCH, round_ * n_traces + b) for b in range(0, n_traces, BATCH)]
                start = time.perf_counter()
                for body in bodies:
                    answer = await client.post("/v1/otlp/v1/traces", content=body, headers=key)
                    assert answer.status_code == 200, answer.text
                return time.perf_counter() - start

            async def via_openai(round_: int) -> float:
                key = await fresh_key()
                items = openai_traces(n_traces, round_ * n_traces)
                start = time.perf_counter()
                for b in range(0, n_traces, BATCH):
                    body = {"format": "openai", "traces": items[b : b + BATCH]}
                    answer = await client.post("/v1/traces", json=body, headers=key)
                    assert answer.status_code == 202, answer.text
                return time.perf_counter() - start

            # the rows the API wrote, as the baseline inserts them (payload JSON already serialised)
            await via_otlp(REPEATS + 1)
            async with app.state.services.store.engine.connect() as conn:
                event_rows = (
                    await conn.execute(
                        select(events.c.stream_id, events.c.event_type, events.c.data).where(
                            events.c.event_type == "TraceIngested"
                        )
                    )
                ).all()
                trace_rows = (await conn.execute(select(traces))).mappings().all()
            assert len(event_rows) >= n_traces and len(trace_rows) >= n_traces
            payloads = [(r.stream_id, r.event_type, json.dumps(r.data)) for r in event_rows[:n_traces]]
            projected = [
                (r["trace_id"], r["project_id"], r["task_key"], r["outcome"], r["status"])
                for r in trace_rows[:n_traces]
            ]

            raw = await asyncpg.connect(dsn)
            try:
                await raw.execute(
                    "CREATE TABLE raw_events (position bigserial primary key, stream_id text, "
                    "event_type text, data jsonb); CREATE TABLE raw_traces (trace_id text primary key, "
                    "project_id text, task_key text, outcome text, status text)"
                )

                async def baseline_insert(round_: int) -> float:
                    rows = [(f"{s}-{round_}", t, d) for s, t, d in payloads]
                    proj = [(f"{p[0]}-{round_}", *p[1:]) for p in projected]
                    start = time.perf_counter()
                    for b in range(0, n_traces, BATCH):
                        async with raw.transaction():
                            await raw.executemany(
                                "INSERT INTO raw_events (stream_id, event_type, data) "
                                "VALUES ($1, $2, $3::jsonb)",
                                rows[b : b + BATCH],
                            )
                            await raw.executemany(
                                "INSERT INTO raw_traces VALUES ($1, $2, $3, $4, $5)", proj[b : b + BATCH]
                            )
                    return time.perf_counter() - start

                best = {"otlp": float("inf"), "openai": float("inf"), "raw": float("inf")}
                for round_ in range(REPEATS):
                    best["otlp"] = min(best["otlp"], await via_otlp(round_))
                    best["openai"] = min(best["openai"], await via_openai(round_))
                    best["raw"] = min(best["raw"], await baseline_insert(round_))
            finally:
                await raw.close()
        raw_rate = n_traces / best["raw"]
        for door, label in (("otlp", "otlp_protobuf"), ("openai", "openai_json")):
            rate = n_traces / best[door]
            results.append(
                {
                    "metric": f"stored_ingest_{label}_{n_traces}_traces_vs_raw_insert",
                    "ours": round(rate, 1),
                    "baseline": round(raw_rate, 1),
                    "unit": "traces/s",
                    "ratio": round(rate / raw_rate, 4),
                }
            )
    finally:
        await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="300 traces instead of 3,000 (store: 300, not 1,000)"
    )
    parser.add_argument("--skip-store", action="store_true", help="leave out the stored-ingest comparison")
    args = parser.parse_args()
    n_traces = 300 if args.quick else 3000
    body = build_request(n_traces)
    best = {"ours": float("inf"), "baseline": float("inf")}
    for _ in range(REPEATS):
        for name, fn in (("ours", ours), ("baseline", baseline)):
            start = time.perf_counter()
            count = fn(body)
            elapsed = time.perf_counter() - start
            assert count == n_traces * SPANS_PER_TRACE, (name, count)
            best[name] = min(best[name], elapsed)
    spans = n_traces * SPANS_PER_TRACE
    ours_rate, base_rate = spans / best["ours"], spans / best["baseline"]
    print(
        json.dumps(
            {
                "metric": f"otlp_protobuf_ingest_{n_traces}_traces",
                "ours": round(ours_rate, 1),
                "baseline": round(base_rate, 1),
                "unit": "spans/s",
                "ratio": round(ours_rate / base_rate, 4),
            }
        )
    )
    if not args.skip_store:
        for line in asyncio.run(_stored(300 if args.quick else 1000)):
            print(json.dumps(line))


if __name__ == "__main__":
    main()
