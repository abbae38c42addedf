"""Owns the run and evaluation reports: JSON, a Markdown table and a PNG plot (matplotlib, Agg).

``collect_report(run_id, run_events, revision_lengths)`` turns a run's stream into rows, one per
evaluated model (the starting model, then the model trained in each iteration), with the metrics of
``train_service.evaluation`` and the iteration's mean revision length; ``write_report`` writes
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

COLUMNS: tuple[tuple[str, str], ...] = (
    ("success_rate", "success"),
    ("avg_reward", "reward"),
    ("avg_steps", "steps"),
    ("invalid_action_rate", "invalid"),
    ("dead_loop_rate", "dead loops"),
    ("recovery_success", "recovery"),
    ("revision_length_mean", "revision len"),
)


def _row(label: str, metrics: dict[str, Any], revision_length: float | None) -> dict[str, Any]:
    recovery = metrics.get("recovery") or {}
    return {
        "model": label,
        "model_version": metrics.get("model_version"),
        "episodes": metrics.get("episodes"),
        "success_rate": metrics.get("success_rate"),
        "avg_reward": metrics.get("avg_reward"),
        "avg_steps": metrics.get("avg_steps"),
        "invalid_action_rate": metrics.get("invalid_action_rate"),
        "dead_loop_rate": metrics.get("dead_loop_rate"),
        "repeated_action_rate": metrics.get("repeated_action_rate"),
        "recovery_success": recovery.get("success_rate"),
        "recovery_episodes": recovery.get("episodes"),
        "revision_length_mean": revision_length,
    }


def collect_report(
    run_id: str, run_events: Sequence[DomainEvent], revision_lengths: dict[int, float]
) -> dict[str, Any]:
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


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    header = "| model | " + " | ".join(title for _, title in COLUMNS) + " |"
    rule = "|---|" + "---:|" * len(COLUMNS)
    lines = [header, rule]
    for row in rows:
        lines.append(f"| {row['model']} | " + " | ".join(_fmt(row.get(key)) for key, _ in COLUMNS) + " |")
    return "\n".join(lines) + "\n"


def report_markdown(report: dict[str, Any]) -> str:
    out = [f"# agentr run {report['run_id']}", "", f"status: **{report['status']}**"]
    if report.get("reason"):
        out.append(f"reason: {report['reason']}")
    out += ["", markdown_table(report["rows"]) if report["rows"] else "(no evaluation yet)", ""]
    datasets = report.get("datasets") or {}
    if datasets:
        out.append("| iteration | revision samples | good trajectories |")
        out.append("|---:|---:|---:|")
        for iteration in sorted(datasets, key=int):
            counts = datasets[iteration]
            out.append(f"| {iteration} | {counts.get('revision', 0)} | {counts.get('good', 0)} |")
        out.append("")
    return "\n".join(out)


def plot(rows: Sequence[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [
        ("success_rate", "success rate"),
        ("avg_reward", "avg reward"),
        ("invalid_action_rate", "invalid actions"),
        ("dead_loop_rate", "dead loops"),
        ("recovery_success", "recovery"),
    ]
    labels = [r["model"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, name in keys:
        values = [r.get(key) for r in rows]
        xs = [i for i, v in enumerate(values) if v is not None]
        ax.plot(xs, [float(values[i] or 0.0) for i in xs], marker="o", label=name)
    ax.set_xticks(range(len(labels)), labels)
    ax.set_ylim(-0.05, 1.05)
    ax.set_title(title)
    ax.legend(loc="best", fontsize="small")
    ax.grid(alpha=0.3)
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
    return markdown_table([_row(str(metrics.get("model", "model")), metrics, None)])


def write_eval(metrics: dict[str, Any], folder: Path) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"json": folder / "eval.json", "markdown": folder / "eval.md", "png": folder / "eval.png"}
    paths["json"].write_text(json.dumps(metrics, indent=2, sort_keys=True, default=str))
    paths["markdown"].write_text(eval_markdown(metrics))
    plot([_row(str(metrics.get("model", "model")), metrics, None)], paths["png"], "evaluation")
    return {k: str(v) for k, v in paths.items()}
