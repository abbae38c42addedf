"""Owns the ``direct`` critic strategy: the Direct-Revision baseline, t' = the last action
(``core.domain.critic.direct_verdicts``); always a fallback, never a model call."""

from __future__ import annotations

from dataclasses import dataclass

from core.domain.critic import direct_verdicts, transition_index
from core.domain.events import CriticStrategyName
from core.domain.trajectory import Trajectory
from core.llm.ports import Policy
from critic_service.strategies.base import CriticOptions, Critique, NoActor


@dataclass(frozen=True)
class DirectStrategy(NoActor):
    name: CriticStrategyName = "direct"
    needs_policy: bool = False

    async def judge(
        self, options: CriticOptions, path: Trajectory, shared_steps: int, policy: Policy | None
    ) -> Critique:
        n_steps = len(path.steps)
        verdicts = direct_verdicts(n_steps, shared_steps)
        return Critique(
            self.name, tuple(verdicts), transition_index(verdicts, n_steps, shared_steps), fallback=True
        )


STRATEGY = DirectStrategy()
