"""TextCraft: recipe data, goal index, rules and messages, expert solutions, clone, splits, URIs."""

from __future__ import annotations

import collections

import pytest

from core.envs.base import Env, EnvError, UnknownTask
from core.envs.registry import open_env
from core.envs.textcraft import TextCraftEnv, recipe_book, solve, split_task_ids


@pytest.fixture(scope="module")
def env() -> TextCraftEnv:
    return TextCraftEnv()


def test_goal_index_has_544_items_by_depth() -> None:
    book = recipe_book()
    depths = [book.depth[g] for g in book.goals]
    assert len(book.goals) == 544
    assert collections.Counter(depths) == {1: 125, 2: 291, 3: 117, 4: 11}
    assert depths == sorted(depths)
    # AgentGym's depth buckets
    assert {book.depth[book.goals[i]] for i in range(0, 125)} == {1}
    assert {book.depth[book.goals[i]] for i in range(125, 416)} == {2}
    assert {book.depth[book.goals[i]] for i in range(416, 533)} == {3}
    assert {book.depth[book.goals[i]] for i in range(533, 544)} == {4}


def test_splits_are_disjoint_and_cover_the_goals() -> None:
    book = recipe_book()
    test, train, demo = (split_task_ids(book, s) for s in ("test", "train", "demo"))
    assert len(test) == 100 and len(train) == 444
    assert not set(test) & set(train)
    assert set(test) | set(train) == {str(i) for i in range(544)}
    assert set(demo) <= set(train)
    assert collections.Counter(book.depth[book.goals[int(t)]] for t in demo) == {1: 12, 2: 4}
    assert [i for i in test if int(i) >= 533] == [str(i) for i in range(533, 544)]
    with pytest.raises(EnvError, match="unknown split 'dev'"):
        split_task_ids(book, "dev")


async def test_every_expert_solution_reaches_reward_one(env: TextCraftEnv) -> None:
    for task_id in env.task_ids("all"):
        await env.reset(task_id)
        actions = solve(env.goal_of(task_id))
        assert len(actions) <= env.max_steps
        result = None
        for number, action in enumerate(actions, 1):
            result = await env.step(action)
            assert result.valid, (task_id, action, result.observation)
            assert result.done == (number == len(actions)), (task_id, action)
        assert result is not None and result.reward == 1.0 and result.done, task_id
        assert result.observation.startswith("Crafted ")


async def test_observation_format_and_messages(env: TextCraftEnv) -> None:
    observation = await env.reset("0")
    goal_name = env.goal_of("0").removeprefix("minecraft:").replace("_", " ")
    assert observation.startswith("Crafting commands:\ncraft ")
    assert observation.endswith(f"\n\nGoal: craft {goal_name}.")
    recipes = observation.split("\n\n")[0].splitlines()[1:]
    assert len(recipes) == len(set(recipes))
    assert (await env.step("inventory")).observation == "Inventory: You are not carrying anything."
    got = await env.step("get 2 oak logs")
    assert (got.observation, got.valid, got.reward, got.done) == ("Got 2 oak logs", True, 0.0, False)
    crafted = await env.step("craft 4 oak planks using 1 oak logs")
    assert crafted.observation == "Crafted 4 minecraft:oak_planks"
    assert (await env.step("inventory")).observation == "Inventory: [oak logs] (1) [oak planks] (4) "
    # a tag ingredient ("planks") is satisfied by a specific kind
    assert (await env.step("craft 4 stick using 2 oak planks")).observation == "Crafted 4 minecraft:stick"


@pytest.mark.parametrize(
    ("action", "message"),
    [
        ("fly to the moon", "Could not execute fly to the moon"),
        ("", "Could not execute "),
        ("get 1 oak planks", "Could not find oak planks"),  # craftable: cannot be fetched
        ("get 1 planks", "Could not find planks"),  # a tag
        ("get 1 unobtainium", "Could not find unobtainium"),
        ("craft 4 oak planks using 1 oak logs", "Could not find enough items to craft minecraft:oak_planks"),
        ("craft 4 oak planks using oak logs", "Wrong item format: oak logs"),
        ("craft 1 stick using 1 bamboo", "Could not find enough items to craft minecraft:stick"),
    ],
)
async def test_invalid_actions_give_could_not_observations(
    env: TextCraftEnv, action: str, message: str
) -> None:
    await env.reset("5")
    result = await env.step(action)
    assert result.observation == message
    assert (result.valid, result.reward, result.done) == (False, 0.0, False)


async def test_wrong_recipe_is_rejected_and_inventory_kept(env: TextCraftEnv) -> None:
    await env.reset("5")
    await env.step("get 3 oak logs")
    result = await env.step("craft 4 oak planks using 3 oak logs")
    assert result.observation == "Could not find a valid recipe for oak planks" and not result.valid
    assert (await env.step("inventory")).observation == "Inventory: [oak logs] (3) "


