"""Owns the HTTP API's request and response shapes (pydantic), including the RunConfig mirror.

``RunConfigIn`` mirrors the pure dataclass ``core.domain.config.RunConfig`` field for field (a test
checks names and defaults stay in step) and adds what a dataclass cannot say: bounds, allowed values,
and descriptions for the OpenAPI document. ``RunConfigIn.to_domain()`` gives the dataclass that
RunRequested carries. Unknown fields are rejected everywhere, so a typo is a 422 naming the field.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from core.domain.config import LAUNCH_KEYS, RunConfig, launch_problem

Scope = Literal["read", "ingest", "run", "review", "admin"]
TraceFormat = Literal["openai", "openai-legacy", "otel", "otlp", "sharegpt"]
ExportFormat = Literal["openai", "sharegpt", "parquet"]


ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,64}$"


def _rfc3339_text(value: Any) -> Any:
    # pydantic would read a number (or numeric text such as "0.5") as Unix seconds: refuse it,
    # so what is accepted is what the document says (format: date-time).
    if isinstance(value, bool | int | float) or (isinstance(value, str) and not _DATE_START.match(value)):
        raise ValueError("expected an RFC 3339 date-time such as 2026-01-31T12:00:00Z")
    return value


def _in_utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        return value
    try:
        return value.astimezone(UTC)
    except OverflowError:  # e.g. 9999-12-31T23:59:59-05:00: past what a timestamp column holds
        raise ValueError("date-time out of range once converted to UTC") from None


_DATE_START = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]")
Timestamp = Annotated[datetime, BeforeValidator(_rfc3339_text), AfterValidator(_in_utc)]
"""A date-time given as RFC 3339 text (not Unix seconds), normalised to UTC; use for every
timestamp the API accepts (query parameters and body fields)."""
TaskId = Annotated[str, Field(min_length=1, max_length=1000, description="A task id of the environment.")]


def _nul_path(value: Any, path: str) -> str | None:
    """The location of the first string holding a NUL character (PostgreSQL cannot store one)."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            found = _nul_path(key, path) or _nul_path(item, f"{path}.{key}" if path else str(key))
            if found is not None:
                return found
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = _nul_path(item, f"{path}[{index}]")
            if found is not None:
                return found
    return None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _no_nul_characters(cls, data: Any) -> Any:
        where = _nul_path(data, "")
        if where is not None:
            raise ValueError(f"{where or 'value'}: text must not contain NUL (\\u0000) characters")
        return data


# ------------------------------------------------------------------------------------------------
# Errors and pages
# ------------------------------------------------------------------------------------------------


class FieldError(BaseModel):
    field: str = Field(description="Dotted location of the offending value, e.g. body.search.max_depth.")
    message: str


class ErrorBody(BaseModel):
    """Every error response: a machine code, a human sentence, and field errors for 422."""

    error: str = Field(description="Short machine-readable code, e.g. not_found, validation_error.")
    detail: str
    fields: list[FieldError] = Field(default_factory=list)
    request_id: str | None = None


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text}
    for code, text in (
        (400, "Malformed request"),
        (401, "Missing or invalid API key"),
        (403, "The key lacks the scope this route needs"),
        (404, "Not found (or belongs to another project)"),
        (409, "Conflicts with the current state"),
        (413, "Request body too large"),
        (422, "Validation error naming the field"),
        (429, "Rate limited: see the Retry-After header"),
    )
}


# ------------------------------------------------------------------------------------------------
# Projects and keys
# ------------------------------------------------------------------------------------------------


class ProjectIn(_Strict):
    name: str = Field(min_length=1, max_length=200, description="Human-readable project name.")
    critic: TraceCriticIn | None = Field(
        None, description="The critic for this project's failed traces (an upload's own critic wins)."
    )


class ProjectOut(BaseModel):
    project_id: str
    name: str
    created_at: datetime | None = None


class KeyIn(_Strict):
    scopes: list[Scope] = Field(
        min_length=1,
        description="read: GET routes; ingest: POST /v1/traces; run: submit and cancel runs; "
        "review: correct pairs' and traces' first errors and reflections; "
        "admin: manage this project's keys (and implies every other scope).",
    )
    label: str = Field("", max_length=200, description="Free text shown in key listings.")

    @field_validator("scopes")
    @classmethod
    def _dedupe(cls, scopes: list[str]) -> list[str]:
        return sorted(set(scopes))


