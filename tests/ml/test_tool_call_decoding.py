"""Constrained tool-call decoding on a real tiny transformers model loaded as every run loads it
(``HFPolicy.from_folder``; core.llm.hf_tool_guide, issue #49 item 1): with a tool-calling
environment's action space (``ToolCalls`` of tau2's tools) every sampled Action line parses, and a
call names one of the tools with arguments that validate against that tool's JSON schema; free
decoding on the same states and seeds mostly does not. The tiny model's tokenizer is trained on tau2
mock's own text (as ``agentr run --env tau2:mock`` builds it); the states are the gold paths of mock's
training tasks, and retail's tools (nested objects, arrays, enums) are checked on retail openings."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

pytest.importorskip("tau2.domains.mock.environment", reason="tau2-bench's domains (the tau2 extra)")
pytest.importorskip("llguidance", reason="constrained tool calls run on llguidance (the tau2 extra)")

import jsonschema  # noqa: E402

from agentr.cli.warm_start import _expert, env_corpus  # noqa: E402
from core.domain.trajectory import Message, Step  # noqa: E402
from core.envs.registry import open_env  # noqa: E402
from core.envs.tau2 import parse_call  # noqa: E402
from core.llm.hf import HFPolicy  # noqa: E402
from core.llm.ports import SamplingParams  # noqa: E402
from core.llm.prompts import build_messages, parse_action  # noqa: E402
from core.llm.tiny import build_tiny_model, react_corpus  # noqa: E402
from core.llm.tool_grammar import ToolCalls, function_of, parameters_of, tool_calls_of  # noqa: E402
from train_service.episodes import EvalConfig, play_episodes  # noqa: E402


@pytest.fixture(scope="module")
def mock_env():  # type: ignore[no-untyped-def]
    return open_env("tau2:mock")


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory, mock_env) -> HFPolicy:  # type: ignore[no-untyped-def]
    torch.set_num_threads(1)
    gold = _expert(mock_env, mock_env.task_ids("train"))
    folder = build_tiny_model(
        tmp_path_factory.mktemp("tools") / "m", itertools.chain(env_corpus(gold), react_corpus()),
        hidden=32, layers=1, heads=2, vocab_size=768, seed=2,
    )  # fmt: skip
    return HFPolicy.from_folder(Path(folder), device="cpu")


def mock_states(env) -> list[list[Message]]:  # type: ignore[no-untyped-def]
    """The prompt at every state of the gold paths of mock's first three training tasks."""
    out = []
    for task_id in env.task_ids("train")[:3]:
        task = env.domain.tasks[task_id]
        opening = env.user.opening(task)
        steps: list[Step] = []
        for action in env.gold_actions(task_id):
            out.append(build_messages(env.instruction, opening, steps))
            steps.append(Step("I act.", action, "ok"))
    return out


def check(text: str, space: ToolCalls) -> str:
    """``"call"`` or ``"message"`` for a sampled answer; fails unless its Action line parses and a
    call validates against its tool's schema."""
    parsed = parse_action(text)
    assert parsed is not None, text
    schemas = {function_of(t)["name"]: parameters_of(t) for t in space.tools}
    call = parse_call(parsed.action, frozenset(schemas))
    assert not isinstance(call, str), (call, text)  # never a malformed call
    if call is None:
        assert space.messages, text
        return "message"
    name, arguments = call
    jsonschema.validate(arguments, schemas[name])
    return "call"


def free_invalid(texts: list[str], space: ToolCalls) -> int:
    """Answers of free decoding that are not a parseable action, or a malformed / invalid call."""
    bad = 0
    for text in texts:
        try:
            check(text, space)
        except (AssertionError, jsonschema.ValidationError):
            bad += 1
    return bad


@pytest.mark.parametrize("messages", [False, True])
async def test_every_sampled_call_parses_and_validates_against_its_schema(
    policy: HFPolicy, mock_env, messages: bool
) -> None:  # type: ignore[no-untyped-def]
    space = ToolCalls(mock_env.tools, messages=messages)
    states = mock_states(mock_env)
    params = SamplingParams(n=4, temperature=1.0, max_tokens=128, seed=11)
    constrained = await policy.sample_actions(states, [space] * len(states), params)
    answers = [c for row in constrained for c in row]
    if messages:  # tau2's setting: every answer parses (a message cut at max_tokens is still one)
        kinds = [check(c.text, space) for c in answers]
        assert "message" in kinds  # the untrained model mostly starts a message: any text but a call's
    else:  # calls only: every call that closed validates; few run past the budget (finish length)
        closed = [c for c in answers if c.finish_reason == "stop"]
        assert {check(c.text, space) for c in closed} == {"call"}
        assert len(closed) >= len(answers) * 3 // 4
        called = {parse_call(parse_action(c.text).action, frozenset(space.names))[0]  # type: ignore[union-attr,index]
                  for c in closed}  # fmt: skip
        assert len(called) >= 2  # the samples spread over the tools
    free = await policy.sample(states, n=4, temperature=1.0, max_tokens=128, seed=11)
    assert free_invalid([c.text for row in free for c in row], space) > len(states)  # most are not


async def test_retail_schemas_nested_arrays_and_enums_validate(policy: HFPolicy) -> None:
    retail = open_env("tau2:retail")
    space = ToolCalls(retail.tools, messages=False)
    conversations = [
        [Message("system", "You are a retail agent. Call one tool."), Message("user", retail.user.opening(t))]
        for t in list(retail.domain.tasks.values())[:4]
    ]
    rows = await policy.sample_actions(
        conversations, [space] * 4, SamplingParams(n=3, temperature=1.3, max_tokens=160, seed=3)
    )
    assert {check(c.text, space) for row in rows for c in row} == {"call"}


async def test_episodes_constrained_make_no_malformed_call_and_the_switch_turns_it_off(
    policy: HFPolicy, mock_env
) -> None:  # type: ignore[no-untyped-def]
    tasks = mock_env.task_ids("train")[:2] * 2
    seeds = list(range(len(tasks)))
    counts = {}
    for on in (True, False):
        cfg = EvalConfig(max_steps=3, max_tokens=96, temperature=1.0, constrain_tool_calls=on)
        played = await play_episodes(policy, lambda: open_env("tau2:mock"), tasks, cfg, seeds=seeds)
        steps = [s for e in played for s in e.steps]
        names = frozenset(mock_env.domain.tool_names)
        # unparseable answers and malformed calls (a tool that raises on valid arguments is the
        # tool's answer, not a malformed call)
        counts[on] = sum(1 for s in steps if not s.action or isinstance(parse_call(s.action, names), str))
    assert counts[True] == 0 < counts[False]
    assert tool_calls_of(mock_env) == ToolCalls(tuple(mock_env.tools))
