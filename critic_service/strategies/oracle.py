"""Owns the ``oracle`` critic strategy: t' = the environment's own first-error oracle
(``critic_service.oracles``; TextCraft has one, ``core.envs.textcraft.oracle``), the perfect critic
against which the others are a ceiling experiment's arms (bench/ceiling.py). Never a model call.

The bad path says where it was made: a search pair's trajectories carry ``env_uri`` and ``task_id``
in their provenance (``search_service.tree_results``), and the critic worker adds the pair's own
where a path lacks them (``critic_service.service.located``). Refused with ``CriticConfigError`` naming the
problem: a path without them (a trace pair has no environment to replay in) and an environment
with no oracle (``core.envs.textcraft.oracle.oracle_strategy_problem``, the same check a run's
configuration gets before it starts: the API's ``RunConfigIn`` and ``agentr run``). A path the
oracle cannot judge (a replay that contradicts the recorded observations) is a
``CriticInputError``. When every judged step is progress
(the path only ran out of steps) no step is bad: t' is the last action, a fallback, as for the
model critic.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.domain.critic import CriticInputError, transition_index
from core.domain.events import CriticStrategyName, StepVerdict
from core.domain.trajectory import Trajectory
from core.envs.textcraft.oracle import OracleError, oracle_strategy_problem
from core.llm.ports import Policy
from critic_service.oracles import NoOracle, Oracles
from critic_service.strategies.base import CriticConfigError, CriticOptions, Critique, NoActor


@dataclass(frozen=True)
class OracleStrategy(NoActor):
    name: CriticStrategyName = "oracle"
    needs_policy: bool = False
    oracles: Oracles = field(default_factory=Oracles, compare=False, repr=False)

    async def judge(
        self, options: CriticOptions, path: Trajectory, shared_steps: int, policy: Policy | None
    ) -> Critique:
        env_uri, task_id = path.provenance.get("env_uri"), path.provenance.get("task_id")
        if not isinstance(env_uri, str) or not env_uri or task_id is None:
            raise CriticConfigError(
                "the oracle strategy judges a path in its environment: this bad path names no env_uri and "
                "task_id in its provenance (search pairs do; a trace has no environment to replay in)"
            )
        if (problem := oracle_strategy_problem(self.name, env_uri)) is not None:
            raise CriticConfigError(problem)
        try:
            result = self.oracles.judge(env_uri, str(task_id), path, shared_steps)
        except NoOracle as exc:
            raise CriticConfigError(f"the oracle strategy: {exc}") from None
        except OracleError as exc:
            raise CriticInputError(f"the oracle cannot judge this path: {exc}") from None
        verdicts = tuple(
            StepVerdict(
                step_index=j.index, label="good" if j.progress else "bad", method="oracle", reason=j.reason
            )
            for j in result.judgements
        )
        index = transition_index(verdicts, len(path.steps), shared_steps)
        return Critique(self.name, verdicts, index, fallback=result.first_error is None)


STRATEGY = OracleStrategy()
