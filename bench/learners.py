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
import json
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def method_variant(config: dict[str, Any], method: str, mode: str = "offline") -> dict[str, Any]:
    """A whole run configuration for ``bench/paper.py``: ``config`` (the Agent-R SFT variant's) with
    its ``train`` replaced by ``method``'s trainer on the SAME budget (``agentr.cli.methods.learner_train``,
    the rule ``agentr run --method`` uses too: ``time_budget_s``, ``batch_size``, ``max_length``,
    ``learning_rate`` carried over; ArCHer runs until the time budget ends it) and the cheapest critic
    (``direct``: neither DPO nor ArCHer trains on revisions; the search, pairs and trees are the
    same). ``method``: ``dpo`` or ``archer`` (``mode`` offline | online)."""
    import copy

    from agentr.cli.methods import learner_train, schedule_critic

    if method not in ("dpo", "archer"):
        raise ValueError(f"method_variant: method must be dpo or archer, got {method!r}")
    out = copy.deepcopy(config)
    out["train"] = learner_train(dict(config.get("train") or {}), method, mode)
    out["critic"] = schedule_critic((method,), dict(config.get("critic") or {}))
    return out


def value_variant(config: dict[str, Any], archer_checkpoint: str | Path) -> dict[str, Any]:
    """Agent-R (SFT) with the ``value`` critic of an archer checkpoint choosing t'."""
    import copy

    out = copy.deepcopy(config)
    out["critic"] = {"strategy": "value", "value_model": str(archer_checkpoint)}
    return out


async def value_critic_match(
    store: Any, run_id: str, model_ref: str, out_dir: Path, quick: bool
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
    checkpoint = train_archer(model_ref, transitions, out_dir, cfg).checkpoint
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
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    iterations = 1 if args.quick else args.iterations
    home = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="agentr-learners-"))
    raise SystemExit(compare(home, iterations, 0, Path(args.out) if args.out else None))


if __name__ == "__main__":
    main()
