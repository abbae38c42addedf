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
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REPEATS = 3
SPANS_PER_TRACE = 6


def build_request(n_traces: int) -> bytes:
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
    for t in range(n_traces):
        trace_id = t.to_bytes(16, "big")

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="300 traces instead of 3,000")
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


if __name__ == "__main__":
    main()
