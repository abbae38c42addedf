"""Benchmark: RedisStreamsBus throughput vs raw redis-py on the same Redis, same messages.

Three comparisons, each measured side by side in one run (ours and the baseline alternate, best of
``--repeats``), on a throwaway key prefix that is deleted afterwards:
- publish: ``RedisStreamsBus.publish`` in batches vs a raw pipelined XADD of the same fields;
- consume+ack: ``consume`` + ``ack`` per batch vs raw XREADGROUP + XACK;
- end to end: both of the above for the same messages.
The baseline is the lower bound of what redis-py can do (no validation, no decoding into
``BusMessage``), so a ratio a little below 1 is expected. Redis: ``AGENTR_TEST_REDIS``
(default redis://127.0.0.1:6379/0). Prints one JSON line per comparison.

    python bench/bus.py [--quick] [--messages N] [--batch B] [--repeats R]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from pathlib import Path

import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.bus.ports import BusMessage  # noqa: E402
from core.bus.redis_streams import RedisStreamsBus  # noqa: E402

REDIS_URL = os.environ.get("AGENTR_TEST_REDIS", "redis://127.0.0.1:6379/0")
TOPIC = "NodesExpanded"
GROUP = "bench"


def make_messages(count: int) -> list[BusMessage]:
    return [
        BusMessage(position=i + 1, event_type=TOPIC, stream_id=f"tree-{i // 50:08d}") for i in range(count)
    ]


def batches(items: list[BusMessage], size: int) -> list[list[BusMessage]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


async def run_ours(prefix: str, messages: list[BusMessage], batch: int) -> tuple[float, float]:
    bus = RedisStreamsBus(REDIS_URL, prefix)
    try:
        await bus.ensure_group(TOPIC, GROUP)
        start = time.perf_counter()
        for chunk in batches(messages, batch):
            await bus.publish(TOPIC, chunk)
        published = time.perf_counter()
        seen = 0
        while seen < len(messages):
            got = await bus.consume([TOPIC], GROUP, "c", count=batch, block_ms=0)
            await bus.ack(TOPIC, GROUP, [d.message_id for d in got])
            seen += len(got)
        done = time.perf_counter()
        return published - start, done - published
    finally:
        await bus.close()


async def run_raw(prefix: str, messages: list[BusMessage], batch: int) -> tuple[float, float]:
    client = aioredis.from_url(REDIS_URL)
    key = f"{prefix}:ev:{TOPIC}"
    try:
        await client.xgroup_create(key, GROUP, id="0", mkstream=True)
        start = time.perf_counter()
        for chunk in batches(messages, batch):
            async with client.pipeline(transaction=False) as pipe:
                for m in chunk:
                    pipe.xadd(key, {"p": str(m.position), "t": m.event_type, "s": m.stream_id})
                await pipe.execute()
        published = time.perf_counter()
        seen = 0
        while seen < len(messages):
            reply = await client.xreadgroup(GROUP, "c", {key: ">"}, count=batch)
            entries = reply[0][1] if reply else []
            if entries:
                await client.xack(key, GROUP, *[mid for mid, _ in entries])
            seen += len(entries)
        done = time.perf_counter()
        return published - start, done - published
    finally:
        await client.aclose()


async def cleanup(prefix: str) -> None:
    client = aioredis.from_url(REDIS_URL)
    try:
        keys = [k async for k in client.scan_iter(match=f"{prefix}*", count=500)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a run under a minute")
    parser.add_argument("--messages", type=int, default=None, help="messages per run")
    parser.add_argument("--batch", type=int, default=500, help="messages per publish / read")
    parser.add_argument("--repeats", type=int, default=None, help="runs per side (best is kept)")
    args = parser.parse_args()
    count = args.messages or (10_000 if args.quick else 100_000)
    repeats = args.repeats or (3 if args.quick else 5)
    messages = make_messages(count)
    ours: list[tuple[float, float]] = []
    raw: list[tuple[float, float]] = []
    for _ in range(repeats):
        for side, results in ((run_ours, ours), (run_raw, raw)):
            prefix = f"agentr-bench-{uuid.uuid4().hex[:10]}"
            try:
                results.append(await side(prefix, messages, args.batch))
            finally:
                await cleanup(prefix)

    def report(metric: str, ours_s: float, raw_s: float) -> None:
        ours_rate, raw_rate = count / ours_s, count / raw_s
        print(
            json.dumps(
                {
                    "metric": metric,
                    "ours": round(ours_rate, 1),
                    "baseline": round(raw_rate, 1),
                    "unit": "messages/s",
                    "ratio": round(ours_rate / raw_rate, 3),
                }
            )
        )

    report("bus_publish", min(p for p, _ in ours), min(p for p, _ in raw))
    report("bus_consume_ack", min(c for _, c in ours), min(c for _, c in raw))
    report("bus_publish_consume_ack", min(p + c for p, c in ours), min(p + c for p, c in raw))


if __name__ == "__main__":
    asyncio.run(main())
