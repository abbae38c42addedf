"""TextCraft's action space (``valid_actions``): what a known state lists, that every listed action
is accepted, that the expert's actions on the demo goals are listed, and states with no list."""

from __future__ import annotations

import asyncio

from agentr.cli.demo import DEMO_GOALS, DEMO_HELD_OUT
from core.envs.base import ActionSpace, valid_actions_of
from core.envs.textcraft import TextCraftEnv, solve


def test_known_state_lists_gets_crafts_it_can_make_and_inventory() -> None:
    env = TextCraftEnv(distractors=1)
    env.reset_sync("goal:oak_planks")
    assert env.valid_actions_sync() == [
        "get 1 oak logs",
        "get 2 oak logs",
        "get 3 oak logs",
        "get 4 oak logs",
        "inventory",
    ]  # nothing held: no craft is possible yet
    env.step_sync("get 1 oak logs")
    after = env.valid_actions_sync()
    assert after is not None
    assert after[0] == "craft 4 oak planks using 1 oak logs"
    assert "craft 4 oak planks using 2 oak logs" not in after  # recipes take exact counts
    assert after[1:] == ["get 1 oak logs", "get 2 oak logs", "get 3 oak logs", "get 4 oak logs", "inventory"]


def test_generic_ingredient_is_instantiated_with_held_members() -> None:
    env = TextCraftEnv(distractors=0)
    env.reset_sync("goal:stick")
    env.step_sync("get 1 birch logs")
    env.step_sync("craft 4 birch planks using 1 birch logs")
    listed = env.valid_actions_sync() or []
    assert "craft 4 stick using 2 birch planks" in listed  # "planks" in the recipe: the held kind
    assert not any(a.startswith("craft 4 stick using 2 planks") for a in listed)


def test_every_listed_action_is_accepted_and_expert_actions_are_listed() -> None:
    env = TextCraftEnv(distractors=1)
    for goal in (*DEMO_GOALS, *DEMO_HELD_OUT):
        env.reset_sync(goal)
        for action in solve(env.goal_of(goal), env.book):
            listed = env.valid_actions_sync()
            assert listed is not None and action in listed, (goal, action)
            assert len(listed) == len(set(listed))
            for candidate in listed:
                assert env.clone_sync().step_sync(candidate).valid, (goal, candidate)
            env.step_sync(action)
        assert env.done and env.valid_actions_sync() is None  # an ended episode lists nothing


def test_port_capability_and_no_list_before_reset() -> None:
    env = TextCraftEnv()
    assert isinstance(env, ActionSpace)
    assert env.valid_actions_sync() is None
    assert asyncio.run(valid_actions_of(object())) is None  # an env without the capability
