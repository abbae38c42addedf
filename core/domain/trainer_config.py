"""Owns the trainers' settings: ``SFTConfig`` (with ``LoraSettings``), ``DPOConfig`` and
``ArcherConfig``, each the ONE definition of its trainer's fields, with their defaults, their checks
(``__post_init__``) and, per field, a ``Knob``: what the field means and the bounds a run request may
give it. ``core.domain.config.TRAINER_FIELDS`` and the API's ``TrainSettings``
(api/schemas/train_settings.py) are derived from these dataclasses (``trainer_fields``, ``knob_of``).

The trainers (train_service.sft / dpo / archer) import their config from here; the bounds of a
``Knob`` are JSON Schema keywords (``gt``, ``ge``, ``lt``, ``le``, ``pattern``, ``max_length``; ``items``:
those of a list's items), stricter than the dataclass checks, which say what the trainer can run.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Self

KNOB = "knob"  # the dataclass field metadata key of a field's Knob


@dataclass(frozen=True)
class Knob:
    """A trainer field as a run request sees it: ``doc`` (one sentence) and its ``bounds``."""

    doc: str
    bounds: Mapping[str, Any] = field(default_factory=dict)


def knob(doc: str, **bounds: Any) -> dict[str, Knob]:
    """Field metadata declaring a trainer field's ``Knob``."""
    return {KNOB: Knob(doc, bounds)}


def knob_of(f: dataclasses.Field[Any]) -> Knob:
    """The ``Knob`` of a trainer config field (ValueError naming the field where it has none)."""
    value = f.metadata.get(KNOB)
    if not isinstance(value, Knob):
        raise ValueError(f"trainer field {f.name!r} declares no knob(...) metadata")
    return value


