"""Our AgentGym client's protocol profiles against faithful stand-ins of AgentGym's own servers
(tests/integration/agentgym_faithful.py: THEIR request models and response shapes, not ours), over
real HTTP: bare actions, WebShop's session_id / env_idx, ALFWorld's game / world_type without
/close, SciWorld's score and task_description, BabyAI, and server errors named in ours."""

from __future__ import annotations

import pytest

from core.envs.base import EnvError, UnknownTask, valid_actions_of
from core.envs.registry import open_env
from core.envs.textcraft import TextCraftEnv, solve
from tests.integration import agentgym_faithful as faithful


def _posted(log: list, path: str) -> list:
    return [body for p, body in log if p == path]


async def test_textcraft_profile_sends_bare_actions_and_solves() -> None:
    app, log = faithful.textcraft_app()
    with faithful.serve(app) as base:
        env = open_env(f"agentgym+{base}/textcraft")
        local = TextCraftEnv()
        try:
            assert await env.reset("3") == await local.reset("3")
            plan = solve(local.goal_of("3"))
            results = [await env.step(f"Thought: next step.\nAction: {action}") for action in plan]
            assert results[-1].reward == 1.0 and results[-1].done
            assert all(r.valid for r in results)
            sent = [body["action"] for body in _posted(log, "/step")]
            assert sent == plan  # the Action: line was cut on our side
            with pytest.raises(UnknownTask, match=r"task ids are 0-543; the server would silently wrap"):
                await env.reset("544")
            assert len(_posted(log, "/reset")) == 1  # refused before asking the server
            with pytest.raises(UnknownTask, match="index tasks by integer only"):
                await env.reset("goal:stone_pickaxe")
        finally:
            await env.close()
        assert _posted(log, "/close") == [{"id": 0}]


async def test_action_prefix_reaches_their_server_only_when_asked() -> None:
    app, log = faithful.textcraft_app()
    with faithful.serve(app) as base:
        prefixed = open_env(f"agentgym+{base}/textcraft?action_prefix=Action:%20")
        bare = open_env(f"agentgym+{base}/textcraft")
        try:
            await prefixed.reset("3")
            await bare.reset("3")
            # what the issue saw with the old default: their server cannot parse the prefix
            broken = await prefixed.step("get 1 birch logs")
            assert broken.observation == "Could not execute Action: get 1 birch logs"
            assert broken.valid is False
            fixed = await bare.step("Action: get 1 birch logs")
            assert (fixed.observation, fixed.valid) == ("Got 1 birch logs", True)
        finally:
            await prefixed.close()
            await bare.close()
        assert [b["action"] for b in _posted(log, "/step")] == [
            "Action: get 1 birch logs",
            "get 1 birch logs",
        ]


async def test_sciworld_profile_reads_score_and_task_description() -> None:
    app, log = faithful.sciworld_app()
    with faithful.serve(app) as base:
        env = open_env(f"agentgym+{base}/sciworld?tasks=0-1")
        try:
            first = await env.reset("1")
            assert first.startswith("Your task is to boil water (variation 1).\n\nThis room is called")
            wrong = await env.step("Action: dance")
            assert (wrong.valid, wrong.reward, wrong.raw_score) == (False, 0.0, 0.0)
            half = await env.step("pick up pot")
            assert (half.reward, half.raw_score, half.done) == (0.25, 25.0, False)
            await env.step("move pot to stove")
            done = await env.step("activate stove")
            assert (done.reward, done.done) == (1.0, True)
            with pytest.raises(EnvError, match="has finished"):  # their words, after the episode
                await env.step("look around")
            await env.reset("0")
            failed = await env.step("eat pot")
            assert (failed.reward, failed.done, failed.raw_score) == (0.0, True, -100.0)
            with pytest.raises(UnknownTask, match=r"no task '7': list index out of range"):
                await env.reset("7")
        finally:
            await env.close()  # their server has no /close: the 404 is tolerated
        assert _posted(log, "/create") == [None]  # create without a body, like their client
        assert _posted(log, "/reset")[0] == {"id": 0, "data_idx": 1}


async def test_webshop_profile_sends_session_id_and_env_idx() -> None:
    app, log = faithful.webshop_app()
    with faithful.serve(app) as base:
        env = open_env(f"agentgym+{base}/webshop?tasks=0-9")
        try:
            first = await env.reset("7")
            assert "Find me goal #7: red shoes" in first  # the session reached the server
            await env.step("Action: search[red shoes]")
            await env.step("click[B01]")
            bought = await env.step("Thought: buy it.\nAction: click[Buy Now]")
            assert (bought.observation, bought.reward, bought.done) == (
                "Thank you for shopping with us!",
                0.75,
                True,
            )
        finally:
            await env.close()
        assert _posted(log, "/reset") == [{"env_idx": 48_950_000, "session_id": 7}]
        assert [b["action"] for b in _posted(log, "/step")] == [
            "search[red shoes]",
            "click[B01]",
            "click[Buy Now]",
        ]
        assert all(set(b) == {"env_idx", "action"} for b in _posted(log, "/step"))
        observed = [q for p, q in log if p == "/observation"]
        assert observed == [{"env_idx": "48950000"}]  # first observation read as their client does
        assert _posted(log, "/close") == [{"env_idx": 48_950_000}]