class KeyOut(BaseModel):
    key_id: str
    project_id: str
    prefix: str = Field(description="The public part of the key (agr_<prefix>_...).")
    scopes: list[str]
    label: str
    revoked: bool = False
    created_at: datetime | None = None


class KeyIssuedOut(KeyOut):
    key: str = Field(description="The full key. Shown once: only a salted hash is stored.")


# ------------------------------------------------------------------------------------------------
# Runs
# ------------------------------------------------------------------------------------------------


class SearchSettings(_Strict):
    """Overrides of the MCTS configuration; unset fields keep the search service's defaults."""

    n_candidates: int | None = Field(None, ge=1, le=32, description="Actions sampled per expansion (4).")
    iterations: int | None = Field(None, ge=1, le=1000, description="Descents per tree (8).")
    max_depth: int | None = Field(None, ge=1, le=200, description="Deepest node of a descent (20).")
    c_uct: float | None = Field(None, ge=0, le=100, description="UCT exploration constant (0.25).")
    temperature: float | None = Field(None, ge=0, le=5, description="Sampling temperature of expansion.")
    max_tokens: int | None = Field(None, ge=1, le=8192, description="Token cap of one generated turn.")
    max_pairs_per_tree: int | None = Field(None, ge=0, le=10_000, description="Cap on pairs per tree.")
    pair_selection: Literal["stratified", "deepest"] | None = Field(
        None,
        description="Which pairs the cap keeps: stratified (spread over bad-suffix lengths and "
        "divergence depths, the default) or deepest (the deepest divergences first: the baseline).",
    )
    record_terminal_children: bool | None = Field(
        None, description="Record a child whose step ended the episode as a leaf at once (true)."
    )


class CriticSettings(_Strict):
    """Critic settings (critic_service.critic.CriticConfig)."""

    strategy: Literal["model", "direct", "rules", "reflect", "value", "first"] = Field(
        "model",
        description="model: the actor judges each bad action (the paper); direct: the last action "
        "(Direct-Revision baseline); rules: invalid actions, loops and tool errors; reflect: the step "
        "after which the actor finds a reflection most likely; value: the first step whose ArCHer "
        "advantage is below value_threshold; first: the first action after the divergence (a baseline).",
    )
    compare_reflect: bool | None = Field(
        None,
        description="Also record the reflect strategy's t' on every search pair, with the same model, "
        "for the run report's critic baselines (true).",
    )
    value_threshold: float | None = Field(
        None, ge=-1e6, le=1e6, description="value: t' is the first step with advantage below this (0)."
    )
    value_model: str | None = Field(
        None,
        min_length=1,
        max_length=1000,
        description="value: an archer checkpoint folder holding critic/ (default: the iteration's actor).",
    )
    plan: Literal["auto", "prefix", "batched"] | None = Field(
        None, description="How `model` runs: auto (default), prefix reuse, or one batched call."
    )
    early_exit: bool | None = Field(None, description="Stop judging at the first bad verdict (true).")
    reflect_margin: float | None = Field(
        None,
        ge=0,
        le=10,
        description="reflect: t' is the first step whose reflection score (mean log-prob per token) is "
        "within this margin of the best step's (0, the argmax).",
    )


class SpliceSettings(_Strict):
    """Splicer settings (critic_service.splice_service.SpliceConfig)."""

    verify: bool = Field(True, description="Replay each revision in the environment when possible.")
    keep_unverified: bool = Field(False, description="Keep revisions whose replay missed the good reward.")
    reflection: Literal["template", "model"] | None = Field(
        None, description="Where the reflection sentence comes from (template, the default, or model)."
    )
    reflections: (
        dict[
            Annotated[str, Field(min_length=1, max_length=64)],
            Annotated[str, Field(min_length=1, max_length=2000)],
        ]
        | None
    ) = Field(
        None, max_length=100, description="Reflection templates (id -> sentence); null = the built-in ones."
    )


