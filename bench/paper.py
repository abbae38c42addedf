"""Benchmark: the Agent-R paper's comparison in miniature, measured side by side in one command
(each variant's run in a process of its own, ``in_child``).

On the SAME starting model, tasks, seeds and training budget (one ``agentr run`` configuration;
only the named settings differ), for ``--iterations`` (default 2) search -> train iterations each:

- ``agent_r_model``   Agent-R, critic strategy ``model`` (the actor judges each step: the paper);
- ``agent_r_reflect`` Agent-R, critic strategy ``reflect`` (the likelihood the actor gives to a
  reflection right after step t);
- ``agent_r_first``   Agent-R, critic strategy ``first`` (t' = the first action after the
  divergence: the trivial critic that is the oracle's answer on most demo pairs, docs/critic.md);
- ``direct``          Direct-Revision (t' = the last action of the bad path: the paper's baseline);
- ``good_only``       SFT on good trajectories only (``include_revisions = false``: the "good" rows of
  the paper's Figure 3; its search and pairs are the same, its revision samples are not trained on);
- ``dpo``             DPO at the divergence node (``train.method = dpo``: every pair of the iteration);
- ``archer_offline``  ArCHer, offline (``train.method = archer``, IQL-style V, AWR actor);
- ``archer_online``   ArCHer, online (V on Q at actions the actor samples, REINFORCE actor);
- ``agent_r_value``   Agent-R SFT with the ``value`` critic: t' chosen by the ArCHer critic of the
  ``archer_offline`` run's iteration-0 checkpoint (both iterations; it runs after that variant).

The learners' ``train`` settings come from ``bench/learners.method_variant`` (docs/learners.md)
with ``agentr run``'s measured-stable rates (``learner_rates``: DPO at SFT's learning rate / 10,
ArCHer's actor at / 100; SFT's own rate collapsed the demo model, docs/learners.md).
The budget is matched in OPTIMIZER STEPS: every SFT and DPO variant trains exactly
``train.max_steps`` = ``--train-steps`` steps per iteration (whatever its data size: good-only's
few samples are passed over more often, not trained for less), under the same wall-clock SAFETY
cap ``train.time_budget_s`` = ``--train-budget-s`` (a capped iteration shows "(cap)" in the table);
ArCHer runs a fixed number of rounds per iteration (``DEMO_ARCHER_ROUNDS``, as ``agentr run
--method archer``: a count of critic and actor updates, not the wall clock; they are not SFT
steps, so its updates are shown beside them, not equal to them). The table
shows each iteration's training seconds and optimizer updates, so the compute actually spent is
visible, not assumed equal.

Seeds: every variant runs once per ``--seeds`` entry (default 0,1,2: the run's seed, i.e. its
search, evaluation-episode, recovery and training seeds; the warm-started model is shared). The
statistics (``paper_table.statistics``, core/domain/stats.py) take the last iteration's model of
each run: per variant the mean and 95% bootstrap interval over tasks x seeds of held-out success,
recovery, dead loops and invalid-action rate (revision length: over seeds), and Agent-R (model
critic) against good-only and Direct-Revision (and every other variant that ran), tested at two
levels: paired by (task, seed) (the mean difference, its 95% interval and a sign-flip permutation
p-value) and paired by SEED (each seed's mean; the training randomness lives in the seed: the
per-seed differences and the exact sign-flip p over all 2^n sign assignments, never below 2 / 2^n,
so 3 seeds can never give p < 0.25). Every p is Holm-adjusted over the tests printed together, and
a difference is significant only where its Holm-adjusted p is <= 0.05 (never by an interval); a
task-level p the seed-level test does not support is no claim.
The table of every iteration is printed for the first seed.

Every variant starts from the same warm-started model (cached once under ``--home``), searches the
same goals with the same tree seeds, and is evaluated by the run's protocol
(``train_service.evaluation``): stratified held-out goals, seeded episodes, recovery from the
STARTING model's failed held-out episodes truncated at seeded random steps (Table 3; the same
prefixes for every variant, since the starting model and its seeds are shared: the header's
"recovery sets: 1 distinct" checks it), dead loops, and the mean revision length of each iteration's
revision samples (Figure 5). The starting model's seen-task evaluation runs in the first variant
only (``evaluation.baseline``; the held-out one runs in each, as it builds the recovery set).

Each finished variant is stored at once under ``<home>/paper-results/`` (keyed by its whole run
configuration), so a rerun with the same ``--home`` and settings reuses it instead of running it
again: a long comparison can be stopped, resumed, or run variant by variant (``--variants``) and
then printed whole (``--fresh`` ignores stored results; ``--print-stored`` runs nothing and prints,
from the newest stored result of each listed variant and ``--seeds`` seed, the table and the
statistics, e.g. of variants run in separate processes whose ``paper-results`` files were copied
into one home).

Output: one JSON line per comparison, ``{"metric", "ours", "baseline", "unit", "ratio"}`` with
"ours" = ``agent_r_model`` and "baseline" = another variant, per iteration (``ratio`` > 1 means
Agent-R is better: ours / baseline for success and recovery, baseline / ours for dead loops and
revision length; null when undefined), wall / CPU seconds and load per variant, then a Markdown
table of every variant and iteration. ``--out FILE`` also writes the table and the raw numbers
(FILE and FILE.json).

Usage: python bench/paper.py [--quick] [--model FOLDER] [--iterations N] [--home DIR]
       [--variants agent_r_model,direct,...] [--seeds 0,1,2] [--train-steps N]
       [--train-budget-s S] [--max-tasks N]
       [--max-eval-tasks N] [--recovery-episodes N] [--out docs/paper-table.md] [--fresh]
``--quick`` is the ``agentr run --quick`` configuration (64-hidden tiny model, 2 goals); without it
the default ``agentr run`` demo configuration (tens of minutes per variant on 2 shared cores).
``--model FOLDER`` runs the same comparison from a local model folder (e.g. SmolLM2-135M-Instruct
imported by ``agentr model import``) instead of the tiny model.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import resource
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paper_table import LEARNERS, VARIANTS, comparisons, numbers, statistics, table  # noqa: E402

DEFAULT_VARIANTS = tuple(VARIANTS)
# per-iteration training SAFETY cap of every variant (s): every learner stops at its own fixed amount
# (SFT / DPO: --train-steps; ArCHer: its rounds, learner_rates) unless a slow machine hits the cap
QUICK_TRAIN_BUDGET_S = 120.0
DEMO_TRAIN_BUDGET_S = 1200.0
# optimizer steps per iteration of every SFT / DPO variant (the matched budget)
QUICK_TRAIN_STEPS = 6
DEMO_TRAIN_STEPS = 40
HOME = "<home>"  # stands for --home in stored results and their keys


def learner_rates(quick: bool) -> dict[str, Any]:
    """The DPO and ArCHer arms' settings: ``agentr run --method``'s, measured stable on the demo model
    (docs/learners.md: DPO at SFT's learning rate / ``RUN_DPO_LR_RATIO``, ArCHer's actor at SFT's /
    ``RUN_ACTOR_LR_RATIO``; at SFT's own rate / 10 both collapsed it) and ArCHer's FIXED rounds per
    iteration (``QUICK_ARCHER_ROUNDS`` / ``DEMO_ARCHER_ROUNDS``), so its budget is a count of
    updates, as SFT's and DPO's are optimizer steps, never the wall clock."""
    from agentr.cli.demo import DEMO_ARCHER_ROUNDS, QUICK_ARCHER_ROUNDS
    from agentr.cli.methods import RUN_ACTOR_LR_RATIO, RUN_DPO_LR_RATIO

    return {
        "archer_iterations": QUICK_ARCHER_ROUNDS if quick else DEMO_ARCHER_ROUNDS,
        "actor_lr_ratio": RUN_ACTOR_LR_RATIO,
        "dpo_lr_ratio": RUN_DPO_LR_RATIO,
    }


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` (one level of dicts merged, the rest replaced)."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def variant_config(
    base: dict[str, Any],
    variant: str,
    *,
    train_budget_s: float,
    first: bool,
    archer_checkpoint: str | Path | None = None,
    archer_warmup: int | None = None,
    train_steps: int | None = None,
    quick: bool = False,
) -> dict[str, Any]:
    """The whole run configuration of ``variant`` from the shared ``base`` (model filled in): the
    same env, goals, seed, search and evaluation for every variant; ``train.time_budget_s`` set to
    ``train_budget_s`` for every learner; the starting model's seen-task evaluation only in the
    ``first`` variant. ``agent_r_value`` needs ``archer_checkpoint`` (a folder with ``critic/``).
    ``archer_warmup``: the ArCHer variants' critic-only warm-up rounds (None: method_variant's).
    ``train_steps``: optimizer steps per iteration of every SFT and DPO variant (``train.max_steps``;
    None: their epochs). The DPO and ArCHer arms take ``learner_rates(quick)``."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
    if train_budget_s <= 0:
        raise ValueError(f"train_budget_s must be > 0, got {train_budget_s}")
    shared = copy.deepcopy(base)
    shared["train"] = {**(shared.get("train") or {}), "time_budget_s": float(train_budget_s)}
    shared["evaluation"] = {**(shared.get("evaluation") or {}), "baseline": bool(first)}
    config = merge(shared, VARIANTS[variant][1])
    if variant in LEARNERS:
        from learners import method_variant

        config = merge(
            method_variant(shared, *LEARNERS[variant], **learner_rates(quick)), VARIANTS[variant][1]
        )
        if archer_warmup is not None and config["train"].get("method") == "archer":
            if archer_warmup < 0:
                raise ValueError(f"archer_warmup must be >= 0, got {archer_warmup}")
            config["train"]["warmup_iters"] = archer_warmup
    elif variant == "agent_r_value":
        if archer_checkpoint is None:
            raise ValueError("agent_r_value needs the archer_offline run's iteration-0 checkpoint")
        from learners import value_variant

        config = value_variant(config, archer_checkpoint)
    if train_steps is not None:
        if train_steps < 1:
            raise ValueError(f"train_steps must be >= 1, got {train_steps}")
        if config["train"].get("method", "sft") in ("sft", "dpo"):
            config["train"] = {**config["train"], "max_steps": int(train_steps)}
    return config


