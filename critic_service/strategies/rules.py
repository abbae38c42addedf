"""Owns the ``rules`` critic strategy: invalid-action observations, tool errors and action loops
mark the first error (``core.domain.critic.rule_verdicts``); no rule fired = the last action
(a fallback)."""

from __future__ import annotations

from dataclasses import dataclass

from core.domain.critic import fell_back, rule_verdicts, transition_index
from core.domain.events import CriticStrategyName
from core.domain.trajectory import Trajectory
from core.llm.ports import Policy
from critic_service.strategies.base import CriticOptions, Critique, NoActor


@dataclass(frozen=True)
class RulesStrategy(NoActor):
    name: CriticStrategyName = "rules"
    needs_policy: bool = False

    async def judge(
        self, options: CriticOptions, path: Trajectory, shared_steps: int, policy: Policy | None
    ) -> Critique:
        verdicts = rule_verdicts(path.steps, start=shared_steps)
        return Critique(
            self.name,
            tuple(verdicts),
            transition_index(verdicts, len(path.steps), shared_steps),
            fallback=fell_back(verdicts, self.name),
        )


STRATEGY = RulesStrategy()