class LoraIn(_Strict):
    """LoRA adapter settings (train_service.sft.LoraSettings)."""

    r: int | None = Field(None, ge=1, le=1024)
    alpha: int | None = Field(None, ge=1, le=100_000)
    dropout: float | None = Field(None, ge=0, lt=1)
    target_modules: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(
        None, max_length=100
    )


class TransitionSettings(_Strict):
    """archer: how the trees become transitions (core.domain.transitions.TransitionConfig)."""

    invalid_action_penalty: float | None = Field(
        None, ge=0, le=1, description="Subtracted from the reward of an action the environment rejected (0)."
    )
    include_open_edges: bool | None = Field(
        None, description="Keep edges into never-expanded nodes (done false, bootstrapped; true)."
    )


class TrainSettings(_Strict):
    """Overrides of the SFT configuration (train_service.sft.SFTConfig); unset fields keep its
    defaults. To add a knob: add it here AND where the trainer reads it."""

    model_path: str | None = Field(
        None,
        min_length=1,
        max_length=1000,
        description="When `model` is a served URL: the local folder with the weights that server serves "
        "(required unless `data_only`); not allowed with a local `model` folder.",
    )
    epochs: float | None = Field(None, gt=0, le=1000, description="Passes over the dataset (1.0).")
    max_steps: int | None = Field(
        None, ge=-1, le=10_000_000, description="Optimizer steps; > 0 overrides epochs."
    )
    learning_rate: float | None = Field(None, gt=0, le=1, description="Peak AdamW learning rate (5e-4).")
    lr_scheduler: str | None = Field(
        None, pattern="^[a-z_]{1,40}$", description="A transformers scheduler name, or time_cosine."
    )
    warmup: float | None = Field(None, ge=0, le=1_000_000, description="Warmup steps; in [0, 1) a fraction.")
    weight_decay: float | None = Field(None, ge=0, le=10)
    batch_size: int | None = Field(None, ge=1, le=4096)
    grad_accumulation: int | None = Field(None, ge=1, le=4096)
    max_length: int | None = Field(None, ge=8, le=1_048_576, description="Tokens per sample (1024).")
    packing: bool | None = None
    pack_length: int | None = Field(None, ge=8, le=1_048_576)
    seed: int | None = Field(None, ge=0, le=2**31 - 1)
    bf16: bool | None = Field(None, description="bfloat16 weights (null: when CUDA supports it).")
    mixed_bf16: bool | None = Field(
        None,
        description="fp32 weights, forward/backward under bfloat16 autocast (fast on a CPU with "
        "AVX512-BF16 / AMX); not with bf16.",
    )
    max_grad_norm: float | None = Field(None, gt=0, le=1e6)
    time_budget_s: float | None = Field(
        None, gt=0, le=30 * 24 * 3600, description="Stop training after this."
    )
    logging_steps: int | None = Field(None, ge=1, le=1_000_000)
    lora: LoraIn | None = None
    launcher: Literal["inline", "torchrun"] | None = Field(
        None, description="How training starts: inline (in the worker) or torchrun (a process group)."
    )
    nproc_per_node: int | None = Field(None, ge=1, le=1024, description="Training processes (torchrun).")
    accelerate_config: str | None = Field(
        None, min_length=1, max_length=1000, description="An accelerate config file (DeepSpeed / FSDP)."
    )
    master_port: int | None = Field(None, ge=1, le=65535, description="torchrun rendezvous port.")
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
        None, gt=0, le=100, description="dpo: KL strength of the implicit reward (0.1)."
    )
    reference: Literal["frozen", "none"] | None = Field(
        None, description="dpo: frozen starting model as reference (default) or none (reference-free)."
    )
    mode: Literal["offline", "online"] | None = Field(
        None, description="archer: offline (expectile V, AWR actor; default) or online (sampled actions)."
    )
    iterations: int | None = Field(None, ge=1, le=1_000_000, description="archer: rounds (40).")
    warmup_iters: int | None = Field(None, ge=0, le=1_000_000, description="archer: critic-only rounds (20).")
    critic_epochs: int | None = Field(
        None, ge=0, le=10_000, description="archer: critic steps per round (5)."
    )
    actor_epochs: int | None = Field(None, ge=0, le=10_000, description="archer: actor steps per round (3).")
    gamma: float | None = Field(None, ge=0, le=1, description="archer: discount per turn (0.95).")
    tau: float | None = Field(None, gt=0, le=1, description="archer: Polyak rate of the target critic (0.1).")
    critic_lr: float | None = Field(None, gt=0, le=1, description="archer: critic learning rate (1e-5).")
    actor_lr: float | None = Field(None, gt=0, le=1, description="archer: actor learning rate (1e-6).")
    expectile: float | None = Field(None, gt=0, lt=1, description="archer offline: V expectile (0.7).")
    actor_loss: Literal["auto", "awr", "pg"] | None = Field(
        None, description="archer: auto (awr offline, pg online), awr or pg."
    )
    awr_beta: float | None = Field(None, gt=0, le=100, description="archer: AWR inverse temperature (3).")
    awr_max_weight: float | None = Field(None, gt=0, le=1e6, description="archer: AWR weight cap (100).")
    kl_coef: float | None = Field(None, ge=0, le=100, description="archer: KL penalty to the start (0.05).")
    temperature: float | None = Field(
        None, gt=0, le=5, description="archer online: sampling temperature (1)."
    )
    max_new_tokens: int | None = Field(
        None, ge=1, le=8192, description="archer online: tokens per action (32)."
    )
    head_hidden: int | None = Field(None, ge=1, le=65_536, description="archer: critic head width (1024).")
    max_state_tokens: int | None = Field(
        None, ge=8, le=1_048_576, description="archer: critic state tokens (512)."
    )
    max_action_tokens: int | None = Field(
        None, ge=4, le=65_536, description="archer: critic action tokens (64)."
    )
    transitions: TransitionSettings | None = Field(None, description="archer: how transitions are read.")

    @model_validator(mode="after")
    def _launch_settings(self) -> TrainSettings:
        problem = launch_problem(self.model_dump(exclude_none=True, include=set(LAUNCH_KEYS)))
        if problem is not None:
            raise ValueError(problem)
        return self


