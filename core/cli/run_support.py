"""Owns the work behind ``agentr run`` / ``eval`` / ``export``: the demo configuration, the cached tiny
model and warm start, the embedded loop with its progress bars, and the final report.

Heavy imports (torch, transformers, SQLAlchemy) happen inside the functions so ``agentr --help`` stays
fast.

How the demo was tuned (2 shared CPU cores, trees inspected in the run's SQLite store): a warm start
of 300 s (261 steps) on the 8 searched goals made the model perfect and peaked, so every expansion's
4 candidates collapsed to ONE distinct action (temperature 0.8), each tree was a single successful
path and no iteration had a pair. The warm start is now a fixed number of optimizer steps (80, the
same model on any machine; the time is only a safety cap): at temperature 1.0 the expansions give
1-4 distinct actions (wrong recipes, counts, items), trees hold successes and failures. The searched
goals are the first 12 of the demo split, 8 MCTS descents per tree, depth 6, and the iteration SFT
runs 8 epochs at 3e-4 (at 3 epochs / 5e-4 the loss on revision samples stayed ~4 and the model
sampled junk at 1.2, so iteration 1 found no success). Measured, fresh AGENTR_HOME, `agentr run`:
4 min 28 s in all (tiny model built 3 s, warm start 80 steps 67 s; iteration 0: search 13 s, SFT
35 s, evaluation 22 s; iteration 1: search 50 s, SFT 60 s, evaluation 12 s); pairs 16 then 30,
revision samples 16 then 30 (all verified), good trajectories 14 then 11. ``--quick`` (64-hidden
model, 300 warm-start steps, 2 goals, temperature 1.2) finds 2 pairs in iteration 0 with its fixed
seeds, in ~20 s.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

log = logging.getLogger("agentr.run")
console = Console(stderr=True)

# The demo: the easy TextCraft split (12 depth-1 + 4 depth-2 goals), one distractor recipe.
DEMO_ENV = "textcraft?distractors=1&split=demo&max_steps=12"
QUICK_ENV = "textcraft?distractors=0&split=demo&max_steps=6"


@dataclass(frozen=True)
class TinySpec:
    hidden: int
    layers: int
    heads: int
    vocab_size: int


@dataclass(frozen=True)
class RunOptions:
    model: str = ""
    env: str = ""
    iterations: int = 2
    tasks: tuple[str, ...] = ()
    max_tasks: int | None = None
    eval_tasks: tuple[str, ...] = ()
    max_eval_tasks: int | None = None
    warm_start_steps: int | None = None
    seed: int = 0
    quick: bool = False
    data_only: bool = False
    home: str = ""
    resume: str = ""
    train_from: str = ""  # local weights of a served --model URL (RunConfig.train["model_path"])


@dataclass(frozen=True)
class Plan:
    """Everything ``agentr run`` decided before starting: the config and how to get the model."""

    config: dict[str, Any]  # a RunConfig (model filled in once the model is ready)
    tiny: TinySpec | None  # None when --model was given
    warm_start_steps: int  # optimizer steps of the warm start (0 = none): a fixed amount of training
    warm_start_cap_s: float  # wall-clock safety cap on the warm start (a slow machine stops early)
    warm_start_tasks: tuple[str, ...]


WARM_START_LR = 3e-3


def plan_run(opts: RunOptions) -> Plan:
    """The run configuration for ``opts`` (demo defaults, or the reduced ``--quick`` one).

    The demo is tuned so that the warm-started tiny model is competent but NOT perfect on the
    searched goals (measured figures in the module docstring): a fixed number of warm-start steps
    (not a time budget, so the model is the same on any machine), and a search temperature that
    makes the expansions branch into wrong recipes / counts, so every iteration's trees hold both
    successes and failures, hence pairs and revision samples.
    """
    from core.domain.config import RunConfig

    env = opts.env or (QUICK_ENV if opts.quick else DEMO_ENV)
    if opts.quick:
        max_tasks = opts.max_tasks or 2
        search = {
            "n_candidates": 4,
            "iterations": 6,
            "max_depth": 4,
            "temperature": 1.2,
            "max_tokens": 32,
            "max_pairs_per_tree": 3,
        }
        train = {
            "epochs": 1.0,
            "learning_rate": 3e-4,
            "batch_size": 4,
            "max_length": 512,
            "time_budget_s": 60.0,  # a safety cap (a few steps; measured < 2 s)
            "logging_steps": 5,
        }
        evaluation = {"max_steps": 4, "max_tokens": 32, "recovery_episodes": 2, "baseline": True}
        tiny = TinySpec(hidden=64, layers=2, heads=2, vocab_size=768)
        warm_steps, warm_cap = 300, 240.0
        max_eval = opts.max_eval_tasks or 2
        eval_split = "test"  # held-out: the quick run searches and trains on demo goals
    else:
        max_tasks = opts.max_tasks or 12
        search = {
            "n_candidates": 4,
            "iterations": 8,
            "max_depth": 6,
            "temperature": 1.0,
            "max_tokens": 40,
            "max_pairs_per_tree": 4,
        }
        train = {
            "epochs": 8.0,
            "learning_rate": 3e-4,
            "batch_size": 8,
            "max_length": 768,
            "time_budget_s": 240.0,  # a safety cap: measured 40-60 s per iteration
            "packing": True,
            "logging_steps": 5,
        }
        evaluation = {"max_steps": 10, "max_tokens": 40, "recovery_episodes": 6, "baseline": True}
        tiny = TinySpec(hidden=256, layers=4, heads=4, vocab_size=2048)
        warm_steps, warm_cap = 80, 480.0
        max_eval = opts.max_eval_tasks or 8
        eval_split = "test"  # its first goals are depth-1 goals the demo split never shows
    if opts.warm_start_steps is not None:
        warm_steps = opts.warm_start_steps
    train_config: dict[str, Any] = dict(train)
    if opts.train_from:
        train_config["model_path"] = opts.train_from
    config = RunConfig(
        env=env,
        model=opts.model,
        tasks=opts.tasks,
        split="demo" if env.startswith("textcraft") else "train",
        max_tasks=max_tasks,
        eval_tasks=opts.eval_tasks,
        eval_split=eval_split if env.startswith("textcraft") else "test",
        max_eval_tasks=max_eval,
        iterations=opts.iterations,
        search=search,
        critic={"strategy": "model"},
        splice={"verify": True, "keep_unverified": False},
        train=train_config,
        evaluation=evaluation,
        data_only=opts.data_only,
        seed=opts.seed,
    )
    return Plan(
        config=config.to_data(),
        tiny=None if opts.model else tiny,
        warm_start_steps=warm_steps,
        warm_start_cap_s=warm_cap,
        warm_start_tasks=opts.tasks,
    )


def _key(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:12]


def prepare_model(plan: Plan, home: Path, seed: int) -> str:
    """The starting model's ref: ``--model`` as given, or the cached tiny model (built, warm-started)."""
    if plan.tiny is None:
        return str(plan.config["model"])
    from core.domain.config import RunConfig
    from core.envs.registry import open_env
    from core.llm.tiny import build_tiny_model, default_corpus

    spec = plan.tiny
    base = home / "models" / f"tiny-{_key(spec.__dict__, seed)}"
    if not (base / "config.json").is_file():
        with console.status(
            f"building the tiny model ({spec.hidden} hidden, {spec.layers} layers) in {base}..."
        ):
            build_tiny_model(
                base,
                default_corpus(),
                hidden=spec.hidden,
                layers=spec.layers,
                heads=spec.heads,
                vocab_size=spec.vocab_size,
                seed=seed,
            )
    if plan.warm_start_steps <= 0:
        return str(base)
    config = RunConfig.from_data(plan.config)
    env = open_env(config.env)
    tasks = list(plan.warm_start_tasks) or env.task_ids(config.split)[: config.max_tasks]
    warm = (
        home
        / "models"
        / f"warm-{_key(base.name, config.env, tasks, plan.warm_start_steps, WARM_START_LR, seed)}"
    )
    if (warm / "meta.json").is_file():
        console.print(f"warm-started model found in [bold]{warm}[/bold] (cached)")
        return str(warm)
    _warm_start(base, env, tasks, plan, warm, seed)
    return str(warm)


