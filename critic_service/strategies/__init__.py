"""Owns the registry of critic strategies: ``critic.strategy`` name -> strategy (``REGISTRY``).

Each strategy is one module of this package behind the ``CriticStrategy`` protocol
(``critic_service.strategies.base``); the pure verdict rules they use are ``core.domain.critic``'s.
Adding a strategy: write ``critic_service/strategies/<name>.py`` with a ``STRATEGY`` object (a
``name``, ``needs_policy``, ``on_traces``, ``actor_use(options)`` and
``async judge(options, path, shared_steps, policy) -> Critique``; the
``direct`` module is the smallest example), add it to the tuple below and its name to
``core.domain.events.CriticStrategyName`` (the names events and the API accept; mypy and
tests/unit/test_critic_strategies.py check the two agree). ``CriticConfig`` then accepts it and the
critic worker chooses it by name (``critic_service.critic.critique``).
"""

from __future__ import annotations

from core.domain.events import CriticStrategyName
from critic_service.strategies import direct, first, model, oracle, reflect, replay, rules, value
from critic_service.strategies.base import CriticConfigError, CriticOptions, CriticStrategy, Critique

REGISTRY: dict[CriticStrategyName, CriticStrategy] = {
    s.name: s
    for s in (
        model.STRATEGY,
        direct.STRATEGY,
        rules.STRATEGY,
        reflect.STRATEGY,
        value.STRATEGY,
        first.STRATEGY,
        oracle.STRATEGY,
        replay.STRATEGY,
    )
}

__all__ = ["REGISTRY", "CriticConfigError", "CriticOptions", "CriticStrategy", "Critique", "strategy_named"]


def strategy_named(name: str) -> CriticStrategy:
    """The registered strategy called ``name``; ``CriticConfigError`` naming the known ones otherwise."""
    for registered, strategy in REGISTRY.items():
        if registered == name:
            return strategy
    raise CriticConfigError(f"critic.strategy: unknown strategy {name!r} ({', '.join(REGISTRY)})")
