"""Native tool-call export vs the same conversations flattened to ReAct text (the old export).

Both sides write the same N revision samples of a tool-calling support conversation (two calls,
a parallel pair of calls, their results, a final answer; reflection + good continuation trained):

* ours: the samples as they are stored now, with native ``tool_calls`` / ``tool`` messages /
  ``tools``, through ``core.formats.export.iter_lines`` (openai, sharegpt) and
  ``core.formats.parquet.parquet_batch`` (Parquet, 500-row groups);
* baseline: the same conversations flattened the way the export did before tool calls were
  first-class (assistant ``Thought: ...\\nAction: name({...})`` text, results as user turns, no
  tool definitions), through the same writers.

Each side is timed ``REPEATS`` times, interleaved, best run kept. Every output is checked (one
JSONL line per sample, Parquet rows = samples; ours keeps its tool calls). Prints one JSON line per
format: {"metric", "ours", "baseline", "unit": "rows/s", "ratio"} with ratio = ours / baseline:
below 1 is expected (native records carry more structure), the figure says what it costs.
``--quick`` uses 2,000 samples; the default is 20,000.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.domain.trajectory import Message, ToolCall, TrainingSample  # noqa: E402
from core.formats.export import iter_lines  # noqa: E402
from core.formats.parquet import parquet_batch, parquet_schema  # noqa: E402

REPEATS = 3
TOOLS = (
    {
        "type": "function",
        "function": {
            "name": "refund_order",
            "description": "Refund one order.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
        },
    },
)


def native(i: int) -> TrainingSample:
    calls = (ToolCall(f"c{i}b", "refund_order", json.dumps({"order_id": str(1000 + i)})),)
    good = (
        ToolCall(f"c{i}g1", "refund_order", json.dumps({"order_id": str(i)})),
        ToolCall(f"c{i}g2", "refund_order", json.dumps({"order_id": str(i + 1)})),
    )
    return TrainingSample(
        sample_id=f"s{i}",
        kind="revision",
        messages=(
            Message("system", "You are a support agent."),
            Message("user", f"Refund orders {i} and {i + 1}."),
            Message("assistant", "Refunding.", 0, tool_calls=calls),
            Message("tool", f"Error: order {1000 + i} not found", 0, tool_call_id=calls[0].call_id),
            Message("assistant", "I used the wrong id. Refunding both.", 1, tool_calls=good),
            Message("tool", '{"status": "refunded"}', 0, tool_call_id=good[0].call_id),
            Message("tool", '{"status": "refunded"}', 0, tool_call_id=good[1].call_id),
            Message("assistant", f"Orders {i} and {i + 1} are refunded.", 1),
        ),
        reward=1.0,
        tools=TOOLS,
    )


def flattened(sample: TrainingSample) -> TrainingSample:
    messages: list[Message] = []
    for m in sample.messages:
        if m.role == "tool":
            messages.append(Message("user", m.content))
        elif m.tool_calls:
            action = "; ".join(f"{c.name}({c.arguments})" for c in m.tool_calls)
            messages.append(Message("assistant", f"Thought: {m.content}\nAction: {action}", m.weight))
        elif m.role == "assistant":
            messages.append(Message("assistant", f"Thought: \nAction: {m.content}", m.weight))
        else:
            messages.append(m)
    return TrainingSample(sample.sample_id, sample.kind, tuple(messages), sample.reward, sample.provenance)


def write(samples: list[TrainingSample], fmt: str) -> int:
    if fmt == "parquet":
        import pyarrow.parquet as pq

        sink = io.BytesIO()
        with pq.ParquetWriter(sink, parquet_schema()) as writer:
            for start in range(0, len(samples), 500):
                writer.write_batch(parquet_batch(samples[start : start + 500]))
        rows = pq.read_table(io.BytesIO(sink.getvalue())).num_rows
        assert rows == len(samples)
        return rows
    lines = list(iter_lines(samples, fmt))
    assert len(lines) == len(samples)
    return len(lines)


def best_rate(samples: list[TrainingSample], fmt: str) -> float:
    start = time.perf_counter()
    write(samples, fmt)
    return len(samples) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 samples (a few seconds)")
    n = 2_000 if parser.parse_args().quick else 20_000
    ours = [native(i) for i in range(n)]
    base = [flattened(s) for s in ours]
    assert "tool_calls" in next(iter_lines(ours[:1], "openai"))
    assert "tool_calls" not in next(iter_lines(base[:1], "openai"))
    for fmt in ("openai", "sharegpt", "parquet"):
        mine: list[float] = []
        theirs: list[float] = []
        for _ in range(REPEATS):
            mine.append(best_rate(ours, fmt))
            theirs.append(best_rate(base, fmt))
        o, b = max(mine), max(theirs)
        print(
            json.dumps(
                {
                    "metric": f"export {fmt}: native tool calls vs flattened ReAct text ({n} samples)",
                    "ours": round(o),
                    "baseline": round(b),
                    "unit": "rows/s",
                    "ratio": round(o / b, 2),
                }
            )
        )


if __name__ == "__main__":
    main()
