"""Owns what every critic strategy is: the ``CriticStrategy`` protocol, the ``Critique`` it returns,
the ``CriticOptions`` it may read (the run's ``critic`` settings, ``critic_service.critic.CriticConfig``)
and ``CriticConfigError``.

A strategy is one small module of this package with one object that has a ``name``, says whether
it ``needs_policy`` (the iteration's model), and ``judge``s the bad path's steps from the divergence
on; the verdict rules themselves are pure and live in ``core.domain.critic``. The registry
(``critic_service.strategies``) maps names to strategies; the service chooses by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from core.domain.events import CriticStrategyName, StepVerdict
from core.domain.trajectory import Trajectory
from core.llm.ports import Policy


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

    async def judge(
        self, options: CriticOptions, path: Trajectory, shared_steps: int, policy: Policy | None
    ) -> Critique:
        """Judge ``path.steps[shared_steps:]`` and name t' (``Critique.transition_index``)."""
        ...