class _TrainerConfig:
    """What every trainer config does with a dict: ``to_dict`` and ``from_dict`` (unknown keys are
    a ValueError naming them, before the dataclass checks its values)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        check_fields(cls, data)
        return cls(**data)


# The knobs several trainers share, declared once.
EPOCHS = knob("Passes over the dataset (fractions allowed); ignored when max_steps > 0.", gt=0, le=1000)
MAX_STEPS = knob("Optimizer steps; > 0 overrides epochs.", ge=-1, le=10_000_000)
LEARNING_RATE = knob("Peak AdamW learning rate.", gt=0, le=1)
LR_SCHEDULER = knob("A transformers scheduler name, or time_cosine.", pattern="^[a-z_]{1,40}$")
WARMUP = knob("Warmup steps; in [0, 1) a fraction.", ge=0, le=1_000_000)
BATCH_SIZE = knob("Samples (or pairs, or transitions) per forward pass.", ge=1, le=4096)
GRAD_ACCUMULATION = knob("Forward passes per optimizer step.", ge=1, le=4096)
MAX_LENGTH = knob(
    "Tokens per sample (cut from the right; the history from the left in archer).", ge=8, le=1_048_576
)
SEED = knob("Seeds data order, dropout and new weights.", ge=0, le=2**31 - 1)
BF16 = knob("bfloat16 weights (null: when CUDA supports it).")
MIXED_BF16 = knob(
    "fp32 weights, forward/backward under bfloat16 autocast (fast on a CPU with AVX512-BF16 / AMX); "
    "not with bf16."
)
MAX_GRAD_NORM = knob("Gradient clipping.", gt=0, le=1e6)
TIME_BUDGET_S = knob("Stop training after this many seconds.", gt=0, le=30 * 24 * 3600)
LOGGING_STEPS = knob("Log the loss every this many optimizer steps.", ge=1, le=1_000_000)


def knob_problems(cfg: Any) -> list[str]:
    """What is wrong with the knobs SFTConfig and DPOConfig share (epochs / max_steps, learning
    rate, batch and accumulation, max_length, time budget); each config adds its own checks."""
    problems = []
    if cfg.epochs <= 0 and cfg.max_steps <= 0:
        problems.append("epochs must be > 0 (or max_steps > 0)")
    if cfg.learning_rate <= 0:
        problems.append("learning_rate must be > 0")
    if cfg.batch_size < 1 or cfg.grad_accumulation < 1:
        problems.append("batch_size and grad_accumulation must be >= 1")
    if cfg.max_length < 8:
        problems.append("max_length must be >= 8")
    if cfg.time_budget_s is not None and cfg.time_budget_s <= 0:
        problems.append("time_budget_s must be > 0")
    if cfg.mixed_bf16 and cfg.bf16:
        problems.append(
            "bf16 (bfloat16 weights) and mixed_bf16 (fp32 weights, bfloat16 autocast) exclude each "
            "other: set one"
        )
    return problems


def check_fields(cls: type, data: dict[str, Any]) -> None:
    """ValueError naming the keys of ``data`` that are not fields of the dataclass ``cls``."""
    unknown = set(data) - set(cls.__dataclass_fields__)  # type: ignore[attr-defined]
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown field(s) {sorted(unknown)}")


@dataclass(frozen=True)
class LoraSettings:
    """Low-rank adapters through peft.

    r: adapter rank. alpha: scaling numerator (scale = alpha / r). dropout: adapter dropout.
    target_modules: module names to adapt (None = peft's default for the architecture).
    """

    r: int = field(default=8, metadata=knob("Adapter rank.", ge=1, le=1024))
    alpha: int = field(default=16, metadata=knob("Scaling numerator (scale = alpha / r).", ge=1, le=100_000))
    dropout: float = field(default=0.05, metadata=knob("Adapter dropout.", ge=0, lt=1))
    target_modules: tuple[str, ...] | None = field(
        default=("q_proj", "k_proj", "v_proj", "o_proj"),
        metadata=knob(
            "Module names to adapt (null: peft's default for the architecture).",
            max_length=100,
            items={"min_length": 1, "max_length": 200},
        ),
    )


@dataclass(frozen=True)
class SFTConfig(_TrainerConfig):
    """Every knob of one SFT run.

    epochs: passes over the dataset (fractions allowed); ignored when ``max_steps`` > 0.
    max_steps: optimizer steps to run; > 0 overrides ``epochs``.
    learning_rate: peak learning rate (AdamW).
    lr_scheduler: a transformers scheduler name ("cosine", "linear", "constant", ...) or
        "time_cosine" (cosine decay over ``time_budget_s`` of wall-clock time; needs the budget).
    warmup: warmup steps; a float in [0, 1) is a fraction of the total steps.
    weight_decay: AdamW weight decay.
    batch_size: samples (or packed blocks) per device per forward pass.
    grad_accumulation: forward passes per optimizer step (effective batch = batch * accumulation).
    max_length: tokens per sample (longer samples are cut from the right) and the packing block size.
    packing: concatenate samples into blocks with per-sample attention (little padding).
    pack_length: packing block size in tokens (None = ``max_length``). Attention costs grow with
        the square of the block, so on small models a block of two or three typical samples is
        faster than one long block.
    seed: seeds model init of new heads, data order and dropout.
    bf16: train in bfloat16; None = automatically when a CUDA device with bf16 support is present.
    mixed_bf16: fp32 weights, forward and backward under bfloat16 autocast (not with ``bf16``;
        ``train_service.precision``: attention and LM head stay fp32): faster on a CPU with native bfloat16.
    max_grad_norm: gradient clipping.
    time_budget_s: stop after this many seconds of training (None = no limit).
    logging_steps: log loss every this many optimizer steps.
    lora: LoRA settings, or None for full fine-tuning.
    """

    epochs: float = field(default=1.0, metadata=EPOCHS)
    max_steps: int = field(default=-1, metadata=MAX_STEPS)
    learning_rate: float = field(default=5e-4, metadata=LEARNING_RATE)
    lr_scheduler: str = field(default="cosine", metadata=LR_SCHEDULER)
    warmup: float = field(default=0.0, metadata=WARMUP)
    weight_decay: float = field(default=0.0, metadata=knob("AdamW weight decay.", ge=0, le=10))
    batch_size: int = field(default=8, metadata=BATCH_SIZE)
    grad_accumulation: int = field(default=1, metadata=GRAD_ACCUMULATION)
    max_length: int = field(default=1024, metadata=MAX_LENGTH)
    packing: bool = field(
        default=False,
        metadata=knob("Concatenate samples into blocks with per-sample attention (little padding)."),
    )
    pack_length: int | None = field(
        default=None, metadata=knob("Packing block size in tokens (null: max_length).", ge=8, le=1_048_576)
    )
    seed: int = field(default=0, metadata=SEED)
    bf16: bool | None = field(default=None, metadata=BF16)
    mixed_bf16: bool = field(default=False, metadata=MIXED_BF16)
    max_grad_norm: float = field(default=1.0, metadata=MAX_GRAD_NORM)
    time_budget_s: float | None = field(default=None, metadata=TIME_BUDGET_S)
    logging_steps: int = field(default=10, metadata=LOGGING_STEPS)
    lora: LoraSettings | None = field(
        default=None, metadata=knob("LoRA adapter settings (null: full fine-tuning).")
    )

    def __post_init__(self) -> None:
        problems = knob_problems(self)
        if self.pack_length is not None and self.pack_length < 8:
            problems.append("pack_length must be >= 8")
        if self.lr_scheduler == "time_cosine" and not self.time_budget_s:
            problems.append("lr_scheduler 'time_cosine' needs time_budget_s")
        if problems:
            raise ValueError("invalid SFTConfig: " + "; ".join(problems))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        check_fields(cls, data)
        values = dict(data)
        if isinstance(values.get("lora"), dict):
            lora = dict(values["lora"])
            if lora.get("target_modules") is not None:
                lora["target_modules"] = tuple(lora["target_modules"])
            values["lora"] = LoraSettings(**lora)
        return cls(**values)


@dataclass(frozen=True)
class DPOConfig(_TrainerConfig):
    """Every knob of one DPO run (defaults after the DPO paper where it states them).

    beta: the KL strength of the implicit reward (0.1 in the DPO paper).
    reference: "frozen" (the starting model, frozen; log-probs precomputed) or "none" (reference-free).
    epochs / max_steps: passes over the pairs, or optimizer steps when > 0.
    learning_rate: peak learning rate (AdamW; 1e-6 in the DPO paper, raise it for tiny models).
    lr_scheduler / warmup: a transformers scheduler name and its warmup (steps, or a fraction < 1).
    batch_size: preference pairs per forward pass (2 * batch_size sequences).
    grad_accumulation: forward passes per optimizer step.
    max_length: tokens per side (cut from the right; a pair left with no trained token is dropped).
    seed: data order and dropout.
    bf16: bfloat16 (None = when CUDA supports it). max_grad_norm: gradient clipping.
    mixed_bf16: fp32 weights, forward and backward under bfloat16 autocast (not with ``bf16``;
        ``train_service.precision``: attention and LM head stay fp32): faster on a CPU with native bfloat16.
    time_budget_s: stop after this many seconds (None = no limit). logging_steps: log interval.
    """

    beta: float = field(default=0.1, metadata=knob("KL strength of the implicit reward.", gt=0, le=100))
    reference: Literal["frozen", "none"] = field(
        default="frozen", metadata=knob("The frozen starting model as reference, or none (reference-free).")
    )
    epochs: float = field(default=1.0, metadata=EPOCHS)
    max_steps: int = field(default=-1, metadata=MAX_STEPS)
    learning_rate: float = field(default=1e-6, metadata=LEARNING_RATE)
    lr_scheduler: str = field(default="linear", metadata=LR_SCHEDULER)
    warmup: float = field(default=0.1, metadata=WARMUP)
    batch_size: int = field(default=4, metadata=BATCH_SIZE)
    grad_accumulation: int = field(default=1, metadata=GRAD_ACCUMULATION)
    max_length: int = field(default=1024, metadata=MAX_LENGTH)
    seed: int = field(default=0, metadata=SEED)
    bf16: bool | None = field(default=None, metadata=BF16)
    mixed_bf16: bool = field(default=False, metadata=MIXED_BF16)
    max_grad_norm: float = field(default=1.0, metadata=MAX_GRAD_NORM)
    time_budget_s: float | None = field(default=None, metadata=TIME_BUDGET_S)
    logging_steps: int = field(default=10, metadata=LOGGING_STEPS)

    def __post_init__(self) -> None:
        problems = []
        if not (isinstance(self.beta, int | float) and math.isfinite(self.beta) and self.beta > 0):
            problems.append(f"beta must be > 0, got {self.beta!r}")
        if self.reference not in ("frozen", "none"):
            problems.append(f"reference must be 'frozen' or 'none', got {self.reference!r}")
        problems += knob_problems(self)
        if problems:
            raise ValueError("invalid DPOConfig: " + "; ".join(problems))


@dataclass(frozen=True)
class ArcherConfig(_TrainerConfig):
    """Every knob of one ArCHer run (train_service.archer's docstring says where each default comes from).

    mode: "offline" (ours: IQL-style V, AWR actor on the logged edges of the iteration's trees) or
        "online" (the paper's: V on Q at actions the actor samples, REINFORCE with the critic's
        baseline; in a run every round first plays ``rollout_episodes`` episodes in the environment,
        ``train_service.archer_online``).
    iterations: rounds of ([rollouts +] critic_epochs critic updates [+ actor_epochs actor updates]).
    warmup_iters: rounds of critic updates only before the actor is updated.
    critic_epochs / actor_epochs: optimizer steps of each per round.
    batch_size: transitions per forward pass. grad_accumulation: forward passes per optimizer step.
    gamma: discount per turn. tau: Polyak rate of the target critic.
    critic_lr / actor_lr: Adam learning rates. max_grad_norm: gradient clipping of both.
    expectile: offline V expectile (0.5 = mean regression).
    actor_loss: "auto" (awr offline, pg online), "awr" or "pg".
    awr_beta: AWR inverse temperature. awr_max_weight: cap on AWR weights.
    kl_coef: per-token KL penalty to the frozen starting actor (0 = off).
    temperature / max_new_tokens: sampling of actor actions (online mode).
    head_hidden / max_state_tokens / max_action_tokens: critic shape (train_service.value_model).
    max_length: tokens of history + turn for the actor (the history is cut from the left).
    seed: replay sampling, head init, generation. time_budget_s: stop after this many seconds (a
        safety cap; comparisons use the step budgets).
    rollout_episodes: episodes the actor plays per round (online; ArCHer's ``rollout_size``).
    buffer_capacity: transitions the replay buffer keeps, oldest dropped first (ArCHer's ``capacity``).
    episode_max_steps: actions per rollout episode before it is cut (ours: the environment's horizon).
    env_steps_budget / optimizer_steps_budget: stop after the round that reaches this many
        environment actions / critic + actor optimizer steps (online; null = no limit).
    """

    mode: Literal["offline", "online"] = field(
        default="offline",
        metadata=knob(
            "offline (ours: expectile V, AWR actor on the logged trees) or online (the paper's: each "
            "round plays episodes in the run's environment into a replay buffer)."
        ),
    )
    iterations: int = field(default=2000, metadata=knob("Rounds.", ge=1, le=1_000_000))
    warmup_iters: int = field(default=20, metadata=knob("Critic-only rounds.", ge=0, le=1_000_000))
    critic_epochs: int = field(default=5, metadata=knob("Critic steps per round.", ge=0, le=10_000))
    actor_epochs: int = field(default=3, metadata=knob("Actor steps per round.", ge=0, le=10_000))
    batch_size: int = field(default=4, metadata=BATCH_SIZE)
    grad_accumulation: int = field(default=64, metadata=GRAD_ACCUMULATION)
    gamma: float = field(default=0.95, metadata=knob("Discount per turn.", ge=0, le=1))
    tau: float = field(default=0.1, metadata=knob("Polyak rate of the target critic.", gt=0, le=1))
    critic_lr: float = field(default=1e-5, metadata=knob("Critic learning rate.", gt=0, le=1))
    actor_lr: float = field(default=1e-6, metadata=knob("Actor learning rate.", gt=0, le=1))
    max_grad_norm: float = field(default=1.0, metadata=MAX_GRAD_NORM)
    expectile: float = field(default=0.7, metadata=knob("Offline: V expectile.", gt=0, lt=1))
    actor_loss: Literal["auto", "awr", "pg"] = field(
        default="auto", metadata=knob("auto (awr offline, pg online), awr or pg.")
    )
    awr_beta: float = field(default=3.0, metadata=knob("AWR inverse temperature.", gt=0, le=100))
    awr_max_weight: float = field(default=100.0, metadata=knob("AWR weight cap.", gt=0, le=1e6))
    kl_coef: float = field(default=0.05, metadata=knob("KL penalty to the starting actor.", ge=0, le=100))
    temperature: float = field(default=1.0, metadata=knob("Online: sampling temperature.", gt=0, le=5))
    max_new_tokens: int = field(default=32, metadata=knob("Online: tokens per action.", ge=1, le=8192))
    head_hidden: int = field(default=1024, metadata=knob("Critic head width.", ge=1, le=65_536))
    max_state_tokens: int = field(default=512, metadata=knob("Critic state tokens.", ge=8, le=1_048_576))
    max_action_tokens: int = field(default=64, metadata=knob("Critic action tokens.", ge=4, le=65_536))
    max_length: int = field(default=1024, metadata=MAX_LENGTH)
    seed: int = field(default=0, metadata=SEED)
    time_budget_s: float | None = field(default=None, metadata=TIME_BUDGET_S)
    rollout_episodes: int = field(
        default=32, metadata=knob("Online: episodes played per round.", ge=1, le=100_000)
    )
    buffer_capacity: int = field(
        default=10_000, metadata=knob("Online: replay buffer size in transitions.", ge=1, le=10_000_000)
    )
    episode_max_steps: int = field(
        default=20, metadata=knob("Online: actions per rollout episode.", ge=1, le=10_000)
    )
    env_steps_budget: int | None = field(
        default=None,
        metadata=knob("Online: stop after this many environment actions.", ge=1, le=1_000_000_000),
    )
    optimizer_steps_budget: int | None = field(
        default=None, metadata=knob("Online: stop after this many optimizer steps.", ge=1, le=1_000_000_000)
    )

    def __post_init__(self) -> None:
        problems = []
        if self.mode not in ("offline", "online"):
            problems.append(f"mode must be 'offline' or 'online', got {self.mode!r}")
        if self.actor_loss not in ("auto", "awr", "pg"):
            problems.append(f"actor_loss must be auto, awr or pg, got {self.actor_loss!r}")
        for name in (
            "iterations",
            "batch_size",
            "grad_accumulation",
            "max_new_tokens",
            "head_hidden",
            "rollout_episodes",
            "buffer_capacity",
            "episode_max_steps",
        ):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1")
        for name in ("warmup_iters", "critic_epochs", "actor_epochs"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be >= 0")
        if not 0 <= self.gamma <= 1:
            problems.append("gamma must be in [0, 1]")
        if not 0 < self.tau <= 1:
            problems.append("tau must be in (0, 1]")
        if not 0 < self.expectile < 1:
            problems.append("expectile must be in (0, 1)")
        for name in ("critic_lr", "actor_lr", "max_grad_norm", "awr_beta", "awr_max_weight", "temperature"):
            if not getattr(self, name) > 0:
                problems.append(f"{name} must be > 0")
        if self.kl_coef < 0:
            problems.append("kl_coef must be >= 0")
        if self.max_state_tokens < 8 or self.max_action_tokens < 4 or self.max_length < 16:
            problems.append("max_state_tokens >= 8, max_action_tokens >= 4 and max_length >= 16 are needed")
        for name in ("env_steps_budget", "optimizer_steps_budget"):
            value = getattr(self, name)
            if value is not None and value < 1:
                problems.append(f"{name} must be >= 1 or null")
        if self.time_budget_s is not None and self.time_budget_s <= 0:
            problems.append("time_budget_s must be > 0")
        if problems:
            raise ValueError("invalid ArcherConfig: " + "; ".join(problems))

    @property
    def actor_objective(self) -> str:
        if self.actor_loss != "auto":
            return self.actor_loss
        return "awr" if self.mode == "offline" else "pg"


TRAINER_CONFIGS: dict[str, type[SFTConfig] | type[DPOConfig] | type[ArcherConfig]] = {
    "sft": SFTConfig,
    "dpo": DPOConfig,
    "archer": ArcherConfig,
}
"""Each ``train.method``'s trainer config (the keys are ``core.domain.config.TRAIN_METHODS``)."""


def trainer_fields(method: str) -> tuple[dataclasses.Field[Any], ...]:
    """The fields of ``method``'s trainer config, in declaration order."""
    return dataclasses.fields(TRAINER_CONFIGS[method])