def config_key(config: dict[str, Any], home: Path) -> str:
    """A stored result's key: the run configuration, with paths under ``home`` made relative (so
    the same comparison under another home, or its results copied there, still matches)."""
    text = json.dumps(config, sort_keys=True, default=str).replace(str(home), HOME)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def stored_result(results_dir: Path, variant: str, key: str) -> dict[str, Any] | None:
    path = results_dir / f"{variant}-{key}.json"
    if not path.is_file():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def store_result(results_dir: Path, variant: str, key: str, result: dict[str, Any]) -> Path:
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{variant}-{key}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1, sort_keys=True))
    tmp.replace(path)
    return path


def _cpu_seconds() -> float:
    """CPU seconds of this process and of its children that ended (the runs' processes, their
    evaluation workers)."""
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _write_result(target: Any, args: tuple[Any, ...], out: str, parent: int) -> None:
    from core.runtime.parent_watch import exit_with_parent

    exit_with_parent(parent)  # a killed bench leaves no run process behind (an orphan held 9.4 GB)
    Path(out).write_text(json.dumps(target(*args)))


def in_child(target: Any, *args: Any) -> tuple[Any, int]:
    """``target(*args)`` in a spawned process of its own: (its JSON-able return value, or None when
    the process died without one; the process's exit code). Why a process per run: models and
    allocator arenas of one run stay in the process, and a process that ran SmolLM2-135M runs one
    after another grew to 24.7 GB and was killed by the kernel's OOM killer in its fourth run."""
    import multiprocessing

    with tempfile.TemporaryDirectory(prefix="paper-run-") as tmp:
        out = Path(tmp) / "result.json"
        process = multiprocessing.get_context("spawn").Process(
            target=_write_result, args=(target, args, str(out), os.getpid())
        )
        process.start()
        process.join()
        value = json.loads(out.read_text()) if process.exitcode == 0 and out.is_file() else None
        return value, int(process.exitcode if process.exitcode is not None else -1)


