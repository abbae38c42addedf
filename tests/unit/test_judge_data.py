"""Judge examples for the warm start: labelled by the oracle, on tasks of their own, rendered exactly
as the critic asks, mixed without diluting the expert text."""

from __future__ import annotations

import pytest

from core.domain.critic import LABEL_WORDS
from core.domain.trajectory import Message, TrainingSample
from core.envs.textcraft import TextCraftEnv, split_task_ids
from core.envs.textcraft.oracle import TextCraftOracle
from core.llm.judge_prompt import judge_conversation
from train_service.judge_data import (
    MISTAKE_KINDS,
    JudgeDataError,
    judge_examples,
    judge_mistakes,
    judge_sample,
    judge_task_ids,
    run_exclusions,
    warm_start_judge_key,
    warm_start_mix,
)
from train_service.judge_examples import VALID_MISTAKE

ENV = TextCraftEnv(distractors=1)


def test_judge_tasks_are_never_searched_or_held_out() -> None:
    demo = ENV.task_ids("demo")
    chosen = judge_task_ids(ENV, demo, 16)
    assert len(chosen) == len(set(chosen)) == 16
    test = set(split_task_ids(ENV.book, "test"))
    assert not set(chosen) & (set(demo) | test)
    assert set(chosen) <= set(split_task_ids(ENV.book, "train"))
    assert sorted({ENV.book.depth[ENV.goal_of(t)] for t in chosen}) == [1, 2]
    assert chosen == judge_task_ids(ENV, demo, 16)  # deterministic
    # the same tasks named by goal are excluded all the same
    by_name = [f"goal:{ENV.goal_name(ENV.goal_of(t))}" for t in chosen[:4]]
    assert not set(judge_task_ids(ENV, [*demo, *by_name], 16)) & set(chosen[:4])


def test_run_exclusions_cover_the_searched_and_evaluated_splits() -> None:
    class Config:
        split = "demo"
        eval_split = "test"
        eval_tasks = ("5",)

    excluded = set(run_exclusions(ENV, Config(), ["7"]))
    assert {"5", "7"} <= excluded
    assert set(ENV.task_ids("demo")) <= excluded and set(ENV.task_ids("test")) <= excluded


def test_examples_are_labelled_by_the_oracle_and_balanced() -> None:
    tasks = judge_task_ids(ENV, ENV.task_ids("demo"), 6)
    examples = judge_examples(ENV, tasks, seed=3)
    oracle = TextCraftOracle(ENV)
    goods = [e for e in examples if e.label == "good"]
    bads = [e for e in examples if e.label == "bad"]
    assert goods and bads and abs(len(goods) - len(bads)) <= len(examples) // 4
    assert {e.mistake for e in bads} <= set(MISTAKE_KINDS) and len({e.mistake for e in bads}) >= 3
    for example in examples:
        actions = [s.action for s in example.path.steps]
        assert example.step_index == len(actions) - 1  # the judged step is the last one
        first = oracle.first_error(
            example.task_id, actions, observations=[s.observation for s in example.path.steps]
        )
        assert first == (example.step_index if example.label == "bad" else None)
    assert examples == judge_examples(ENV, tasks, seed=3)


def test_a_judge_sample_is_the_critics_conversation_plus_the_label() -> None:
    (task,) = judge_task_ids(ENV, ENV.task_ids("demo"), 1)
    examples = judge_examples(ENV, [task])
    for example in examples[:4]:
        sample = judge_sample(example)
        asked = judge_conversation(example.path, example.step_index)
        assert [(m.role, m.content) for m in sample.messages[:-1]] == [(m.role, m.content) for m in asked]
        assert sample.messages[-1] == Message("assistant", LABEL_WORDS[example.label], 1)  # type: ignore[index]
        assert all(m.weight == 0 for m in sample.messages[:-1])  # only the answer is trained on
        assert sample.provenance["source"] == "judge" and sample.provenance["label"] == example.label


