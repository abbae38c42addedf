"""Benchmark: the Agent-R paper's comparison in miniature, measured side by side in one process.

On the SAME starting model, tasks, seeds and budget (one ``agentr run`` configuration; only the
named settings differ), for ``--iterations`` (default 2) search -> train iterations each:

- ``agent_r_model``   Agent-R, critic strategy ``model`` (the actor judges each step: the paper);
- ``agent_r_reflect`` Agent-R, critic strategy ``reflect`` (the likelihood the actor gives to a
  reflection right after step t);
- ``direct``          Direct-Revision (t' = the last action of the bad path: the paper's baseline);
- ``good_only``       SFT on good trajectories only (``include_revisions = false``: the "good" rows of
  the paper's Figure 3; its search and pairs are the same, its revision samples are not trained on).

Opt-in (``--variants``): ``dpo``, ``archer_offline``, ``archer_online`` (the other learners on the
same log, ``train.method``; docs/learners.md) and ``agent_r_value`` (Agent-R with the ``value``
critic of the ``archer_offline`` run's iteration-0 checkpoint, so list it after ``archer_offline``).

Every variant starts from the same warm-started model (cached once under ``--home``), searches the
same goals with the same tree seeds, and is evaluated by the run's protocol
(``train_service.evaluation``): stratified held-out goals, seeded episodes, recovery from the
STARTING model's failed held-out episodes truncated at seeded random steps (Table 3; the same
prefixes for every variant, since the starting model and its seeds are shared), dead loops, and the
mean revision length of each iteration's revision samples (Figure 5).

Output: one JSON line per comparison, ``{"metric", "ours", "baseline", "unit", "ratio"}`` with
"ours" = ``agent_r_model`` and "baseline" = another variant, per iteration (``ratio`` > 1 means
Agent-R is better: ours / baseline for success and recovery, baseline / ours for dead loops and
revision length; null when undefined), then a Markdown table of every variant and iteration.
``--out FILE`` also writes the table and the raw numbers (FILE and FILE.json).

Usage: python bench/paper.py [--quick] [--model FOLDER] [--iterations N] [--home DIR]
       [--variants agent_r_model,direct,...] [--out docs/paper-table.md]
``--quick`` is the ``agentr run --quick`` configuration (64-hidden tiny model, 2 goals; a few
minutes on 2 cores); without it the default ``agentr run`` demo configuration (tens of minutes).
``--model FOLDER`` runs the same comparison from a local model folder (e.g. SmolLM2-135M-Instruct
imported by ``agentr model import``) instead of the tiny model.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "agent_r_model": ("Agent-R (model critic)", {"critic": {"strategy": "model"}}),
    "agent_r_reflect": ("Agent-R (reflect critic)", {"critic": {"strategy": "reflect"}}),
    "direct": ("Direct-Revision", {"critic": {"strategy": "direct"}}),
    # the critic does not matter when revisions are not trained on: the cheapest one
    "good_only": ("good trajectories only", {"critic": {"strategy": "direct"}, "include_revisions": False}),
}
# Other learners on the same log (docs/learners.md), opt-in with --variants: their whole run config
# comes from bench/learners.py (train.method's trainer replaces the SFT settings, same budget);
# agent_r_value takes the value critic of the archer_offline run's iteration 0 (list it first).
LEARNERS: dict[str, tuple[str, str]] = {
    "dpo": ("dpo", "offline"),
    "archer_offline": ("archer", "offline"),
    "archer_online": ("archer", "online"),
}
DEFAULT_VARIANTS = tuple(VARIANTS)
VARIANTS.update(
    {
        "dpo": ("DPO at the divergence node", {"include_revisions": False}),
        "archer_offline": ("ArCHer (offline)", {"include_revisions": False}),
        "archer_online": ("ArCHer (online)", {"include_revisions": False}),
        "agent_r_value": ("Agent-R (value critic of archer_offline)", {}),
    }
)
OURS = "agent_r_model"
# (key in a variant's per-iteration numbers, JSON metric name, unit, higher is better)
METRICS: tuple[tuple[str, str, str, bool], ...] = (
    ("success_rate", "heldout_success", "rate", True),
    ("recovery_success", "recovery_success", "rate", True),
    ("dead_loop_rate", "heldout_dead_loops", "rate", False),
    ("revision_length", "revision_length", "actions", False),
)


def _merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def _numbers(report: dict[str, Any], variant: str) -> list[dict[str, Any]]:
    """One entry per evaluated model of a run: held-out figures, recovery, dead loops, revision
    length (trained-on revisions only) and the critic's agreement with the oracle."""
    critic = report.get("critic") or {}
    datasets = report.get("datasets") or {}
    out = []
    for row in report.get("rows") or []:
        iteration = None if row["model"] == "start" else int(row["model"].split()[-1])
        entry = {
            "variant": variant,
            "model": row["model"],
            "success_rate": row.get("success_rate"),
            "avg_reward": row.get("avg_reward"),
            "invalid_action_rate": row.get("invalid_action_rate"),
            "dead_loop_rate": row.get("dead_loop_rate"),
            "recovery_success": row.get("recovery_success"),
            "recovery_episodes": row.get("recovery_episodes"),
            "recovery_set_id": row.get("recovery_set_id"),
            "episodes": row.get("episodes"),
            "seen_success_rate": row.get("seen_success_rate"),
            "revision_length": None,
            "revision_samples": None,
            "critic_exact_match": None,
            "critic_fallback_share": None,
        }
        if iteration is not None:
            counts = datasets.get(str(iteration)) or {}
            trained_revisions = VARIANTS[variant][1].get("include_revisions", True)
            entry["revision_samples"] = counts.get("revision", 0) if trained_revisions else 0
            if trained_revisions:
                entry["revision_length"] = counts.get("revision_length_mean")
            judged = critic.get(str(iteration)) or {}
            entry["critic_exact_match"] = judged.get("exact_match")
            entry["critic_fallback_share"] = judged.get("fallback_share")
        out.append(entry)
    return out