def _run_config(home: str, config: dict[str, Any]) -> list[Any]:
    """One ``agentr run`` of ``config`` under ``home`` (in a run's own process): [exit code, run id]."""
    from agentr.cli.embedded_run import embedded_settings, run_config

    settings, where = embedded_settings(Path(home))
    return list(run_config(settings, where, config, show_report=False))


def run_variant(home: Path, variant: str, config: dict[str, Any]) -> dict[str, Any] | None:
    """Run one variant's ``agentr run`` in a process of its own (``in_child``); its result with
    wall, CPU (its process and its workers) and load, or None when that process died (nothing is
    stored: a rerun runs it again)."""
    load_before = os.getloadavg()[0]
    t0, c0 = time.monotonic(), _cpu_seconds()
    value, exitcode = in_child(_run_config, str(home), config)
    seconds, cpu = time.monotonic() - t0, _cpu_seconds() - c0
    if value is None:
        print(
            f"# {variant}: its run's process died (exit code {exitcode}; -9 is SIGKILL, e.g. the OOM "
            f"killer) after {seconds:.0f}s; not stored",
            file=sys.stderr,
            flush=True,
        )
        return None
    code, run_id = int(value[0]), str(value[1])
    report_path = home / "runs" / run_id / "report.json"
    report = json.loads(report_path.read_text()) if report_path.is_file() else {}
    first = home / "runs" / run_id / "checkpoints" / "iter-0"
    return {
        "run_id": run_id,
        "status": report.get("status", "failed" if code else "unknown"),
        "reason": report.get("reason") or "",
        "seconds": round(seconds, 1),
        "cpu_seconds": round(cpu, 1),
        "load": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "finished_at": time.strftime("%H:%M:%S UTC", time.gmtime()),
        # relative to home ("<home>/runs/..."), so results copied to another home keep their keys
        "iteration0_checkpoint": str(first).replace(str(home), HOME) if (first / "critic").is_dir() else None,
        "report": report,  # the run's report.json: the table's numbers are read from it when printed
    }


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the agentr run --quick configuration")
    parser.add_argument("--model", default="", help="a local model folder instead of the tiny model")
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0, help="the warm start's seed")
    parser.add_argument("--seeds", default="0,1,2", help="run seeds of every variant (comma-separated)")
    parser.add_argument(
        "--train-steps", type=int, default=None,
        help=f"optimizer steps per iteration of every SFT / DPO variant (default {QUICK_TRAIN_STEPS} quick, "
        f"{DEMO_TRAIN_STEPS} otherwise)",
    )  # fmt: skip
    parser.add_argument("--home", default="", help="data folder (default: a fresh temporary one)")
    parser.add_argument(
        "--variants", default=",".join(DEFAULT_VARIANTS), help="comma-separated, of: " + ", ".join(VARIANTS)
    )
    parser.add_argument("--warm-start-steps", type=int, default=None)
    parser.add_argument(
        "--judge-phase-steps", type=int, default=None,
        help="the warm start's judge phase, as agentr run --judge-phase-steps (with --model: teaches it)",
    )  # fmt: skip
    parser.add_argument(
        "--bf16", choices=("auto", "on", "off"), default="auto",
        help="training precision, as agentr run --bf16 (auto: mixed bfloat16 where the CPU has it)",
    )  # fmt: skip
    parser.add_argument(
        "--max-tasks", type=int, default=None, help="search only the first N goals (same warm start)"
    )
    parser.add_argument("--max-eval-tasks", type=int, default=None, help="held-out goals")
    parser.add_argument(
        "--recovery-episodes", type=int, default=None, help="failed prefixes of the starting model"
    )
    parser.add_argument(
        "--train-budget-s",
        type=float,
        default=None,
        help=f"training cap per iteration, every variant (default {QUICK_TRAIN_BUDGET_S:g} quick, "
        f"{DEMO_TRAIN_BUDGET_S:g} otherwise)",
    )
    parser.add_argument(
        "--archer-warmup",
        type=int,
        default=None,
        help="critic-only warm-up rounds of the ArCHer variants (default: bench/learners.py's 5)",
    )
    parser.add_argument(
        "--print-stored",
        action="store_true",
        help="run nothing: the table and statistics of the newest stored result of each listed variant "
        "and seed under --home",
    )
    parser.add_argument("--fresh", action="store_true", help="ignore stored results under --home")
    parser.add_argument("--out", default="", help="also write the table to this file (and FILE.json)")
    args = parser.parse_args()
    args.variant_list = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in args.variant_list if v not in VARIANTS]
    if unknown or not args.variant_list:
        parser.error(f"unknown variant(s) {unknown}; known: {', '.join(VARIANTS)}")
    if len(set(args.variant_list)) != len(args.variant_list):
        parser.error("a variant is listed twice")
    try:
        args.seed_list = [int(x) for x in args.seeds.split(",") if x.strip()]
    except ValueError:
        parser.error(f"--seeds must be comma-separated integers, got {args.seeds!r}")
    if not args.seed_list or len(set(args.seed_list)) != len(args.seed_list):
        parser.error("--seeds needs at least one seed, none twice")
    if args.train_steps is not None and args.train_steps < 1:
        parser.error("--train-steps must be >= 1")
    if args.iterations < 2:
        parser.error("the comparison needs --iterations >= 2")
    for name in ("max_tasks", "max_eval_tasks", "recovery_episodes"):
        value = getattr(args, name)
        if value is not None and value < (0 if name == "recovery_episodes" else 1):
            parser.error(f"--{name.replace('_', '-')} must be >= {0 if name == 'recovery_episodes' else 1}")
    if args.archer_warmup is not None and args.archer_warmup < 0:
        parser.error("--archer-warmup must be >= 0")
    if args.train_budget_s is not None and args.train_budget_s <= 0:
        parser.error("--train-budget-s must be > 0")
    return args


