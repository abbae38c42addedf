"""Owns ``RunConfigIn``, the HTTP mirror of the pure dataclass ``core.domain.config.RunConfig``, and
its sections (search, critic, splice, train, evaluation settings).

``RunConfigIn`` mirrors ``RunConfig`` field for field (a test checks names and defaults stay in step)
and adds what a dataclass cannot say: bounds, allowed values, and descriptions for the OpenAPI
document. ``RunConfigIn.to_domain()`` gives the dataclass that RunRequested carries. Unknown fields
are rejected everywhere, so a typo is a 422 naming the field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from api.schemas.common import (
    ModelRef,
    TaskId,
    _Strict,
)
from api.schemas.train_settings import LoraIn, TrainSettings, TransitionSettings
from core.domain.config import RunConfig
from core.domain.events import CriticStrategyName

__all__ = [
    "CriticSettings",
    "EvaluationSettings",
    "LoraIn",
    "RunConfigIn",
    "SearchSettings",
    "SpliceSettings",
    "TrainSettings",
    "TransitionSettings",
]


class SearchSettings(_Strict):
    """Overrides of the MCTS configuration; unset fields keep the search service's defaults."""

    n_candidates: int | None = Field(
        None, strict=True, ge=1, le=32, description="Actions sampled per expansion (4)."
    )
    iterations: int | None = Field(None, strict=True, ge=1, le=1000, description="Descents per tree (8).")
    max_depth: int | None = Field(
        None, strict=True, ge=1, le=200, description="Deepest node of a descent (20)."
    )
    c_uct: float | None = Field(
        None, strict=True, ge=0, le=100, description="UCT exploration constant (0.25)."
    )
    temperature: float | None = Field(
        None, strict=True, ge=0, le=5, description="Sampling temperature of expansion."
    )
    max_tokens: int | None = Field(
        None, strict=True, ge=1, le=8192, description="Token cap of one generated turn."
    )
    max_pairs_per_tree: int | None = Field(
        None, strict=True, ge=0, le=10_000, description="Cap on pairs per tree."
    )
    constrain_actions: bool | None = Field(
        None,
        description="Decode the Action line only among the environment's valid actions (Env.valid_actions; "
        "docs/constrained-decoding.md); false: free decoding (default).",
    )
    constrain_tool_calls: bool | None = Field(
        None,
        description="In a tool-calling environment (tau2), decode the Action line as a call of one of its "
        "tools whose arguments validate against the tool's JSON schema, or a message (default true; "
        "docs/constrained-decoding.md); false: free decoding.",
    )
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

    strategy: CriticStrategyName = Field(
        "first",
        description="first (default): the first action after the divergence, the most accurate critic "
        "measured on search pairs (docs/critic.md); model: the actor judges each bad action (the paper); "
        "direct: the last action (Direct-Revision baseline); rules: invalid actions, loops and tool "
        "errors; reflect: the step after which the actor finds a reflection most likely; value: the "
        "first step whose ArCHer advantage is below value_threshold; replay: replays the bad path in "
        "its environment and finds the step after which continuations stop succeeding (docs/critic.md); "
        "oracle: the environment's own first-error oracle (TextCraft only; the ceiling of bench/ceiling.py).",
    )
    replay_policy: Literal["expert", "model"] | None = Field(
        None,
        description="replay: who continues each probed prefix: the environment's expert (TextCraft's "
        "solver, tau2's gold actions; the default) or the iteration's model.",
    )
    replay_m: int | None = Field(
        None, strict=True, ge=1, le=64, description="replay with the model: continuations per probe (4)."
    )
    replay_budget: int | None = Field(
        None, strict=True, ge=1, le=4096, description="replay: most continuations per path (16)."
    )
    replay_theta: float | None = Field(
        None, gt=0, le=1, description="replay: decisive when V(k + 1) < theta * V(start) (0.5)."
    )
    replay_temperature: float | None = Field(
        None, ge=0, le=5, description="replay with the model: sampling temperature (0.7)."
    )
    compare_model: bool | None = Field(
        None,
        description="Also record the model strategy's t' on every search pair (the iteration's actor as "
        "judge) when the run's strategy is another, for the run report's critic baselines (true).",
    )
    compare_reflect: bool | None = Field(
        None,
        description="Also record the reflect strategy's t' on every search pair, with the same model, "
        "for the run report's critic baselines (true).",
    )
    value_threshold: float | None = Field(
        None,
        strict=True,
        ge=-1e6,
        le=1e6,
        description="value: t' is the first step with advantage below this (0).",
    )
    value_model: ModelRef | None = Field(
        None,
        description="value: an archer checkpoint folder holding critic/ (default: the iteration's actor).",
    )
    plan: Literal["auto", "prefix", "batched", "text", "whole"] | None = Field(
        None,
        description="How `model` runs: auto (default), prefix reuse, one batched label-scoring call, or "
        "the model's words (text: step by step; whole: the whole trajectory at once) for a served chat "
        "model without label log-probabilities.",
    )
    early_exit: bool | None = Field(None, description="Stop judging at the first bad verdict (true).")
    reflect_margin: float | None = Field(
        None,
        strict=True,
        ge=0,
        le=10,
        description="reflect: t' is the first step whose reflection score (mean log-prob per token) is "
        "within this margin of the best step's (0, the argmax).",
    )


