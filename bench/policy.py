"""Benchmark the hf Policy backend on the tiny model, each comparison measured side by side in one run.

1. n=4 candidate actions for a node in ONE batched call (prefill once, cache repeated) vs 4
   sequential n=1 calls (what the paper's code did); also vs transformers' own
   ``generate(num_return_sequences=4)`` as a raw-library reference.
2. Critic judgements: label scoring (one forward pass for Good / Bad / Uncertain) vs generating a
   reasoned judgement text (greedy, 48 tokens) per step.

3. ``--only invalid``: constrained decoding (docs/constrained-decoding.md) against free decoding on
   the demo's WARM-STARTED model (``agentr run``'s default plan; found in ``--home``'s model cache,
   or built there with that plan when missing): the demo's held-out goals, ``--seeds`` seeded
   episodes each, the demo's evaluation settings, played twice with the same goals and seeds, free
   and with ``constrain_actions``. Prints ``invalid_action_rate`` (ours = constrained, baseline =
   free, ratio = ours / baseline: lower is better) and ``success_rate`` (ratio = ours / baseline),
   each with the episode and action counts. ``--model`` evaluates another folder instead.

Prints one JSON line per comparison: {"metric", "ours", "baseline", "unit", "ratio"}; ratio > 1 means
ours is faster (speed lines). ``--quick`` runs in well under a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from core.domain.trajectory import Message, Step  # noqa: E402
from core.llm.hf import HFPolicy  # noqa: E402
from core.llm.prompts import build_messages  # noqa: E402
from core.llm.tiny import build_tiny_model, default_corpus  # noqa: E402


def node_conversation() -> list[Message]:
    """A realistic search node: a TextCraft task observation and two steps of history."""
    from core.envs.textcraft import TextCraftEnv, solve

    env = TextCraftEnv()
    task_id = env.task_ids("test")[30]
    observation = env.reset_sync(task_id)
    steps = []
    for action in solve(env.goal_of(task_id), env.book)[:2]:
        result = env.step_sync(action)
        steps.append(Step(f"I will {action}.", action, result.observation))
    return build_messages(env.instruction, observation, steps)


def judge_conversation(base: list[Message], index: int) -> list[Message]:
    return [
        *base,
        Message(
            "user", f"Was the action at step {index} good, bad or uncertain? Answer Good, Bad or Uncertain."
        ),
    ]


async def timed(call: Callable[[], Awaitable[object]], repeats: int) -> float:
    await call()  # warm-up
    start = time.perf_counter()
    for _ in range(repeats):
        await call()
    return (time.perf_counter() - start) / repeats


def emit(metric: str, ours: float, baseline: float, unit: str) -> None:
    ratio = ours / baseline if "/s" in unit else baseline / ours
    print(
        json.dumps(
            {
                "metric": metric,
                "ours": round(ours, 3),
                "baseline": round(baseline, 3),
                "unit": unit,
                "ratio": round(ratio, 3),
            }
        ),
        flush=True,
    )


def demo_model(home: Path, quick: bool) -> str:
    """The warm-started starting model of ``agentr run`` (``--quick``'s with ``quick``): cached in
    ``home``'s model folder by its plan's key, built there with that plan when missing."""
    from agentr.cli.demo import RunOptions, plan_run
    from agentr.cli.warm_start import prepare_model

    return prepare_model(plan_run(RunOptions(quick=quick)), home, 0)


async def invalid_rates(args: argparse.Namespace) -> None:
    """Section 3 of the module docstring: free vs constrained episodes, same goals and seeds."""
    import resource

    from agentr.cli.demo import DEMO_ENV, DEMO_HELD_OUT, QUICK_ENV, RunOptions, plan_run
    from core.domain.eval_protocol import episode_seed
    from core.envs.registry import open_env
    from train_service.evaluation import EvalConfig, play

    started, cpu0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    folder = str(args.model) if args.model else demo_model(args.home.resolve(), args.quick_model)
    plan = plan_run(RunOptions(quick=args.quick_model))
    env_uri = QUICK_ENV if args.quick_model else DEMO_ENV
    probe = open_env(env_uri)
    goals = list(DEMO_HELD_OUT) if not args.quick_model else probe.task_ids("test")[:4]
    settings = dict(plan.config["evaluation"])
    for key in ("baseline", "recovery_episodes", "seen_max_tasks", "constrain_actions"):
        settings.pop(key, None)
    policy = HFPolicy.from_folder(folder, device=args.device)
    tasks = [g for g in goals for _ in range(args.seeds)]
    seeds = [episode_seed(0, g, e) for g in goals for e in range(args.seeds)]
    rates: dict[bool, dict[str, float]] = {}
    for constrained in (False, True):
        cfg = EvalConfig.from_data({**settings, "constrain_actions": constrained})
        results = await play(policy, lambda: open_env(env_uri), tasks, cfg, seeds=seeds)
        actions = sum(len(r.valid) - r.prefix_steps for r in results)
        invalid = sum(1 for r in results for ok in r.valid[r.prefix_steps :] if not ok)
        successes = sum(1 for r in results if r.reward >= cfg.success_threshold)
        rates[constrained] = {
            "invalid": invalid / max(1, actions),
            "success": successes / len(results),
            "actions": actions,
        }
    await policy.close()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    common = {
        "episodes": len(tasks),
        "goals": len(goals),
        "seeds_per_goal": args.seeds,
        "model": folder,
        "temperature": settings.get("temperature", EvalConfig.temperature),
        "max_steps": settings.get("max_steps"),
        "wall_s": round(time.perf_counter() - started, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime - cpu0.ru_utime - cpu0.ru_stime, 1),
    }
    for metric, key, unit in (
        ("invalid_action_rate", "invalid", "invalid actions / actions (ours: constrained, baseline: free)"),
        ("success_rate", "success", "successful episodes / episodes (ours: constrained, baseline: free)"),
    ):
        ours, baseline = rates[True][key], rates[False][key]
        line = {
            "metric": metric,
            "ours": round(ours, 4),
            "baseline": round(baseline, 4),
            "unit": unit,
            "ratio": round(ours / baseline, 4) if baseline else None,
            "actions_ours": rates[True]["actions"],
            "actions_baseline": rates[False]["actions"],
            **common,
        }
        print(json.dumps(line), flush=True)


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer repeats (< 1 minute)")
    parser.add_argument(
        "--model", type=Path, default=None, help="model folder (default: build the tiny model)"
    )
    parser.add_argument("--device", default=None)
    parser.add_argument("--only", choices=("speed", "invalid"), default="speed")
    parser.add_argument("--home", type=Path, default=Path(".agentr"), help="agentr run's data folder")
    parser.add_argument("--seeds", type=int, default=3, help="--only invalid: episodes per goal")
    parser.add_argument(
        "--quick-model", action="store_true", help="--only invalid: agentr run --quick's model and goals"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)
    if args.only == "invalid":
        await invalid_rates(args)
        return
    repeats = 2 if args.quick else 6
    action_tokens = 30

    with tempfile.TemporaryDirectory() as scratch:
        folder = args.model or build_tiny_model(Path(scratch) / "tiny", default_corpus())
        policy = HFPolicy.from_folder(folder, device=args.device)
        node = node_conversation()
        seed = iter(range(10_000))

        async def batched() -> object:
            return await policy.sample(
                [node], n=4, temperature=1.0, max_tokens=action_tokens, seed=next(seed)
            )

        async def sequential() -> object:
            return [
                await policy.sample([node], n=1, temperature=1.0, max_tokens=action_tokens, seed=next(seed))
                for _ in range(4)
            ]

        prompt_ids = torch.tensor([policy.encode(policy.render(node))], device=policy.device)

        async def library() -> object:
            def run() -> object:
                with torch.inference_mode():
                    return policy.model.generate(
                        prompt_ids,
                        attention_mask=torch.ones_like(prompt_ids),
                        do_sample=True,
                        num_return_sequences=4,
                        max_new_tokens=action_tokens,
                        min_new_tokens=action_tokens,
                        pad_token_id=policy.pad_id,
                    )

            return await asyncio.to_thread(run)

        t_batched = await timed(batched, repeats)
        t_sequential = await timed(sequential, repeats)
        t_library = await timed(library, repeats)
        emit(
            "node expansion, 4 candidates: one batched call vs 4 sequential calls",
            4 / t_batched,
            4 / t_sequential,
            "candidates/s",
        )
        emit(
            "node expansion, 4 candidates: ours vs transformers generate(num_return_sequences=4)",
            4 / t_batched,
            4 / t_library,
            "candidates/s",
        )

        judges = [judge_conversation(node, i) for i in range(1, 5)]

        async def score() -> object:
            return await policy.score_labels(judges, ["Good", "Bad", "Uncertain"])

        async def reasoned() -> object:
            return await policy.sample(judges, n=1, temperature=0.0, max_tokens=48)

        t_score = await timed(score, repeats)
        t_text = await timed(reasoned, repeats)
        emit(
            "critic verdicts for 4 steps: label scoring vs generating a reasoned judgement",
            len(judges) / t_score,
            len(judges) / t_text,
            "verdicts/s",
        )
        await policy.close()


if __name__ == "__main__":
    asyncio.run(main())
