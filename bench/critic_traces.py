"""Benchmark: the first-error critic where no search tree exists - failed episodes, as production logs
bring them (``agentr ingest``, ``POST /v1/traces``): no good sibling, so no divergence to blame.

On search pairs the trivial critic "blame the first action after the divergence" is the TextCraft
oracle's answer on most pairs by construction (docs/critic.md, "Why first-after-divergence is so
hard to beat"). A failed trace has no divergence: every critic judges it from its first action. This
bench plays the default demo's starting model (its warm start, built in ``--home`` or reused; the
demo's evaluation settings: constrained decoding, temperature, 12 actions) on the demo's 20 held-out
goals with ``--seeds`` episode seeds, keeps the failed episodes the oracle finds an error in, and
compares on the SAME traces the t' of

- ``model``: the actor as its own critic (the run's strategy; fallback = the last action),
- ``reflect``: the likelihood of a reflection after each step, same model,
- the trivial critics: ``first`` (the first action), ``last`` (Direct-Revision) and ``rules``
  (the first rejected action or loop, else the last action),

with the oracle's first error (``core/envs/textcraft/oracle.py``, judged from the first action).
One JSON line, ``first_error_match_traces``: ours = the model critic's exact-match share, baseline =
the best trivial critic's, with the trace count, every critic's share, and pair by pair against the
best baseline (traces only the critic gets right / only the baseline, McNemar's exact p). Also
``# oracle first error at action k`` counts on stderr: how much room each trivial critic has.

    python bench/critic_traces.py [--home DIR] [--seeds 0,1,2,3] [--quick] [--model CHECKPOINT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

TRIVIAL = ("first", "last", "rules")
CRITICS = ("model", "reflect", *TRIVIAL)


def trace_match(rows: Sequence[dict[str, int]]) -> dict[str, Any]:
    """The JSON line's body from one row per trace: each critic's t' and the oracle's (``oracle``).

    Shares of exact matches per critic; the baseline is the best trivial critic (ties: the first of
    ``TRIVIAL``); ``discordant``: traces only the model critic gets right, only the baseline, and
    McNemar's exact p of that split."""
    from core.domain.stats import mcnemar_exact

    if not rows:
        raise ValueError("no trace the oracle judged: nothing to compare")
    right = {c: [row[c] == row["oracle"] for row in rows] for c in CRITICS}
    share = {c: sum(hits) / len(rows) for c, hits in right.items()}
    best = max(TRIVIAL, key=lambda c: (share[c], -TRIVIAL.index(c)))
    only_model = sum(a and not b for a, b in zip(right["model"], right[best], strict=True))
    only_best = sum(b and not a for a, b in zip(right["model"], right[best], strict=True))
    ours, baseline = share["model"], share[best]
    return {
        "metric": "first_error_match_traces",
        "ours": round(ours, 4),
        "baseline": round(baseline, 4),
        "unit": "share of failed traces with t' = oracle",
        "ratio": round(ours / baseline, 2) if baseline else None,
        "traces": len(rows),
        "baseline_critic": best,
        **{c: round(share[c], 4) for c in CRITICS if c != "model"},
        # where the oracle puts the first error, and which critics find it there
        "by_oracle_index": {str(k): _right_at(rows, k) for k in sorted({row["oracle"] for row in rows})},
        "discordant": {
            "critic_only": only_model,
            "baseline_only": only_best,
            "p": round(mcnemar_exact(only_model, only_best), 4),
        },
    }


def _right_at(rows: Sequence[dict[str, int]], k: int) -> dict[str, int]:
    """On the traces whose oracle first error is action ``k``: their count and each critic's hits."""
    at = [row for row in rows if row["oracle"] == k]
    return {"traces": len(at), **{c: sum(row[c] == k for row in at) for c in CRITICS}}


async def judged_traces(
    home: Path, seeds: Sequence[int], quick: bool, model: str = ""
) -> list[dict[str, int]]:
    """Failed held-out episodes of the demo's starting model (or of ``model``, a checkpoint folder
    such as a run's ``checkpoints/iter-1``), each critic's t' (same model) and the oracle's."""
    from policy import demo_model

    from agentr.cli.demo import RunOptions, plan_run
    from core.domain.config import RunConfig
    from core.domain.critic import rule_verdicts, transition_index
    from core.envs.registry import open_env
    from core.envs.textcraft.oracle import OracleError, TextCraftOracle
    from core.llm.hf import HFPolicy
    from critic_service.critic import CriticConfig, critique
    from train_service.episodes import EvalConfig, play_episodes

    config = RunConfig.from_data(plan_run(RunOptions(quick=quick)).config)
    model = model or demo_model(home, quick)
    cfg = EvalConfig.from_data({**(config.evaluation or {}), "workers": 1})
    goals = [g for g in config.eval_tasks for _ in seeds]
    episode_seeds = [s for _ in config.eval_tasks for s in seeds]
    policy = HFPolicy.from_folder(model, device="cpu")
    try:
        played = await play_episodes(policy, lambda: open_env(config.env), goals, cfg, seeds=episode_seeds)
        traces = [(e.task_id, e.trajectory()) for e in played]
        failed = [(task, t) for task, t in traces if (t.reward or 0.0) < cfg.success_threshold and t.steps]
        oracle = TextCraftOracle()
        model_cfg, reflect_cfg = CriticConfig(strategy="model"), CriticConfig(strategy="reflect")
        rows: list[dict[str, int]] = []
        for task_id, trace in failed:
            actions = [s.action for s in trace.steps]
            try:
                index = oracle.first_error(
                    task_id, actions, observations=[s.observation for s in trace.steps]
                )
            except OracleError as exc:
                print(f"# {task_id}: not judged by the oracle ({exc})", file=sys.stderr)
                continue
            if index is None:  # every action was progress: the episode only ran out of steps
                continue
            n = len(actions)
            rows.append(
                {
                    "oracle": index,
                    "model": (await critique(model_cfg, trace, 0, policy)).transition_index,
                    "reflect": (await critique(reflect_cfg, trace, 0, policy)).transition_index,
                    "first": 0,
                    "last": n - 1,
                    "rules": transition_index(rule_verdicts(trace.steps, start=0), n, 0),
                }
            )
        print(
            f"# {len(played)} episodes on {len(config.eval_tasks)} held-out goals x seeds {list(seeds)}: "
            f"{len(failed)} failed, {len(rows)} with an oracle first error",
            file=sys.stderr,
        )
        return rows
    finally:
        await policy.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default="", help="agentr home holding (or to hold) the demo's warm start")
    parser.add_argument("--seeds", default="0,1,2,3", help="episode seeds per held-out goal, comma-separated")
    parser.add_argument("--quick", action="store_true", help="the --quick demo's model and goals")
    parser.add_argument(
        "--model", default="", help="play and judge with this checkpoint folder (default: the demo's start)"
    )
    args = parser.parse_args()
    import tempfile

    from core.runtime.torch_threads import INFERENCE_THREADS, configure, default_training_threads

    # the threads of `agentr run`: its warm start's cache key holds them, so the run's model is reused
    configure(inference=INFERENCE_THREADS, training=default_training_threads())
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    if not seeds:
        parser.error("--seeds: give at least one seed")
    home = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="agentr-bench-traces-"))
    rows = asyncio.run(judged_traces(home, seeds, args.quick, args.model))
    at = Counter(row["oracle"] for row in rows)
    print(f"# oracle first error at action k (traces): {sorted(at.items())}", file=sys.stderr)
    print(json.dumps(trace_match(rows)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
