"""Owns ``TrainSettings`` (``train`` of a run: the trainer knobs of every method, ``model_path`` and
the launch settings) and its parts (``LoraIn``, ``TransitionSettings``), and the JSON Schema
statement of which trainer fields each ``train.method`` takes.

``TRAINER_FIELDS_RULE`` is built from the constants ``core.domain.config.method_problem`` reads
(``TRAINER_FIELDS``, ``TRAIN_METHODS``, ``TRANSITIONS_KEY``): a field (even as null) only with a
scheduled method whose trainer takes it. It is written as one ``anyOf`` over the sets of methods a
schedule can hold, each branch naming the fields that set excludes (``false``), so schemathesis's
canonicaliser (jsonschema_rs) can both generate from it and negate it; a product of per-field
``if``/``then`` rules is more than it models (a Schema Error). The other ``train`` rules
(``launch_problem``: accelerate_config / nproc_per_node > 1 need torchrun; dpo and archer not under
torchrun; bf16 and mixed_bf16 exclusive) are checked by the validators and listed in
docs/security.md: stated beside this one they make the schema too large for the canonicaliser.

``launcher``, ``nproc_per_node`` and ``method`` sent as null mean their default (the schema admits
null): ``to_domain`` drops them, as the domain reads an absent key as the default.
"""

from __future__ import annotations

from itertools import combinations
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator

from api.schemas.common import ModelRef, _Strict
from core.domain.config import LAUNCH_KEYS, TRAIN_METHODS, TRAINER_FIELDS, TRANSITIONS_KEY, launch_problem

NULL_IS_DEFAULT = ("launcher", "nproc_per_node", "method")
"""``train`` keys whose explicit null means unset."""


def field_owners() -> dict[str, tuple[str, ...]]:
    """Each ``train`` field that some method's trainer lacks -> the methods whose trainers take it."""
    owners: dict[str, list[str]] = {}
    for method in TRAIN_METHODS:
        for name in TRAINER_FIELDS[method]:
            owners.setdefault(name, []).append(method)
    owners[TRANSITIONS_KEY] = ["archer"]
    return {name: tuple(methods) for name, methods in owners.items() if len(methods) < len(TRAIN_METHODS)}


def _schedule_holding(methods: tuple[str, ...]) -> dict[str, Any]:
    """``train.method`` that names every one of ``methods`` (a name, or a schedule holding them)."""
    if len(methods) > 1:
        return {"type": "array", "allOf": [{"contains": {"const": m}} for m in methods]}
    branches: list[dict[str, Any]] = [
        {"const": methods[0]},
        {"type": "array", "contains": {"const": methods[0]}},
    ]
    if methods[0] == "sft":
        branches.append({"type": "null"})  # absent or null: the default, sft
    return {"anyOf": branches}


def trainer_fields_rule() -> dict[str, Any]:
    """``method_problem``'s field rule as JSON Schema: for some set of methods the schedule holds,
    no field that only the other methods' trainers take."""
    owners = field_owners()
    branches = []
    for size in range(1, len(TRAIN_METHODS) + 1):
        for held in combinations(TRAIN_METHODS, size):
            excluded = sorted(name for name, methods in owners.items() if not set(methods) & set(held))
            branch: dict[str, Any] = {
                "properties": {"method": _schedule_holding(held), **dict.fromkeys(excluded, False)}
            }
            if held != ("sft",):
                branch["required"] = ["method"]
            branches.append(branch)
    return {"anyOf": branches}


class LoraIn(_Strict):
    """LoRA adapter settings (train_service.sft.LoraSettings)."""

    r: int | None = Field(None, strict=True, ge=1, le=1024)
    alpha: int | None = Field(None, strict=True, ge=1, le=100_000)
    dropout: float | None = Field(None, strict=True, ge=0, lt=1)
    target_modules: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(
        None, max_length=100
    )


class TransitionSettings(_Strict):
    """archer: how the trees become transitions (core.domain.transitions.TransitionConfig)."""

    invalid_action_penalty: float | None = Field(
        None,
        strict=True,
        ge=0,
        le=1,
        description="Subtracted from the reward of an action the environment rejected (0).",
    )
    include_open_edges: bool | None = Field(
        None, description="Keep edges into never-expanded nodes (done false, bootstrapped; true)."
    )