class EvaluationSettings(_Strict):
    """Overrides of the evaluation (train_service.evaluation.EvalConfig); unset fields keep its
    defaults."""

    max_steps: int | None = Field(
        None, ge=1, le=1000, description="Actions per episode (100, the paper's max rounds)."
    )
    max_tokens: int | None = Field(None, ge=1, le=8192, description="Generation budget per turn (40).")
    prompt_budget: int | None = Field(None, ge=16, le=1_048_576, description="Prompt tokens kept (1536).")
    episodes_per_task: int | None = Field(None, ge=1, le=1000, description="Seeded episodes per task (3).")
    temperature: float | None = Field(
        None, ge=0, le=5, description="Sampling temperature of evaluation episodes (0.7; 0 = greedy)."
    )
    stratify: bool | None = Field(
        None, description="Cap held-out tasks by a choice stratified over depths (true), else the first ones."
    )
    recovery_episodes: int | None = Field(
        None,
        ge=0,
        le=10_000,
        description="The starting model's failed held-out episodes, truncated at seeded random steps, "
        "continued by every model (8).",
    )
    recovery_seeds: int | None = Field(
        None,
        ge=1,
        le=100,
        description="Seeded continuations of each recovery prefix, each with max_steps actions after "
        "the prefix (3).",
    )
    success_threshold: float | None = Field(None, ge=0, le=1, description="Reward counted as success (1.0).")
    baseline: bool | None = Field(None, description="Also evaluate the starting model (true).")
    seen_tasks: bool | None = Field(None, description="Also evaluate on the searched tasks (true).")
    seen_max_tasks: int | None = Field(
        None, ge=1, le=1_000_000, description="At most this many searched tasks evaluated as seen (all)."
    )
    shared_passes: bool | None = Field(
        None,
        description="A local model runs each turn's prompts in shared forward passes (true: deterministic "
        "per seed, cheaper only for short prompts); false (default): batch-invariant passes, each "
        "episode as if played alone.",
    )


