"""Owns the demo's plan for ``agentr run``: the command's options (``RunOptions``), the default and
``--quick`` configurations (environment URIs, search / train / evaluation settings, the tiny model's
shape and warm-start budget) and ``plan_run``, which turns options into a ``Plan``.

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

from dataclasses import dataclass
from typing import Any

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
        evaluation = {
            "max_steps": 4,
            "max_tokens": 32,
            "episodes_per_task": 2,
            "recovery_episodes": 2,
            "baseline": True,
        }
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