async def test_alfworld_profile_game_world_type_available_actions_no_close() -> None:
    app, log = faithful.alfworld_app()
    with faithful.serve(app) as base:
        env = open_env(f"agentgym+{base}/alfworld?tasks=0-1")
        try:
            first = await env.reset("0")
            assert first.endswith(
                "AVAILABLE ACTIONS: go to countertop 1,take apple 1 from countertop 1,"
                "go to fridge 1,inventory"
            )
            nothing = await env.step("open drawer 9")
            assert (nothing.observation.split("\n")[0], nothing.valid) == ("Nothing happens.", False)
            await env.step("go to countertop 1")
            took = await env.step("Action: take apple 1 from countertop 1")
            assert "put apple 1 in/on fridge 1" in took.info["available_actions"]
            await env.step("go to fridge 1")
            won = await env.step("put apple 1 in/on fridge 1")
            assert (won.reward, won.done, won.valid) == (1.0, True, True)
            with pytest.raises(UnknownTask, match="list index out of range"):
                await env.reset("5")
        finally:
            await env.close()
        assert _posted(log, "/reset")[0] == {"id": 0, "game": 0, "world_type": "Text"}
        assert "/close" not in [p for p, _ in log]  # ALFWorld has no /close: never called
        hybrid = open_env(f"agentgym+{base}/alfworld?tasks=0-1&world_type=Hybrid")
        assert hybrid.options == {"world_type": "Hybrid"}  # type: ignore[attr-defined]
        await hybrid.close()
    with pytest.raises(EnvError, match="world_type='Lego' must be one of Text, Embody, Hybrid"):
        open_env("agentgym+http://127.0.0.1:9/alfworld?world_type=Lego")


async def test_babyai_profile() -> None:
    app, log = faithful.babyai_app()
    with faithful.serve(app) as base:
        env = open_env(f"agentgym+{base}/babyai?tasks=0-39")
        try:
            first = await env.reset("2")
            assert first.startswith("Your goal: go to the red ball")
            bad = await env.step("fly")
            assert bad.valid is False and bad.reward == 0.0
            ok = await env.step("Action: go to red ball 1")
            assert (ok.reward, ok.done, ok.valid) == (1.0, True, True)
        finally:
            await env.close()
        assert "/close" not in [p for p, _ in log]
        assert _posted(log, "/reset") == [{"id": 0, "data_idx": 2}]


async def test_generic_profile_and_server_errors_name_the_servers_words() -> None:
    app, _ = faithful.textcraft_app()  # a textcraft-shaped server under a name AgentGym lacks
    with faithful.serve(app) as base:
        env = open_env(f"agentgym+{base}/minecrafty?tasks=0-3")
        try:
            await env.reset("1")
            result = await env.step("Could this be an action")
            assert result.valid is False  # "Could not execute ..." is recognised generically
            env._env_id = 99  # type: ignore[attr-defined]  # an id the server never issued
            with pytest.raises(EnvError, match="server error on /step: The id 99 is not valid."):
                await env.step("inventory")
        finally:
            await env.close()


async def test_valid_actions_where_the_server_publishes_them() -> None:
    """ALFWorld's reset / step answers carry ``available_actions``; WebShop has ``GET
    /available_actions`` (no list on a page with the search bar); TextCraft's server has none."""
    app, log = faithful.alfworld_app()
    with faithful.serve(app) as base:
        env = open_env(f"agentgym+{base}/alfworld?tasks=0-1")
        try:
            await env.reset("0")
            assert await valid_actions_of(env) == faithful.ALF_ROOM
            await env.step("go to countertop 1")
            await env.step("take apple 1 from countertop 1")
            assert await valid_actions_of(env) == [*faithful.ALF_ROOM, "put apple 1 in/on fridge 1"]
        finally:
            await env.close()
    app, log = faithful.webshop_app()
    with faithful.serve(app) as base:
        env = open_env(f"agentgym+{base}/webshop?tasks=0-9")
        try:
            await env.reset("3")
            assert await valid_actions_of(env) is None  # the search bar takes free text
            await env.step("search[red shoes]")
            assert await valid_actions_of(env) == ["click[back to search]", "click[B01]"]
        finally:
            await env.close()
        assert [q for p, q in log if p == "/available_actions"] == [{"env_idx": "48950000"}] * 2
    app, log = faithful.textcraft_app()
    with faithful.serve(app) as base:
        env = open_env(f"agentgym+{base}/textcraft?tasks=0-9")
        try:
            await env.reset("1")
            assert await valid_actions_of(env) is None
        finally:
            await env.close()
