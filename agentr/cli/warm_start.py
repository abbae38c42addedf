"""Owns the starting model of ``agentr run``: the tiny local model (built once) and its warm start on
expert episodes of the warm-start tasks, both cached under ``<home>/models`` by a key of their
settings, so the same command reproduces (or reuses) them. A ``--model`` folder is used as given,
or, with ``--warm-start-steps N``, warm-started the same way (at ``Plan.warm_start_lr``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from rich.console import Console

from agentr.cli.demo import REAL_MODEL_MICRO_BATCH, Plan, micro_batches
from core.runtime.torch_threads import in_training_phase

console = Console(stderr=True)

WARM_START_LR = 3e-3


def warm_start_batches(plan: Plan) -> tuple[int, int]:
    """The warm start's (batch size, accumulation), a batch of 8: at once for the tiny model, in
    micro-batches accumulated to 8 for a pretrained ``--model`` (agentr.cli.demo.REAL_MODEL_MICRO_BATCH:
    what a CPU holds)."""
    return (8, 1) if plan.tiny is not None else micro_batches(8)


def _key(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:12]


def prepare_model(plan: Plan, home: Path, seed: int) -> str:
    """The starting model's ref: ``--model`` as given, or the cached tiny model (built, warm-started)."""
    from core.domain.config import RunConfig, is_served_model
    from core.envs.registry import open_env
    from core.llm.tiny import build_tiny_model, default_corpus

    spec = plan.tiny
    if spec is None:
        given = str(plan.config["model"])
        if plan.warm_start_steps <= 0 or is_served_model(given):
            return given
        base = Path(given).resolve()
        if not (base / "config.json").is_file():
            raise FileNotFoundError(f"--model {given}: no config.json, not a model folder to warm-start")
    else:
        base = home / "models" / f"tiny-{_key(spec.__dict__, seed)}"
    if spec is not None and not (base / "config.json").is_file():
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
    from train_service.judge_data import judge_mistakes, warm_start_judge_key

    # judge examples (train_service/judge_data.py) change the model
    mistakes = judge_mistakes(config)
    judge_key = (
        warm_start_judge_key(env, plan.judge_phase_steps, mistakes, plan.judge_phase_lr)
        if plan.judge_examples
        else ""
    )
    lr = plan.warm_start_lr
    parts: tuple[Any, ...] = (base.name, config.env, tasks, plan.warm_start_steps, WARM_START_LR, seed)
    if spec is None or lr != WARM_START_LR:  # a given folder: its path and rate name the warm start
        parts = (str(base), config.env, tasks, plan.warm_start_steps, lr, seed)
    if spec is None:  # a pretrained model warm-starts in micro-batches (an older cache key had none)
        parts = (*parts, "micro_batch", REAL_MODEL_MICRO_BATCH)
    if plan.mixed_bf16:  # bfloat16 autocast trains another model (fp32 keeps its old cache key)
        parts = (*parts, "mixed_bf16")
    # the training threads and ISA caps change the float reductions, hence the weights: a model
    # warm-started under other conditions is not this run's (core.runtime.torch_threads)
    parts = (*parts, *_conditions_key())
    warm = home / "models" / f"warm-{_key(*parts, judge_key) if judge_key else _key(*parts)}"
    if (warm / "meta.json").is_file():
        console.print(f"warm-started model found in [bold]{warm}[/bold] (cached)")
    else:
        _warm_start(base, env, tasks, plan, warm, seed, config)
    if judge_key and plan.judge_general and not (warm / "judge-general.jsonl").is_file():
        # the judge set next to the model: runs keep it mixed in (train_service/judge_data.py)
        from train_service.judge_data import warm_start_judge_samples, write_judge_general

        write_judge_general(warm_start_judge_samples(env, config, tasks, seed), warm)
    return str(warm)


