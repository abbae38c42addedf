"""The TextCraft first-error oracle on hand-built paths (real environment, real recipe data)."""

from __future__ import annotations

import pytest

from core.envs.textcraft import TextCraftEnv, solve
from core.envs.textcraft.oracle import OracleError, TextCraftOracle

ENV = TextCraftEnv(distractors=0)
ORACLE = TextCraftOracle(ENV)


def task(goal: str) -> str:
    return str(ENV.book.goals.index(f"minecraft:{goal}"))


OAK_BUTTON = task("oak_button")  # get 1 oak logs, craft 4 oak planks, craft 1 oak button
TORCH = task("torch")  # get 2 bamboo, craft 1 stick using 2 bamboo, get 1 coal, craft 4 torch
ACACIA_SIGN = task("acacia_sign")  # sticks from bamboo (expert) or from planks (the other recipe)


def test_the_expert_path_has_no_error_on_every_goal() -> None:
    for task_id in ENV.task_ids("all"):
        result = ORACLE.judge(task_id, solve(ENV.goal_of(task_id)))
        assert result.first_error is None, (task_id, result.reason)
        assert all(j.progress for j in result.judgements)


def test_a_rejected_action_is_the_first_error() -> None:
    path = ["get 1 oak logs", "craft 1 oak button using 1 oak logs", "craft 4 oak planks using 1 oak logs"]
    result = ORACLE.judge(OAK_BUTTON, path)
    assert result.first_error == 1
    assert result.reason.startswith("rejected: Could not find")


def test_a_valid_but_useless_action_is_the_first_error() -> None:
    # getting an unrelated raw item is accepted by the environment but brings nothing
    path = ["get 1 oak logs", "get 1 coal", "craft 4 oak planks using 1 oak logs"]
    result = ORACLE.judge(OAK_BUTTON, path)
    assert result.first_error == 1 and "no progress" in result.reason
    # an inventory look-up and a repeated get of what is already held are no progress either
    assert ORACLE.first_error(OAK_BUTTON, ["get 1 oak logs", "inventory"]) == 1
    assert ORACLE.first_error(TORCH, ["get 2 bamboo", "get 2 bamboo"]) == 1


def test_partial_and_excess_gets_are_progress() -> None:
    assert ORACLE.first_error(TORCH, ["get 1 bamboo", "get 1 bamboo", "craft 1 stick using 2 bamboo"]) is None
    assert ORACLE.first_error(TORCH, ["get 5 bamboo", "craft 1 stick using 2 bamboo", "get 1 coal"]) is None


def test_a_craft_that_wastes_needed_ingredients_is_an_error() -> None:
    # the planks are needed for the button; crafting sticks from them consumes them for nothing
    path = ["get 1 oak logs", "craft 4 oak planks using 1 oak logs", "craft 4 stick using 2 oak planks"]
    assert ORACLE.first_error(OAK_BUTTON, path) == 2


def test_any_recipe_the_task_shows_is_accepted() -> None:
    # the expert makes the sign's stick from bamboo; making it from planks is another accepted plan
    path = [
        "get 2 acacia logs",
        "craft 4 acacia planks using 1 acacia logs",
        "craft 4 acacia planks using 1 acacia logs",
        "craft 4 stick using 2 acacia planks",
        "craft 3 acacia sign using 6 acacia planks, 1 stick",
    ]
    result = ORACLE.judge(ACACIA_SIGN, path)
    assert result.first_error is None, result.reason
    assert result.judgements[-1].reason == "crafted the goal"
    # eight planks are enough for both plans: a third batch serves none of them
    wasteful = ["get 3 acacia logs", *[path[1]] * 3]
    assert ORACLE.first_error(ACACIA_SIGN, wasteful) == 3


def test_only_steps_after_the_divergence_are_judged() -> None:
    path = ["inventory", "get 1 oak logs", "get 1 coal"]
    assert ORACLE.first_error(OAK_BUTTON, path, start=0) == 0
    assert ORACLE.first_error(OAK_BUTTON, path, start=1) == 2
    assert [j.index for j in ORACLE.judge(OAK_BUTTON, path, start=1).judgements] == [1, 2]


def test_a_path_that_only_ran_out_of_steps_has_no_error() -> None:
    result = ORACLE.judge(TORCH, ["get 2 bamboo", "craft 1 stick using 2 bamboo"])
    assert result.first_error is None and result.reason == "every judged step was progress"


def test_bad_input_is_refused_with_the_reason() -> None:
    with pytest.raises(OracleError, match="cannot reset task"):
        ORACLE.judge("99999", ["get 1 oak logs"])
    with pytest.raises(OracleError, match="replays to"):
        ORACLE.judge(OAK_BUTTON, ["get 1 oak logs"], observations=["Got 7 oak logs"])
    with pytest.raises(OracleError, match="outside the path"):
        ORACLE.judge(OAK_BUTTON, ["get 1 oak logs"], start=3)
