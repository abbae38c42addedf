"""The critic strategy registry (critic_service/strategies/): one module per strategy, chosen by name.

The registry, the names events and the API accept (``core.domain.events.CriticStrategyName``) and
``CriticConfig`` agree; each strategy module says what it owns; an unknown name is refused naming
the registered ones; the policy-free strategies run through ``critique`` on a real path.
"""

from __future__ import annotations

import importlib
import typing

import pytest

from api.schemas import CriticSettings
from core.domain.events import CriticStrategyName
from core.domain.trajectory import Step, Trajectory
from critic_service.critic import STRATEGIES, CriticConfig, CriticConfigError, critique
from critic_service.strategies import REGISTRY, strategy_named


def test_registry_names_are_the_names_events_and_the_api_accept() -> None:
    names = set(typing.get_args(CriticStrategyName))
    assert set(REGISTRY) == names == set(STRATEGIES)
    api_names = set(typing.get_args(CriticSettings.model_fields["strategy"].annotation))
    assert api_names == names
    for name, strategy in REGISTRY.items():
        assert strategy.name == name
        module = importlib.import_module(f"critic_service.strategies.{name}")
        assert module.STRATEGY is strategy  # one module per strategy, named after it
        assert (module.__doc__ or "").startswith(f"Owns the ``{name}`` critic strategy")


def test_config_accepts_every_registered_name_and_refuses_others() -> None:
    for name in REGISTRY:
        assert CriticConfig.from_data({"strategy": name}).strategy == name
    with pytest.raises(CriticConfigError, match="unknown strategy 'oracular' \\(model, direct, rules"):
        CriticConfig.from_data({"strategy": "oracular"})
    with pytest.raises(CriticConfigError, match="must be a strategy name"):
        CriticConfig.from_data({"strategy": ["model"]})
    with pytest.raises(CriticConfigError, match="unknown strategy 'oracular'"):
        strategy_named("oracular")


async def test_policy_free_strategies_run_by_name() -> None:
    steps = (
        Step("", "get 1 oak logs", "Got 1 oak logs"),
        Step("", "craft 1 stick", "Could not find enough items to craft minecraft:stick"),
        Step("", "inventory", "Inventory: [oak logs] (1)"),
    )
    path = Trajectory(task="craft a stick", instruction="", steps=steps)
    rules = await critique(CriticConfig(strategy="rules"), path, 0)
    assert (rules.strategy, rules.transition_index, rules.fallback) == ("rules", 1, False)
    direct = await critique(CriticConfig(strategy="direct"), path, 0)
    assert (direct.strategy, direct.transition_index, direct.fallback) == ("direct", 2, True)
    for needs_model in ("model", "reflect"):
        assert REGISTRY[needs_model].needs_policy
        with pytest.raises(CriticConfigError, match=f"the {needs_model} strategy needs a policy"):
            await critique(CriticConfig(strategy=needs_model), path, 0)


@pytest.mark.parametrize(
    ("data", "needs_actor", "judges_with_actor", "on_traces"),
    [
        ({"strategy": "model"}, True, True, "model"),
        ({"strategy": "reflect"}, True, True, "model"),
        ({"strategy": "value"}, True, True, "runs-only"),
        ({"strategy": "value", "value_model": "/ckpt/critic"}, False, False, "runs-only"),
        ({"strategy": "replay"}, False, False, "as-set"),
        ({"strategy": "replay", "replay_policy": "model"}, True, True, "as-set"),
        ({"strategy": "first"}, True, False, "as-set"),  # the model / reflect baselines only
        ({"strategy": "first", "compare_model": False, "compare_reflect": False}, False, False, "as-set"),
        ({"strategy": "rules"}, False, False, "as-set"),
        ({"strategy": "direct"}, False, False, "as-set"),
        ({"strategy": "oracle"}, False, False, "as-set"),
    ],
)
def test_each_strategy_says_what_it_needs(
    data: dict[str, object], needs_actor: bool, judges_with_actor: bool, on_traces: str
) -> None:
    """The critic worker leases the actor and picks a trace's critic by what the strategy declares
    (``actor_use``, ``on_traces``), not by its name."""
    from critic_service.service import strategy_needs_model

    config = CriticConfig.from_data(data)
    assert config.needs_actor is needs_actor
    assert strategy_needs_model(config) is judges_with_actor
    assert strategy_named(config.strategy).on_traces == on_traces