class RunConfigIn(_Strict):
    """The body of POST /v1/runs. Mirrors core.domain.config.RunConfig."""

    env: str = Field(
        "textcraft",
        min_length=1,
        max_length=300,
        description="Environment URI: textcraft, sciworld, agentgym+http://HOST:PORT/NAME.",
    )
    model: str = Field(
        min_length=1,
        max_length=1000,
        description="Starting model: a local model folder or an OpenAI-compatible base URL.",
    )
    tasks: list[TaskId] = Field(
        default_factory=list,
        max_length=100_000,
        description="Explicit task ids; empty means `split` (cut to `max_tasks`).",
    )
    split: str = Field(
        "train", min_length=1, max_length=100, description="Named split when `tasks` is empty."
    )
    max_tasks: int | None = Field(None, ge=1, le=1_000_000, description="Cap on tasks per iteration.")
    eval_tasks: list[TaskId] = Field(
        default_factory=list, max_length=100_000, description="Held-out task ids; empty = `eval_split`."
    )
    eval_split: str = Field("test", min_length=1, max_length=100, description="Split used for evaluation.")
    max_eval_tasks: int | None = Field(20, ge=1, le=1_000_000, description="Cap on evaluation tasks.")
    iterations: int = Field(3, ge=1, le=100, description="Search -> train iterations.")
    alpha_schedule: list[Annotated[float, Field(ge=0, le=1)]] = Field(
        default_factory=lambda: [0.5, 0.7, 1.0],
        min_length=1,
        max_length=100,
        description="Good-trajectory reward threshold per iteration (inclusive); the last value repeats.",
    )
    beta: float = Field(0.2, ge=0, le=1, description="A bad leaf's reward is at most good reward - beta.")
    eta: float = Field(
        0.2,
        gt=0,
        le=1,
        description="Agent share of the objective eta * L_agent + (1 - eta) * L_general, applied as a "
        "mixing ratio (general samples = round(A * (1 - eta) / eta)); 1 = agent data only.",
    )
    general_data: str | None = Field(None, max_length=1000, description="General chat data file (JSONL).")
    max_general: int | None = Field(
        None,
        ge=0,
        le=1_000_000,
        description="At most this many general samples per iteration (null: eta's count); with the warm "
        "start's judge set as general data, a small replay of judge examples.",
    )
    mask_invalid_steps: bool = Field(
        True, description="Good trajectories: env-rejected turns get loss weight 0 (kept as context)."
    )
    mask_loop_steps: bool = Field(
        True, description="Good trajectories: repeats of an action loop get loss weight 0 (kept as context)."
    )
    include_revisions: bool = Field(
        True, description="Train on revision samples; false = good trajectories only (an ablation)."
    )
    search: SearchSettings = Field(default_factory=lambda: SearchSettings.model_validate({}))
    critic: CriticSettings = Field(default_factory=lambda: CriticSettings.model_validate({}))
    splice: SpliceSettings = Field(default_factory=lambda: SpliceSettings.model_validate({}))
    train: TrainSettings = Field(
        default_factory=lambda: TrainSettings.model_validate({}),
        description="Overrides of the SFT configuration (epochs, learning_rate, ...), plus `model_path`: "
        "when `model` is a served URL, the local folder with the weights that server serves (required "
        "unless `data_only`); later iterations load the trained checkpoint folder locally.",
    )
    evaluation: EvaluationSettings = Field(
        default_factory=lambda: EvaluationSettings.model_validate({}),
        description="Overrides of the evaluation (max_steps, max_tokens, recovery_episodes, baseline, ...).",
    )
    data_only: bool = Field(False, description="Stop each iteration once its dataset is ready (no training).")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Seed of everything random in the run.")

    @field_validator("alpha_schedule")
    @classmethod
    def _alpha_in_unit_interval(cls, schedule: list[float]) -> list[float]:
        for index, alpha in enumerate(schedule):
            if not 0.0 <= alpha <= 1.0:
                raise ValueError(f"alpha_schedule[{index}] = {alpha} is outside [0, 1]")
        return schedule

    @field_validator("tasks", "eval_tasks")
    @classmethod
    def _task_ids_non_empty(cls, ids: list[str]) -> list[str]:
        for index, task_id in enumerate(ids):
            if not task_id.strip():
                raise ValueError(f"task id at index {index} is empty")
        return ids

    @model_validator(mode="after")
    def _env_uri_shape(self) -> RunConfigIn:
        env = self.env
        if "://" in env and not env.startswith("agentgym+http"):
            raise ValueError(
                f"env: unsupported URI scheme in {env!r} (expected agentgym+http://HOST:PORT/NAME)"
            )
        return self

    @model_validator(mode="after")
    def _served_model_trains_from_local_weights(self) -> RunConfigIn:
        problem = self.to_domain().training_problem()
        if problem is not None:
            raise ValueError(problem)
        return self

    def to_domain(self) -> RunConfig:
        data = self.model_dump()
        data["search"] = self.search.model_dump(exclude_none=True)
        data["critic"] = self.critic.model_dump(exclude_none=True)
        data["splice"] = self.splice.model_dump(exclude_none=True)
        # explicit nulls mean something here (prompt_budget: null = no budget; bf16: null = auto)
        data["train"] = self.train.model_dump(exclude_unset=True)
        data["evaluation"] = self.evaluation.model_dump(exclude_unset=True)
        data["tasks"] = tuple(self.tasks)
        data["eval_tasks"] = tuple(self.eval_tasks)
        data["alpha_schedule"] = tuple(self.alpha_schedule)
        return RunConfig(**data)


