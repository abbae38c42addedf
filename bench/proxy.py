"""Capture proxy overhead: per-call latency through ``agentr proxy`` vs calling the upstream directly.

Set-up (all real processes on this machine): an upstream OpenAI-compatible server (``--upstream
URL``, else a minimal one started here: uvicorn answering every chat completion with a fixed
assistant message after ``--upstream-ms`` milliseconds, so the figure is the proxy's own cost and
not a model's), ``agentr serve`` to create a project and an ingest key, and ``agentr proxy
--upstream`` on the same database (embedded SQLite under a temporary AGENTR_HOME, or
``AGENTR_DATABASE_URL`` when set). Each call sends a 4-message agent conversation (distinct per
call, so every call is recorded into its own trace).

For plain and streamed calls (``"stream": true``, read as the official openai client reads it: up
to ``[DONE]``, then the connection is closed), and for 1 and 16 concurrent clients, direct and
proxied rounds alternate (``--rounds``, each ``--calls`` calls per client); per-call latencies (a
stream's: until ``[DONE]``) are pooled per side. Prints JSON lines: ``{"metric": "proxy [stream
]latency p50|p99, C client(s)", "ours": proxied ms, "baseline": direct ms, "unit": "ms", "ratio":
ours / baseline, "added_ms": ours - baseline}``, then one line saying how many calls the proxy
recorded (``ours``) of the calls made (``baseline``, ``streamed`` of them streams): every call must be
stored once the proxy is flushed. Each latency line also gives ``proxy_cpu_ms_per_call``: the proxy
process's CPU time over its rounds per call (/proc, Linux), which a loaded machine does not inflate as
it does wall-clock latency. ``--profile PATH`` runs the proxy under cProfile (stats written at exit).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import free_port, start_http_process  # noqa: E402

ADMIN_KEY = "bench-admin-key-" + "x" * 16
UPSTREAM_APP = """
import asyncio, json, os, time
from fastapi import FastAPI
from fastapi.responses import StreamingResponse
app = FastAPI()
DELAY = float(os.environ.get("BENCH_UPSTREAM_MS", "0")) / 1000
ANSWER = {"role": "assistant", "content": "Thought: the recipe first.\\nAction: get_recipe(oak planks)"}

@app.get("/v1/models")
async def models():
    return {"object": "list", "data": [{"id": "bench", "object": "model", "owned_by": "bench"}]}

def chunk(delta, finish):
    body = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0, "model": "bench",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return "data: " + json.dumps(body) + "\\n\\n"

async def events():
    yield chunk({"role": "assistant", "content": ""}, None)
    for piece in ANSWER["content"].split(" "):
        yield chunk({"content": piece + " "}, None)
    yield chunk({}, "stop")
    yield "data: [DONE]\\n\\n"

@app.post("/v1/chat/completions")
async def chat(body: dict):
    if DELAY:
        await asyncio.sleep(DELAY)
    if body.get("stream"):
        return StreamingResponse(events(), media_type="text/event-stream")
    return {"id": "chatcmpl-bench", "object": "chat.completion", "created": int(time.time()),
            "model": "bench",
            "choices": [{"index": 0, "message": ANSWER, "finish_reason": "stop", "logprobs": None}],
            "usage": {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52}}