class SpliceSettings(_Strict):
    """Splicer settings (splice_service.service.SpliceConfig)."""

    verify: bool = Field(True, description="Replay each revision in the environment when possible.")
    keep_unverified: bool = Field(False, description="Keep revisions whose replay missed the good reward.")
    partner: Literal["adjacent", "pair"] | None = Field(
        None,
        description="Which good path a revision continues with: pair (the default: the pair's own good "
        "path) or adjacent (the tree's good path that branches off the bad one nearest before t', the "
        "next ones tried when a replay misses the good reward).",
    )
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


class EvaluationSettings(_Strict):
    """Overrides of the evaluation (train_service.evaluation.EvalConfig); unset fields keep its
    defaults."""

    max_steps: int | None = Field(
        None, strict=True, ge=1, le=1000, description="Actions per episode (100, the paper's max rounds)."
    )
    max_tokens: int | None = Field(
        None, strict=True, ge=1, le=8192, description="Generation budget per turn (40)."
    )
    prompt_budget: int | None = Field(
        None, strict=True, ge=16, le=1_048_576, description="Prompt tokens kept (1536)."
    )
    episodes_per_task: int | None = Field(
        None, strict=True, ge=1, le=1000, description="Seeded episodes per task (3)."
    )
    temperature: float | None = Field(
        None,
        strict=True,
        ge=0,
        le=5,
        description="Sampling temperature of evaluation episodes (0.7; 0 = greedy).",
    )
    stratify: bool | None = Field(
        None, description="Cap held-out tasks by a choice stratified over depths (true), else the first ones."
    )
    recovery_episodes: int | None = Field(
        None,
        strict=True,
        ge=0,
        le=10_000,
        description="The starting model's failed held-out episodes, truncated at seeded random steps, "
        "continued by every model (8).",
    )
    recovery_seeds: int | None = Field(
        None,
        strict=True,
        ge=1,
        le=100,
        description="Seeded continuations of each recovery prefix, each with max_steps actions after "
        "the prefix (3).",
    )
    success_threshold: float | None = Field(
        None, strict=True, ge=0, le=1, description="Reward counted as success (1.0)."
    )
    baseline: bool | None = Field(None, description="Also evaluate the starting model (true).")
    seen_tasks: bool | None = Field(None, description="Also evaluate on the searched tasks (true).")
    seen_max_tasks: int | None = Field(
        None,
        strict=True,
        ge=1,
        le=1_000_000,
        description="At most this many searched tasks evaluated as seen (all).",
    )
    constrain_actions: bool | None = Field(
        None,
        description="Evaluate with the Action line constrained to the environment's valid actions "
        "(docs/constrained-decoding.md); false: free decoding (default).",
    )
    constrain_tool_calls: bool | None = Field(
        None,
        description="Evaluate a tool-calling environment (tau2) with each Action line a schema-valid call "
        "of one of its tools, or a message (default true; docs/constrained-decoding.md).",
    )
    shared_passes: bool | None = Field(
        None,
        description="A local model runs each turn's prompts in shared forward passes (true: deterministic "
        "per seed, cheaper only for short prompts); false (default): batch-invariant passes, each "
        "episode as if played alone.",
    )
    workers: int | None = Field(
        None,
        strict=True,
        ge=1,
        le=256,
        description="Processes that play a local model's evaluation episodes (null: one per usable core "
        "where the batch is large enough; 1: in the train service's process). The results are the same.",
    )