def _ratio(ours: float | None, baseline: float | None, higher_is_better: bool) -> float | None:
    if ours is None or baseline is None:
        return None
    good, bad = (ours, baseline) if higher_is_better else (baseline, ours)
    if bad == 0:
        return 1.0 if good == 0 else None
    return round(good / bad, 4)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def table(results: dict[str, dict[str, Any]]) -> str:
    columns = (
        ("success_rate", "held-out success"),
        ("avg_reward", "reward"),
        ("recovery_success", "recovery"),
        ("dead_loop_rate", "dead loops"),
        ("invalid_action_rate", "invalid"),
        ("seen_success_rate", "seen success"),
        ("revision_samples", "revisions trained"),
        ("revision_length", "revision len"),
        ("critic_exact_match", "t' = oracle"),
        ("critic_fallback_share", "fallback"),
    )
    lines = [
        "| variant | model | " + " | ".join(title for _, title in columns) + " |",
        "|---|---|" + "---:|" * len(columns),
    ]
    start_done = False
    for variant, result in results.items():
        for entry in result["numbers"]:
            if entry["model"] == "start":
                if start_done:  # the same starting model, tasks and seeds for every variant
                    continue
                start_done = True
                label = "(all: starting model)"
            else:
                label = VARIANTS[variant][0]
            cells = " | ".join(_fmt(entry.get(key)) for key, _ in columns)
            lines.append(f"| {label} | {entry['model']} | {cells} |")
        if result["status"] != "completed":
            lines.append(f"| {VARIANTS[variant][0]} | (run {result['status']}: {result['reason']}) |")
    return "\n".join(lines) + "\n"


