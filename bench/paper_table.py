"""Owns what ``bench/paper.py`` reads out of its runs and prints: the variants' names, the numbers
of one run's ``report.json`` per evaluated model (``numbers``), the comparison JSON lines
(``comparisons``: ours = Agent-R with the model critic) and the Markdown table (``table``).
Pure (no torch, no store): a run's report dict in, rows and text out.

A run may end before its last iteration: an iteration >= 1 whose dataset is empty ends it early
(completed, with the reason in the report) and a failed run carries its reason too. ``numbers``
then holds the iterations that were evaluated, and ``table`` says which ones are missing and why.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# name -> (label, overrides of the Agent-R SFT run configuration); the learner variants' ``train``
# comes from bench/learners.method_variant (bench/paper.py), their overrides here are the rest.
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "agent_r_model": ("Agent-R (model critic)", {"critic": {"strategy": "model"}}),
    "agent_r_reflect": ("Agent-R (reflect critic)", {"critic": {"strategy": "reflect"}}),
    # t' = the first action after the divergence: the trivial critic that matches the TextCraft
    # oracle on most demo pairs (docs/critic.md); does a better t' train a better model than it?
    "agent_r_first": ("Agent-R (first-after-divergence t')", {"critic": {"strategy": "first"}}),
    "direct": ("Direct-Revision", {"critic": {"strategy": "direct"}}),
    # the critic does not matter when revisions are not trained on: the cheapest one
    "good_only": ("good trajectories only", {"critic": {"strategy": "direct"}, "include_revisions": False}),
    "dpo": ("DPO at the divergence node", {"include_revisions": False}),
    "archer_offline": ("ArCHer (offline)", {"include_revisions": False}),
    "archer_online": ("ArCHer (online)", {"include_revisions": False}),
    "agent_r_value": ("Agent-R (value critic of archer_offline)", {}),
}
# the other learners on the same log (docs/learners.md): variant -> (train.method, mode)
LEARNERS: dict[str, tuple[str, str]] = {
    "dpo": ("dpo", "offline"),
    "archer_offline": ("archer", "offline"),
    "archer_online": ("archer", "online"),
}
OURS = "agent_r_model"
# (key in a variant's per-iteration numbers, JSON metric name, unit, higher is better)
METRICS: tuple[tuple[str, str, str, bool], ...] = (
    ("success_rate", "heldout_success", "rate", True),
    ("recovery_success", "recovery_success", "rate", True),
    ("dead_loop_rate", "heldout_dead_loops", "rate", False),
    ("revision_length", "revision_length", "actions", False),
)
COLUMNS: tuple[tuple[str, str], ...] = (
    ("success_rate", "held-out success"),
    ("avg_reward", "reward"),
    ("recovery_success", "recovery"),
    ("dead_loop_rate", "dead loops"),
    ("invalid_action_rate", "invalid"),
    ("seen_success_rate", "seen success"),
    ("trained_on", "trained on"),
    ("revision_length", "revision len"),
    ("critic_exact_match", "t' = oracle"),
    ("critic_fallback_share", "fallback"),
    ("train_seconds", "train s"),
    ("updates", "updates"),
)


def trains_revisions(variant: str) -> bool:
    return bool(VARIANTS[variant][1].get("include_revisions", True))


def _trained_on(variant: str, counts: dict[str, Any], train: dict[str, Any]) -> str | None:
    """What the iteration's learner trained on, counted: SFT samples (revision + good), DPO pairs
    or ArCHer transitions (the trainer's own count where it reported one)."""
    if variant in LEARNERS:
        method = LEARNERS[variant][0]
        unit = "pairs" if method == "dpo" else "transitions"
        count = train.get(unit)
        if count is None and method == "dpo":
            count = counts.get("pairs")
        return None if count is None else f"{count} {unit}"
    revisions = counts.get("revision", 0) if trains_revisions(variant) else 0
    if not counts and not train:
        return None
    return f"{revisions} rev + {counts.get('good', 0)} good"


def _updates(train: dict[str, Any]) -> str | None:
    """Optimizer updates of the iteration's training: SFT / DPO steps, ArCHer critic + actor."""
    if not train:
        return None
    if "critic_updates" in train:
        text = f"{train['critic_updates']} c + {train.get('actor_updates', 0)} a"
    elif "steps" in train:
        text = str(train["steps"])
    else:
        return None
    return text + (" (cap)" if train.get("stopped_by_time_budget") else "")


def numbers(report: dict[str, Any], variant: str) -> list[dict[str, Any]]:
    """One entry per evaluated model of a run (``report.json`` of ``agentr run``): held-out figures,
    recovery, dead loops, revision length (trained-on revisions only), the critic's agreement with
    the oracle and the iteration's training (seconds, updates, data)."""
    critic = report.get("critic") or {}
    datasets = report.get("datasets") or {}
    trains = {int(it["iteration"]): it.get("train") or {} for it in report.get("iterations") or []}
    out = []
    for row in report.get("rows") or []:
        iteration = None if row["model"] == "start" else int(row["model"].split()[-1])
        entry: dict[str, Any] = {
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
            "trained_on": None,
            "critic_exact_match": None,
            "critic_fallback_share": None,
            "train_seconds": None,
            "updates": None,
        }
        if iteration is not None:
            counts = datasets.get(str(iteration)) or {}
            train = trains.get(iteration) or {}
            if trains_revisions(variant) and variant not in LEARNERS:
                entry["revision_samples"] = counts.get("revision", 0)
                entry["revision_length"] = counts.get("revision_length_mean")
            else:
                entry["revision_samples"] = 0
            entry["trained_on"] = _trained_on(variant, counts, train)
            judged = critic.get(str(iteration)) or {}
            entry["critic_exact_match"] = judged.get("exact_match")
            entry["critic_fallback_share"] = judged.get("fallback_share")
            seconds = train.get("seconds")
            entry["train_seconds"] = None if seconds is None else round(float(seconds), 1)
            entry["updates"] = _updates(train)
        out.append(entry)
    return out


def ended_early(result: dict[str, Any], iterations: int) -> str | None:
    """Why a run has fewer evaluated iterations than asked (None when it has them all)."""
    evaluated = [e for e in result.get("numbers") or [] if e["model"] != "start"]
    if len(evaluated) >= iterations and result.get("status") == "completed":
        return None
    status = result.get("status") or "unknown"
    reason = result.get("reason") or "no reason recorded"
    return f"{len(evaluated)} of {iterations} iterations evaluated; run {status}: {reason}"


def ratio(ours: float | None, baseline: float | None, higher_is_better: bool) -> float | None:
    """How many times better ours is (ours / baseline, or baseline / ours when lower is better);
    1.0 when both are 0, None when undefined."""
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


def table(results: dict[str, dict[str, Any]], iterations: int) -> str:
    """Every variant and evaluated model, the starting model once (the same for every variant)."""
    lines = [
        "| variant | model | " + " | ".join(title for _, title in COLUMNS) + " |",
        "|---|---|" + "---:|" * len(COLUMNS),
    ]
    start_done = False
    for variant, result in results.items():
        label = VARIANTS[variant][0]
        for entry in result["numbers"]:
            if entry["model"] == "start":
                if start_done:
                    continue
                start_done = True
                name = "(all: starting model)"
            else:
                name = label
            cells = " | ".join(
                f"{entry[key]:.1f}"
                if key == "train_seconds" and entry.get(key) is not None
                else _fmt(entry.get(key))
                for key, _ in COLUMNS
            )
            lines.append(f"| {name} | {entry['model']} | {cells} |")
        why = ended_early(result, iterations)
        if why:
            lines.append(f"| {label} | ({why}) |" + " |" * len(COLUMNS))
    return "\n".join(lines) + "\n"


def comparisons(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """JSON lines: Agent-R (model critic) against every other variant, per evaluated iteration."""
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
                if key == "revision_length" and (not trains_revisions(variant) or variant in LEARNERS):
                    continue  # trains no revision: nothing to compare
                a = (ours.get(model) or {}).get(key)
                b = (theirs.get(model) or {}).get(key)
                lines.append(
                    {
                        "metric": f"{name}_{model.replace(' ', '')}_vs_{variant}",
                        "ours": a,
                        "baseline": b,
                        "unit": unit,
                        "ratio": ratio(a, b, higher),
                    }
                )
    return lines


# ------------------------------------------------------------------------------------------------
# Statistics over seeds: intervals over tasks x seeds, paired tests of Agent-R against baselines
# ------------------------------------------------------------------------------------------------

# (JSON name, per-task key, where in a report row the per-task figures are, higher is better)
STAT_METRICS: tuple[tuple[str, str, str, bool], ...] = (
    ("heldout_success", "success_rate", "by_task", True),
    ("recovery_success", "success_rate", "recovery_by_task", True),
    ("heldout_dead_loops", "dead_loop_rate", "by_task", False),
    ("heldout_invalid_rate", "invalid_action_rate", "by_task", False),
)
PAIRED_AGAINST = ("good_only", "direct")


def paired_against(variants: Iterable[str]) -> list[str]:
    """The variants Agent-R (model critic) is tested against, paired: good-only and Direct-Revision
    first (the issue's two), then every other variant that ran (reflect, DPO, ArCHer, ...), each
    its own test (several tests: read a lone p below 0.05 as one of many)."""
    present = [v for v in variants if v != OURS]
    return [v for v in PAIRED_AGAINST if v in present] + [v for v in present if v not in PAIRED_AGAINST]


def task_units(reports: dict[int, dict[str, Any]], model: str, where: str, key: str) -> dict[Any, float]:
    """``{(task, seed): value}`` of one variant: the per-task figure ``key`` of the report row
    ``model`` (e.g. "iter 1"; a run that stopped early: its final model's, ``final_row``) under
    ``where`` (``by_task`` held-out, ``recovery_by_task``), per run
    seed (``reports``: seed -> the run's report.json)."""
    out: dict[Any, float] = {}
    for seed, report in reports.items():
        row = final_row(report, model)
        for task, figures in ((row or {}).get(where) or {}).items():
            value = figures.get(key)
            if value is not None:
                out[(task, seed)] = float(value)
    return out


def final_row(report: dict[str, Any], model: str) -> dict[str, Any] | None:
    """The report row of ``model`` ("iter i"); for a run that COMPLETED before iteration i (it
    stopped early: the iteration had nothing to learn from, core.domain.runs), the row of its last
    evaluated iteration, which is the run's final model. A failed run has no final model: None."""
    rows = [r for r in report.get("rows") or [] if str(r.get("model", "")).startswith("iter ")]
    row = next((r for r in rows if r.get("model") == model), None)
    if row is not None or report.get("status") != "completed" or not rows:
        return row
    return max(rows, key=lambda r: int(str(r["model"]).split()[1]))


def revision_units(reports: dict[int, dict[str, Any]], iteration: int) -> dict[Any, float]:
    """``{("run", seed): mean revision length}`` of one variant's iteration (a run-level unit: the
    revision samples of a seed's run are not tied to held-out tasks)."""
    out: dict[Any, float] = {}
    for seed, report in reports.items():
        value = ((report.get("datasets") or {}).get(str(iteration)) or {}).get("revision_length_mean")
        if value is not None:
            out[("run", seed)] = float(value)
    return out


def revision_counts(reports: dict[int, dict[str, Any]]) -> dict[int, int]:
    """``{seed: revision samples trained over every iteration}`` of one variant (the report's
    ``datasets[iteration]["revision"]``; absent = none kept): where this is 0 the variant trained
    what good-only trained, whatever its critic."""
    return {
        seed: sum(int(d.get("revision") or 0) for d in (report.get("datasets") or {}).values())
        for seed, report in sorted(reports.items())
    }


def seed_means(units: dict[Any, float]) -> dict[Any, float]:
    """``{seed: mean}`` of ``{(task or "run", seed): value}`` units, by seed: the spread a reader
    needs beside an interval over tasks x seeds (tasks of one seed share its model)."""
    by_seed: dict[Any, list[float]] = {}
    for (_, seed), value in units.items():
        by_seed.setdefault(seed, []).append(value)
    return {seed: sum(v) / len(v) for seed, v in sorted(by_seed.items(), key=lambda kv: repr(kv[0]))}


def statistics(
    per_seed: dict[str, dict[int, dict[str, Any]]], iteration: int, *, resamples: int = 10_000
) -> tuple[list[dict[str, Any]], str]:
    """JSON lines and a Markdown table: every variant's mean and 95% bootstrap interval over tasks x
    seeds of iteration ``iteration``'s model, and Agent-R (model critic) against good-only,
    Direct-Revision and every other variant present (``paired_against``), tested twice:

    - task level, paired by (task, seed): the mean difference, its interval and the sign-flip
      p-value (core.domain.stats), Holm-adjusted over every paired test of the call (``p_holm``);
    - seed level, paired by seed (each seed's mean over the paired tasks; training randomness lives
      in the seed, and the tasks of a seed share its model): the per-seed differences, their mean,
      the EXACT sign-flip p over all 2^n sign assignments (``seed_p_value``; never below 2 / 2^n) and
      its Holm adjustment over the call's seed-level tests (``seed_p_holm``).

    Significance is decided by the Holm-adjusted p-values only (``significant`` =
    ``significant_holm``: task level; ``seed_significant_holm``: seed level), never by an interval.
    Revision length: run-level units (one per seed). The text holds the means table and the paired
    table."""
    from core.domain.stats import bootstrap_mean, holm_adjust, paired_test, seed_test

    model = f"iter {iteration}"
    rows: list[tuple[str, str, dict[Any, float]]] = []
    for name, key, where, _ in STAT_METRICS:
        for variant, reports in per_seed.items():
            rows.append((name, variant, task_units(reports, model, where, key)))
    for variant, reports in per_seed.items():
        if trains_revisions(variant) and variant not in LEARNERS:
            rows.append(("revision_length", variant, revision_units(reports, iteration)))
    units = {(name, variant): values for name, variant, values in rows}
    lines: list[dict[str, Any]] = []
    raw_p: list[float | None] = []  # the lines' unrounded p-values, for Holm
    raw_seed_p: list[float | None] = []  # the same at the seed level
    table_rows = []
    higher = {name: h for name, _, _, h in STAT_METRICS} | {"revision_length": False}
    for name, variant, values in rows:
        interval = bootstrap_mean(list(values.values()), resamples=resamples)
        table_rows.append((name, variant, interval))
    for name in higher:
        ours = units.get((name, OURS))
        if ours is None:
            continue
        for other in paired_against(per_seed):
            theirs = units.get((name, other))
            if theirs is None:
                continue
            test = paired_test(ours, theirs, resamples=resamples)
            raw_p.append(test.p_value)
            paired = [k for k in ours if k in theirs]
            by_seed = seed_test(
                seed_means({k: ours[k] for k in paired}), seed_means({k: theirs[k] for k in paired})
            )
            raw_seed_p.append(by_seed.p_value)
            a = bootstrap_mean([ours[k] for k in ours if k in theirs], resamples=resamples)
            b = bootstrap_mean([theirs[k] for k in ours if k in theirs], resamples=resamples)
            d = test.difference
            lines.append(
                {
                    "metric": f"{name}_iter{iteration}_vs_{other}",
                    "ours": _r(a.mean),
                    "baseline": _r(b.mean),
                    "unit": "rate" if name != "revision_length" else "actions",
                    "ratio": ratio(a.mean, b.mean, higher[name]),
                    "ours_ci": [_r(a.low), _r(a.high)],
                    "baseline_ci": [_r(b.low), _r(b.high)],
                    "difference": _r(d.mean),
                    "difference_ci": [_r(d.low), _r(d.high)],
                    "p_value": _r(test.p_value),
                    "paired_units": d.n,
                    "seeds": by_seed.n,
                    "seed_differences": [_r(x) for x in by_seed.differences],
                    "seed_difference": _r(by_seed.mean),
                    "seed_p_value": _r(by_seed.p_value),
                }
            )
    for line, adjusted, seed_adjusted in zip(lines, holm_adjust(raw_p), holm_adjust(raw_seed_p), strict=True):
        line["p_holm"] = _r(adjusted)
        line["significant_holm"] = adjusted is not None and adjusted <= 0.05
        line["significant"] = line["significant_holm"]  # the decision is the Holm-adjusted p's
        line["seed_p_holm"] = _r(seed_adjusted)
        line["seed_significant_holm"] = seed_adjusted is not None and seed_adjusted <= 0.05
    text = [
        f"Iteration {iteration}'s model, mean [95% bootstrap interval] over tasks x seeds "
        "(revision length: over seeds):",
        "",
        "| metric | " + " | ".join(VARIANTS[v][0] for v in per_seed) + " |",
        "|---|" + "---:|" * len(per_seed),
    ]
    for name in higher:
        cells = []
        for variant in per_seed:
            found = next((i for n, v, i in table_rows if n == name and v == variant), None)
            if found is None or found.mean is None:
                cells.append("-")
            else:
                seeds = " / ".join(f"{m:.2f}" for m in seed_means(units[(name, variant)]).values())
                shown = f"{found.mean:.3f} [{found.low:.3f}, {found.high:.3f}]"
                cells.append(f"{shown} (n={found.n}; seeds {seeds})")
        text.append(f"| {name} | " + " | ".join(cells) + " |")
    # what sets the Agent-R variants apart from good-only at all: the revision samples they trained
    counts = {v: revision_counts(per_seed[v]) for v in per_seed if trains_revisions(v) and v not in LEARNERS}
    cells = [
        f"{sum(counts[v].values())} (seeds {' / '.join(str(c) for c in counts[v].values())})"
        if v in counts
        else "-"
        for v in per_seed
    ]
    text.append("| revision samples trained (all iterations) | " + " | ".join(cells) + " |")
    return lines, "\n".join(text + paired_table(lines, iteration)) + "\n"


def paired_table(lines: list[dict[str, Any]], iteration: int) -> list[str]:
    """The Markdown lines of ``statistics``' paired tests (none without tests)."""
    if not lines:
        return []
    text = [
        "",
        f"{VARIANTS[OURS][0]} minus each other variant, paired by (task, seed): mean difference "
        f"[95% bootstrap interval], sign-flip p, Holm-adjusted p over these {len(lines)} tests; and "
        "paired by SEED (each seed's mean; training randomness lives in the seed): the mean of the "
        "per-seed differences, the exact sign-flip p over all 2^n sign assignments (never below "
        "2 / 2^n) and its Holm adjustment. Significant only where a Holm-adjusted p is <= 0.05:",
        "",
        "| metric | against | difference | p | p (Holm) | units | seed difference | p (seeds) | "
        "p (seeds, Holm) | seeds |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for line in lines:
        name, other = line["metric"].split(f"_iter{iteration}_vs_")
        low, high = line["difference_ci"]
        seed_diff = "-" if line["seed_difference"] is None else f"{line['seed_difference']:+.3f}"
        text.append(
            f"| {name} | {VARIANTS[other][0]} | {line['difference']:+.3f} [{low:+.3f}, {high:+.3f}] | "
            f"{line['p_value']} | {line['p_holm']} | {line['paired_units']} | {seed_diff} | "
            f"{line['seed_p_value']} | {line['seed_p_holm']} | {line['seeds']} |"
        )
    return text


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
