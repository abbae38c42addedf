"""Owns the embedded loop behind ``agentr run``: settings and torch threads, the run's start (or
resume) in the embedded store, the search / critic / splice / train services driven in one process
with progress bars that follow the store's read models, and the final console summary (the report,
which names each iteration's learner: ``ModelTrained.metrics["method"]``).
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from agentr.cli.demo import RunOptions, plan_run
from agentr.cli.run_report import write_run_report
from agentr.cli.warm_start import fit_context, prepare_model

if TYPE_CHECKING:
    from core.store.sql import SqlEventStore

console = Console(stderr=True)


def embedded_settings(
    home: str | Path = "", threads: int | None = None, database_url: str | None = None
) -> tuple[Any, Path]:
    """Settings of an embedded run (SQLite under ``home``, in-process bus), the resolved home, and
    the process set up for it: logging, quiet transformers progress, torch threads per phase (one
    for inference; ``threads`` for training, default ``torch_threads.default_training_threads()``:
    a fixed count, never the machine's momentary load, core.runtime.torch_threads).

    ``AGENTR_DATABASE_URL`` and ``AGENTR_REDIS_URL`` are ignored: inside a deployment's container
    they name the deployment's database, whose workers would pick the run up and redo its work;
    ``database_url`` (``agentr run --database-url``) names another store explicitly."""
    from core.runtime import torch_threads
    from core.runtime.logging import configure_logging
    from core.runtime.settings import load_settings

    overrides: dict[str, Any] = {"redis_url": None, "reclaim_idle_ms": 2000, "database_url": database_url}
    if home:
        overrides["home"] = Path(home)
    # the run is what this machine's user typed: its served model and environment are called as given
    settings = load_settings(**overrides).for_local_user()
    resolved = Path(settings.home).resolve()
    resolved.mkdir(parents=True, exist_ok=True)
    configure_logging(os.environ.get("AGENTR_LOG_LEVEL", "WARNING"), False)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own rich bars say what is happening
    training = threads if threads is not None else torch_threads.default_training_threads()
    torch_threads.configure(inference=torch_threads.INFERENCE_THREADS, training=training)
    return settings, resolved


def run_command(opts: RunOptions) -> int:
    from core.runtime import torch_threads

    try:
        threads = opts.threads if opts.threads is not None else torch_threads.default_training_threads()
    except ValueError as exc:  # a malformed OMP_NUM_THREADS
        console.print(f"[red]cannot start the run:[/red] {exc}")
        return 2
    settings, home = embedded_settings(opts.home, threads, opts.database_url or None)
    if os.environ.get("AGENTR_DATABASE_URL") and not opts.database_url:
        console.print(
            "[yellow]note:[/yellow] AGENTR_DATABASE_URL is set but not used: this run keeps its own "
            f"store, {settings.effective_database_url} (--database-url names another)"
        )
    started = time.monotonic()
    try:
        plan = plan_run(opts)
    except ValueError as exc:  # options that contradict each other (--judge-mix with --method dpo)
        console.print(f"[red]cannot start the run:[/red] {exc}")
        return 2
    config = dict(plan.config)
    if not opts.resume:
        from core.domain.config import RunConfig

        problem = RunConfig.from_data(config).training_problem()
        if problem is not None:
            console.print(f"[red]cannot start the run:[/red] {problem}")
            return 2
        for note in plan.notes:  # what the plan decided (learner settings, critic)
            console.print(f"[yellow]note:[/yellow] {note}")
        if plan.mixed_bf16:  # --bf16 (auto: this CPU multiplies bfloat16 natively)
            console.print(
                "training precision: fp32 weights, MLP blocks in bfloat16 (train_service/precision.py; "
                "--bf16 off trains in fp32)"
            )
        # the conditions its floats depend on, recorded in the run's config (report.md shows them)
        config = with_conditions(config)
        console.print(
            f"torch threads: {threads} for training (--threads), {torch_threads.INFERENCE_THREADS} for "
            f"inference; CPU: {config['runtime']['cpu']['model']} ({config['runtime']['cpu']['capability']})"
        )
    if not opts.resume:
        from core.llm.chat_template import run_template_problem

        try:
            config["model"] = prepare_model(plan, home, opts.seed)
        except Exception as exc:
            console.print(f"[red]cannot prepare the model:[/red] {exc}")
            return 2
        # first what the model cannot do at all (no template / not prefix-stable / drops tool calls)
        template = run_template_problem(RunConfig.from_data(config))
        if template is not None:
            console.print(f"[red]cannot start the run:[/red] {template[0]}: {template[1]}")
            return 2
        try:  # a tool environment's prompts and turns in the model's tokens (agentr.cli.warm_start)
            config, fitted = fit_context(config, plan)
        except Exception as exc:
            console.print(f"[red]cannot prepare the model:[/red] {exc}")
            return 2
        for note in fitted:
            console.print(f"[yellow]note:[/yellow] {note}")
        if plan.judge_general:  # the warm start's judge set as general data (train_service/judge_data.py)
            from train_service.judge_data import with_judge_general

            config, judge_note = with_judge_general(config, config["model"])
            if judge_note:
                console.print(judge_note)
    code, _run_id = asyncio.run(_run_async(settings, home, config, opts.resume, started))
    return code


def run_config(
    settings: Any, home: Path, config: dict[str, Any], *, show_report: bool = True
) -> tuple[int, str]:
    """Run one whole configuration (its ``model`` already prepared) in this process: (exit code,
    run id). The run's report is under ``home/runs/<run id>/`` (bench/paper.py reads it). A critic the
    environment cannot support (``oracle`` without a first-error oracle) is refused here, before any
    event (ValueError naming it)."""
    from core.envs.textcraft.oracle import oracle_strategy_problem

    strategy = str((config.get("critic") or {}).get("strategy", "model"))
    if (problem := oracle_strategy_problem(strategy, str(config.get("env", "textcraft")))) is not None:
        raise ValueError(problem)
    return asyncio.run(_run_async(settings, home, config, "", time.monotonic(), show_report=show_report))


async def _run_async(
    settings: Any,
    home: Path,
    config: dict[str, Any],
    resume: str,
    started: float,
    *,
    show_report: bool = True,
) -> tuple[int, str]:
    from core.domain.events import NewEvent, RunRequested
    from core.domain.ids import new_id, run_stream
    from core.domain.runs import fold
    from core.store.factory import open_store

    store = await open_store(settings.effective_database_url, create_tables=True)
    try:
        if resume:
            run_id = resume
            history = await store.read_stream(run_stream(run_id))
            if not history:
                console.print(f"[red]no run {run_id} in {settings.effective_database_url}[/red]")
                return 2, run_id
            state = fold(run_id, [r.event for r in history])
            if state.terminal:
                console.print(f"run {run_id} is already {state.status}")
                return (0 if state.status == "completed" else 1), run_id
            config = state.config.to_data()
            console.print(f"resuming run [bold]{run_id}[/bold]")
            _resume_conditions(config)
        else:
            run_id = new_id()
            config = with_conditions(config)  # a bench's config too (bench/paper.py: run_config)
            await store.append(
                [NewEvent(run_stream(run_id), RunRequested(run_id, "local", config))],
                {run_stream(run_id): -1},
            )
            console.print(f"run [bold]{run_id}[/bold] started; data in {home}")
        (home / "runs" / run_id).mkdir(parents=True, exist_ok=True)
        status = await _drive(store, settings, run_id, config)
        report_paths = await write_run_report(store, home, run_id)
        elapsed = time.monotonic() - started
        final = fold(run_id, [r.event for r in await store.read_stream(run_stream(run_id))])
        learners = ", ".join(
            f"iteration {it.iteration}: {it.train_metrics.get('method', 'sft')}"
            for it in final.iterations
            if it.train_metrics
        )
        if learners:  # ModelTrained.metrics["method"] of every trained iteration
            console.print(f"trained with {learners}")
        if final.status == "completed":
            console.print(
                f"[green]run {run_id} completed[/green] in {elapsed:.0f}s; report: {report_paths['markdown']}"
            )
            if final.reason:  # an iteration after the first had nothing to train on
                console.print(f"[yellow]{final.reason}[/yellow]")
            if show_report:
                # the report, its Training table included (train_service.report.training_markdown)
                console.print(await asyncio.to_thread(Path(report_paths["markdown"]).read_text))
            return 0, run_id
        console.print(f"[red]run {run_id} {status}[/red]: {final.reason}")
        return 1, run_id
    finally:
        await store.close()


def with_conditions(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with its ``runtime`` record (the training threads configured for this process,
    the training precision its ``train`` settings ask for, the CPU), unless it has one already."""
    from core.runtime import torch_threads

    if config.get("runtime"):
        return config
    train = config.get("train") or {}
    precision = "bf16" if train.get("bf16") else "mixed_bf16" if train.get("mixed_bf16") else "fp32"
    import torch

    threads = torch_threads.training_threads() or torch.get_num_threads()
    return {**config, "runtime": torch_threads.run_conditions(training=threads, precision=precision)}


def _resume_conditions(config: dict[str, Any]) -> None:
    """A resumed run trains with the thread count it recorded at its start (the same floats as an
    undisturbed run), whatever ``--threads`` or the environment say now; a different CPU or ISA
    cap is named (its later iterations may differ from an undisturbed run's)."""
    from core.runtime import torch_threads
    from core.runtime.cpu_features import describe

    runtime = config.get("runtime") or {}
    recorded = torch_threads.recorded_training_threads(runtime)
    if recorded is not None:
        torch_threads.configure(inference=torch_threads.INFERENCE_THREADS, training=recorded)
        console.print(f"torch threads: {recorded} for training, as the run recorded at its start")
    cpu = runtime.get("cpu") or {}
    now = describe()
    changed = [k for k in ("model", "capability", "isa_caps") if k in cpu and cpu[k] != now[k]]
    if changed:
        console.print(
            "[yellow]note:[/yellow] the run started on another CPU setting ("
            + ", ".join(f"{k}: {cpu[k]!r} then, {now[k]!r} now" for k in changed)
            + "): later iterations may differ from an undisturbed run's"
        )


async def _drive(store: SqlEventStore, settings: Any, run_id: str, config: dict[str, Any]) -> str:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from agentr.process import build_service
    from core.domain.config import RunConfig
    from core.domain.ids import run_stream
    from core.domain.runs import fold
    from core.llm.policy_cache import PolicyCache
    from core.llm.registry import egress_checked as checked_policy_opener
    from core.runtime.embedded import run_embedded
    from core.store.queries.runs import latest_iteration
    from search_service.service import open_search_policy
    from train_service.service import build_service as build_train

    cfg = RunConfig.from_data(config)
    bars = Progress(
        TextColumn("{task.description:<22}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        console=console,
    )
    ids = {
        name: bars.add_task(name, total=None, info="")
        for name in ("trees", "pairs", "samples", "training", "evaluation")
    }
    train_state: dict[str, Any] = {"step": 0, "max": 0, "loss": None}
    eval_state: dict[str, Any] = {}

    def on_train_step(step: int, max_steps: int, loss: float | None) -> None:
        train_state.update(step=step, max=max_steps, loss=loss)

    def on_eval(label: str, done: int, total: int) -> None:
        eval_state.update(label=label, done=done, total=total)

    # one process: search, critic and splice share ONE model cache (one copy of each model, not three)
    egress = settings.egress  # the services' own openers check against it; the shared cache too
    opener = checked_policy_opener(functools.partial(open_search_policy, egress=egress), egress)
    models = PolicyCache(opener, max_open=settings.max_open_models, name="models")
    services = [
        await build_service("search", settings, store, policies=models),
        await build_service("critic", settings, store, policies=models),
        await build_service("splice", settings, store, policies=models),
        build_train(
            settings,
            store,
            inline_training=True,
            on_train_step=on_train_step,
            on_eval=on_eval,
            before_training=models.close_idle,  # the searched models are not used again: free them
        ),
    ]
    status = {"value": "running"}

    async def until() -> bool:
        history = await store.read_stream(run_stream(run_id))
        state = fold(run_id, [r.event for r in history])
        row = await latest_iteration(store, run_id)
        if row is not None:
            label = f"iteration {row['iteration'] + 1}/{cfg.iterations}"
            bars.update(
                ids["trees"],
                total=row["trees_expected"],
                completed=row["trees_done"] + row["trees_failed"],
                info=label,
            )
            found = row["pairs"]
            bars.update(ids["pairs"], total=max(found, 1), completed=found, info=f"{found} pairs")
            bars.update(
                ids["samples"],
                total=None,
                completed=row["revisions"] + row["goods"],
                info=f"{row['revisions']} revisions, {row['goods']} good",
            )
        if train_state["max"]:
            loss = train_state["loss"]
            bars.update(
                ids["training"],
                total=train_state["max"],
                completed=train_state["step"],
                info="" if loss is None else f"loss {loss:.3f}",
            )
        if eval_state:
            bars.update(
                ids["evaluation"],
                total=eval_state["total"],
                completed=eval_state["done"],
                info=eval_state["label"],
            )
        status["value"] = state.status
        await asyncio.sleep(0.5)
        return state.terminal

    try:
        with bars:
            await run_embedded(store, services, until, settings=settings)
    finally:
        await models.close()
    return status["value"]