"""


def _agentr() -> list[str]:
    script = Path(sys.executable).with_name("agentr")
    return [str(script)] if script.exists() else [sys.executable, "-c", "from agentr.cli import main; main()"]


def _profiled(path: Path | None) -> list[str]:
    """The ``agentr`` command, under cProfile writing to ``path`` when given (stopped with SIGINT:
    uvicorn shuts down, then raises the signal again, and cProfile writes its stats on the way out)."""
    if path is None:
        return _agentr()
    script = Path(sys.executable).with_name("agentr")
    if not script.exists():
        raise SystemExit(f"--profile needs the agentr script beside {sys.executable}")
    return [sys.executable, "-m", "cProfile", "-o", str(path.resolve()), str(script)]


def _messages(client: int, call: int) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are a crafting agent. Answer with Thought: and Action:."},
        {"role": "user", "content": f"Goal: craft oak planks (client {client}, call {call})."},
        {"role": "assistant", "content": "Thought: check the inventory.\nAction: inventory"},
        {"role": "user", "content": "Inventory: 1 oak log, 2 sticks."},
    ]


async def _round(url: str, key: str, clients: int, calls: int, tag: int, stream: bool = False) -> list[float]:
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=60, limits=limits) as http:

        async def one(client: int) -> None:
            for call in range(calls):
                body = {
                    "model": "bench",
                    "messages": _messages(client, tag * 100_000 + call),
                    "max_tokens": 16,
                    "stream": stream,
                }
                headers = {"Authorization": f"Bearer {key}"}
                started = time.perf_counter()
                if not stream:
                    response = await http.post(f"{url}/chat/completions", json=body, headers=headers)
                    latencies.append((time.perf_counter() - started) * 1000)
                    response.raise_for_status()
                    continue
                # as the official openai client does: read up to [DONE], then close the connection
                async with http.stream("POST", f"{url}/chat/completions", json=body, headers=headers) as sent:
                    sent.raise_for_status()
                    async for line in sent.aiter_lines():
                        if line.strip() == "data: [DONE]":
                            break
                    else:
                        raise RuntimeError("a stream ended without [DONE]")
                    latencies.append((time.perf_counter() - started) * 1000)

        await asyncio.gather(*(one(c) for c in range(clients)))
    return latencies


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far (Linux /proc; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _create_key(api: str) -> str:
    async with httpx.AsyncClient(base_url=api, headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as http:
        project = (await http.post("/v1/projects", json={"name": "bench-proxy"})).json()["project_id"]
        key = await http.post(f"/v1/projects/{project}/keys", json={"scopes": ["ingest", "read"]})
        return str(key.json()["key"])


async def _recorded(api: str, key: str) -> int:
    count, cursor = 0, None
    async with httpx.AsyncClient(base_url=api, headers={"Authorization": f"Bearer {key}"}) as http:
        while True:
            params: dict[str, Any] = {"limit": 200, "source_format": "proxy"}
            if cursor:
                params["cursor"] = cursor
            page = (await http.get("/v1/traces", params=params)).json()
            count += len(page["items"])
            cursor = page.get("next_cursor")
            if not cursor:
                return count


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--upstream", default=None, help="An OpenAI-compatible /v1 URL (default: start one).")
    parser.add_argument("--upstream-ms", type=float, default=0.0, help="Delay of the built-in upstream.")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--calls", type=int, default=50, help="Calls per client per round.")
    parser.add_argument("--quick", action="store_true", help="2 rounds of 15 calls.")
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="Run the proxy under cProfile and write its stats here when it stops (pstats format).",
    )
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.calls = 2, 15
    home = Path(tempfile.mkdtemp(prefix="agentr-bench-proxy-"))
    env = {
        **os.environ,
        "AGENTR_HOME": str(home),
        "AGENTR_ADMIN_KEY": ADMIN_KEY,
        "AGENTR_LOG_LEVEL": "WARNING",
        # the processes run this checkout's code, as the bench does (not another installed copy)
        "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    env |= {
        "AGENTR_KEY_REQUESTS_PER_S": "0",
        "AGENTR_AUTH_FAILURES_PER_MIN": "0",
        "BENCH_UPSTREAM_MS": str(args.upstream_ms),
    }
    env.pop("AGENTR_PROXY_UPSTREAM_KEY", None)
    processes = []
    proxy_process = None
    try:
        upstream = args.upstream
        if upstream is None:
            (home / "bench_upstream.py").write_text(UPSTREAM_APP)
            port = free_port()
            processes.append(
                start_http_process(
                    [
                        sys.executable,
                        "-m",
                        "uvicorn",
                        "bench_upstream:app",
                        "--port",
                        str(port),
                        "--log-level",
                        "warning",
                    ],
                    f"http://127.0.0.1:{port}/v1/models",
                    what="bench upstream",
                    env=env,
                    cwd=home,
                )
            )
            upstream = f"http://127.0.0.1:{port}/v1"
        api_port, proxy_port = free_port(), free_port()
        api = f"http://127.0.0.1:{api_port}"
        processes.append(
            start_http_process(
                [*_agentr(), "serve", "--port", str(api_port), "--create-tables"],
                f"{api}/healthz",
                what="agentr serve",
                env=env,
            )
        )
        key = asyncio.run(_create_key(api))
        proxy_root = f"http://127.0.0.1:{proxy_port}"
        proxy_process = start_http_process(
            [
                *_profiled(args.profile),
                "proxy",
                "--upstream",
                upstream,
                "--port",
                str(proxy_port),
                "--spool",
                str(home / "spool"),
            ],
            f"{proxy_root}/healthz",
            what="agentr proxy",
            env=env,
            log_path=home / "proxy.log",  # kept: a 502's detail is there
        )
        processes.append(proxy_process)
        print(json.dumps({"note": f"logs in {home}"}), flush=True)
        proxied_url = f"{proxy_root}/v1/proxy/openai/v1"
        asyncio.run(_round(proxied_url, key, 1, 3, 999))  # warm both paths (connections, key cache)
        asyncio.run(_round(upstream, key, 1, 3, 998))
        total, streamed = 3, 0  # the proxied warm-up calls
        for stream in (False, True):
            kind = "stream " if stream else ""
            for clients in (1, 16):
                direct: list[float] = []
                proxied: list[float] = []
                cpu = 0.0
                for r in range(args.rounds):
                    tag = clients * 1000 + 2 * r + (500 if stream else 0)
                    direct += asyncio.run(_round(upstream, key, clients, args.calls, tag, stream))
                    before = _cpu_s(proxy_process.process.pid)
                    proxied += asyncio.run(_round(proxied_url, key, clients, args.calls, tag + 1, stream))
                    cpu += _cpu_s(proxy_process.process.pid) - before
                total += clients * args.calls * args.rounds
                streamed += clients * args.calls * args.rounds if stream else 0
                for name, q in (("p50", 0.5), ("p99", 0.99)):
                    ours, base = _pct(proxied, q), _pct(direct, q)
                    print(
                        json.dumps(
                            {
                                "metric": f"proxy {kind}latency {name}, {clients} client"
                                + ("s" if clients > 1 else ""),
                                "ours": round(ours, 3),
                                "baseline": round(base, 3),
                                "unit": "ms",
                                "ratio": round(ours / base, 2),
                                "added_ms": round(ours - base, 3),
                                "calls": len(proxied),
                                "mean_ours": round(statistics.fmean(proxied), 3),
                                # the proxy process's CPU per call (its recorder's included), at 10 ms
                                # clock ticks: the figure load on the machine does not inflate
                                "proxy_cpu_ms_per_call": round(cpu * 1000 / len(proxied), 2),
                            }
                        ),
                        flush=True,
                    )
        deadline = time.monotonic() + 120
        recorded = asyncio.run(_recorded(api, key))
        while recorded < total and time.monotonic() < deadline:
            time.sleep(1)
            recorded = asyncio.run(_recorded(api, key))
        print(
            json.dumps(
                {
                    "metric": "proxied calls recorded as traces",
                    "ours": recorded,
                    "baseline": total,
                    "unit": "calls",
                    "streamed": streamed,
                    "ratio": round(recorded / total, 3),
                }
            )
        )
    finally:
        if args.profile is not None and proxy_process is not None:
            proxy_process.process.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proxy_process.process.wait(timeout=30)
        for process in reversed(processes):
            process.stop()


if __name__ == "__main__":
    main()
