"""Owns ``agentr run`` (the whole loop in one process), ``agentr eval`` and ``agentr export``.

``agentr run`` is the embedded composition root: SQLite under ``AGENTR_HOME`` (default ``.agentr``),
the in-process bus, and the search, critic, splice and train services in ONE process
(``core.runtime.embedded.run_embedded``). Without ``--model`` it builds the tiny local model and
warm-starts it on expert TextCraft episodes, both cached under ``<home>/models`` by a key of their
settings (the same command reproduces them). Progress bars follow the store's read models; at the
end the report (JSON, Markdown, PNG) is written to ``<home>/runs/<run id>/``. The work itself lives in
``agentr.cli.demo`` (plan), ``agentr.cli.warm_start`` (model), ``agentr.cli.embedded_run`` (loop),
``agentr.cli.run_report`` (report), ``agentr.cli.methods`` (``--method``: the learner of each iteration)
and ``agentr.cli.eval_export`` (imported inside the commands, so ``agentr --help`` stays fast).
"""

from __future__ import annotations

import enum

import typer

from agentr.cli.demo import DEMO_ENV, QUICK_ENV
from agentr.cli.export_formats import FORMAT_HELP
from agentr.cli.methods import METHOD_HELP, parse_methods


class Precision(enum.StrEnum):
    """``--bf16``'s choices."""

    auto = "auto"
    on = "on"
    off = "off"


