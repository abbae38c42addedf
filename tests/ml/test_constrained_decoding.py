"""Constrained decoding on a real tiny transformers model (core/llm/hf_decoding.py): every sampled
Action line is one of the state's valid actions, the Thought stays the model's own, and under greedy
decoding the constrained answer IS the free answer whenever the free action is valid. The states and
their valid actions are TextCraft's (``valid_actions``)."""

from __future__ import annotations

import pytest
import torch

from core.domain.trajectory import Message, Step, TrainingSample
from core.envs.textcraft import TextCraftEnv, solve
from core.llm.hf import HFPolicy
from core.llm.ports import SamplingParams
from core.llm.prompts import build_messages, format_assistant, parse_action
from core.llm.tiny import build_tiny_model
from tests.support import TinySpec
from train_service.hf_trainer import TrainJob
from train_service.sft import SFTConfig, train_sft

GOALS = ("goal:oak_planks", "goal:birch_button", "goal:stick", "goal:spruce_slab")


@pytest.fixture(scope="module")
def tiny_spec() -> TinySpec:
    return TinySpec(name="tiny-constrained", seed=3, hidden=32, layers=2, vocab_size=512)


def states() -> list[tuple[list[Message], list[str]]]:
    """(conversation, valid actions) at every state along the expert path of each goal."""
    env = TextCraftEnv(distractors=1)
    out = []
    for goal in GOALS:
        task = env.reset_sync(goal)
        steps: list[Step] = []
        for action in solve(env.goal_of(goal), env.book):
            out.append((build_messages(env.instruction, task, steps), env.valid_actions_sync() or []))
            result = env.step_sync(action)
            steps.append(Step(f"I need {action.split(' using ')[0]}.", action, result.observation))
    return out


@pytest.mark.parametrize(("temperature", "max_tokens"), [(1.0, 48), (1.6, 48), (1.0, 14)])
async def test_constrained_samples_are_always_valid_actions(
    local: HFPolicy, temperature: float, max_tokens: int
) -> None:
    cases = states()
    conversations = [c for c, _ in cases]
    actions = [a for _, a in cases]
    free = await local.sample(conversations, n=4, temperature=temperature, max_tokens=max_tokens, seed=5)
    constrained = await local.sample_actions(
        conversations, actions, SamplingParams(n=4, temperature=temperature, max_tokens=max_tokens, seed=5)
    )
    free_valid = 0
    for listed, free_row, row in zip(actions, free, constrained, strict=True):
        valid = {a.lower() for a in listed}
        for completion in row:
            parsed = parse_action(completion.text)
            assert parsed is not None and parsed.normalized in valid, (completion.text, listed)
            assert completion.finish_reason == "stop"
        free_valid += sum(1 for c in free_row if (p := parse_action(c.text)) and p.normalized in valid)
    assert free_valid < len(cases)  # the untrained model alone rarely writes a valid action
    assert len({c.text for row in constrained for c in row}) > len(cases)  # samples differ


