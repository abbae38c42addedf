"""Owns the critic's settings and its choice of strategy: ``CriticConfig`` (the run's ``critic``
section, checked) and ``critique``, which runs the strategy the config names from the registry.

The strategies, one module each behind one protocol (``critic_service/strategies/``): ``model`` (the
actor judges each step: Good / Bad / Uncertain label scores, prefix-reused or batched), ``reflect``
(the likelihood of a reflection after each step), ``value`` (ArCHer's advantage), ``rules``
(invalid actions, tool errors, loops), ``direct`` (Direct-Revision: the last action), ``first``
(the first action after the divergence: the default, the most accurate critic measured on search
pairs, docs/critic.md), ``replay`` (replays the bad path in its environment and finds the step after
which continuations stop succeeding) and ``oracle`` (the environment's first-error oracle: TextCraft's;
the ceiling). ``reflect_baseline`` and ``model_baseline`` are the reflect and model
strategies' t' recorded beside another strategy's on every search pair (``FirstErrorMarked.baselines``),
so the model critic stays measured next to the default in every report. The pure
verdict rules (labels from scores, t' from verdicts, fallback) are ``core.domain.critic``'s.
The names below that live in the strategy modules are re-exported for existing imports.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from core.domain.critic import judged_range
from core.domain.events import CriticStrategyName
from core.domain.trajectory import Trajectory
from core.envs.base import Env
from core.llm.judge_prompt import LABEL_TEXTS, judge_conversation, label_reserve
from core.llm.ports import Policy
from core.llm.prompts import JUDGE_QUESTION
from critic_service.strategies import REGISTRY, strategy_named
from critic_service.strategies.base import CriticConfigError, Critique
from critic_service.strategies.model import judge_batched, judge_naive, judge_prefix
from critic_service.strategies.reflect import judge_reflect, reflect_conversation, reflection_texts
from critic_service.strategies.scoring import label_token_counts, normalised_verdict, supports_prefix_reuse

Strategy = CriticStrategyName
STRATEGIES: tuple[Strategy, ...] = tuple(REGISTRY)
MAX_REFLECT_MARGIN = 10.0

__all__ = [
    "JUDGE_QUESTION",
    "LABEL_TEXTS",
    "STRATEGIES",
    "CriticConfig",
    "CriticConfigError",
    "Critique",
    "critique",
    "judge_batched",
    "model_baseline",
    "reflect_baseline",
    "judge_conversation",
    "judge_naive",
    "judge_prefix",
    "judge_reflect",
    "label_reserve",
    "label_token_counts",
    "normalised_verdict",
    "reflect_conversation",
    "reflection_texts",
    "supports_prefix_reuse",
]


@dataclass(frozen=True)
class CriticConfig:
    strategy: Strategy = "first"
    """A registered strategy: first (default) | model | direct | rules | reflect | value | replay | oracle
    (``STRATEGIES``)."""
    plan: Literal["auto", "prefix", "batched", "text", "whole"] = "auto"
    """How ``model`` runs: auto = prefix reuse on a local HF model, else one batched label-scoring
    call; text / whole = the model's words, step by step / about the whole trajectory (a served chat
    model without label log-probabilities)."""
    early_exit: bool = True
    """Stop judging at the first "bad" verdict (prefix plan; the batched plan judges all steps)."""
    reflect_margin: float = 0.0
    """reflect: t' is the first step whose reflection score is within this many nats per token of
    the best step's (0 = the argmax)."""
    value_threshold: float = 0.0
    """value: t' is the first step whose advantage min Q - min V is below this."""
    value_model: str | None = None
    """value: the checkpoint folder whose ``critic/`` scores the steps (an archer run's); None = the
    iteration's actor folder."""
    compare_reflect: bool = True
    """Also find the ``reflect`` strategy's t' on every search pair, with the same model, recorded
    as ``FirstErrorMarked.baselines["reflect"]`` (the per-iteration critic baselines of the run
    report; only pairs with >= 2 actions after the divergence cost model passes)."""
    replay_policy: Literal["expert", "model"] = "expert"
    """replay: who continues each probed prefix: the environment's expert (TextCraft's solver,
    tau2's gold actions; one continuation per probe) or the model (``replay_m`` sampled ones)."""
    replay_m: int = 4
    """replay with the model: continuations per probed prefix."""
    replay_budget: int = 16
    """replay: most continuations spent on one path (the binary search needs about log2(T) + 2 probes)."""
    replay_theta: float = 0.5
    """replay: the decisive step is the first k with V(k + 1) < theta * V(start)."""
    replay_temperature: float = 0.7
    """replay with the model: the continuations' sampling temperature."""
    compare_model: bool = True
    """Also find the ``model`` strategy's t' on every search pair when the run's strategy is another
    (the default ``first``), with the iteration's actor, recorded as ``FirstErrorMarked.baselines
    ["model"]``: the model critic measured beside the default in every report."""

    @classmethod
    def from_data(cls, data: dict[str, Any] | None) -> CriticConfig:
        data = dict(data or {})
        strategy = data.get("strategy", "first")
        if not isinstance(strategy, str):
            raise CriticConfigError(f"critic.strategy: must be a strategy name, got {strategy!r}")
        strategy = strategy_named(strategy).name  # unknown names fail here, naming the registered ones
        plan = data.get("plan", "auto")
        if plan not in ("auto", "prefix", "batched", "text", "whole"):
            raise CriticConfigError(
                f"critic.plan: unknown plan {plan!r} (auto, prefix, batched, text, whole)"
            )
        margin = data.get("reflect_margin", 0.0)
        if (
            isinstance(margin, bool)
            or not isinstance(margin, int | float)
            or not 0.0 <= float(margin) <= MAX_REFLECT_MARGIN
        ):
            raise CriticConfigError(
                f"critic.reflect_margin: must be a number in [0, {MAX_REFLECT_MARGIN}], got {margin!r}"
            )
        threshold = data.get("value_threshold", 0.0)
        numeric = isinstance(threshold, int | float) and not isinstance(threshold, bool)
        if not numeric or not -1e6 <= threshold <= 1e6:
            raise CriticConfigError(f"critic.value_threshold: must be a number, got {threshold!r}")
        value_model = data.get("value_model")
        if value_model is not None and (not isinstance(value_model, str) or not value_model.strip()):
            raise CriticConfigError(f"critic.value_model: must be a checkpoint folder, got {value_model!r}")
        replay_policy = data.get("replay_policy", "expert")
        if replay_policy not in ("expert", "model"):
            raise CriticConfigError(f"critic.replay_policy: expert or model, got {replay_policy!r}")
        replay_m, replay_budget = data.get("replay_m", 4), data.get("replay_budget", 16)
        for name, value, low, high in (
            ("replay_m", replay_m, 1, 64),
            ("replay_budget", replay_budget, 1, 4096),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise CriticConfigError(f"critic.{name}: an integer in [{low}, {high}], got {value!r}")
        if replay_budget < (replay_m if replay_policy == "model" else 1):
            raise CriticConfigError(
                f"critic.replay_budget ({replay_budget}) cannot pay one probe of {replay_m} continuations"
            )
        theta, temperature = data.get("replay_theta", 0.5), data.get("replay_temperature", 0.7)
        for key, number, lowest, highest in (
            ("replay_theta", theta, 0.0, 1.0),
            ("replay_temperature", temperature, 0.0, 5.0),
        ):
            ok = (
                isinstance(number, int | float)
                and not isinstance(number, bool)
                and lowest <= number <= highest
            )
            if not ok or (key == "replay_theta" and number == 0):
                raise CriticConfigError(f"critic.{key}: a number in ({lowest}, {highest}], got {number!r}")
        return cls(
            replay_policy=replay_policy,
            replay_m=replay_m,
            replay_budget=replay_budget,
            replay_theta=float(theta),
            replay_temperature=float(temperature),
            strategy=strategy,
            plan=plan,
            early_exit=bool(data.get("early_exit", True)),
            reflect_margin=float(margin),
            value_threshold=float(threshold),
            value_model=value_model,
            compare_reflect=bool(data.get("compare_reflect", True)),
            compare_model=bool(data.get("compare_model", True)),
        )

    @property
    def needs_actor(self) -> bool:
        """Whether the critic worker should lease the iteration's actor for a search pair: the
        strategy needs it, or, under the default ``first``, the model and reflect baselines
        (``compare_model`` / ``compare_reflect``) are recorded beside it (each strategy's
        ``actor_use``). ``rules`` and ``direct`` (the critic of a schedule no learner reads
        revisions from) spend no model pass."""
        return strategy_named(self.strategy).actor_use(self) != "none"


async def critique(
    config: CriticConfig,
    path: Trajectory,
    shared_steps: int,
    policy: Policy | None = None,
    *,
    env_uri: str | None = None,
    task_id: str | None = None,
    env_opener: Callable[[str], Env] | None = None,
) -> Critique:
    """Run the configured strategy on the bad ``path`` whose steps from ``shared_steps`` are judged.
    ``env_uri`` / ``task_id``: where the path was played, for a strategy that replays it (``replay``);
    ``env_opener``: how it opens that environment (a worker's, behind its egress allow-list)."""
    strategy = strategy_named(config.strategy)
    judged_range(len(path.steps), shared_steps)  # a bad range fails before any model call
    if strategy.needs_policy and policy is None:
        raise CriticConfigError(
            f"the {config.strategy} strategy needs a policy (no model reference was given)"
        )
    judge_in = getattr(strategy, "judge_in", None)
    if judge_in is not None:
        return await judge_in(config, path, shared_steps, policy, env_uri, task_id, env_opener)  # type: ignore[no-any-return]
    return await strategy.judge(config, path, shared_steps, policy)


async def reflect_baseline(
    config: CriticConfig, path: Trajectory, shared_steps: int, policy: Policy | None
) -> dict[str, int]:
    """``FirstErrorMarked.baselines``: the ``reflect`` strategy's t' on the same bad path with the
    same model, when ``config.compare_reflect`` and a model is at hand (the strategy is not reflect
    itself). One action after the divergence needs no model: that action is every critic's t'."""
    if not config.compare_reflect or policy is None or config.strategy == "reflect":
        return {}
    judged = judged_range(len(path.steps), shared_steps)
    if len(judged) == 1:
        return {"reflect": judged.start}
    verdicts, _ = await judge_reflect(policy, path, list(judged), config.reflect_margin)
    return {"reflect": next(v.step_index for v in verdicts if v.label == "bad")}


async def model_baseline(
    config: CriticConfig, path: Trajectory, shared_steps: int, policy: Policy | None
) -> dict[str, int]:
    """``FirstErrorMarked.baselines["model"]``: the ``model`` strategy's t' on the same bad path with
    the iteration's actor, when ``config.compare_model`` and a model is at hand and the strategy is
    another (the default ``first``); the model critic stays measured beside it. One action after the
    divergence needs no model pass."""
    if not config.compare_model or policy is None or config.strategy == "model":
        return {}
    judged = judged_range(len(path.steps), shared_steps)
    if len(judged) == 1:
        return {"model": judged.start}
    result = await strategy_named("model").judge(config, path, shared_steps, policy)
    return {"model": result.transition_index}