def _check_method(value: str) -> str:
    """``--method``'s check at parse time: a usage error (exit 2) naming the bad entry."""
    try:
        parse_methods(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    return value


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run(
        model: str = typer.Option(
            "",
            "--model",
            help="Starting model: a local model folder or an OpenAI-compatible base URL "
            "(http://host:port/v1#model). Default: the tiny local model, built and warm-started if absent.",
        ),
        env: str = typer.Option(
            "",
            "--env",
            help=f"Environment URI (default {DEMO_ENV}; with --quick {QUICK_ENV}).",
        ),
        iterations: int = typer.Option(2, "--iterations", min=1, help="Search -> train iterations."),
        tasks: str = typer.Option(
            "", "--tasks", help="Comma-separated task ids to search (default: the env's split)."
        ),
        max_tasks: int | None = typer.Option(
            None, "--max-tasks", min=1, help="Cap on tasks searched per iteration."
        ),
        eval_tasks: str = typer.Option(
            "", "--eval-tasks", help="Comma-separated held-out task ids for evaluation."
        ),
        max_eval_tasks: int | None = typer.Option(
            None, "--max-eval-tasks", min=1, help="Cap on evaluation tasks."
        ),
        warm_start_steps: int | None = typer.Option(
            None,
            "--warm-start-steps",
            min=0,
            help="Optimizer steps of the warm start on expert episodes (0 = none; the tiny model's "
            "default 80, with --quick 300; a --model folder is warm-started only when this is given).",
        ),
        seed: int = typer.Option(0, "--seed", help="Seed of the run (search, training, tiny model)."),
        quick: bool = typer.Option(
            False, "--quick", help="A reduced configuration that finishes in about a minute (tests)."
        ),
        data_only: bool = typer.Option(
            False, "--data-only", help="Stop each iteration at its dataset (no training)."
        ),
        train_from: str = typer.Option(
            "",
            "--train-from",
            help="With a served --model URL: the local folder holding the weights that server serves; "
            "iteration 0 trains from it, later iterations load the trained checkpoints locally. "
            "Without it a URL model needs --data-only.",
        ),
        home: str = typer.Option("", "--home", help="Data folder (default $AGENTR_HOME or .agentr)."),
        database_url: str = typer.Option(
            "",
            "--database-url",
            help="Event store of this run. Default: the SQLite file under --home; AGENTR_DATABASE_URL "
            "is NOT used (inside a deployment it is the deployment's database, whose workers would "
            "redo this run's work).",
        ),
        resume: str = typer.Option(
            "", "--resume", help="Resume the unfinished run with this id instead of starting one."
        ),
        method: str = typer.Option(
            "sft",
            "--method",
            metavar="sft|dpo|archer[,...]",
            callback=_check_method,
            help=METHOD_HELP,
        ),
        bf16: Precision = typer.Option(
            Precision.auto,
            "--bf16",
            help="Training precision: on = fp32 weights, MLP blocks in bfloat16 (the warm start and "
            "every iteration's SFT / DPO), off = fp32; auto = on where the CPU multiplies bfloat16 "
            "natively (AVX512-BF16 / AMX: 1.4x faster steps measured) and no CUDA device, off "
            "under --quick.",
        ),
        threads: int | None = typer.Option(
            None,
            "--threads",
            min=1,
            help="Torch intra-op threads for training (inference always takes 1 and decodes prompts "
            "in threads of its own). Default: $OMP_NUM_THREADS when set, else 2 (fewer where this "
            "process may use fewer cores); never the machine's momentary load. Recorded in the run's "
            "config, report and checkpoints; --resume keeps the recorded count. 1 on a busy machine.",
        ),
        judge_mix: bool | None = typer.Option(
            None,
            "--judge-mix/--no-judge-mix",
            help="Default demo (on unless --no-judge-mix): keep a small replay of the warm start's "
            "judge examples (Good/Bad on other train goals, at most 24 per iteration) mixed into "
            "every iteration's SFT as general data (eta rule), so the model critic keeps judging "
            "after training (docs/critic.md). Not under --quick, --env or --model.",
        ),
        judge_phase_steps: int | None = typer.Option(
            None,
            "--judge-phase-steps",
            min=0,
            help="Optimizer steps of the warm start's judge phase, which teaches the actor (the model "
            "critic, measured beside the default first-after-divergence critic) the Good/Bad/Uncertain "
            "judge question on oracle-labelled TextCraft examples of "
            "other goals (docs/critic.md). Default: 100, with --quick 40, none for a --model; 0 = "
            "no judge examples; N with a --model folder and --warm-start-steps teaches that model too "
            "(at 1e-4).",
        ),
        critic: str = typer.Option(
            "first",
            "--critic",
            help="Critic strategy for the search pairs. Default first: t' = the first action after the "
            "divergence, the most accurate critic measured on search pairs (0.92 / 0.91 against the model "
            "critic's 0.46 / 0.50, docs/critic.md); the model critic's t' is recorded beside it and "
            "compared in the report. model: the actor judges each action; replay: replays the bad path in "
            "its environment (docs/critic.md); also reflect, rules, direct.",
        ),
        free_tool_calls: bool = typer.Option(
            False,
            "--free-tool-calls",
            help="In a tool-calling environment (tau2), decode the Action line freely instead of as a "
            "schema-valid call of one of its tools or a message (search.constrain_tool_calls and "
            "evaluation.constrain_tool_calls false; docs/constrained-decoding.md).",
        ),
    ) -> None:
        """Run the whole Agent-R loop in this process: MCTS search -> first-error critic (t' = the
        first action after the divergence by default, the most accurate critic measured on search
        pairs; the model critic is measured beside it in the report, docs/critic.md) -> revision
        splicing -> training (SFT, or --method dpo / archer) -> evaluation, for N iterations, on the
        embedded SQLite store, with progress bars and a final report (JSON + Markdown + PNG under
        <home>/runs/RUN_ID/); the summary names each iteration's learner."""
        from agentr.cli.demo import RunOptions
        from agentr.cli.embedded_run import run_command

        options = RunOptions(
            model=model,
            env=env,
            iterations=iterations,
            tasks=tuple(t.strip() for t in tasks.split(",") if t.strip()),
            max_tasks=max_tasks,
            eval_tasks=tuple(t.strip() for t in eval_tasks.split(",") if t.strip()),
            max_eval_tasks=max_eval_tasks,
            warm_start_steps=warm_start_steps,
            seed=seed,
            quick=quick,
            data_only=data_only,
            train_from=train_from,
            home=home,
            database_url=database_url,
            resume=resume,
            judge_mix=judge_mix,
            method=parse_methods(method),
            mixed_bf16={Precision.on: True, Precision.off: False}.get(bf16),
            threads=threads,
            judge_phase_steps=judge_phase_steps,
            critic=critic,
            constrain_tool_calls=not free_tool_calls,
        )
        raise typer.Exit(run_command(options))

    @app.command("eval")
    def eval_(
        model: str = typer.Option(..., "--model", help="Model folder or OpenAI-compatible base URL."),
        env: str = typer.Option(
            ..., "--env", help="Environment URI (textcraft, sciworld, agentgym+http://...)."
        ),
        tasks: str = typer.Option("", "--tasks", help="Comma-separated task ids (default: --split)."),
        split: str = typer.Option("test", "--split", help="Named split when --tasks is not given."),
        max_tasks: int | None = typer.Option(20, "--max-tasks", min=1, help="Cap on tasks."),
        max_steps: int = typer.Option(
            100, "--max-steps", min=1, help="Actions per episode (100: the paper's max rounds)."
        ),
        max_tokens: int = typer.Option(40, "--max-tokens", min=1, help="Generation budget per turn."),
        episodes: int = typer.Option(3, "--episodes", min=1, help="Seeded episodes per task."),
        temperature: float = typer.Option(
            0.7,
            "--temperature",
            min=0.0,
            max=5.0,
            help="Sampling temperature (0 = greedy; then use --episodes 1).",
        ),
        seed: int = typer.Option(0, "--seed", help="Seed of the episodes' sampling."),
        constrain_actions: bool = typer.Option(
            False,
            "--constrain-actions",
            help="Sample each Action line among the state's valid actions (the environment's "
            "valid_actions(); free where it lists none), as evaluation.constrain_actions in a run "
            "(docs/constrained-decoding.md). Recorded in the metrics.",
        ),
        free_tool_calls: bool = typer.Option(
            False,
            "--free-tool-calls",
            help="In a tool-calling environment (tau2), decode the Action line freely instead of as a "
            "schema-valid call of one of its tools or a message (evaluation.constrain_tool_calls "
            "false). Recorded in the metrics.",
        ),
        out: str = typer.Option(
            "", "--out", "-o", help="Folder for eval.json / eval.md / eval.png (default: print only)."
        ),
        workers: int | None = typer.Option(
            None,
            "--workers",
            min=1,
            help="Processes that play a local model's episodes (default: one per usable core when there "
            "are at least 16 episodes; 1 = this process). The same episodes and metrics either way.",
        ),
    ) -> None:
        """Evaluate a model with seeded episodes on a stratified choice of tasks: average reward,
        success rate, average steps, dead loops and invalid-action rate (episodes are batched: one
        model call per turn)."""
        from agentr.cli.eval_export import eval_command

        raise typer.Exit(
            eval_command(
                model=model,
                env=env,
                tasks=tuple(t.strip() for t in tasks.split(",") if t.strip()),
                split=split,
                max_tasks=max_tasks,
                max_steps=max_steps,
                max_tokens=max_tokens,
                episodes=episodes,
                temperature=temperature,
                seed=seed,
                constrain_actions=constrain_actions,
                constrain_tool_calls=not free_tool_calls,
                out=out,
                workers=workers,
            )
        )

    @app.command("export")
    def export(
        run_id: str = typer.Argument(..., help="The run's id."),
        iteration: int = typer.Argument(..., min=0, help="The iteration (0-based)."),
        fmt: str = typer.Option("openai", "--format", "-f", help=FORMAT_HELP),
        output: str = typer.Option(..., "--output", "-o", help="File (or hf folder) to write, atomically."),
        home: str = typer.Option("", "--home", help="Data folder (default $AGENTR_HOME or .agentr)."),
        model: str | None = typer.Option(
            None, "--model", help="Tokenizer for tokenized / hf (folder or id)."
        ),
        max_length: int = typer.Option(
            1024, "--max-length", min=1, help="Tokens per sample (as the trainer)."
        ),
    ) -> None:
        """Export an iteration's dataset (revision samples + good trajectories >= alpha + general data
        mixed with eta) as OpenAI fine-tuning JSONL, ShareGPT/AgentGym JSONL, Parquet, pre-tokenised
        Parquet or a Hugging Face datasets folder; or its pairs and trees as DPO / PRM records."""
        from agentr.cli.eval_export import export_command

        raise typer.Exit(export_command(run_id, iteration, fmt, output, home, model, max_length))
