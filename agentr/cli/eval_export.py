"""Owns ``agentr eval`` (greedy episodes of a model on an environment's tasks, written as
eval.json / eval.md / eval.png) and ``agentr export`` (an iteration's dataset as OpenAI JSONL,
ShareGPT JSONL or Parquet).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from rich.console import Console

console = Console(stderr=True)


def eval_command(
    *,
    model: str,
    env: str,
    tasks: tuple[str, ...],
    split: str,
    max_tasks: int | None,
    max_steps: int,
    max_tokens: int,
    episodes: int = 1,
    temperature: float = 0.0,
    seed: int = 0,
    constrain_actions: bool = False,
    constrain_tool_calls: bool = True,
    out: str,
    workers: int | None = None,
) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from core.envs.base import EnvError
    from core.envs.registry import open_env
    from core.llm.ports import PolicyError
    from core.llm.registry import open_policy
    from train_service.episode_processes import EpisodeWorkers, resolve_workers
    from train_service.evaluation import EvalConfig, evaluate, held_out_tasks
    from train_service.report import eval_markdown, write_eval
    from train_service.runs import select_tasks

    try:
        cfg = EvalConfig(
            max_steps=max_steps,
            max_tokens=max_tokens,
            episodes_per_task=episodes,
            temperature=temperature,
            recovery_episodes=0,
            baseline=False,
            constrain_actions=constrain_actions,
            constrain_tool_calls=constrain_tool_calls,
            workers=workers,
        )
        probe = open_env(env)
        task_ids = held_out_tasks(probe, select_tasks(probe, tasks, split, None), max_tasks)
        asyncio.run(probe.close())
        policy = open_policy(model)
    except (EnvError, PolicyError, ValueError) as exc:
        console.print(f"[red]cannot evaluate:[/red] {exc}")
        return 2
    if not task_ids:
        asyncio.run(policy.close())
        console.print(f"[red]no tasks:[/red] split {split!r} of {env} is empty")
        return 2
    with Progress(TextColumn("episodes"), BarColumn(), MofNCompleteColumn(), console=console) as bars:
        bar = bars.add_task("eval", total=len(task_ids) * episodes)

        def progress(done: int, total: int) -> None:
            bars.update(bar, completed=done, total=total)

        local = not model.startswith(("http://", "https://"))
        count = resolve_workers(workers, len(task_ids) * episodes) if local else 1

        async def go() -> dict[str, Any]:
            if count > 1:  # a local model's episodes in worker processes (train_service.episode_processes)
                await policy.close()  # it was opened to name a bad folder before any work
                async with EpisodeWorkers(count) as pool:
                    player = pool.player(model, env)
                    return await evaluate(
                        None,
                        lambda: open_env(env),
                        task_ids,
                        cfg,
                        seed=seed,
                        progress=progress,
                        player=player,
                    )
            try:
                return await evaluate(
                    policy, lambda: open_env(env), task_ids, cfg, seed=seed, progress=progress
                )
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


def export_command(
    run_id: str,
    iteration: int,
    fmt: str,
    output: str,
    home: str,
    model: str | None = None,
    max_length: int = 1024,
) -> int:
    from agentr.cli.export_formats import LOCAL_FORMATS, PAIR_FORMATS
    from core.runtime.settings import load_settings

    known = ("openai", "sharegpt", "parquet", *PAIR_FORMATS, *LOCAL_FORMATS)
    if fmt not in known:
        console.print(f"[red]unknown format {fmt!r}[/red]: choose {', '.join(known)}")
        return 2
    settings = load_settings(**({"home": Path(home)} if home else {}))
    try:
        count = asyncio.run(_export(settings, run_id, iteration, fmt, Path(output), model, max_length))
    except (LookupError, ValueError, FileNotFoundError) as exc:
        console.print(f"[red]cannot export:[/red] {exc}")
        return 2
    console.print(f"{count} samples written to {output} ({fmt})")
    return 0


async def _export(
    settings: Any, run_id: str, iteration: int, fmt: str, output: Path, model: str | None, max_length: int
) -> int:
    from agentr.cli.export_formats import LOCAL_FORMATS, PAIR_FORMATS, pair_lines_from_store, write_local
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
        if fmt in PAIR_FORMATS:
            from agentr.cli.export_formats import write_records_jsonl

            return write_records_jsonl(output, await pair_lines_from_store(store, run_id, iteration, fmt))
        effects = RunEffects(settings, store)
        from core.domain.datasets import DatasetConfig, build_dataset
        from core.formats.export import read_general_chat

        revisions, good = await effects.load_samples(run_id, iteration, state.config)
        general = list(read_general_chat(state.config.general_data)) if state.config.general_data else []
        built = build_dataset(
            run_id=run_id,
            iteration=iteration,
            revisions=revisions,
            good=good,
            general=general,
            config=DatasetConfig(  # the same mix the run trained on (train_service.runs.write_dataset)
                alpha_schedule=state.config.alpha_schedule,
                eta=state.config.eta,
                seed=state.config.seed,
                mask_invalid_steps=state.config.mask_invalid_steps,
                mask_loop_steps=state.config.mask_loop_steps,
                include_revisions=state.config.include_revisions,
            ),
        )
        if fmt in LOCAL_FORMATS:
            return write_local(fmt, built.samples, output, model, max_length)
        if fmt == "parquet":
            return write_parquet(output, built.samples)
        return write_jsonl(output, built.samples, fmt)
    finally:
        await store.close()