def _warm_start(base: Path, env: Any, tasks: list[str], plan: Plan, out: Path, seed: int) -> None:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from core.domain.datasets import trajectory_to_sample
    from core.domain.ids import derived_id
    from train_service.sft import SFTConfig, train_sft
    from train_service.warm_start import expert_trajectories

    expert = [
        trajectory_to_sample(t, derived_id("expert", t.provenance["task_id"]))
        for t in expert_trajectories(env, tasks)
    ]
    if not expert:
        raise RuntimeError("the expert solver finished none of the warm-start tasks")
    cfg = SFTConfig(
        max_steps=plan.warm_start_steps,
        learning_rate=WARM_START_LR,
        lr_scheduler="cosine",
        warmup=0.05,
        time_budget_s=plan.warm_start_cap_s,
        packing=True,
        max_length=512,
        batch_size=8,
        logging_steps=20,
        seed=seed,
    )
    with Progress(
        TextColumn("warm start"),
        BarColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        console=console,
    ) as bars:
        bar = bars.add_task("warm", total=plan.warm_start_steps, info="")

        def on_step(step: int, _max: int, loss: float | None) -> None:
            info = f"step {step}" + (f", loss {loss:.3f}" if loss is not None else "")
            bars.update(bar, completed=step, info=info)

        report = train_sft(
            base, expert, out, cfg, iteration=-1, dataset_id=f"warm-start:{_key(tasks)}", on_step=on_step
        )
        bars.update(bar, completed=plan.warm_start_steps)
    console.print(
        f"warm start: {len(expert)} expert episodes, {report.metrics.get('steps')} steps in "
        f"{report.metrics.get('seconds', 0):.0f}s -> [bold]{out}[/bold]"
    )