def stored_by_seed(results_dir: Path, variant: str, seeds: list[int]) -> dict[int, dict[str, Any]]:
    """The newest stored result of ``variant`` per run seed in ``seeds`` (the seed its run's config
    recorded), whatever the rest of its configuration: variants run in separate processes (homes),
    their ``paper-results`` copied into one, combine into one comparison."""
    by_seed: dict[int, dict[str, Any]] = {}
    for path in sorted(results_dir.glob(f"{variant}-*.json"), key=lambda p: p.stat().st_mtime):
        data: dict[str, Any] = json.loads(path.read_text())
        seed = ((data.get("report") or {}).get("config") or {}).get("seed")
        if isinstance(seed, int) and seed in seeds:
            by_seed[seed] = data  # newer files replace older ones
    return by_seed


def print_stored(args: argparse.Namespace) -> int:
    """``--print-stored``: the table (the first of ``--seeds``) and, over every listed seed stored,
    the statistics of stored results; no run."""
    if not args.home:
        raise SystemExit("--print-stored needs --home")
    home = Path(args.home).resolve()
    results: dict[str, dict[str, Any]] = {}
    per_seed: dict[str, dict[int, dict[str, Any]]] = {}
    for variant in args.variant_list:
        by_seed = stored_by_seed(home / "paper-results", variant, args.seed_list)
        missing = [seed for seed in args.seed_list if seed not in by_seed]
        if missing:
            print(
                f"# {variant}: no stored result for seed(s) {missing} under {home / 'paper-results'}",
                file=sys.stderr,
            )
        if not by_seed:
            continue
        first = by_seed[min(by_seed, key=args.seed_list.index)]
        results[variant] = {**first, "numbers": numbers(first.get("report") or {}, variant)}
        per_seed[variant] = {seed: r.get("report") or {} for seed, r in by_seed.items()}
    models = {str((r.get("report") or {}).get("config", {}).get("model")) for r in results.values()}
    return report(args, results, f"model: {', '.join(sorted(models))} (stored results); ", per_seed)