class TrainSettings(_Strict):
    """Overrides of the SFT configuration (train_service.sft.SFTConfig); unset fields keep its
    defaults. To add a knob: add it here AND where the trainer reads it."""

    model_config = ConfigDict(json_schema_extra=trainer_fields_rule())

    model_path: ModelRef | None = Field(
        None,
        description="When `model` is a served URL: the local folder with the weights that server serves "
        "(required unless `data_only`); not allowed with a local `model` folder.",
    )
    epochs: float | None = Field(
        None, strict=True, gt=0, le=1000, description="Passes over the dataset (1.0)."
    )
    max_steps: int | None = Field(
        None, strict=True, ge=-1, le=10_000_000, description="Optimizer steps; > 0 overrides epochs."
    )
    learning_rate: float | None = Field(
        None, strict=True, gt=0, le=1, description="Peak AdamW learning rate (5e-4)."
    )
    lr_scheduler: str | None = Field(
        None, pattern="^[a-z_]{1,40}$", description="A transformers scheduler name, or time_cosine."
    )
    warmup: float | None = Field(
        None, strict=True, ge=0, le=1_000_000, description="Warmup steps; in [0, 1) a fraction."
    )
    weight_decay: float | None = Field(None, strict=True, ge=0, le=10)
    batch_size: int | None = Field(None, strict=True, ge=1, le=4096)
    grad_accumulation: int | None = Field(None, strict=True, ge=1, le=4096)
    max_length: int | None = Field(
        None, strict=True, ge=8, le=1_048_576, description="Tokens per sample (1024)."
    )
    packing: bool | None = None
    pack_length: int | None = Field(None, strict=True, ge=8, le=1_048_576)
    seed: int | None = Field(None, strict=True, ge=0, le=2**31 - 1)
    bf16: bool | None = Field(None, description="bfloat16 weights (null: when CUDA supports it).")
    mixed_bf16: bool | None = Field(
        None,
        description="fp32 weights, forward/backward under bfloat16 autocast (fast on a CPU with "
        "AVX512-BF16 / AMX); not with bf16.",
    )
    max_grad_norm: float | None = Field(None, strict=True, gt=0, le=1e6)
    time_budget_s: float | None = Field(
        None, strict=True, gt=0, le=30 * 24 * 3600, description="Stop training after this."
    )
    logging_steps: int | None = Field(None, strict=True, ge=1, le=1_000_000)
    lora: LoraIn | None = None
    launcher: Literal["inline", "torchrun"] | None = Field(
        None, description="How training starts: inline (in the worker) or torchrun (a process group)."
    )
    nproc_per_node: int | None = Field(
        None, strict=True, ge=1, le=1024, description="Training processes (torchrun)."
    )
    accelerate_config: str | None = Field(
        None, min_length=1, max_length=1000, description="An accelerate config file (DeepSpeed / FSDP)."
    )
    master_port: int | None = Field(
        None, strict=True, ge=1, le=65535, description="torchrun rendezvous port."
    )
    # train.method and the DPO / ArCHer trainer fields (train_service/dpo.py, train_service/archer.py);
    # a field of another method's trainer is refused (core.domain.config.method_problem)
    method: (
        Literal["sft", "dpo", "archer"]
        | Annotated[list[Literal["sft", "dpo", "archer"]], Field(min_length=1, max_length=100)]
        | None
    ) = Field(
        None,
        description="The learner: sft (Agent-R SFT, default), dpo (at the divergence node), archer; "
        "or a list, one per iteration, the last repeating (e.g. [sft, archer]).",
    )
    beta: float | None = Field(
        None, strict=True, gt=0, le=100, description="dpo: KL strength of the implicit reward (0.1)."
    )
    reference: Literal["frozen", "none"] | None = Field(
        None, description="dpo: frozen starting model as reference (default) or none (reference-free)."
    )
    mode: Literal["offline", "online"] | None = Field(
        None,
        description="archer: offline (ours: expectile V, AWR actor on the logged trees; default) or "
        "online (the paper's: each round plays episodes in the run's environment into a replay buffer).",
    )
    iterations: int | None = Field(
        None, strict=True, ge=1, le=1_000_000, description="archer: rounds (2000)."
    )
    warmup_iters: int | None = Field(
        None, strict=True, ge=0, le=1_000_000, description="archer: critic-only rounds (20)."
    )
    critic_epochs: int | None = Field(
        None, strict=True, ge=0, le=10_000, description="archer: critic steps per round (5)."
    )
    actor_epochs: int | None = Field(
        None, strict=True, ge=0, le=10_000, description="archer: actor steps per round (3)."
    )
    gamma: float | None = Field(
        None, strict=True, ge=0, le=1, description="archer: discount per turn (0.95)."
    )
    tau: float | None = Field(
        None, strict=True, gt=0, le=1, description="archer: Polyak rate of the target critic (0.1)."
    )
    critic_lr: float | None = Field(
        None, strict=True, gt=0, le=1, description="archer: critic learning rate (1e-5)."
    )
    actor_lr: float | None = Field(
        None, strict=True, gt=0, le=1, description="archer: actor learning rate (1e-6)."
    )
    expectile: float | None = Field(
        None, strict=True, gt=0, lt=1, description="archer offline: V expectile (0.7)."
    )
    actor_loss: Literal["auto", "awr", "pg"] | None = Field(
        None, description="archer: auto (awr offline, pg online), awr or pg."
    )
    awr_beta: float | None = Field(
        None, strict=True, gt=0, le=100, description="archer: AWR inverse temperature (3)."
    )
    awr_max_weight: float | None = Field(
        None, strict=True, gt=0, le=1e6, description="archer: AWR weight cap (100)."
    )
    kl_coef: float | None = Field(
        None, strict=True, ge=0, le=100, description="archer: KL penalty to the start (0.05)."
    )
    temperature: float | None = Field(
        None, strict=True, gt=0, le=5, description="archer online: sampling temperature (1)."
    )
    max_new_tokens: int | None = Field(
        None, strict=True, ge=1, le=8192, description="archer online: tokens per action (32)."
    )
    head_hidden: int | None = Field(
        None, strict=True, ge=1, le=65_536, description="archer: critic head width (1024)."
    )
    max_state_tokens: int | None = Field(
        None, strict=True, ge=8, le=1_048_576, description="archer: critic state tokens (512)."
    )
    max_action_tokens: int | None = Field(
        None, strict=True, ge=4, le=65_536, description="archer: critic action tokens (64)."
    )
    rollout_episodes: int | None = Field(
        None, strict=True, ge=1, le=100_000, description="archer online: episodes played per round (32)."
    )
    buffer_capacity: int | None = Field(
        None,
        strict=True,
        ge=1,
        le=10_000_000,
        description="archer online: replay buffer size in transitions (10000).",
    )
    episode_max_steps: int | None = Field(
        None, strict=True, ge=1, le=10_000, description="archer online: actions per rollout episode (20)."
    )
    env_steps_budget: int | None = Field(
        None,
        strict=True,
        ge=1,
        le=1_000_000_000,
        description="archer online: stop after this many environment actions.",
    )
    optimizer_steps_budget: int | None = Field(
        None,
        strict=True,
        ge=1,
        le=1_000_000_000,
        description="archer online: stop after this many optimizer steps.",
    )
    transitions: TransitionSettings | None = Field(None, description="archer: how transitions are read.")

    @model_validator(mode="after")
    def _launch_settings(self) -> TrainSettings:
        problem = launch_problem(self.model_dump(exclude_none=True, include=set(LAUNCH_KEYS)))
        if problem is not None:
            raise ValueError(problem)
        return self

    def to_domain(self) -> dict[str, Any]:
        """``RunConfig.train``: the fields sent (explicit nulls mean something: bf16 null = auto),
        without the ``NULL_IS_DEFAULT`` keys sent as null."""
        data = self.model_dump(exclude_unset=True)
        return {k: v for k, v in data.items() if not (k in NULL_IS_DEFAULT and v is None)}