class RunAccepted(BaseModel):
    run_id: str
    status: str


class IterationOut(BaseModel):
    iteration: int
    status: str
    model_ref: str
    alpha: float
    trees_expected: int
    trees_done: int
    trees_failed: int
    pairs: int
    revisions: int
    goods: int
    dataset_id: str | None = None
    checkpoint: str | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)
    revision_length_mean: float | None = None
    reason: str | None = None


class RunOut(BaseModel):
    run_id: str
    project_id: str
    status: str
    config: dict[str, Any]
    current_iteration: int
    final_model_ref: str | None = None
    reason: str | None = None
    summary: dict[str, Any] | None = None
    created_at: datetime
    updated_at: datetime
    iterations: list[IterationOut] = Field(default_factory=list)


class RunSummaryOut(BaseModel):
    run_id: str
    status: str
    current_iteration: int
    created_at: datetime
    updated_at: datetime


class RunPage(BaseModel):
    items: list[RunSummaryOut]
    next_cursor: str | None = Field(None, description="Pass as `cursor` for the next page; null at the end.")


class CancelIn(_Strict):
    reason: str = Field("cancelled by user", min_length=1, max_length=500)


# ------------------------------------------------------------------------------------------------
# Trees, pairs, samples
# ------------------------------------------------------------------------------------------------


class NodeOut(BaseModel):
    node_id: str
    parent_id: str | None
    depth: int
    action: str
    thought: str
    observation: str
    reward: float
    done: bool
    valid: bool
    visits: int = Field(description="N(s): leaf outcomes recorded at or below this node.")
    value_sum: float = Field(description="Sum of the terminal rewards of those outcomes.")
    q: float | None = Field(description="Mean value Q(s)/N(s); null when unvisited.")


class TreeSummaryOut(BaseModel):
    tree_id: str
    run_id: str | None
    iteration: int
    env_uri: str
    task_id: str
    status: str
    node_count: int = Field(description="Nodes expanded so far.")
    rollouts: int
    best_reward: float | None
    reason: str | None = None


class TreeOut(TreeSummaryOut):
    root_id: str | None = None
    nodes: list[NodeOut] = Field(default_factory=list, description="Every node, parents before children.")


class TreePage(BaseModel):
    items: list[TreeSummaryOut]
    next_cursor: str | None = None


class PairOut(BaseModel):
    pair_id: str
    run_id: str | None
    iteration: int
    tree_id: str | None
    source: str
    task_key: str
    status: str
    shared_steps: int
    transition_index: int | None = None
    strategy: str | None = None
    reason: str | None = None


class PairPage(BaseModel):
    items: list[PairOut]
    next_cursor: str | None = None


class SampleOut(BaseModel):
    sample_id: str
    run_id: str | None
    iteration: int
    kind: str
    pair_id: str | None = None
    tree_id: str | None = None
    verified: bool | None = None
    template_id: str | None = None
    revision_length: int | None = None
    sample: dict[str, Any] = Field(description="The TrainingSample: messages with loss weights, provenance.")


class SamplePage(BaseModel):
    items: list[SampleOut]
    next_cursor: str | None = None


# ------------------------------------------------------------------------------------------------
# Traces
# ------------------------------------------------------------------------------------------------