def report(
    args: argparse.Namespace,
    results: dict[str, dict[str, Any]],
    prefix: str,
    per_seed: dict[str, dict[int, dict[str, Any]]] | None = None,
) -> int:
    """Print the JSON lines and the table of ``results`` (and write ``--out``); with ``per_seed``
    (variant -> seed -> report) also the statistics over tasks x seeds of the last iteration."""
    stats_text = ""
    if per_seed:
        stat_lines, stats_text = statistics(per_seed, args.iterations - 1)
        for line in stat_lines:
            print(json.dumps(line))
    for line in comparisons(results):
        print(json.dumps(line))
    for variant, result in results.items():
        for metric, unit in (("seconds", "s"), ("cpu_seconds", "s")):
            line = {"metric": f"{metric}_{variant}", "ours": result[metric], "baseline": None, "unit": unit}
            print(json.dumps({**line, "ratio": None}))
    rendered = table(results, args.iterations)
    set_ids = {e["recovery_set_id"] for r in results.values() for e in r["numbers"] if e["recovery_set_id"]}
    runs = "; ".join(
        f"{v}: {r['seconds']:.0f}s wall, {r['cpu_seconds']:.0f}s CPU, load {r['load'][0]}-{r['load'][1]}, "
        f"done {r.get('finished_at', '?')}"
        for v, r in results.items()
    )
    header = (
        f"{prefix}iterations: {args.iterations}; recovery sets: {len(set_ids)} distinct (1 = every model "
        f"continued the same prefixes)\nruns: {runs}\n"
    )
    print()
    print(header)
    print(rendered)
    if stats_text:
        print(stats_text)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(header + "\n" + rendered + ("\n" + stats_text if stats_text else ""))
        out.with_suffix(out.suffix + ".json").write_text(json.dumps(results, indent=1, sort_keys=True))
    return 0 if all(r["status"] == "completed" for r in results.values()) else 1