async def test_unknown_task_id_is_named(env: TextCraftEnv) -> None:
    for bad in ("544", "-1", "abc", ""):
        with pytest.raises(UnknownTask, match=f"unknown task id {bad!r}"):
            await env.reset(bad)


async def test_step_limit_ends_the_episode() -> None:
    env = TextCraftEnv(max_steps=3)
    await env.reset("0")
    results = [await env.step("inventory") for _ in range(3)]
    assert [r.done for r in results] == [False, False, True]
    assert results[-1].info == {"truncated": True} and results[-1].reward == 0.0


async def test_clone_then_step_equals_replay_then_step(env: TextCraftEnv) -> None:
    for task_id in ("130", "420", "540"):
        actions = solve(env.goal_of(task_id))
        cut = len(actions) // 2
        await env.reset(task_id)
        for action in actions[:cut]:
            await env.step(action)
        twin = await env.clone()
        assert twin is not env
        probes = ["inventory", actions[cut], "get 1 oak logs", "inventory"]
        from_clone = [await twin.step(a) for a in probes]
        replay = TextCraftEnv()
        await replay.reset(task_id)
        for action in actions[:cut]:
            await replay.step(action)
        assert [await replay.step(a) for a in probes] == from_clone
        # the original was not disturbed by the clone's steps
        assert (await env.step("inventory")).observation == from_clone[0].observation


async def test_distractor_option_and_protocol() -> None:
    env = open_env("textcraft?distractors=0&split=demo")
    assert isinstance(env, Env)
    assert env.task_ids() == split_task_ids(recipe_book(), "demo")
    full = TextCraftEnv()
    for task_id in env.task_ids():
        lines = (await env.reset(task_id)).splitlines()
        assert len(lines) <= len((await full.reset(task_id)).splitlines())
        assert set(lines) <= set((await full.reset(task_id)).splitlines())


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("", "empty"),
        ("minecraft", "unknown environment 'minecraft'"),
        ("textcraft?colour=red", "unknown option\\(s\\) colour"),
        ("textcraft?distractors=many", "distractors='many' is not a number"),
        ("textcraft?distractors=-1", "distractors must be >= 0"),
        ("textcraft?split=dev", "unknown split 'dev'"),
        ("http://x/textcraft", "malformed environment URI"),
        ("agentgym+ftp://h:1/textcraft", "agentgym\\+http"),
        ("agentgym+http://h:1", "expected agentgym\\+http://HOST:PORT/NAME"),
        ("agentgym+http://h:99999/textcraft", "malformed environment URI"),
        ("agentgym+http://h:1/webshop?tasks=a-b", "START-END"),
    ],
)
def test_bad_uris_are_named(uri: str, message: str) -> None:
    with pytest.raises(EnvError, match=message):
        open_env(uri)


def test_agentgym_uri_options_and_action_prefix_stripping() -> None:
    from core.envs.agentgym import AgentGymEnv
    from core.envs.server import strip_action_prefix

    env = open_env("agentgym+http://10.0.0.5:36001/api/webshop?tasks=0-9&action_prefix=&retries=1")
    assert isinstance(env, AgentGymEnv)
    assert (env.base_url, env.name, env.id_key, env.action_prefix, env.retries) == (
        "http://10.0.0.5:36001/api",
        "webshop",
        "env_idx",
        "",
        1,
    )
    assert env.task_ids("test") == [str(i) for i in range(10)]
    with pytest.raises(EnvError, match="unknown split 'train'"):
        env.task_ids("train")
    assert strip_action_prefix("Action: get 1 oak logs") == "get 1 oak logs"
    assert strip_action_prefix("Thought: need logs\n\nAction:\nget 1 oak logs") == "get 1 oak logs"
    assert strip_action_prefix("Thought: x\nAction: inventory") == "inventory"
    assert strip_action_prefix("inventory") == "inventory"


async def test_goal_name_ids_are_the_same_task_as_their_index() -> None:
    env = TextCraftEnv()
    index = env.book.goals.index("minecraft:stone_pickaxe")
    by_name = await env.reset("goal:stone_pickaxe")
    assert by_name == env.observation_for(str(index)) == env.observation_for("goal:stone pickaxe")
    assert env.goal_of("goal:minecraft:stone_pickaxe") == "minecraft:stone_pickaxe"
    for action in solve("minecraft:stone_pickaxe"):
        result = await env.step(action)
    assert (result.reward, result.done) == (1.0, True)
    with pytest.raises(UnknownTask, match="unknown goal 'diamond_house'"):
        env.goal_of("goal:diamond_house")


def test_goal_option_sets_the_default_tasks() -> None:
    env = open_env("textcraft?goal=stone_pickaxe,oak planks")
    assert env.task_ids() == ["goal:stone_pickaxe", "goal:oak_planks"]
    assert len(env.task_ids("test")) == 100  # named splits still work
    with pytest.raises(UnknownTask, match="unknown goal 'nope'"):
        open_env("textcraft?goal=nope")
    with pytest.raises(EnvError, match="either split or goal"):
        open_env("textcraft?goal=stone_pickaxe&split=test")