def _sample(sample_id: str, chars: int) -> TrainingSample:
    return TrainingSample(sample_id, "good", (Message("system", "x" * chars), Message("assistant", "y", 1)))


def test_the_mix_keeps_the_expert_text_and_adds_steps() -> None:
    expert = [_sample("e1", 99), _sample("e2", 99)]  # 200 characters
    judge = [_sample(f"j{i}", 299) for i in range(3)]  # 900 characters
    mixed, steps = warm_start_mix(expert, judge, 70, judge_share=0.3)
    assert steps == 100  # 70 / (1 - 0.3): the expert text seen stays that of 70 steps
    repeats = sum(s.sample_id == "e1" for s in mixed)
    assert repeats == 10  # 900 * 0.7 / 0.3 = 2100 characters of expert text ~ 10 copies of 200
    assert warm_start_mix(expert, [], 70) == (expert, 70)
    with pytest.raises(JudgeDataError, match="judge_share"):
        warm_start_mix(expert, judge, 70, judge_share=1.0)
    with pytest.raises(JudgeDataError, match="no tasks|left after"):
        judge_task_ids(ENV, ENV.task_ids("all"), 3)


def test_valid_mode_mistakes_are_actions_a_constrained_policy_can_take() -> None:
    """``mistakes="valid"``: every Bad example's judged action is one of the state's valid actions
    (what constrained decoding can emit), accepted by the environment, and still the oracle's first
    error; the set stays balanced and deterministic."""
    tasks = judge_task_ids(ENV, ENV.task_ids("demo"), 6)
    examples = judge_examples(ENV, tasks, seed=3, mistakes="valid")
    oracle = TextCraftOracle(ENV)
    bads = [e for e in examples if e.label == "bad"]
    goods = [e for e in examples if e.label == "good"]
    assert bads and goods and abs(len(goods) - len(bads)) <= len(examples) // 4
    assert {e.mistake for e in bads} == {VALID_MISTAKE}
    for example in bads:
        *before, judged = example.path.steps
        replay = ENV.clone_sync()
        replay.reset_sync(example.task_id)
        for step in before:
            replay.step_sync(step.action)
        assert judged.action in (replay.valid_actions_sync() or [])
        assert judged.valid  # the environment accepted it: a decision, not a syntax error
        actions = [s.action for s in example.path.steps]
        assert oracle.first_error(example.task_id, actions) == example.step_index
    # the injected kinds make rejected actions; the valid mode never does
    assert any(not e.path.steps[-1].valid for e in judge_examples(ENV, tasks, seed=3) if e.label == "bad")
    assert examples == judge_examples(ENV, tasks, seed=3, mistakes="valid")
    with pytest.raises(JudgeDataError, match="mistakes must be one of all, valid"):
        judge_examples(ENV, tasks, mistakes="syntax")


def test_the_runs_search_decides_the_mistake_mode_and_the_warm_start_key() -> None:
    from agentr.cli.demo import RunOptions, plan_run
    from core.domain.config import RunConfig

    assert judge_mistakes(RunConfig(search={"constrain_actions": True})) == "valid"
    assert judge_mistakes(RunConfig(search={"constrain_actions": False})) == "all"
    assert judge_mistakes(RunConfig()) == "all"
    # the default demo constrains its search, so its warm start judges valid-action mistakes
    assert judge_mistakes(RunConfig.from_data(plan_run(RunOptions()).config)) == "valid"
    assert judge_mistakes(RunConfig.from_data(plan_run(RunOptions(quick=True)).config)) == "all"
    # the mode is part of the key: "valid" judge data warm-starts another model
    assert warm_start_judge_key(ENV, 100) == warm_start_judge_key(ENV, 100, "all")
    assert warm_start_judge_key(ENV, 100, "valid") != warm_start_judge_key(ENV, 100)
    assert warm_start_judge_key(object(), 100, "valid") == ""