class OutcomeIn(_Strict):
    """An outcome stated as success plus an optional reward."""

    success: bool
    reward: float | None = Field(None, ge=0, le=1, description="Final reward in [0, 1].")


class _TraceEnvelope(BaseModel):
    """The fields every trace format shares. A format's own fields beyond the ones described are
    passed to its importer (core.formats), which names any malformed one in its 422."""

    model_config = ConfigDict(extra="allow")

    id: Annotated[str, Field(min_length=1, max_length=200)] | int | None = Field(
        None, description="The caller's own id for the trace (at most 200 characters)."
    )
    task_key: str | None = Field(
        None, min_length=1, max_length=1000, description="Groups traces of one task; default: a hash."
    )
    outcome: (
        Literal["success", "failure", "unknown"]
        | bool
        | Annotated[float, Field(ge=0, le=1)]
        | OutcomeIn
        | None
    ) = Field(
        None,
        description='How the trace ended: "success" | "failure" | "unknown" (default), a reward in [0, 1] '
        '(success only at 1), true/false, or {"success": bool, "reward": number}. Unknown traces wait '
        "for PATCH /v1/traces/{id}.",
    )
    reward: float | None = Field(None, ge=0, le=1, description="Final reward in [0, 1], if known.")
    metadata: dict[str, Any] | None = Field(None, description="Free-form metadata kept with the trace.")


class OpenAITextPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["text"]
    text: str


class OpenAIFunction(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1, max_length=200)
    arguments: str | dict[str, Any] = Field("", description="JSON text (or an object) of the arguments.")


class OpenAIToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str = Field(min_length=1, max_length=200)
    type: Literal["function"] = "function"
    function: OpenAIFunction


class OpenAIMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool", "function"] = Field(
        description="function: the legacy result role, accepted with format openai-legacy."
    )
    content: str | list[OpenAITextPart] | None = None
    tool_calls: list[OpenAIToolCall] | None = None
    tool_call_id: str | None = Field(None, min_length=1, max_length=200)
    function_call: OpenAIFunction | None = Field(None, description="Legacy; format openai-legacy only.")


class OpenAITrace(_TraceEnvelope):
    messages: list[OpenAIMessage] = Field(min_length=1, description="OpenAI chat messages, in order.")
    tools: list[dict[str, Any]] | None = Field(None, description="The tool definitions offered.")


class OtelSpan(BaseModel):
    model_config = ConfigDict(extra="allow")
    attributes: dict[str, Any] | list[dict[str, Any]] = Field(
        default_factory=dict,
        description="gen_ai.* attributes: an object, or an OTLP key-value list; gen_ai.input.messages "
        "(and gen_ai.output.messages) hold the messages as JSON text or arrays.",
    )
    start_time_unix_nano: int | str | None = None


class OtelTrace(_TraceEnvelope):
    spans: list[OtelSpan] | None = Field(
        None, min_length=1, description="The trace's spans (every model-call span is read)."
    )
    resourceSpans: list[dict[str, Any]] | None = Field(  # noqa: N815 (the OTLP/JSON field name)
        None, min_length=1, description="Or: one OTLP/JSON export holding this trace's spans."
    )


class ShareGPTTurn(BaseModel):
    model_config = ConfigDict(extra="allow")
    from_: Literal[
        "system",
        "human",
        "user",
        "gpt",
        "assistant",
        "function_call",
        "observation",
        "tool",
        "function_response",
    ] = Field(alias="from")
    value: str


class ShareGPTTrace(_TraceEnvelope):
    conversations: list[ShareGPTTurn] = Field(min_length=1, description="ShareGPT / AgentGym turns.")


class TraceCriticIn(_Strict):
    """Who finds the first error of this batch's failed traces (default: the critic worker's settings)."""

    strategy: Literal["rules", "model", "direct"] = Field(
        "rules",
        description="rules: tool errors, HTTP-style codes, loops; model: the named critic model "
        "labels each step; direct: the last action (Direct-Revision), which never says no_error_found.",
    )
    model: str | None = Field(
        None, min_length=1, max_length=500, description="Critic model for strategy model (folder or URL)."
    )


