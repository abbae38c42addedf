"""Owns the learner choice of ``agentr run --method``: parsing the option (``sft``, ``dpo``,
``archer`` or a comma-separated schedule, one per iteration with the last repeating), the trainer
settings each learner gets from a plan's SFT settings (``learner_train``: also
``bench/learners.method_variant``'s, so the bench's arms and the command's runs train alike), a
schedule's merged ``train`` section and the critic a schedule needs (the report's per-iteration
Training table is ``train_service.report.training_markdown``).

The rule of ``learner_train`` (docs/learners.md): DPO and ArCHer train on the SAME budget as the
plan's SFT (``time_budget_s``, ``batch_size``, ``max_length``, ``learning_rate`` carried over). DPO
keeps SFT's epochs (or its fixed ``max_steps``: the default demo's), takes its learning rate divided
by ``dpo_lr_ratio`` (the bench: 1; ``agentr run``: 10, ``RUN_DPO_LR_RATIO``), halves the batch (a
pair is two sequences) and has no warm-up; ArCHer keeps the batch (one accumulation step), critic
learning rate = SFT's, actor's SFT's divided by ``actor_lr_ratio`` (the bench: 10; ``agentr run``:
100, ``RUN_ACTOR_LR_RATIO``), 5 critic-only warm-up rounds, states cut to 512 tokens, and either a
fixed number of rounds (``archer_iterations``: ``agentr run``, whose time budget is a safety cap) or
as many as its time budget allows (``bench/``). A run whose schedule has no ``sft`` iteration uses
the ``direct`` critic: neither DPO nor ArCHer trains on revision samples, so the model critic's
calls would be spent on data no learner reads (the pairs, trees and transitions are the same under
any critic).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.domain.config import LAUNCH_KEYS, TRAIN_METHODS, TRAIN_MODEL_PATH, TRAINER_FIELDS

METHOD_HELP = (
    "Learner of each iteration (docs/learners.md): sft = Agent-R SFT on revision samples + good "
    "trajectories (the default); dpo = DPO at the divergence node, each pair's good continuation "
    "preferred to its bad one (frozen reference); archer = ArCHer offline actor-critic on the trees' "
    "transitions (utterance-level critic, advantage-weighted token policy). A comma-separated list is a "
    "schedule, one method per iteration with the last repeating (sft,dpo: SFT in iteration 0, DPO "
    "after). dpo and archer train in one process (no torchrun)."
)


# agentr run's ArCHer actor learning rate: SFT's / 100 (the demo: 3e-6; a pretrained --model: 5e-7,
# near ArCHer's own 1e-6). Measured (docs/learners.md) on the demo model, 2 searched goals (8
# transitions), 12 rounds: SFT's / 10 collapsed the actor (seen success 1.000 -> 0.000, every action
# invalid, KL 0.43 per token), / 100 kept it (1.000 -> 1.000, KL 0.021).
RUN_ACTOR_LR_RATIO = 100.0
# agentr run's DPO learning rate: SFT's / 10 (the demo: 3e-5; a pretrained --model: 5e-6). Measured
# the same way (4 pairs, 8 epochs = 8 steps): SFT's own 3e-4 collapsed the model (seen success
# 1.000 -> 0.250, invalid 0.87, dead loops 0.75; DPO loss 0.693 -> 0.015), / 10 learnt the
# preference and kept it (loss -> 0.388, reward margin 0.75, seen success 1.000), / 100 barely
# moved (loss -> 0.655).
RUN_DPO_LR_RATIO = 10.0


def parse_methods(text: str) -> tuple[str, ...]:
    """``--method``'s value as a schedule: ``"dpo"`` -> ``("dpo",)``, ``"sft, dpo"`` ->
    ``("sft", "dpo")``. ValueError naming the bad entry (unknown, empty, or no method at all)."""
    names = [part.strip().lower() for part in text.split(",")]
    if not any(names):
        raise ValueError(f"no method given; choose one of {', '.join(TRAIN_METHODS)}")
    for index, name in enumerate(names):
        if not name:
            raise ValueError(
                f"{text!r} has an empty entry (position {index + 1}); write a comma-separated list of "
                f"{', '.join(TRAIN_METHODS)} such as sft,dpo"
            )
        if name not in TRAIN_METHODS:
            where = f" (entry {index + 1} of {text!r})" if len(names) > 1 else ""
            raise ValueError(
                f"{name!r}{where} is not a learner; choose {', '.join(TRAIN_METHODS)}, or a "
                "comma-separated schedule of them such as sft,dpo"
            )
    return tuple(names)


def learner_train(
    train: dict[str, Any],
    method: str,
    mode: str = "offline",
    *,
    archer_iterations: int | None = None,
    actor_lr_ratio: float = 10.0,
    dpo_lr_ratio: float = 1.0,
) -> dict[str, Any]:
    """The ``train`` section of ``method`` (sft | dpo | archer) on the budget of ``train`` (a plan's
    SFT settings): the rule in the module docstring. ``mode``: ArCHer's (offline | online).
    ``archer_iterations``: ArCHer's rounds; None = 40, or unbounded when ``train`` has a
    ``time_budget_s`` (the budget ends it). ``actor_lr_ratio``: ArCHer's actor learning rate is
    SFT's divided by it (``bench/``: 10; ``agentr run``: ``RUN_ACTOR_LR_RATIO``); ``dpo_lr_ratio``
    likewise DPO's (``bench/``: 1; ``agentr run``: ``RUN_DPO_LR_RATIO``). ``model_path`` and
    the launch keys are carried over (run-level, no trainer's; RunConfig checks them)."""
    if method == "sft":
        return {k: v for k, v in train.items() if k != "method"}
    base = dict(train)
    run_level = {k: base[k] for k in (TRAIN_MODEL_PATH, *LAUNCH_KEYS) if k in base}
    budget = {k: base[k] for k in ("time_budget_s",) if k in base}
    # a fixed budget of optimizer steps (the default demo's SFT) is DPO's too: matched in steps
    steps = {"max_steps": base["max_steps"]} if int(base.get("max_steps", -1)) > 0 else {}
    # the precision: DPO's Trainer takes it, ArCHer's own loop does not
    precision = {k: base[k] for k in ("mixed_bf16",) if k in base}
    # the effective batch (a real model's SFT runs micro-batches accumulated to it: agentr.cli.demo)
    batch = int(base.get("batch_size", 8)) * int(base.get("grad_accumulation", 1))
    lr = float(base.get("learning_rate", 3e-4))
    length = int(base.get("max_length", 768))
    if method == "dpo":
        return {
            "method": "dpo",
            "epochs": float(base.get("epochs", 1.0)),
            "batch_size": max(1, batch // 2),  # a pair is two sequences
            "max_length": length,
            "learning_rate": lr / dpo_lr_ratio,
            "warmup": 0.0,
            "logging_steps": 5,
            **steps,
            **budget,
            **precision,
            **run_level,
        }
    if method == "archer":
        if archer_iterations is None:
            archer_iterations = 100_000 if budget else 40  # the time budget ends it
        return {
            "method": "archer",
            "mode": mode,
            "iterations": archer_iterations,
            "warmup_iters": min(5, max(archer_iterations - 1, 0)),
            "batch_size": batch,
            "grad_accumulation": 1,
            "critic_lr": lr,
            "actor_lr": lr / actor_lr_ratio,
            "max_state_tokens": min(length, 512),
            "max_length": length,
            **budget,
            **run_level,
        }
    raise ValueError(f"method must be one of {', '.join(TRAIN_METHODS)}, got {method!r}")


def schedule_train(
    train: dict[str, Any],
    schedule: Sequence[str],
    *,
    archer_iterations: int | None = None,
    actor_lr_ratio: float = RUN_ACTOR_LR_RATIO,
    dpo_lr_ratio: float = RUN_DPO_LR_RATIO,
) -> tuple[dict[str, Any], list[str]]:
    """One ``train`` section for a schedule (RunConfig has one for every iteration; each trainer
    reads the fields it takes), and notes on what the merge decided.

    Each scheduled method's section is ``learner_train``'s. A field several scheduled trainers take
    gets ONE value: the one the first-scheduled of them would use (its section's, else its trainer's
    default); every other trainer that would have used another value is named in a note. A single
    method's section is ``learner_train``'s as is (``method`` a string, none for ``sft``); a
    schedule's ``method`` is the list."""
    methods = list(dict.fromkeys(schedule))
    knobs: dict[str, Any] = {
        "archer_iterations": archer_iterations,
        "actor_lr_ratio": actor_lr_ratio,
        "dpo_lr_ratio": dpo_lr_ratio,
    }
    if len(methods) == 1:
        return learner_train(train, methods[0], **knobs), []
    sections = {m: learner_train(train, m, **knobs) for m in methods}
    merged: dict[str, Any] = {}
    notes: list[str] = []
    keys = dict.fromkeys(k for m in methods for k in sections[m] if k != "method")
    for key in keys:
        takers = [m for m in methods if key in TRAINER_FIELDS[m]]
        if not takers:  # run-level (model_path, launch keys): the same in every section
            merged[key] = next(sections[m][key] for m in methods if key in sections[m])
            continue

        def used(method: str, key: str = key) -> Any:
            return sections[method].get(key, _trainer_defaults(method).get(key))

        owner = takers[0]
        merged[key] = used(owner)
        for other in takers[1:]:
            if used(other) != merged[key]:
                notes.append(
                    f"train.{key}: {other} runs with {owner}'s {_show(merged[key])} instead of "
                    f"{_show(used(other))} (one train section serves every iteration)"
                )
    merged["method"] = list(schedule)
    return merged, notes


def _show(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else repr(value)


def _trainer_defaults(method: str) -> dict[str, Any]:
    """The defaults of ``method``'s trainer config (imports torch: only when a schedule merges)."""
    from dataclasses import MISSING, fields

    from train_service.archer import ArcherConfig
    from train_service.dpo import DPOConfig
    from train_service.sft import SFTConfig

    config = {"sft": SFTConfig, "dpo": DPOConfig, "archer": ArcherConfig}[method]
    return {f.name: f.default for f in fields(config) if f.default is not MISSING}


def schedule_critic(schedule: Sequence[str], critic: dict[str, Any]) -> dict[str, Any]:
    """The run's critic: ``critic`` when an iteration trains with ``sft`` (it reads the revision
    samples the critic's t' shapes), else ``direct`` (the module docstring)."""
    return dict(critic) if "sft" in schedule else {"strategy": "direct"}
