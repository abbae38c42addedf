"""Benchmark: the learners compared on whole runs (Agent-R SFT vs DPO vs ArCHer vs the value critic).

``python bench/learners.py [--iterations N] [--out FILE]`` runs Agent-R SFT, DPO, ArCHer offline,
ArCHer online and Agent-R with the ``value`` critic (from the offline ArCHer run's iteration-0
checkpoint) on the ``agentr run --quick`` configuration: the same warm-started model, goals, seeds
and time budget, only the learner / critic differ. It prints held-out success and recovery per
iteration as JSON lines (ours = the learner, baseline = Agent-R SFT) and a Markdown table
(``--compare`` is accepted and means the same: it was the flag when this file also measured
throughput).

``method_variant`` / ``value_variant`` give ``bench/paper.py`` the run configurations of the DPO,
ArCHer (offline / online) and Agent-R-with-value-critic arms on the same budget (the trainer
settings from ``agentr.cli.methods.learner_train``, shared with ``agentr run --method``);
``value_critic_match`` gives ``bench/critic.py`` the value critic's agreement with the TextCraft
oracle on a run's pairs.

The learners' training throughput (DPO tokens/s, ArCHer actor tokens/s and critic updates/s next to
SFT's on the same data) is ``bench/train.py``'s (its ``learners`` section).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

from core.store.ports import EventStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def method_variant(
    config: dict[str, Any], method: str, mode: str = "offline", **rates: Any
) -> dict[str, Any]:
    """A whole run configuration for ``bench/paper.py``: ``config`` (the Agent-R SFT variant's) with
    its ``train`` replaced by ``method``'s trainer on the SAME budget (``agentr.cli.methods.learner_train``,
    the rule ``agentr run --method`` uses too: ``time_budget_s``, ``batch_size``, ``max_length``,
    ``learning_rate`` carried over) and the cheapest critic (``direct``: neither DPO nor ArCHer
    trains on revisions; the search, pairs and trees are the same). ``method``: ``dpo`` or
    ``archer`` (``mode`` offline | online). ``rates``: ``learner_train``'s keyword settings
    (``archer_iterations``, ``actor_lr_ratio``, ``dpo_lr_ratio``); none given = its defaults (SFT's
    learning rate for DPO, SFT's / 10 for ArCHer's actor, ArCHer until the time budget ends it:
    this file's own comparison); ``bench/paper.py`` passes ``agentr run``'s measured-stable ones."""
    import copy

    from agentr.cli.methods import learner_train, schedule_critic

    if method not in ("dpo", "archer"):
        raise ValueError(f"method_variant: method must be dpo or archer, got {method!r}")
    out = copy.deepcopy(config)
    out["train"] = learner_train(dict(config.get("train") or {}), method, mode, **rates)
    out["critic"] = schedule_critic((method,), dict(config.get("critic") or {}))
    return out


def value_variant(config: dict[str, Any], archer_checkpoint: str | Path) -> dict[str, Any]:
    """Agent-R (SFT) with the ``value`` critic of an archer checkpoint choosing t'."""
    import copy

    out = copy.deepcopy(config)
    out["critic"] = {"strategy": "value", "value_model": str(archer_checkpoint)}
    return out


async def value_critic_match(
    store: EventStore, run_id: str, model_ref: str, out_dir: Path, quick: bool
) -> dict[str, Any]:
    """The ``value`` critic's agreement with the TextCraft oracle on a run's iteration-0 pairs: an
    ArCHer critic is trained (critic updates only, offline) on the transitions of that iteration's
    trees, starting from ``model_ref``, then judges the same pairs; ``critic_metrics`` of the result
    (exact match, Direct-Revision's on the same pairs, fallback share, ...). In-sample: the critic
    saw the trees the pairs come from (that is what a run's value critic does too)."""
    from core.domain.events import FirstErrorMarked
    from core.domain.transitions import build_transitions
    from critic_service.critic import CriticConfig, critique
    from train_service.archer import ArcherConfig, train_archer
    from train_service.critic_metrics import critic_metrics, load_judged
    from train_service.hf_trainer import TrainJob
    from train_service.methods import tree_sources

    trees = await tree_sources(store, run_id, 0)
    transitions = build_transitions(run_id=run_id, iteration=0, trees=trees).transitions
    rounds = 6 if quick else 20
    cfg = ArcherConfig(
        iterations=rounds,
        warmup_iters=rounds,  # critic only: the value strategy needs no actor update
        batch_size=8,
        grad_accumulation=1,
        critic_lr=1e-4,
        kl_coef=0.0,
        max_state_tokens=384,
    )
    checkpoint = train_archer(TrainJob(model_ref, out_dir), transitions, cfg).checkpoint
    judged = []
    for pair, marked in await load_judged(store, run_id):
        if pair.iteration != 0:
            continue
        config = CriticConfig(strategy="value", value_model=str(checkpoint))
        result = await critique(config, pair.bad, pair.shared_steps)
        judged.append(
            (
                pair,
                FirstErrorMarked(
                    marked.pair_id,
                    "value",
                    result.transition_index,
                    result.verdicts,
                    fallback=result.fallback,
                    oracle_index=marked.oracle_index,
                ),
            )
        )
    metrics = critic_metrics(judged).get(0, {})
    return {**metrics, "transitions": len(transitions), "trees": len(trees), "critic_updates": rounds * 5}


COMPARED = ("agent_r_sft", "dpo", "archer_offline", "archer_online", "agent_r_value")


def _rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    critic = report.get("critic") or {}
    out = []
    for row in report.get("rows") or []:
        iteration = None if row["model"] == "start" else row["model"].split()[-1]
        judged = (critic.get(str(iteration)) or {}) if iteration is not None else {}
        out.append(
            {
                "model": row["model"],
                "success_rate": row.get("success_rate"),
                "avg_reward": row.get("avg_reward"),
                "recovery_success": row.get("recovery_success"),
                "dead_loop_rate": row.get("dead_loop_rate"),
                "invalid_action_rate": row.get("invalid_action_rate"),
                "seen_success_rate": row.get("seen_success_rate"),
                "critic_exact_match": judged.get("exact_match"),
                "critic_fallback_share": judged.get("fallback_share"),
            }
        )
    return out


def compare(home: Path, iterations: int, seed: int, out: Path | None) -> int:
    """Agent-R SFT vs DPO vs ArCHer (offline, online) vs Agent-R with the value critic: the same
    ``agentr run --quick`` configuration (model, goals, seeds, time budget), only the learner /
    critic differ. The value critic uses the archer_offline run's iteration-0 critic."""
    from agentr.cli.demo import RunOptions, plan_run
    from agentr.cli.embedded_run import embedded_settings, run_config
    from agentr.cli.warm_start import prepare_model

    settings, home = embedded_settings(home)
    plan = plan_run(RunOptions(quick=True, iterations=iterations, seed=seed))
    base = dict(plan.config, model=prepare_model(plan, home, seed))
    configs: dict[str, dict[str, Any]] = {
        "agent_r_sft": base,
        "dpo": method_variant(base, "dpo"),
        "archer_offline": method_variant(base, "archer", "offline"),
        "archer_online": method_variant(base, "archer", "online"),
    }
    results: dict[str, dict[str, Any]] = {}
    for name in COMPARED:
        if name == "agent_r_value":
            archer = results.get("archer_offline", {}).get("checkpoint")
            if not archer:
                continue
            configs[name] = value_variant(base, archer)
        code, run_id = run_config(settings, home, configs[name], show_report=False)
        report_path = home / "runs" / run_id / "report.json"
        report = json.loads(report_path.read_text()) if report_path.is_file() else {}
        first = home / "runs" / run_id / "checkpoints" / "iter-0"
        results[name] = {
            "run_id": run_id,
            "status": report.get("status", "failed" if code else "unknown"),
            "reason": report.get("reason", ""),
            "rows": _rows(report),
            "checkpoint": str(first) if (first / "critic").is_dir() else None,
        }
        print(f"# {name}: run {run_id} {results[name]['status']}", file=sys.stderr, flush=True)
    sft = {r["model"]: r for r in results.get("agent_r_sft", {}).get("rows", [])}
    for name, result in results.items():
        if name == "agent_r_sft":
            continue
        for row in result["rows"]:
            if row["model"] == "start" or row["model"] not in sft:
                continue
            for key in ("success_rate", "recovery_success"):
                ours, baseline = row.get(key), sft[row["model"]].get(key)
                ratio = round(ours / baseline, 3) if ours is not None and baseline else None
                metric = f"{key}_{name}_vs_agent_r_sft_{row['model'].replace(' ', '_')}"
                line = {"metric": metric, "ours": ours, "baseline": baseline, "unit": "rate", "ratio": ratio}
                print(json.dumps(line))
    keys = (
        "success_rate",
        "avg_reward",
        "recovery_success",
        "dead_loop_rate",
        "invalid_action_rate",
        "seen_success_rate",
        "critic_exact_match",
    )
    lines = [
        "| learner | model | held-out success | avg reward | recovery | dead loops | invalid actions "
        "| seen success | critic exact match |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, result in results.items():
        for row in result["rows"]:
            cells = [row[k] for k in keys]
            text = " | ".join(
                "-" if c is None else f"{c:.3f}" if isinstance(c, float) else str(c) for c in cells
            )
            lines.append(f"| {name} ({result['status']}) | {row['model']} | {text} |")
    table = "\n".join(lines)
    print(table)
    if out is not None:
        out.write_text(table + "\n")
        out.with_suffix(out.suffix + ".json").write_text(json.dumps(results, indent=1, sort_keys=True))
    return 0 if all(r["status"] == "completed" for r in results.values()) else 1


ONLINE_ALGORITHMS = ("archer", "reinforce", "filtered_bc")


def bootstrap_interval(
    values_by_seed: dict[int, list[float]], draws: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """Mean and 95% percentile-bootstrap interval of episode outcomes, resampling seeds and then
    the episodes within each drawn seed (the seeds are the independent units)."""
    import random

    rng = random.Random(seed)
    groups = [v for v in values_by_seed.values() if v]
    everything = [x for v in groups for x in v]
    if not everything:
        return float("nan"), float("nan"), float("nan")
    means = []
    for _ in range(draws):
        sample: list[float] = []
        for _ in groups:
            group = groups[rng.randrange(len(groups))]
            sample.extend(group[rng.randrange(len(group))] for _ in group)
        means.append(sum(sample) / len(sample))
    means.sort()
    return sum(everything) / len(everything), means[int(0.025 * draws)], means[int(0.975 * draws) - 1]


def _online_config(plan_train: dict[str, Any], rounds: int, episodes: int, max_steps: int, seed: int) -> Any:
    """The comparison's ArcherConfig: ArCHer's defaults except what a 2-core CPU needs smaller
    (docs/learners.md: rounds, rollout size, batch 4 x 4, critic head 256, token limits, actor lr
    from the run's rule) - the same for every algorithm, so budgets match in env and optimizer steps."""
    from train_service.archer import ArcherConfig

    return ArcherConfig(
        mode="online",
        iterations=rounds,
        warmup_iters=1,
        critic_epochs=5,
        actor_epochs=3,
        batch_size=4,
        grad_accumulation=4,
        rollout_episodes=episodes,
        episode_max_steps=max_steps,
        head_hidden=256,
        max_state_tokens=384,
        max_action_tokens=48,
        max_length=512,
        actor_lr=float(plan_train["learning_rate"]) / 10,
        critic_lr=1e-4,
        max_new_tokens=32,
        seed=seed,
    )


async def _calibration(checkpoint: str, env_uri: str, tasks: list[str], seed: int) -> dict[str, Any]:
    """The trained critic's V at the start state against the outcome of held-out episodes played by
    the trained actor (Pearson r and Brier score of clip(V, 0, 1))."""
    import torch

    from core.domain.eval_protocol import episode_seed
    from core.domain.transitions import history_messages
    from core.envs.registry import open_env
    from core.llm.hf import HFPolicy
    from train_service.evaluation import EvalConfig, play_episodes
    from train_service.value_model import encode_texts, load_critic, state_text

    policy = HFPolicy.from_folder(checkpoint, prefix_cache_mb=0)
    critic = load_critic(checkpoint)
    seeds = [episode_seed(seed, t, i, "calibration") for i, t in enumerate(tasks)]
    cfg = EvalConfig(max_steps=8, max_tokens=32, temperature=1.0, episodes_per_task=1, recovery_episodes=0)
    played = await play_episodes(policy, lambda: open_env(env_uri), tasks, cfg, seeds=seeds)
    texts = [state_text(policy.tokenizer, history_messages(e.instruction, e.task, ())) for e in played]
    with torch.no_grad():
        v1, v2 = critic.values(
            encode_texts(policy.tokenizer, texts, critic.shape.max_state_tokens, left=True)
        )
    values = torch.minimum(v1, v2).tolist()
    outcomes = [1.0 if e.reward >= 1.0 else 0.0 for e in played]
    brier = sum((min(max(v, 0.0), 1.0) - o) ** 2 for v, o in zip(values, outcomes, strict=True)) / len(values)
    mv, mo = sum(values) / len(values), sum(outcomes) / len(outcomes)
    cov = sum((v - mv) * (o - mo) for v, o in zip(values, outcomes, strict=True))
    var = (sum((v - mv) ** 2 for v in values) * sum((o - mo) ** 2 for o in outcomes)) ** 0.5
    return {
        "episodes": len(values),
        "success_rate": mo,
        "v_mean": mv,
        "pearson_r": cov / var if var > 0 else None,
        "brier": brier,
    }


def online_comparison(
    home: Path,
    *,
    quick: bool,
    seeds: int,
    rounds: int,
    episodes: int,
    max_steps: int,
    last: int,
    model: str = "",
) -> int:
    """ArCHer (online) vs trajectory-level REINFORCE vs online filtered BC: the same warm-started
    model, training tasks, rollout schedule and seeds; success of the rollouts against environment
    steps, and success over the last ``last`` rounds (a fixed env-step budget) with 95% intervals."""
    import asyncio

    from agentr.cli.demo import RunOptions, plan_run
    from agentr.cli.embedded_run import embedded_settings
    from agentr.cli.warm_start import prepare_model
    from core.envs.registry import open_env
    from core.store.factory import open_store
    from train_service.archer_online import OnlineSetup, StoreEpisodeLog, train_archer_online_async
    from train_service.checkpoint import read_meta
    from train_service.hf_trainer import TrainJob
    from train_service.runs import select_tasks

    settings, home = embedded_settings(home)
    plan = plan_run(RunOptions(quick=quick, iterations=1, seed=0))
    model = model or prepare_model(plan, home, 0)  # --model: an already warm-started folder
    env_uri = str(plan.config["env"])
    env = open_env(env_uri)
    tasks = select_tasks(
        env, tuple(plan.config["tasks"]), str(plan.config["split"]), plan.config["max_tasks"]
    )
    held_out = select_tasks(env, tuple(plan.config["eval_tasks"]), "test", 4)
    print(
        f"# online comparison: {len(tasks)} training tasks, {seeds} seeds, {rounds} rounds x {episodes} "
        f"episodes, <= {max_steps} steps each, model {model}",
        file=sys.stderr,
        flush=True,
    )
    results: dict[str, dict[int, dict[str, Any]]] = {a: {} for a in ONLINE_ALGORITHMS}

    async def one(algorithm: str, seed: int) -> dict[str, Any]:
        store = await open_store(settings.effective_database_url, create_tables=True)
        try:
            cfg = _online_config(plan.config["train"], rounds, episodes, max_steps, seed)
            setup = OnlineSetup(lambda: open_env(env_uri), tuple(tasks), StoreEpisodeLog(store))
            # one experiment per configuration: a rerun with other settings never reuses a checkpoint
            tag = hashlib.sha256(json.dumps(cfg.to_dict(), sort_keys=True).encode()).hexdigest()[:10]
            run_id = f"bench-online-{algorithm}-{seed}-{tag}"
            out = home / "online" / run_id
            report = await train_archer_online_async(
                TrainJob(model, out, run_id=run_id, dataset_id=run_id), cfg, setup, algorithm=algorithm
            )
            # a rerun of the same configuration reuses the finished experiment (its meta.json)
            metrics = read_meta(report.checkpoint).metrics if report.reused else report.metrics
            played = await StoreEpisodeLog(store).read(metrics["buffer_id"])
            return {"metrics": metrics, "checkpoint": str(report.checkpoint), "episodes": played}
        finally:
            await store.engine.dispose()

    for algorithm in ONLINE_ALGORITHMS:
        for seed in range(seeds):
            results[algorithm][seed] = asyncio.run(one(algorithm, seed))
            m = results[algorithm][seed]["metrics"]
            print(
                f"# {algorithm} seed {seed}: success by round {m['success_by_round']}, "
                f"{m['actor_updates']} actor updates",
                file=sys.stderr,
                flush=True,
            )
    summary: dict[str, Any] = {}
    for algorithm, by_seed in results.items():
        final = {
            seed: [
                1.0 if (e.trajectory.reward or 0.0) >= 1.0 else 0.0
                for e in r["episodes"]
                if e.round >= rounds - last
            ]
            for seed, r in by_seed.items()
        }
        mean, lo, hi = bootstrap_interval(final)
        steps = [r["metrics"]["env_steps"] for r in by_seed.values()]
        updates = [r["metrics"]["actor_updates"] / max(1, r["metrics"]["rounds"]) for r in by_seed.values()]
        curve = [
            sum(r["metrics"]["success_by_round"][i] or 0.0 for r in by_seed.values()) / len(by_seed)
            for i in range(rounds)
        ]
        summary[algorithm] = {
            "success_last_rounds": mean,
            "ci95": [lo, hi],
            "env_steps_mean": sum(steps) / len(steps),
            "actor_updates_per_round": sum(updates) / len(updates),
            "success_by_round": curve,
            "episodes_in_estimate": sum(len(v) for v in final.values()),
        }
    for baseline in ("reinforce", "filtered_bc"):
        ours, base = summary["archer"], summary[baseline]
        ratio = (
            ours["success_last_rounds"] / base["success_last_rounds"] if base["success_last_rounds"] else None
        )
        print(
            json.dumps(
                {
                    "metric": f"archer_success_at_fixed_env_steps_vs_{baseline}",
                    "ours": round(ours["success_last_rounds"], 4),
                    "baseline": round(base["success_last_rounds"], 4),
                    "unit": "success rate",
                    "ratio": None if ratio is None else round(ratio, 3),
                    "ours_ci95": [round(x, 4) for x in ours["ci95"]],
                    "baseline_ci95": [round(x, 4) for x in base["ci95"]],
                    "seeds": seeds,
                    "tasks": len(tasks),
                    "episodes_per_arm": ours["episodes_in_estimate"],
                    "env_steps": [round(ours["env_steps_mean"]), round(base["env_steps_mean"])],
                }
            )
        )
    print(
        json.dumps(
            {
                "metric": "archer_actor_updates_per_round",
                "ours": summary["archer"]["actor_updates_per_round"],
                "baseline": None,
                "unit": "updates/round",
                "ratio": None,
            }
        )
    )
    calibration = [
        asyncio.run(_calibration(r["checkpoint"], env_uri, held_out, seed))
        for seed, r in results["archer"].items()
    ]
    print(json.dumps({"metric": "archer_critic_calibration_heldout", "per_seed": calibration}))
    print(
        json.dumps(
            {
                "metric": "online_success_by_round",
                "curves": {a: s["success_by_round"] for a, s in summary.items()},
            }
        )
    )
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--compare", action="store_true", help="the comparison (the default; kept for old commands)"
    )
    parser.add_argument("--quick", action="store_true", help="the same quick runs, 1 iteration")
    parser.add_argument("--iterations", type=int, default=1, help="iterations per run (1)")
    parser.add_argument("--home", default="", help="data folder (default: a temporary one)")
    parser.add_argument("--out", default="", help="also write the table to this file")
    parser.add_argument(
        "--online",
        action="store_true",
        help="the sample-efficiency comparison instead: online ArCHer vs REINFORCE vs online filtered BC",
    )
    parser.add_argument("--demo", action="store_true", help="--online on the demo model and goals (slow)")
    parser.add_argument("--seeds", type=int, default=3, help="--online: seeds per algorithm (3)")
    parser.add_argument("--rounds", type=int, default=6, help="--online: rounds (6)")
    parser.add_argument("--episodes", type=int, default=8, help="--online: episodes per round (8)")
    parser.add_argument("--max-steps", type=int, default=6, help="--online: actions per episode (6)")
    parser.add_argument("--last", type=int, default=2, help="--online: rounds in the final estimate (2)")
    parser.add_argument(
        "--model",
        default="",
        help="--online: a warm-started model folder to start from (default: build the plan's)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    iterations = 1 if args.quick else args.iterations
    home = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="agentr-learners-"))
    if args.online:
        raise SystemExit(
            online_comparison(
                home,
                quick=not args.demo,
                model=args.model,
                seeds=args.seeds,
                rounds=args.rounds,
                episodes=args.episodes,
                max_steps=args.max_steps,
                last=args.last,
            )
        )
    raise SystemExit(compare(home, iterations, 0, Path(args.out) if args.out else None))


if __name__ == "__main__":
    main()