def main() -> int:
    args = _args()
    if args.print_stored:
        return print_stored(args)
    from agentr.cli.demo import RunOptions, plan_run
    from agentr.cli.embedded_run import embedded_settings
    from agentr.cli.warm_start import prepare_model

    home = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="agentr-paper-"))
    _, home = embedded_settings(home)  # the runs' processes open it again (run_variant)
    try:
        plan = plan_run(
            RunOptions(
                model=args.model,
                quick=args.quick,
                iterations=args.iterations,
                seed=args.seed,
                warm_start_steps=args.warm_start_steps,
                judge_phase_steps=args.judge_phase_steps,
                max_eval_tasks=args.max_eval_tasks,
                mixed_bf16={"on": True, "off": False}.get(args.bf16),
            )
        )
    except ValueError as exc:  # options that contradict each other: named, no traceback
        raise SystemExit(f"bench/paper.py: {exc}") from None
    if args.max_tasks:  # search fewer goals; the warm start (and its cache key) stays the demo's
        plan = replace(plan, config={**plan.config, "max_tasks": args.max_tasks})
    if args.recovery_episodes is not None:
        evaluation = {**(plan.config.get("evaluation") or {}), "recovery_episodes": args.recovery_episodes}
        plan = replace(plan, config={**plan.config, "evaluation": evaluation})
    budget = args.train_budget_s or (QUICK_TRAIN_BUDGET_S if args.quick else DEMO_TRAIN_BUDGET_S)
    started, c0 = time.monotonic(), _cpu_seconds()
    model = prepare_model(plan, home, args.seed)
    warm_s, warm_cpu = time.monotonic() - started, _cpu_seconds() - c0
    base = dict(plan.config, model=model)
    results_dir = home / "paper-results"
    steps = args.train_steps or (QUICK_TRAIN_STEPS if args.quick else DEMO_TRAIN_STEPS)
    results: dict[str, dict[str, Any]] = {}  # the first seed's: the per-iteration table
    per_seed: dict[str, dict[int, dict[str, Any]]] = {}  # variant -> seed -> report.json
    for seed in args.seed_list:
        seeded: dict[str, dict[str, Any]] = {}
        for index, variant in enumerate(args.variant_list):
            archer = None
            if variant == "agent_r_value":
                stored = (seeded.get("archer_offline") or {}).get("iteration0_checkpoint")
                archer = stored.replace(HOME, str(home)) if stored else None
                if not archer:
                    print(
                        "# agent_r_value skipped: it needs archer_offline (listed before it)", file=sys.stderr
                    )
                    continue
            config = variant_config(
                dict(base, seed=seed),
                variant,
                train_budget_s=budget,
                first=index == 0,
                archer_checkpoint=archer,
                archer_warmup=args.archer_warmup,
                train_steps=steps,
                quick=args.quick,
            )
            key = config_key(config, home)
            result = None if args.fresh else stored_result(results_dir, variant, key)
            if result is not None:
                print(
                    f"# {variant} seed {seed}: stored result of run {result['run_id']} reused",
                    file=sys.stderr,
                )
            else:
                result = run_variant(home, variant, config)
                if result is None:
                    continue
                store_result(results_dir, variant, key, result)
            seeded[variant] = {**result, "numbers": numbers(result.get("report") or {}, variant)}
            per_seed.setdefault(variant, {})[seed] = result.get("report") or {}
            print(
                f"# {variant} seed {seed}: run {result['run_id']} {result['status']} in "
                f"{result['seconds']:.0f}s wall, {result['cpu_seconds']:.0f}s CPU, load {result['load']}",
                file=sys.stderr,
                flush=True,
            )
        if seed == args.seed_list[0]:
            results = seeded
    prefix = (
        f"model: {model} (prepared in {warm_s:.0f}s wall, {warm_cpu:.0f}s CPU); quick: {args.quick}; "
        f"seeds: {args.seed_list} (table: seed {args.seed_list[0]}); train steps: {steps} per iteration "
        f"(SFT, DPO); train cap: {budget:g}s per iteration; archer warm-up: "
        f"{'default' if args.archer_warmup is None else args.archer_warmup}; home: {home}; "
    )
    return report(args, results, prefix, per_seed)


if __name__ == "__main__":
    raise SystemExit(main())