# --------------------------------------------------------------------------------------------
# agentr run
# --------------------------------------------------------------------------------------------


def _torch_threads() -> int:
    """Intra-op threads for the tiny model: the idle cores, 1 to 2. A tiny model's kernels are short,
    so a thread waiting for a busy core stalls every op (measured on a loaded 2-core machine: 2
    threads ran the quick warm start 15x slower than 1)."""
    cores = os.cpu_count() or 1
    try:
        idle = cores - os.getloadavg()[0]
    except OSError:  # no load average on this platform
        idle = cores
    return max(1, min(2, round(idle)))


def run_command(opts: RunOptions) -> int:
    from core.runtime.logging import configure_logging
    from core.runtime.settings import load_settings

    overrides: dict[str, Any] = {"redis_url": None, "reclaim_idle_ms": 2000}
    if opts.home:
        overrides["home"] = Path(opts.home)
    settings = load_settings(**overrides)
    home = Path(settings.home).resolve()
    home.mkdir(parents=True, exist_ok=True)
    configure_logging(os.environ.get("AGENTR_LOG_LEVEL", "WARNING"), False)
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own rich bars say what is happening

    if not os.environ.get("OMP_NUM_THREADS"):  # an explicit OMP_NUM_THREADS is respected by torch
        torch.set_num_threads(_torch_threads())
    started = time.monotonic()
    plan = plan_run(opts)
    config = dict(plan.config)
    if not opts.resume:
        from core.domain.config import RunConfig

        problem = RunConfig.from_data(config).training_problem()
        if problem is not None:
            console.print(f"[red]cannot start the run:[/red] {problem}")
            return 2
    if not opts.resume:
        try:
            config["model"] = prepare_model(plan, home, opts.seed)
        except Exception as exc:
            console.print(f"[red]cannot prepare the model:[/red] {exc}")
            return 2
    return asyncio.run(_run_async(settings, home, config, opts.resume, started))


async def _run_async(settings: Any, home: Path, config: dict[str, Any], resume: str, started: float) -> int:
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
                return 2
            state = fold(run_id, [r.event for r in history])
            if state.terminal:
                console.print(f"run {run_id} is already {state.status}")
                return 0 if state.status == "completed" else 1
            config = state.config.to_data()
            console.print(f"resuming run [bold]{run_id}[/bold]")
        else:
            run_id = new_id()
            await store.append(
                [NewEvent(run_stream(run_id), RunRequested(run_id, "local", config))],
                {run_stream(run_id): -1},
            )
            console.print(f"run [bold]{run_id}[/bold] started; data in {home}")
        (home / "runs" / run_id).mkdir(parents=True, exist_ok=True)
        status = await _drive(store, settings, run_id, config)
        report_paths = await _write_report(store, home, run_id)
        elapsed = time.monotonic() - started
        final = fold(run_id, [r.event for r in await store.read_stream(run_stream(run_id))])
        if final.status == "completed":
            console.print(
                f"[green]run {run_id} completed[/green] in {elapsed:.0f}s; report: {report_paths['markdown']}"
            )
            console.print(await asyncio.to_thread(Path(report_paths["markdown"]).read_text))
            return 0
        console.print(f"[red]run {run_id} {status}[/red]: {final.reason}")
        return 1
    finally:
        await store.close()


