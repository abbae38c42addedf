"""Owns the run and evaluation reports: JSON, a Markdown table and a PNG plot (matplotlib, Agg).

``collect_report(run_id, run_events, revision_lengths)`` turns a run's stream into rows, one per
evaluated model (the starting model, then the model trained in each iteration), with the metrics of
``train_service.evaluation`` on the held-out tasks (recovery included: the Table 3 protocol on the
starting model's failed held-out episodes), the same on the SEEN (searched, trained-on) tasks under
``seen_*`` keys, and the iteration's mean revision length; ``write_report`` writes
``report.json``, ``report.md`` and ``report.png`` into a folder. ``write_eval`` does the same for a
single ``agentr eval``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core.domain.events import DomainEvent
from core.domain.runs import fold

HELD_OUT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("success_rate", "success"),
    ("avg_reward", "reward"),
    ("avg_steps", "steps"),
    ("invalid_action_rate", "invalid"),
    ("dead_loop_rate", "dead loops"),
    ("recovery_success", "recovery"),
)
# the mean revision length per iteration is in the datasets table
SEEN_COLUMNS: tuple[tuple[str, str], ...] = (
    ("seen_success_rate", "success"),
    ("seen_avg_reward", "reward"),
    ("seen_avg_steps", "steps"),
    ("seen_invalid_action_rate", "invalid"),
    ("seen_dead_loop_rate", "dead loops"),
)
COLUMNS: tuple[tuple[str, str], ...] = (  # the single table of ``agentr eval``
    ("success_rate", "success"),
    ("avg_reward", "reward"),
    ("avg_steps", "steps"),
    ("invalid_action_rate", "invalid"),
    ("dead_loop_rate", "dead loops"),
    ("recovery_success", "recovery"),
)


def _row(label: str, metrics: dict[str, Any], revision_length: float | None) -> dict[str, Any]:
    recovery = metrics.get("recovery") or {}
    seen = metrics.get("seen") or {}
    return {
        "model": label,
        "model_version": metrics.get("model_version"),
        "episodes": metrics.get("episodes"),
        "tasks": len(metrics.get("tasks") or []) or None,
        "episodes_per_task": metrics.get("episodes_per_task"),
        "max_steps": metrics.get("max_steps"),
        "temperature": metrics.get("temperature"),
        "constrain_actions": metrics.get("constrain_actions"),
        "success_rate": metrics.get("success_rate"),
        "avg_reward": metrics.get("avg_reward"),
        "avg_steps": metrics.get("avg_steps"),
        "invalid_action_rate": metrics.get("invalid_action_rate"),
        "dead_loop_rate": metrics.get("dead_loop_rate"),
        "repeated_action_rate": metrics.get("repeated_action_rate"),
        "recovery_success": recovery.get("success_rate"),
        "recovery_episodes": recovery.get("episodes"),
        "recovery_prefixes": recovery.get("prefixes"),
        "by_task": metrics.get("by_task"),
        "recovery_by_task": recovery.get("by_task"),
        "recovery_seeds": recovery.get("seeds"),
        "recovery_set_id": recovery.get("set_id"),
        "revision_length_mean": revision_length,
        "seen_episodes": seen.get("episodes"),
        "seen_tasks": len(seen.get("tasks") or []) or None,
        "seen_success_rate": seen.get("success_rate"),
        "seen_avg_reward": seen.get("avg_reward"),
        "seen_avg_steps": seen.get("avg_steps"),
        "seen_invalid_action_rate": seen.get("invalid_action_rate"),
        "seen_dead_loop_rate": seen.get("dead_loop_rate"),
    }


def collect_report(
    run_id: str, run_events: Sequence[DomainEvent], revision_lengths: dict[int, float]
) -> dict[str, Any]:
    """The run's report: config, per-iteration facts and one row per evaluated model.

    A row holds the held-out metrics (``success_rate``, ...) and, when the run evaluated on its
    search tasks too, the same metrics on those SEEN tasks under ``seen_*`` keys.
    """
    state = fold(run_id, run_events)
    rows: list[dict[str, Any]] = []
    for it in state.iterations:
        if it.eval_metrics is None:
            continue
        if "start" in it.eval_metrics and not rows:
            rows.append(_row("start", it.eval_metrics["start"], None))
        rows.append(_row(f"iter {it.iteration}", it.eval_metrics, revision_lengths.get(it.iteration)))
    return {
        "run_id": run_id,
        "status": state.status,
        "reason": state.reason,
        "final_model_ref": state.final_model_ref,
        "config": state.config.to_data(),
        "constrain_actions": constrain_settings(state.config.search, state.config.evaluation),
        "iterations": [
            {
                "iteration": it.iteration,
                "model_ref": it.model_ref,
                "alpha": it.alpha,
                "trees": len(it.tree_ids),
                "dataset_id": it.dataset_id,
                "checkpoint": it.checkpoint,
                "train": it.train_metrics,
                "revision_length_mean": revision_lengths.get(it.iteration),
            }
            for it in state.iterations
        ],
        "rows": rows,
    }


def constrain_settings(search: dict[str, Any], evaluation: dict[str, Any]) -> dict[str, bool]:
    """Whether the run's search and evaluation decode with constrained actions (their configs'
    ``constrain_actions``, default off; docs/constrained-decoding.md)."""
    return {
        "search": bool(search.get("constrain_actions", False)),
        "evaluation": bool(evaluation.get("constrain_actions", False)),
    }


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def markdown_table(
    rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]] = HELD_OUT_COLUMNS
) -> str:
    header = "| model | " + " | ".join(title for _, title in columns) + " |"
    rule = "|---|" + "---:|" * len(columns)
    lines = [header, rule]
    for row in rows:
        lines.append(f"| {row['model']} | " + " | ".join(_fmt(row.get(key)) for key, _ in columns) + " |")
    return "\n".join(lines) + "\n"


def _first(rows: Sequence[dict[str, Any]], key: str) -> Any:
    return next((r[key] for r in rows if r.get(key) is not None), None)


def _recovery_prefixes(rows: Sequence[dict[str, Any]]) -> int:
    """Recovery prefixes (older reports, one continuation each, only know the episodes)."""
    return int(_first(rows, "recovery_prefixes") or _first(rows, "recovery_episodes") or 0)


def report_markdown(report: dict[str, Any]) -> str:
    out = [f"# agentr run {report['run_id']}", "", f"status: **{report['status']}**"]
    if report.get("reason"):
        out.append(f"reason: {report['reason']}")
    rows = report["rows"]
    config = report.get("config") or {}
    if config.get("runtime"):
        out += ["", conditions_line(config["runtime"])]
    constrained = report.get("constrain_actions") or constrain_settings(
        config.get("search") or {}, config.get("evaluation") or {}
    )
    search_on, eval_on = ("on" if constrained[k] else "off" for k in ("search", "evaluation"))
    out.append(
        "constrained decoding (Action line among the env's valid actions): "
        f"search {search_on}, evaluation {eval_on}"
    )
    if not rows:
        out += ["", "(no evaluation yet)", ""]
    else:
        held_out = config.get("eval_tasks") or f"split {config.get('eval_split', '?')!r}"
        temperature = _first(rows, "temperature")
        sampling = "greedy" if not temperature else f"sampled at temperature {temperature}"
        out += [
            "",
            f"## Held-out tasks ({_first(rows, 'tasks')} goals of {held_out}, stratified, never searched "
            "or trained on)",
            "",
            f"{_first(rows, 'episodes_per_task')} seeded episodes per goal ({sampling}), at most "
            f"{_first(rows, 'max_steps')} actions each; rates are over all {_first(rows, 'episodes')} "
            "episodes. recovery: success when continuing "
            f"{_recovery_prefixes(rows)} failed held-out episodes of the STARTING model, "
            "each truncated at a seeded random step; the same prefixes for every model (the paper's "
            f"Table 3 protocol), each continued with {_first(rows, 'recovery_seeds') or 1} seed(s) and "
            f"{_first(rows, 'max_steps')} actions after the prefix.",
            "",
            markdown_table(rows, HELD_OUT_COLUMNS),
        ]
        if _first(rows, "seen_episodes") is not None:
            searched = config.get("tasks") or f"split {config.get('split', '?')!r}"
            out += [
                f"## Seen tasks ({_first(rows, 'seen_tasks')} searched goals of {searched}, "
                f"{_first(rows, 'seen_episodes')} episodes: SEEN in training, their good and revised "
                "paths are trained on)",
                "",
                markdown_table(rows, SEEN_COLUMNS),
            ]
    critic = report.get("critic") or {}
    if critic:  # the critic against the oracle, per iteration (train_service/critic_metrics.py)
        from train_service.critic_metrics import critic_markdown

        out.append(critic_markdown(critic))
    datasets = report.get("datasets") or {}
    if datasets:
        out.append("## Datasets")
        out.append("")
        search = config.get("search") or {}
        out.append(
            f"Pairs per tree: at most {search.get('max_pairs_per_tree', 8)}, chosen by pair_selection "
            f"**{search.get('pair_selection', 'stratified')}** (core/domain/pairs.py), each revision "
            f"continued with splice.partner **{(config.get('splice') or {}).get('partner', 'pair')}** "
            "(core.domain.splice.splice_partners); rejected: pairs that "
            "became no revision sample, by reason (a splice whose replay ended early or fell short of the "
            "good reward, a critic refusal, ...)."
        )
        out.append("")
        out.append(
            "| iteration | trees | pairs | revision samples | verified / pairs | good trajectories "
            "| revision len | rejected (by reason) |"
        )
        out.append("|---:|---:|---:|---:|---:|---:|---:|---|")
        for iteration in sorted(datasets, key=int):
            c = datasets[iteration]
            cells = (
                _fmt(c.get("trees")),
                c.get("pairs", 0),
                c.get("revision", 0),
                _fmt(c.get("verified_share")),
                c.get("good", 0),
                _fmt(c.get("revision_length_mean")),
                ", ".join(f"{kind} {n}" for kind, n in sorted((c.get("rejected") or {}).items())) or "-",
            )
            out.append(f"| {iteration} | " + " | ".join(str(x) for x in cells) + " |")
        out.append("")
    training = training_markdown(report.get("iterations") or [])
    if training:
        out.append(training)
    return "\n".join(out)


def conditions_line(runtime: dict[str, Any]) -> str:
    """One line naming the conditions a run computed under (its config's ``runtime``: threads,
    precision, CPU; core.runtime.torch_threads.run_conditions)."""
    threads = runtime.get("threads") or {}
    cpu = runtime.get("cpu") or {}
    caps = ", ".join(f"{k}={v}" for k, v in (cpu.get("isa_caps") or {}).items())
    return (
        f"computed with: {threads.get('training', '?')} torch thread(s) for training, "
        f"{threads.get('inference', '?')} for inference; precision {runtime.get('precision', '?')}; "
        f"CPU {cpu.get('model', '?')} ({cpu.get('capability', '?')} kernels"
        + (f"; capped: {caps}" if caps else "")
        + f"), torch {runtime.get('torch', '?')}. The same seed reproduces these numbers under these "
        "conditions; other threads, precision or CPU kernels give other floats."
    )


def training_markdown(iterations: Sequence[dict[str, Any]]) -> str:
    """The Training section: one row per trained iteration (``report["iterations"]`` entries, their
    ``train`` = ``ModelTrained.metrics``): its learner (``metrics["method"]``), what it did (steps, or
    critic / actor updates), loss first -> last, seconds, whether the time budget stopped it, the
    precision (``metrics["bf16"]`` / ``["mixed_bf16"]``: fp32, bf16 weights or mixed bf16; "-" for a
    learner that does not say); "" when nothing trained yet."""
    trained = [it for it in iterations if it.get("train")]
    if not trained:
        return ""
    lines = [
        "## Training",
        "",
        "| iteration | method | updates | loss | seconds | stopped by time budget | precision |",
        "|---:|---|---|---|---:|---|---|",
    ]
    for it in trained:
        m = it["train"]
        method = str(m.get("method", "sft"))
        if method == "archer":
            updates = f"{m.get('critic_updates', 0)} critic, {m.get('actor_updates', 0)} actor"
            loss = _span(m.get("td_loss_first"), m.get("td_loss_last"), "TD ")
        elif method == "dpo":
            updates = f"{m.get('steps', '-')} steps"
            loss = _span(m.get("first_loss"), m.get("last_loss"), "")
        else:
            updates = f"{m.get('steps', '-')} steps"
            loss = "-" if m.get("train_loss") is None else f"mean {float(m['train_loss']):.3f}"
        if m.get("reused"):
            updates += " (reused checkpoint)"
        seconds = m.get("seconds")
        secs = "-" if seconds is None else f"{float(seconds):.1f}"
        stopped = "yes" if m.get("stopped_by_time_budget") else "no"
        lines.append(
            f"| {it['iteration']} | {method} | {updates} | {loss} | {secs} | {stopped} | {_precision(m)} |"
        )
    return "\n".join(lines) + "\n"


def _precision(metrics: dict[str, Any]) -> str:
    if metrics.get("mixed_bf16"):
        return "mixed bf16"  # fp32 weights, MLP blocks in bfloat16 (train_service/precision.py)
    if metrics.get("bf16"):
        return "bf16"
    return "fp32" if "bf16" in metrics or "mixed_bf16" in metrics else "-"


def _span(first: Any, last: Any, prefix: str) -> str:
    if first is None or last is None:
        return "-"
    return f"{prefix}{float(first):.3f} -> {float(last):.3f}"


def plot(rows: Sequence[dict[str, Any]], path: Path, title: str) -> None:
    """Two panels, held-out tasks and seen tasks; markers and dashes keep coinciding lines visible."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        (
            "held-out tasks",
            [
                ("success_rate", "success"),
                ("avg_reward", "avg reward"),
                ("invalid_action_rate", "invalid actions"),
                ("dead_loop_rate", "dead loops"),
                ("recovery_success", "recovery (Table 3)"),
            ],
        ),
        (
            "seen tasks (trained on)",
            [
                ("seen_success_rate", "success"),
                ("seen_invalid_action_rate", "invalid actions"),
                ("seen_dead_loop_rate", "dead loops"),
            ],
        ),
    ]
    styles = [("o", "-"), ("s", "--"), ("^", "-."), ("D", ":"), ("v", (0, (5, 1)))]
    labels = [r["model"] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, (panel, keys) in zip(axes, panels, strict=True):
        for (key, name), (marker, dash) in zip(keys, styles, strict=False):
            values = [r.get(key) for r in rows]
            xs = [i for i, v in enumerate(values) if v is not None]
            ys = [float(values[i] or 0.0) for i in xs]
            ax.plot(xs, ys, marker=marker, linestyle=dash, markersize=7, alpha=0.85, label=name)
        ax.set_xticks(range(len(labels)), labels)
        ax.set_ylim(-0.05, 1.05)
        ax.set_title(panel)
        ax.legend(loc="best", fontsize="small")
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_report(report: dict[str, Any], folder: Path) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"json": folder / "report.json", "markdown": folder / "report.md", "png": folder / "report.png"}
    paths["json"].write_text(json.dumps(report, indent=2, sort_keys=True, default=str))
    paths["markdown"].write_text(report_markdown(report))
    plot(report["rows"], paths["png"], f"run {report['run_id'][:8]}")
    return {k: str(v) for k, v in paths.items()}


def eval_markdown(metrics: dict[str, Any]) -> str:
    return markdown_table([_row(str(metrics.get("model", "model")), metrics, None)], COLUMNS)


def write_eval(metrics: dict[str, Any], folder: Path) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"json": folder / "eval.json", "markdown": folder / "eval.md", "png": folder / "eval.png"}
    paths["json"].write_text(json.dumps(metrics, indent=2, sort_keys=True, default=str))
    paths["markdown"].write_text(eval_markdown(metrics))
    plot([_row(str(metrics.get("model", "model")), metrics, None)], paths["png"], "evaluation")
    return {k: str(v) for k, v in paths.items()}