def _conditions_key() -> tuple[Any, ...]:
    """The part of the warm start's cache key that names its float conditions: the training thread
    count (the embedded loop's, else torch's own) and any ISA cap set in the environment."""
    import torch

    from core.runtime.cpu_features import describe
    from core.runtime.torch_threads import training_threads

    threads = training_threads() or torch.get_num_threads()
    caps = sorted(describe()["isa_caps"].items())
    return (f"threads={threads}", *(f"{k}={v}" for k, v in caps))


@in_training_phase  # the embedded loop's training thread count (core.runtime.torch_threads)
def _warm_start(
    base: Path, env: Any, tasks: list[str], plan: Plan, out: Path, seed: int, config: Any = None
) -> None:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from core.domain.good_samples import trajectory_to_sample
    from core.domain.ids import derived_id
    from train_service.sft import SFTConfig, train_sft
    from train_service.warm_start import expert_trajectories

    expert = [
        trajectory_to_sample(t, derived_id("expert", t.provenance["task_id"]))
        for t in expert_trajectories(env, tasks)
    ]
    if not expert:
        raise RuntimeError("the expert solver finished none of the warm-start tasks")
    # judge examples on tasks of their own (never searched or evaluated): the critic can judge from
    # iteration 0; the expert text seen stays the same (more steps), see train_service/judge_data.py
    from train_service.judge_data import warm_start_judge_samples, warm_start_mix

    judge = warm_start_judge_samples(env, config, tasks, seed) if plan.judge_examples else []
    samples, steps = warm_start_mix(expert, judge, plan.warm_start_steps)
    first_out = out.with_name(out.name + "-mixed") if judge else out  # then the judge phase -> out
    batch, accumulate = warm_start_batches(plan)
    cfg = SFTConfig(
        max_steps=steps,
        learning_rate=plan.warm_start_lr,
        lr_scheduler="cosine",
        warmup=0.05,
        time_budget_s=plan.warm_start_cap_s,
        packing=True,
        max_length=512,
        batch_size=batch,
        grad_accumulation=accumulate,
        logging_steps=20,
        seed=seed,
        mixed_bf16=plan.mixed_bf16,
    )
    with Progress(
        TextColumn("warm start"),
        BarColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        console=console,
    ) as bars:
        bar = bars.add_task("warm", total=steps, info="")

        def on_step(step: int, _max: int, loss: float | None) -> None:
            info = f"step {step}" + (f", loss {loss:.3f}" if loss is not None else "")
            bars.update(bar, completed=step, info=info)

        report = train_sft(
            base,
            samples,
            first_out,
            cfg,
            iteration=-1,
            dataset_id=f"warm-start:{_key(tasks)}",
            on_step=on_step,
        )
        bars.update(bar, completed=steps)
    if judge:  # the judge question alone, on top (train_service/judge_data.py: judge_phase)
        from train_service.judge_data import JUDGE_PHASE_LR, JUDGE_PHASE_STEPS, judge_phase

        phase_steps = plan.judge_phase_steps or JUDGE_PHASE_STEPS
        with console.status(f"warm start: judge phase, {phase_steps} steps on {len(judge)} examples..."):
            judge_phase(
                report.checkpoint,
                judge,
                out,
                expert=expert,
                seed=seed,
                cap_s=plan.warm_start_cap_s,
                steps=phase_steps,
                mixed_bf16=plan.mixed_bf16,
                learning_rate=plan.judge_phase_lr or JUDGE_PHASE_LR,
                batch=(batch, accumulate),
            )
    done = int(report.metrics.get("steps") or 0)
    if done < steps:  # the safety cap fired: this model is not the one the command documents
        console.print(
            f"[red]warm start stopped at its {plan.warm_start_cap_s:.0f}s safety cap after {done} of "
            f"{steps} steps[/red] (a slow or loaded machine): the model is less trained than the "
            "documented one; delete it to redo the warm start"
        )
    console.print(
        f"warm start: {len(expert)} expert episodes + {len(judge)} judge examples, "
        f"{report.metrics.get('steps')} steps in "
        f"{report.metrics.get('seconds', 0):.0f}s -> [bold]{out}[/bold]"
    )