async def test_rows_without_actions_decode_exactly_as_free(local: HFPolicy) -> None:
    cases = states()[:3]
    conversations = [c for c, _ in cases]
    free = await local.sample(conversations, n=2, temperature=1.0, max_tokens=20, seed=9)
    mixed = await local.sample_actions(
        conversations, [None, cases[1][1], []], SamplingParams(n=2, temperature=1.0, max_tokens=20, seed=9)
    )
    assert [c.text for c in mixed[0]] == [c.text for c in free[0]]
    assert [c.text for c in mixed[2]] == [c.text for c in free[2]]
    assert all(parse_action(c.text) for c in mixed[1])


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> HFPolicy:
    """A tiny model trained for a few dozen steps on expert turns, so that its free greedy answers
    are well-formed ReAct turns (often valid actions, sometimes not)."""
    torch.set_num_threads(1)
    cases = states()
    env = TextCraftEnv(distractors=1)
    texts = [m.content for c, _ in cases for m in c] * 3
    base = build_tiny_model(
        tmp_path_factory.mktemp("trie") / "m", texts, hidden=48, layers=2, heads=2, vocab_size=600, seed=1
    )
    samples = []
    for index, (conversation, _) in enumerate(cases):
        goal = conversation[1].content.rsplit("Goal: craft ", 1)[-1].rstrip(".")
        done = (len(conversation) - 2) // 2
        plan = solve(goal, env.book)
        answer = format_assistant(f"I need {plan[done].split(' using ')[0]}.", plan[done])
        samples.append(TrainingSample(f"s{index}", "good", (*conversation, Message("assistant", answer, 1))))
    cfg = SFTConfig(epochs=40, batch_size=8, learning_rate=1e-2, max_length=512, logging_steps=50)
    report = train_sft(TrainJob(base, tmp_path_factory.mktemp("trie-sft") / "ckpt"), samples, cfg)
    return HFPolicy.from_folder(report.checkpoint, device="cpu")


async def test_greedy_constrained_equals_free_whenever_free_is_valid(trained: HFPolicy) -> None:
    cases = states()
    conversations = [c for c, _ in cases]
    free = await trained.sample(conversations, n=1, temperature=0.0, max_tokens=48)
    free_actions = [parse_action(row[0].text) for row in free]
    # the valid lists: the state's actions, plus the free greedy action where it has one (so that the
    # free action is valid on every state it parses on, whatever the env would say of it)
    actions = [
        [
            *listed,
            *([parsed.action] if parsed and parsed.normalized not in {a.lower() for a in listed} else []),
        ]
        for (_, listed), parsed in zip(cases, free_actions, strict=True)
    ]
    constrained = await trained.sample_actions(
        conversations, actions, SamplingParams(n=1, temperature=0.0, max_tokens=48)
    )
    compared = 0
    for listed, (f,), (c,), parsed_free in zip(actions, free, constrained, free_actions, strict=True):
        parsed = parse_action(c.text)
        assert parsed is not None and parsed.normalized in {a.lower() for a in listed}
        if parsed_free is not None:
            assert c.text == f.text  # the same thought, the same action
            compared += 1
    assert compared >= len(cases) // 2  # the property was exercised on most states
    # the free action left out: the constrained answer keeps the thought and moves to another one
    index = next(i for i, parsed in enumerate(free_actions) if parsed is not None)
    chosen = free_actions[index]
    assert chosen is not None
    others = [a for a in actions[index] if a.lower() != chosen.normalized]
    (row,) = await trained.sample_actions(
        [conversations[index]], [others], SamplingParams(n=1, temperature=0.0, max_tokens=48)
    )
    moved = parse_action(row[0].text)
    assert moved is not None and moved.normalized in {a.lower() for a in others}
    assert moved.thought == chosen.thought


def test_agentr_eval_constrain_actions_plays_only_valid_actions(tiny_folder, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``agentr eval --constrain-actions``: the untrained model's episodes hold no rejected action
    (free decoding on the same tasks and seeds rejects most), and the metrics record the setting."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    rates = {}
    for flag in ("--constrain-actions", ""):
        out = tmp_path / (flag or "free")
        args = [str(Path(sys.executable).parent / "agentr"), "eval", "--model", str(tiny_folder), "--env",
                "textcraft?distractors=1", "--tasks", "goal:oak_planks,goal:stick", "--max-steps", "3",
                "--max-tokens", "24", "--episodes", "1", "--out", str(out)]  # fmt: skip
        done = subprocess.run([*args, *([flag] if flag else [])], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
        metrics = json.loads((out / "eval.json").read_text())
        assert metrics["constrain_actions"] is bool(flag)
        rates[flag] = metrics["invalid_action_rate"]
    assert rates["--constrain-actions"] == 0.0 and rates[""] > 0.0
