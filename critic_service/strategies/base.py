"""Owns what every critic strategy is: the ``CriticStrategy`` protocol, the ``Critique`` it returns,
the ``CriticOptions`` it may read (the run's ``critic`` settings, ``critic_service.critic.CriticConfig``)
and ``CriticConfigError``.

A strategy is one small module of this package with one object that has a ``name``, says whether
it ``needs_policy`` (the iteration's model), how it uses the actor under given options
(``actor_use``: the critic worker leases the model by it) and how it takes an uploaded trace
(``on_traces``), and ``judge``s the bad path's steps from the divergence on; the verdict rules
themselves are pure and live in ``core.domain.critic``. The registry (``critic_service.strategies``)
maps names to strategies; the service and ``CriticConfig`` ask the chosen one, never its name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from core.domain.events import CriticStrategyName, StepVerdict
from core.domain.trajectory import Trajectory
from core.llm.ports import Policy

ActorUse = Literal["required", "optional", "none"]
"""How judging uses the iteration's actor: it cannot judge without it, it records extra (baseline)
verdicts with it when it can be opened, or it never asks for it."""

TraceUse = Literal["model", "runs-only", "as-set"]
"""How a strategy takes an uploaded trace: with the trace's critic model (rules judge when none is
set), not at all (it needs a run's artefacts: rules judge instead), or as set, with no model."""


class CriticConfigError(ValueError):
    """An unknown strategy / plan name in the critic settings, or a strategy that cannot run as set."""


@dataclass(frozen=True)
class Critique:
    strategy: CriticStrategyName
    verdicts: tuple[StepVerdict, ...]
    transition_index: int
    tokens_processed: int = 0
    model_version: str = ""
    fallback: bool = False
    """No step was judged bad: t' is the last action (Direct-Revision's rule; always so for direct)."""
    probes: tuple[Any, ...] = ()
    """The evidence of a strategy that checks its answer (``replay``: its ``core.domain.decisive_step``
    probes, each recorded as a ``ReplayProbed`` event)."""
    unverified: str | None = None
    """Why the strategy could not verify a step (``replay``: no environment, no replay, no success
    from the start, ...); then no t' is named and the pair gets no sample."""


class CriticOptions(Protocol):
    """The critic settings a strategy may read (``critic_service.critic.CriticConfig`` has them)."""

    @property
    def plan(self) -> str: ...

    @property
    def early_exit(self) -> bool: ...

    @property
    def reflect_margin(self) -> float: ...

    @property
    def value_threshold(self) -> float: ...

    @property
    def value_model(self) -> str | None: ...

    @property
    def replay_policy(self) -> str: ...

    @property
    def compare_model(self) -> bool: ...

    @property
    def compare_reflect(self) -> bool: ...


class CriticStrategy(Protocol):
    """One way of finding the first error t' on a bad path."""

    @property
    def name(self) -> CriticStrategyName:
        """The ``critic.strategy`` value that chooses it (a name of ``CriticStrategyName``)."""
        ...

    @property
    def needs_policy(self) -> bool:
        """True when it cannot judge without the iteration's model (the service passes ``policy``)."""
        ...

    @property
    def on_traces(self) -> TraceUse:
        """How it takes an uploaded trace (``TraceUse``)."""
        ...

    def actor_use(self, options: CriticOptions) -> ActorUse:
        """How judging with ``options`` uses the iteration's actor (``ActorUse``)."""
        ...

    async def judge(
        self, options: CriticOptions, path: Trajectory, shared_steps: int, policy: Policy | None
    ) -> Critique:
        """Judge ``path.steps[shared_steps:]`` and name t' (``Critique.transition_index``)."""
        ...


class NoActor:
    """The defaults of a strategy that never asks for the actor and takes a trace as set."""

    on_traces: TraceUse = "as-set"

    def actor_use(self, options: CriticOptions) -> ActorUse:
        return "none"
