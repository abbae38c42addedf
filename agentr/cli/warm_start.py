"""Owns the starting model of ``agentr run``: the tiny local model (built once) and its warm start on
expert episodes of the warm-start tasks, both cached under ``<home>/models`` by a key of their
settings, so the same command reproduces (or reuses) them. A ``--model`` folder is used as given,
or, with ``--warm-start-steps N``, warm-started the same way (at ``Plan.warm_start_lr``).

A tool-calling environment (one with tool schemas, ``env.tools``: tau2's domains) differs in three
ways, all derived from the environment's own text rather than TextCraft's fixed sizes: the tiny
model's tokenizer learns the environment's text instead of TextCraft's (its instruction with the
policy and tools, the warm-start tasks and their gold turns: ``env_corpus``; the warm start itself
plays the run's training tasks' gold actions, ``env.gold_actions``), the tiny model's window holds
the longest gold episode, and the training context and generation budgets are raised to what those
episodes take in the model's tokens (``fit_context``: a tau2 mock sample is ~600 tokens, a retail one
up to ~12k, over the TextCraft plans' 512-768).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
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
    from core.llm.tiny import build_tiny_model, default_corpus, react_corpus

    config = RunConfig.from_data(plan.config)
    env = open_env(config.env)
    tasks = warm_start_task_ids(plan, env, config)
    expert = _expert(env, tasks) if is_tool_env(env) and plan.warm_start_steps > 0 else None
    spec = plan.tiny
    if spec is None:
        given = str(plan.config["model"])
        if plan.warm_start_steps <= 0 or is_served_model(given):
            return given
        base = Path(given).resolve()
        if not (base / "config.json").is_file():
            raise FileNotFoundError(f"--model {given}: no config.json, not a model folder to warm-start")
    else:
        # a tool environment's tokenizer learns its text too (env_corpus): the key names the env
        extra = (config.env, tasks) if expert is not None else ()
        base = home / "models" / f"tiny-{_key(spec.__dict__, seed, *extra)}"
    if spec is not None and not (base / "config.json").is_file():
        # TextCraft's text for TextCraft; a tool environment's tokenizer learns its own text (its
        # policy, tool schemas, calls and answers) and the ReAct / critic words, nothing of TextCraft's
        corpus = default_corpus() if expert is None else itertools.chain(env_corpus(expert), react_corpus())
        with console.status(
            f"building the tiny model ({spec.hidden} hidden, {spec.layers} layers) in {base}..."
        ):
            shape = {"hidden": spec.hidden, "layers": spec.layers, "heads": spec.heads}
            build_tiny_model(base, corpus, **shape, vocab_size=spec.vocab_size, seed=seed)
            if expert is not None:  # a window that holds the environment's longest expert episode
                need = _longest_sample(base, expert)
                window = _window(base)
                if need > window:  # rotary positions: the same weights, a longer window
                    corpus = itertools.chain(env_corpus(expert), react_corpus())
                    positions = _round_up(need, 1024)
                    build_tiny_model(
                        base, corpus, **shape, vocab_size=spec.vocab_size, seed=seed, max_positions=positions
                    )
    if plan.warm_start_steps <= 0:
        return str(base)
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
        _warm_start(base, env, tasks, plan, warm, seed, config, expert)
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


def is_tool_env(env: Any) -> bool:
    """Whether ``env`` calls tools (it lists their JSON schemas, ``env.tools``: tau2's domains)."""
    return bool(getattr(env, "tools", None))


def warm_start_task_ids(plan: Plan, env: Any, config: Any) -> list[str]:
    """The warm start's tasks: the plan's, else the run's own training tasks (its split cut to
    ``max_tasks``: the tasks it searches), whose gold actions the expert plays. Measured on tau2 mock
    (--quick, a loaded 2-core machine): warm-starting on all 9 training tasks instead of the 2 searched
    made each step ~5x longer; the 900 s safety cap stopped it at 75 of 300 steps and that model wrote
    no valid call at the search's temperature (docs/envs.md)."""
    if plan.warm_start_tasks:
        return list(plan.warm_start_tasks)
    return list(env.task_ids(config.split)[: config.max_tasks])


_EXPERT: dict[tuple[str, tuple[str, ...]], list[Any]] = {}


def _expert(env: Any, tasks: Sequence[str]) -> list[Any]:
    """The expert's episodes of ``tasks`` (``train_service.warm_start.expert_trajectories``), played
    once per process (tau2's retail replays its 74 training tasks in minutes on a loaded machine)."""
    from train_service.warm_start import expert_trajectories

    key = (str(getattr(env, "name", type(env).__name__)), tuple(tasks))
    if key not in _EXPERT:
        _EXPERT[key] = list(expert_trajectories(env, tasks))
    return _EXPERT[key]


def env_corpus(trajectories: Sequence[Any]) -> Iterator[str]:
    """A tool environment's text for the tiny tokenizer: each expert episode's instruction (policy
    and tools), task, assistant turns (as the model writes them) and observations."""
    from core.llm.prompts import format_assistant

    seen: set[str] = set()
    for trajectory in trajectories:
        if trajectory.instruction not in seen:
            seen.add(trajectory.instruction)
            yield trajectory.instruction
        yield str(trajectory.task)
        for step in trajectory.steps:
            yield format_assistant(step.thought, step.action)
            yield step.observation


@dataclass(frozen=True)
class ContextFit:
    """What a tool environment's expert episodes take in the model's tokens (``measure_context``)."""

    longest_sample: int  # a whole expert sample, as the chat template renders it
    longest_prompt: int  # the tokens before the first assistant turn (instruction, tools, task)
    longest_step: int  # one assistant turn plus the observation after it
    longest_turn: int  # one assistant turn's text (what the policy generates)
    window: int  # the model's context length (max_position_embeddings), 0 when it does not say

    def train_max_length(self, max_depth: int) -> int:
        """The iteration SFT's ``max_length``: the prompt and a path of ``max_depth`` steps plus one
        (a revision sample's reflection turn), rounded up to 64; within the model's window."""
        need = _round_up(self.longest_prompt + (max_depth + 1) * self.longest_step, 64)
        return min(need, self.window) if self.window else need

    def max_tokens(self) -> int:
        """The generation budget of one turn: the longest expert turn and its end token, rounded up to 8."""
        return _round_up(self.longest_turn + 1, 8)


def _round_up(n: int, unit: int) -> int:
    return int(math.ceil(n / unit) * unit)


def measure_context(model: str | Path, samples: Sequence[Any]) -> ContextFit:
    """``ContextFit`` of ``samples`` (expert TrainingSamples) in the tokens of the model folder ``model``;
    ValueError when a sample does not fit the model's window."""
    from transformers import AutoTokenizer

    from train_service.tokenize import IGNORE_INDEX, tokenize_sample

    tokenizer = AutoTokenizer.from_pretrained(model)
    window = _window(model)
    longest = prompt = step = turn = 0
    for sample in samples:
        tok = tokenize_sample(tokenizer, sample)
        trained = [i for i, label in enumerate(tok.labels) if label != IGNORE_INDEX]
        if not trained:
            continue
        longest, prompt = max(longest, len(tok.input_ids)), max(prompt, trained[0])
        # the runs of trained tokens are the assistant turns; from one run's start to the next's is
        # that turn and the observation after it
        starts = [i for k, i in enumerate(trained) if k == 0 or trained[k - 1] != i - 1]
        for a, b in itertools.pairwise([*starts, len(tok.input_ids)]):
            step = max(step, b - a)
        for message in sample.messages:
            if message.role == "assistant":
                turn = max(turn, len(tokenizer(message.content, add_special_tokens=False)["input_ids"]))
    if window and longest > window:
        raise ValueError(
            f"the environment's expert episodes take up to {longest} tokens; the model {model} holds "
            f"{window} (max_position_embeddings)"
        )
    return ContextFit(longest, prompt, step, turn, window)


def _window(model: str | Path) -> int:
    from transformers import AutoConfig

    return int(getattr(AutoConfig.from_pretrained(model), "max_position_embeddings", 0) or 0)


def _longest_sample(model: str | Path, trajectories: Sequence[Any]) -> int:
    """The longest of ``trajectories`` as training samples in the tokens of ``model``."""
    from transformers import AutoTokenizer

    from core.domain.good_samples import trajectory_to_sample
    from core.domain.ids import derived_id
    from train_service.tokenize import tokenize_sample

    tokenizer = AutoTokenizer.from_pretrained(model)
    return max(
        len(tokenize_sample(tokenizer, trajectory_to_sample(t, derived_id("expert", str(i)))).input_ids)
        for i, t in enumerate(trajectories)
    )


def fit_context(config: dict[str, Any], plan: Plan) -> tuple[dict[str, Any], list[str]]:
    """``config`` (its ``model`` prepared) with the training ``max_length`` and the search's and
    evaluation's ``max_tokens`` raised to what a tool environment's expert episodes take in the
    model's tokens (``ContextFit``), and the notes saying so; unchanged for any other environment, a
    served model, or a run with no expert."""
    from core.domain.config import RunConfig, is_served_model
    from core.domain.good_samples import trajectory_to_sample
    from core.domain.ids import derived_id
    from core.envs.registry import open_env
    from train_service.episodes import EvalConfig
    from train_service.warm_start import NoExpertError

    default_budget = EvalConfig.prompt_budget

    cfg = RunConfig.from_data(config)
    env = open_env(cfg.env)
    if not is_tool_env(env) or is_served_model(cfg.model):
        return config, []
    try:
        expert = _expert(env, warm_start_task_ids(plan, env, cfg))
    except NoExpertError:
        return config, []
    fit = measure_context(
        cfg.model, [trajectory_to_sample(t, derived_id("expert", str(i))) for i, t in enumerate(expert)]
    )
    train, search, evaluation = dict(cfg.train), dict(cfg.search), dict(cfg.evaluation)
    notes: list[str] = []
    max_length = fit.train_max_length(int(search.get("max_depth", 20)))
    if max_length > int(train.get("max_length") or 0):
        train["max_length"] = max_length
        notes.append(f"train max_length {max_length}")
    budget = fit.max_tokens()
    for name, section in (("search", search), ("evaluation", evaluation)):
        if budget > int(section.get("max_tokens") or 0):
            section["max_tokens"] = budget
            notes.append(f"{name} max_tokens {budget}")
    # the evaluation's prompt budget (EvalConfig.prompt_budget, 1536 by default) must hold the
    # instruction and the episode so far: retail's instruction alone takes ~3.2k tokens, and a budget
    # below it dropped every earlier step, so each turn repeated the first call
    prompt = max_length - int(evaluation.get("max_tokens") or 0)
    current = evaluation.get("prompt_budget", default_budget)
    if current is not None and prompt > int(current):
        evaluation["prompt_budget"] = prompt
        notes.append(f"evaluation prompt_budget {prompt}")
    if not notes:
        return config, []
    said = (
        f"{env.name}'s expert episodes take up to {fit.longest_sample} tokens (prompt {fit.longest_prompt}, "
        f"a turn and its observation {fit.longest_step}, a turn {fit.longest_turn}; the model holds "
        f"{fit.window or 'unknown'}): " + ", ".join(notes)
    )
    return {**config, "train": train, "search": search, "evaluation": evaluation}, [said]


def warm_start_cap(cap_s: float, max_length: int) -> float:
    """The warm start's safety cap for blocks of ``max_length`` tokens: the plan's cap, scaled by the
    blocks' length over 1,024 tokens when longer (a step's time grows with it)."""
    return cap_s * max(1.0, max_length / 1024)


@in_training_phase  # the embedded loop's training thread count (core.runtime.torch_threads)
def _warm_start(
    base: Path,
    env: Any,
    tasks: list[str],
    plan: Plan,
    out: Path,
    seed: int,
    config: Any = None,
    trajectories: list[Any] | None = None,
) -> None:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from core.domain.good_samples import trajectory_to_sample
    from core.domain.ids import derived_id
    from train_service.sft import SFTConfig, TrainJob, train_sft

    if trajectories is None:
        trajectories = _expert(env, tasks)
    expert = [trajectory_to_sample(t, derived_id("expert", t.provenance["task_id"])) for t in trajectories]
    if not expert:
        raise RuntimeError("the expert solver finished none of the warm-start tasks")
    # TextCraft's episodes fit 512 tokens; a tool environment's are as long as its longest expert
    # sample (its prompt carries the policy and the tools), packed in blocks of that length
    max_length = 512
    cap_s = plan.warm_start_cap_s
    if is_tool_env(env):
        max_length = max(max_length, _round_up(measure_context(base, expert).longest_sample, 64))
        # the safety cap scales with the blocks (TextCraft's 900 s / 1800 s were set for 512-768
        # tokens): tau2 retail's ~3.5k-token blocks take ~4.6 s a step on 2 loaded cores
        cap_s = warm_start_cap(cap_s, max_length)
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
        time_budget_s=cap_s,
        packing=True,
        max_length=max_length,
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

        job = TrainJob(base, first_out, iteration=-1, dataset_id=f"warm-start:{_key(tasks)}", on_step=on_step)
        report = train_sft(job, samples, cfg)
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
            f"[red]warm start stopped at its {cap_s:.0f}s safety cap after {done} of "
            f"{steps} steps[/red] (a slow or loaded machine): the model is less trained than the "
            "documented one; delete it to redo the warm start"
        )
    console.print(
        f"warm start: {len(expert)} expert episodes + {len(judge)} judge examples, "
        f"{report.metrics.get('steps')} steps in "
        f"{report.metrics.get('seconds', 0):.0f}s -> [bold]{out}[/bold]"
    )