class RunConfigIn(_Strict):
    """The body of POST /v1/runs. Mirrors core.domain.config.RunConfig."""

    env: str = Field(
        "textcraft",
        min_length=1,
        max_length=300,
        description="Environment URI: textcraft, sciworld, agentgym+http://HOST:PORT/NAME (a remote one "
        "must lie under the server's AGENTR_ALLOWED_ENV_URLS).",
    )
    model: ModelRef = Field(
        description="Starting model: an OpenAI-compatible base URL under the server's "
        "AGENTR_ALLOWED_MODEL_URLS, or an existing model folder inside the server's model roots "
        "(AGENTR_MODEL_ROOTS; a relative name is a folder of the first root).",
    )
    tasks: list[TaskId] = Field(
        default_factory=list,
        max_length=100_000,
        description="Explicit task ids; empty means `split` (cut to `max_tasks`).",
    )
    split: str = Field(
        "train", min_length=1, max_length=100, description="Named split when `tasks` is empty."
    )
    max_tasks: int | None = Field(
        None, strict=True, ge=1, le=1_000_000, description="Cap on tasks per iteration."
    )
    eval_tasks: list[TaskId] = Field(
        default_factory=list, max_length=100_000, description="Held-out task ids; empty = `eval_split`."
    )
    eval_split: str = Field("test", min_length=1, max_length=100, description="Split used for evaluation.")
    max_eval_tasks: int | None = Field(
        20, strict=True, ge=1, le=1_000_000, description="Cap on evaluation tasks."
    )
    iterations: int = Field(3, strict=True, ge=1, le=100, description="Search -> train iterations.")
    alpha_schedule: list[Annotated[float, Field(ge=0, le=1)]] = Field(
        default_factory=lambda: [0.5, 0.7, 1.0],
        min_length=1,
        max_length=100,
        description="Good-trajectory reward threshold per iteration (inclusive); the last value repeats.",
    )
    beta: float = Field(
        0.2, strict=True, ge=0, le=1, description="A bad leaf's reward is at most good reward - beta."
    )
    eta: float = Field(
        0.2,
        strict=True,
        gt=0,
        le=1,
        description="Agent share of the objective eta * L_agent + (1 - eta) * L_general, applied as a "
        "mixing ratio (general samples = round(A * (1 - eta) / eta)); 1 = agent data only.",
    )
    general_data: str | None = Field(None, max_length=1000, description="General chat data file (JSONL).")
    max_general: int | None = Field(
        None,
        strict=True,
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
    seed: int = Field(0, strict=True, ge=0, le=2**31 - 1, description="Seed of everything random in the run.")
    runtime: dict[str, Any] = Field(
        default_factory=dict,
        description="The conditions the run computes under (torch threads, precision, CPU), as "
        "`agentr run` records them; informational.",
    )

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
    def _oracle_critic_has_an_oracle(self) -> RunConfigIn:
        from core.envs.textcraft.oracle import oracle_strategy_problem

        problem = oracle_strategy_problem(self.critic.strategy, self.env)
        if problem is not None:
            raise ValueError(problem)
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
        data["train"] = self.train.to_domain()
        data["evaluation"] = self.evaluation.model_dump(exclude_unset=True)
        data["tasks"] = tuple(self.tasks)
        data["eval_tasks"] = tuple(self.eval_tasks)
        data["alpha_schedule"] = tuple(self.alpha_schedule)
        return RunConfig(**data)