async def _drive(store: Any, settings: Any, run_id: str, config: dict[str, Any]) -> str:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from sqlalchemy import select

    from core.domain.config import RunConfig
    from core.domain.ids import run_stream
    from core.domain.runs import fold
    from core.runtime.embedded import run_embedded
    from core.runtime.process import build_service
    from core.store.tables import iterations
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

    services = [
        await build_service("search", settings, store),
        await build_service("critic", settings, store),
        await build_service("splice", settings, store),
        build_train(settings, store, inline_training=True, on_train_step=on_train_step, on_eval=on_eval),
    ]
    status = {"value": "running"}

    async def until() -> bool:
        history = await store.read_stream(run_stream(run_id))
        state = fold(run_id, [r.event for r in history])
        async with store.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(iterations)
                    .where(iterations.c.run_id == run_id)
                    .order_by(iterations.c.iteration.desc())
                )
            ).first()
        if row is not None:
            label = f"iteration {row.iteration + 1}/{cfg.iterations}"
            bars.update(
                ids["trees"],
                total=row.trees_expected,
                completed=row.trees_done + row.trees_failed,
                info=label,
            )
            bars.update(ids["pairs"], total=max(row.pairs, 1), completed=row.pairs, info=f"{row.pairs} pairs")
            bars.update(
                ids["samples"],
                total=None,
                completed=row.revisions + row.goods,
                info=f"{row.revisions} revisions, {row.goods} good",
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

    with bars:
        await run_embedded(store, services, until, settings=settings)
    return status["value"]


async def _write_report(store: Any, home: Path, run_id: str) -> dict[str, str]:
    from core.domain.ids import run_stream
    from train_service.evaluation import revision_lengths
    from train_service.report import collect_report, write_report

    history = [r.event for r in await store.read_stream(run_stream(run_id))]
    report = collect_report(run_id, history, await revision_lengths(store, run_id))
    report["datasets"] = await _dataset_counts(store, run_id)
    return write_report(report, home / "runs" / run_id)


async def _dataset_counts(store: Any, run_id: str) -> dict[str, Any]:
    """Per iteration: trees searched, pairs found, revision samples (their mean revision length, and
    ``verified_share``: verified revision samples / pairs) and good trajectories."""
    from sqlalchemy import Integer, func, select

    from core.store.tables import iterations, pairs, samples

    async with store.engine.connect() as conn:
        rows = (
            await conn.execute(
                select(
                    samples.c.iteration,
                    samples.c.kind,
                    func.count(),
                    func.sum(func.coalesce(samples.c.verified, False).cast(Integer())),
                    func.avg(samples.c.revision_length),
                )
                .where(samples.c.run_id == run_id)
                .group_by(samples.c.iteration, samples.c.kind)
            )
        ).all()
        pair_rows = (
            await conn.execute(
                select(pairs.c.iteration, func.count())
                .where(pairs.c.run_id == run_id)
                .group_by(pairs.c.iteration)
            )
        ).all()
        tree_rows = (
            await conn.execute(
                select(iterations.c.iteration, iterations.c.trees_done).where(iterations.c.run_id == run_id)
            )
        ).all()
    out: dict[str, Any] = {}
    for iteration, trees in tree_rows:
        out.setdefault(str(iteration), {})["trees"] = int(trees)
    for iteration, count in pair_rows:
        out.setdefault(str(iteration), {})["pairs"] = int(count)
    for iteration, kind, count, verified, length in rows:
        entry = out.setdefault(str(iteration), {})
        entry[kind] = int(count)
        if kind == "revision":
            entry["verified"] = int(verified or 0)
            entry["revision_length_mean"] = None if length is None else float(length)
    for entry in out.values():
        # the share of the iteration's pairs that became a revision sample passing the replay check
        entry["verified_share"] = entry.get("verified", 0) / entry["pairs"] if entry.get("pairs") else None
    return out


# --------------------------------------------------------------------------------------------
# agentr eval
# --------------------------------------------------------------------------------------------


def eval_command(
    *,
    model: str,
    env: str,
    tasks: tuple[str, ...],
    split: str,
    max_tasks: int | None,
    max_steps: int,
    max_tokens: int,
    out: str,
) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from core.envs.base import EnvError
    from core.envs.registry import open_env
    from core.llm.ports import PolicyError
    from core.llm.registry import open_policy
    from train_service.evaluation import EvalConfig, evaluate
    from train_service.report import eval_markdown, write_eval
    from train_service.runs import select_tasks

    try:
        probe = open_env(env)
        task_ids = select_tasks(probe, tasks, split, max_tasks)
        asyncio.run(probe.close())
        policy = open_policy(model)
    except (EnvError, PolicyError, ValueError) as exc:
        console.print(f"[red]cannot evaluate:[/red] {exc}")
        return 2
    if not task_ids:
        console.print(f"[red]no tasks:[/red] split {split!r} of {env} is empty")
        return 2
    cfg = EvalConfig(max_steps=max_steps, max_tokens=max_tokens, recovery_episodes=0, baseline=False)
    with Progress(TextColumn("episodes"), BarColumn(), MofNCompleteColumn(), console=console) as bars:
        bar = bars.add_task("eval", total=len(task_ids))

        def progress(done: int, total: int) -> None:
            bars.update(bar, completed=done, total=total)

        async def go() -> dict[str, Any]:
            try:
                return await evaluate(policy, lambda: open_env(env), task_ids, cfg, progress=progress)
            finally:
                await policy.close()

        metrics = asyncio.run(go())
    metrics["model"] = model
    metrics["env"] = env
    if out:
        paths = write_eval(metrics, Path(out))
        console.print(f"written {', '.join(paths.values())}")
    print(eval_markdown(metrics))
    return 0


# --------------------------------------------------------------------------------------------
# agentr export
# --------------------------------------------------------------------------------------------


def export_command(run_id: str, iteration: int, fmt: str, output: str, home: str) -> int:
    from core.runtime.settings import load_settings

    if fmt not in ("openai", "sharegpt", "parquet"):
        console.print(f"[red]unknown format {fmt!r}[/red]: choose openai, sharegpt or parquet")
        return 2
    settings = load_settings(**({"home": Path(home)} if home else {}))
    try:
        count = asyncio.run(_export(settings, run_id, iteration, fmt, Path(output)))
    except (LookupError, ValueError, FileNotFoundError) as exc:
        console.print(f"[red]cannot export:[/red] {exc}")
        return 2
    console.print(f"{count} samples written to {output} ({fmt})")
    return 0


async def _export(settings: Any, run_id: str, iteration: int, fmt: str, output: Path) -> int:
    from core.domain.ids import run_stream
    from core.domain.runs import fold
    from core.formats.export import write_jsonl, write_parquet
    from core.store.factory import open_store
    from train_service.runs import RunEffects

    store = await open_store(settings.effective_database_url, create_tables=False)
    try:
        history = await store.read_stream(run_stream(run_id))
        if not history:
            raise LookupError(f"no run {run_id} in {settings.effective_database_url}")
        state = fold(run_id, [r.event for r in history])
        if state.iteration(iteration) is None:
            raise LookupError(f"run {run_id} has no iteration {iteration}")
        effects = RunEffects(settings, store)
        from core.domain.datasets import DatasetConfig, build_dataset
        from core.formats.export import read_general_chat

        revisions, good = await effects.load_samples(run_id, iteration)
        general = list(read_general_chat(state.config.general_data)) if state.config.general_data else []
        built = build_dataset(
            run_id=run_id,
            iteration=iteration,
            revisions=revisions,
            good=good,
            general=general,
            config=DatasetConfig(
                alpha_schedule=state.config.alpha_schedule, eta=state.config.eta, seed=state.config.seed
            ),
        )
        if fmt == "parquet":
            return write_parquet(output, built.samples)
        return write_jsonl(output, built.samples, fmt)
    finally:
        await store.close()
