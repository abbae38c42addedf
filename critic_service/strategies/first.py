"""Owns the ``first`` critic strategy: the first-after-divergence baseline, t' = the first action
after the divergence (``core.domain.critic.first_step_verdicts``: what a critic answering Bad to
everything gives; on a pair with one action after the divergence, every critic's t'). Never a model
call, never a fallback."""

from __future__ import annotations

from dataclasses import dataclass

from core.domain.critic import first_step_verdicts, transition_index
from core.domain.events import CriticStrategyName
from core.domain.trajectory import Trajectory
from core.llm.ports import Policy
from critic_service.strategies.base import ActorUse, CriticOptions, Critique, TraceUse


@dataclass(frozen=True)
class FirstStrategy:
    name: CriticStrategyName = "first"
    needs_policy: bool = False
    on_traces: TraceUse = "as-set"

    def actor_use(self, options: CriticOptions) -> ActorUse:
        """The model and reflect baselines recorded beside it, when asked for."""
        return "optional" if options.compare_model or options.compare_reflect else "none"

    async def judge(
        self, options: CriticOptions, path: Trajectory, shared_steps: int, policy: Policy | None
    ) -> Critique:
        n_steps = len(path.steps)
        verdicts = first_step_verdicts(n_steps, shared_steps)
        return Critique(self.name, tuple(verdicts), transition_index(verdicts, n_steps, shared_steps))


STRATEGY = FirstStrategy()
