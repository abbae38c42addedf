"""tau2-bench through our Env port (core.envs.tau2): gold actions reach tau2's own reward 1, tool
calls and tool errors in the trajectory's tool shape, clone independence, the scripted user."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("tau2.environment.environment")

from core.domain.trajectory import tool_action  # noqa: E402
from core.envs.base import EnvError  # noqa: E402
from core.envs.registry import open_env  # noqa: E402
from core.envs.tau2 import STOP, USER_REPLY, Tau2Env, evaluate, tool_step  # noqa: E402


def _play(env: Tau2Env, task_id: str, actions: list[str]) -> list:
    async def run() -> list:
        await env.reset(task_id)
        return [await env.step(a) for a in actions]

    return asyncio.run(run())


@pytest.mark.slow
def test_gold_actions_reach_reward_one_on_20_retail_tasks_through_tau2s_evaluator() -> None:
    env = open_env("tau2:retail?max_steps=100")
    assert isinstance(env, Tau2Env)
    ids = env.task_ids("all")[:20]
    assert len(ids) == 20
    for task_id in ids:
        results = _play(env, task_id, env.gold_actions(task_id))
        assert results[-1].done and results[-1].reward == 1.0, task_id
        # the same conversation scored directly by tau2's evaluators agrees
        assert evaluate(env.domain, env.task(task_id), env.messages()).reward == 1.0


def test_without_the_closing_message_or_with_a_wrong_write_the_reward_is_zero() -> None:
    env = Tau2Env("retail", max_steps=100)
    gold = env.gold_actions("0")
    # skip the one write (exchange) tau2's DB check looks at: reward 0 from tau2's evaluator
    reads = [a for a in gold[:-1] if not a.startswith("exchange_")]
    results = _play(env, "0", [*reads, gold[-1]])
    assert results[-1].done and results[-1].reward == 0.0


def test_tool_calls_errors_and_user_turns_in_the_trajectory_tool_shape() -> None:
    env = Tau2Env("retail")
    opening = asyncio.run(env.reset("0"))
    assert "Yusuf Rossi" in opening and "19122" in opening
    call = 'find_user_id_by_name_zip({"first_name": "Yusuf", "last_name": "Rossi", "zip": "19122"})'
    result = asyncio.run(env.step(call))
    assert result.valid and not result.done and "yusuf_rossi" in result.observation
    step = tool_step("look the user up", result, call)
    assert step.kind == "tool" and step.tool_calls[0].name == "find_user_id_by_name_zip"
    assert step.action == tool_action(step.tool_calls) == call  # canonical form, sorted keys
    assert step.tool_results[0].call_id == step.tool_calls[0].call_id
    # the JSON (OpenAI/Hermes) form is the same call
    same = asyncio.run(env.step('{"name": "get_order_details", "arguments": {"order_id": "#W2378156"}}'))
    assert same.valid and "W2378156" in same.observation
    # a tool that raises: invalid step, error text from tau2
    failed = asyncio.run(env.step('get_order_details({"order_id": "#nope"})'))
    assert not failed.valid and failed.observation.startswith("Error")
    assert tool_step("", failed, "").tool_results[0].is_error
    # malformed calls name the problem
    unknown = asyncio.run(env.step('fly_to_moon({"x": 1})'))
    assert not unknown.valid and "unknown tool 'fly_to_moon'" in unknown.observation
    bad_json = asyncio.run(env.step("get_order_details({order_id: 1})"))
    assert not bad_json.valid and "JSON" in bad_json.observation
    # a message to the user gets the scripted reply; STOP ends the episode with tau2's reward
    said = asyncio.run(env.step("Could you tell me which items you want to exchange?"))
    assert said.observation == USER_REPLY and tool_step("", said, "Could you?").kind == "answer"
    end = asyncio.run(env.step(f"Goodbye {STOP}"))
    assert end.done and end.reward == 0.0


def test_clone_is_independent_of_the_original() -> None:
    env = Tau2Env("retail", max_steps=100)
    gold = env.gold_actions("0")

    async def run() -> tuple[float, float]:
        await env.reset("0")
        for action in gold[:-2]:
            await env.step(action)
        twin = await env.clone()
        # the original makes the write, the clone does not
        for action in gold[-2:]:
            done = await env.step(action)
        other = await twin.step(gold[-1])
        return done.reward, other.reward

    original, twin = asyncio.run(run())
    assert original == 1.0 and twin == 0.0


def test_uri_errors_name_the_problem() -> None:
    with pytest.raises(EnvError, match="unknown tau2 domain 'shop'"):
        open_env("tau2:shop")
    with pytest.raises(EnvError, match="unknown option"):
        open_env("tau2:mock?colour=red")
    env = open_env("tau2:mock")
    assert env.name == "tau2:mock" and env.task_ids("all")
    # mock has no split file: every third task is held out, in tau2's order
    train, test, every = env.task_ids("train"), env.task_ids("test"), env.task_ids("all")
    assert test == every[2::3] and train == [i for i in every if i not in test] and not set(train) & set(test)
    with pytest.raises(EnvError, match="unknown split"):
        env.task_ids("nonsense")


def test_every_mock_task_gold_path_reaches_reward_one_env_assertion_only_included() -> None:
    env = open_env("tau2:mock")
    assert isinstance(env, Tau2Env)
    graded_by_assertion = "update_task_with_history_and_env_assertions"
    basis = [str(b) for b in env.task(graded_by_assertion).evaluation_criteria.reward_basis]
    assert (
        basis == ["RewardType.ENV_ASSERTION"]
        and not env.task(graded_by_assertion).evaluation_criteria.actions
    )
    assert env.gold_actions(graded_by_assertion)[0] == (
        'update_task_status({"status": "completed", "task_id": "task_2"})'
    )
    for task_id in env.task_ids("all"):
        results = _play(env, task_id, env.gold_actions(task_id))
        assert results[-1].done and results[-1].reward == 1.0, task_id


def test_a_task_from_an_earlier_conversation_resets_with_it() -> None:
    env = Tau2Env("mock")

    async def run() -> tuple[str, list]:
        first = await env.reset("update_task_with_history_and_env_assertions")
        return first, env.messages()

    first, messages = asyncio.run(run())
    assert first.startswith(
        "Earlier in this conversation:\nuser: I need to create a task for the project review"
    )
    assert 'assistant called create_task({"description": "Review Q4 project status", "title"' in first
    assert "ID task_2 and is currently in pending status" in first
    assert first.endswith("Now you want to mark the task as completed.")
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant", "user"]


def test_the_action_prefix_is_parsed_and_an_unclosed_call_refused_by_name() -> None:
    env = Tau2Env("mock")
    call = 'update_task_status({"task_id": "task_2", "status": "completed"})'
    results = _play(
        env,
        "update_task_with_history_and_env_assertions",
        [f"Action: {call}", call[:-1], f"Done. {STOP}"],
    )
    assert results[0].valid and results[0].info["kind"] == "tool"
    assert '"status":"completed"' in results[0].observation.replace(" ", "")
    assert not results[1].valid and results[1].info["kind"] == "tool_error"
    assert results[1].observation == "Error: the call to update_task_status is missing its closing ')'"
    assert results[2].done and results[2].reward == 1.0  # the refused call changed nothing


def test_an_assertion_without_gold_calls_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from core.envs import tau2

    monkeypatch.setattr(tau2, "ASSERTION_ACTIONS", {})
    with pytest.raises(EnvError, match="graded by the environment assertion assert_task_status"):
        Tau2Env("mock").gold_actions("update_task_with_history_and_env_assertions")


def test_an_assertion_on_what_the_agent_never_made_scores_zero_instead_of_raising() -> None:
    # create_task_1_with_env_assertions asserts task_2's status: an agent that stops at once never
    # created task_2, and tau2's assert_task_status raises "Task task_2 not found" (it crashed the
    # search of `agentr run --env tau2:mock`); every mock task's immediate stop scores 0 (one is
    # graded by NL assertion only, which tau2 scores 1 offline: no criteria to fail)
    env = Tau2Env("mock")
    (result,) = _play(env, "create_task_1_with_env_assertions", [f"Done. {STOP}"])
    assert result.done and result.reward == 0.0
    stopped = {task_id: _play(env, task_id, [f"Done. {STOP}"])[-1] for task_id in env.task_ids("all")}
    assert all(r.done for r in stopped.values())
    assert {t for t, r in stopped.items() if r.reward != 0.0} == {"create_task_1_nl_eval"}