def comparisons(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    ours = {e["model"]: e for e in results.get(OURS, {}).get("numbers", [])}
    lines = []
    for variant, result in results.items():
        if variant == OURS:
            continue
        theirs = {e["model"]: e for e in result["numbers"]}
        for model in sorted(set(ours) | set(theirs)):
            if model == "start":
                continue
            for key, name, unit, higher in METRICS:
                a = (ours.get(model) or {}).get(key)
                b = (theirs.get(model) or {}).get(key)
                if key == "revision_length" and variant == "good_only":
                    continue  # good-only trains no revision: nothing to compare
                lines.append(
                    {
                        "metric": f"{name}_{model.replace(' ', '')}_vs_{variant}",
                        "ours": a,
                        "baseline": b,
                        "unit": unit,
                        "ratio": _ratio(a, b, higher),
                    }
                )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the agentr run --quick configuration")
    parser.add_argument("--model", default="", help="a local model folder instead of the tiny model")
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--home", default="", help="data folder (default: a fresh temporary one)")
    parser.add_argument(
        "--variants", default=",".join(DEFAULT_VARIANTS), help="comma-separated, of: " + ", ".join(VARIANTS)
    )
    parser.add_argument("--warm-start-steps", type=int, default=None)
    parser.add_argument(
        "--max-tasks", type=int, default=None, help="search only the first N goals (same warm start)"
    )
    parser.add_argument("--max-eval-tasks", type=int, default=None, help="held-out goals")
    parser.add_argument("--out", default="", help="also write the table to this file (and FILE.json)")
    args = parser.parse_args()
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        parser.error(f"unknown variant(s) {unknown}; known: {', '.join(VARIANTS)}")
    if args.iterations < 2:
        parser.error("the comparison needs --iterations >= 2")

    from core.cli.demo import RunOptions, plan_run
    from core.cli.embedded_run import embedded_settings, run_config
    from core.cli.warm_start import prepare_model

    home = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="agentr-paper-"))
    settings, home = embedded_settings(home)
    plan = plan_run(
        RunOptions(
            model=args.model,
            quick=args.quick,
            iterations=args.iterations,
            seed=args.seed,
            warm_start_steps=args.warm_start_steps,
            max_eval_tasks=args.max_eval_tasks,
        )
    )
    if args.max_tasks:  # search fewer goals; the warm start (and its cache key) stays the demo's
        plan = replace(plan, config={**plan.config, "max_tasks": args.max_tasks})
    started = time.monotonic()
    model = prepare_model(plan, home, args.seed)
    warm_s = time.monotonic() - started
    results: dict[str, dict[str, Any]] = {}
    for variant in variants:
        config = _merge(dict(plan.config, model=model), VARIANTS[variant][1])
        if variant in LEARNERS:
            from learners import method_variant

            config = method_variant(dict(plan.config, model=model), *LEARNERS[variant])
        elif variant == "agent_r_value":
            from learners import value_variant

            archer_run = results.get("archer_offline", {}).get("run_id", "")
            archer = home / "runs" / archer_run / "checkpoints" / "iter-0"
            if not archer_run or not (archer / "critic").is_dir():
                print("# agent_r_value skipped: list archer_offline before it", file=sys.stderr)
                continue
            config = value_variant(config, archer)
        t0 = time.monotonic()
        code, run_id = run_config(settings, home, config, show_report=False)
        seconds = time.monotonic() - t0
        report_path = home / "runs" / run_id / "report.json"
        report = json.loads(report_path.read_text()) if report_path.is_file() else {}
        results[variant] = {
            "run_id": run_id,
            "status": report.get("status", "failed" if code else "unknown"),
            "reason": report.get("reason", ""),
            "seconds": round(seconds, 1),
            "numbers": _numbers(report, variant),
        }
        print(f"# {variant}: run {run_id} {results[variant]['status']} in {seconds:.0f}s", file=sys.stderr)
    for line in comparisons(results):
        print(json.dumps(line))
    for variant, result in results.items():
        print(
            json.dumps(
                {
                    "metric": f"wall_seconds_{variant}",
                    "ours": result["seconds"],
                    "baseline": None,
                    "unit": "s",
                    "ratio": None,
                }
            )
        )
    rendered = table(results)
    set_ids = {e["recovery_set_id"] for r in results.values() for e in r["numbers"] if e["recovery_set_id"]}
    header = (
        f"model: {model} (prepared in {warm_s:.0f}s); iterations: {args.iterations}; "
        f"quick: {args.quick}; home: {home}; recovery sets: {len(set_ids)} distinct (1 = every model "
        "continued the same prefixes)\n"
    )
    print()
    print(header)
    print(rendered)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(header + "\n" + rendered)
        out.with_suffix(out.suffix + ".json").write_text(json.dumps(results, indent=1, sort_keys=True))
    return 0 if all(r["status"] == "completed" for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