class _TraceBatch(_Strict):
    traces: list[Any]
    critic: TraceCriticIn | None = Field(None, description="The critic for this batch's failed traces.")

    def trace_dicts(self) -> list[dict[str, Any]]:
        """The traces as the importers read them: exactly the fields the caller sent."""
        return [trace.model_dump(mode="json", by_alias=True, exclude_unset=True) for trace in self.traces]


class OpenAIBatchIn(_TraceBatch):
    format: Literal["openai"]
    traces: list[OpenAITrace] = Field(min_length=1, max_length=10_000)


class OpenAILegacyBatchIn(_TraceBatch):
    format: Literal["openai-legacy"]
    traces: list[OpenAITrace] = Field(
        min_length=1,
        max_length=10_000,
        description="OpenAI messages that may use function_call / role function.",
    )


class OtlpBatchIn(_TraceBatch):
    format: Literal["otlp"]
    traces: list[dict[str, Any]] = Field(
        min_length=1,
        max_length=1_000,
        description="OTLP/JSON export requests ({resourceSpans: [...]}); spans are grouped into traces by "
        "trace id. Outcome, reward and task key come from agentr.outcome / agentr.reward / agentr.task_key "
        "attributes or the root span's status.",
    )

    def trace_dicts(self) -> list[dict[str, Any]]:
        return list(self.traces)


class OtelBatchIn(_TraceBatch):
    format: Literal["otel"]
    traces: list[OtelTrace] = Field(min_length=1, max_length=10_000)


class ShareGPTBatchIn(_TraceBatch):
    format: Literal["sharegpt"]
    traces: list[ShareGPTTrace] = Field(min_length=1, max_length=10_000)


TraceBatchIn = Annotated[
    OpenAIBatchIn | OpenAILegacyBatchIn | OtelBatchIn | OtlpBatchIn | ShareGPTBatchIn,
    Field(
        discriminator="format",
        description="A batch of production traces in one import format (`format` picks the shape of "
        "each trace); all are stored or none is. To add a format: a batch model here, in this union.",
    ),
]


class TraceAccepted(BaseModel):
    trace_ids: list[str]
    waiting_for_outcome: list[str] = Field(
        default_factory=list,
        description="The traces stored without an outcome: nothing is done with them until "
        "PATCH /v1/traces/{id} (or PATCH /v1/traces) sets one.",
    )
    message: str = Field("", description="What happens next, in words.")


class TraceOutcomeIn(_Strict):
    """The outcome of a trace that was ingested without one."""

    outcome: Literal["success", "failure"] | bool | Annotated[float, Field(ge=0, le=1)] | OutcomeIn = Field(
        description='"success" | "failure", a reward in [0, 1] (success only at 1), true/false, or '
        '{"success": bool, "reward": number}.'
    )
    reward: float | None = Field(None, ge=0, le=1, description="Final reward in [0, 1], if known.")


class TraceOutcomeItem(TraceOutcomeIn):
    trace_id: str = Field(pattern=ID_PATTERN, description="The trace to set.")


class TraceOutcomeBatchIn(_Strict):
    """Outcomes for several traces; all are set or none is."""

    outcomes: list[TraceOutcomeItem] = Field(min_length=1, max_length=10_000)


class TraceOutcomeOut(BaseModel):
    trace_id: str
    outcome: str
    reward: float | None = None
    changed: bool = Field(description="False when the trace already had this outcome (nothing appended).")


class TraceOutcomesOut(BaseModel):
    items: list[TraceOutcomeOut]


class VerdictOut(BaseModel):
    step_index: int
    label: str
    scores: dict[str, float] = Field(default_factory=dict)
    method: str = ""
    reason: str = ""


class CritiqueOut(BaseModel):
    strategy: str
    transition_index: int | None
    verdicts: list[VerdictOut]
    model_version: str = ""


class TraceOut(BaseModel):
    trace_id: str
    task_key: str
    outcome: str
    source_format: str
    external_id: str | None = None
    status: str
    transition_index: int | None = None
    created_at: datetime
    trajectory: dict[str, Any] | None = None
    critique: CritiqueOut | None = None
    sample: dict[str, Any] | None = None


class HealthOut(BaseModel):
    status: str
    checks: dict[str, str] = Field(default_factory=dict)
