"""The default ``agentr run`` demo's goals: held-out goals never searched, sharing sub-recipes."""

from __future__ import annotations

from collections import Counter

from agentr.cli.demo import (
    DEMO_GOALS,
    DEMO_HELD_OUT,
    DEMO_HELD_OUT_NEAR,
    DEMO_HELD_OUT_NEW,
    DEMO_SFT_STEPS,
    RunOptions,
    plan_run,
)
from core.envs.textcraft import TextCraftEnv


def test_demo_searches_and_holds_out_disjoint_wooden_goals() -> None:
    env = TextCraftEnv(distractors=1)
    book = env.book
    assert len(DEMO_GOALS) == 24 and len(DEMO_HELD_OUT) == 20 == len(set(DEMO_HELD_OUT))
    assert DEMO_HELD_OUT == DEMO_HELD_OUT_NEAR + DEMO_HELD_OUT_NEW
    assert not set(DEMO_GOALS) & set(DEMO_HELD_OUT)
    searched_recipes = {r.text for goal in DEMO_GOALS for r in book.tree(env.goal_of(goal))}
    depths = Counter(book.depth[env.goal_of(goal)] for goal in DEMO_HELD_OUT_NEAR)
    assert depths == {1: 4, 2: 6}
    sharing = [
        g for g in DEMO_HELD_OUT_NEAR if any(r.text in searched_recipes for r in book.tree(env.goal_of(g)))
    ]
    # most near held-out goals need a recipe the searched goals' trees hold (their planks)
    assert len(sharing) >= 6
    # the new-product goals: depth 2, products no searched goal makes, planks from the searched trees
    searched_products = {g.split("_", 1)[1] for g in DEMO_GOALS}
    assert {book.depth[env.goal_of(g)] for g in DEMO_HELD_OUT_NEW} == {2}
    for goal in DEMO_HELD_OUT_NEW:
        assert not any(goal.endswith(f"_{p}") and not goal.endswith("_gate") for p in searched_products)
        assert any(r.text in searched_recipes for r in book.tree(env.goal_of(goal)))


def test_demo_plan_uses_the_goals_and_warm_starts_on_the_searched_ones_only() -> None:
    plan = plan_run(RunOptions())
    assert tuple(plan.config["tasks"]) == DEMO_GOALS
    assert tuple(plan.config["eval_tasks"]) == DEMO_HELD_OUT
    assert plan.warm_start_tasks == DEMO_GOALS
    capped = plan_run(RunOptions(max_tasks=6))
    assert capped.warm_start_tasks == DEMO_GOALS[:6]
    # another environment keeps its own splits
    other = plan_run(RunOptions(env="textcraft?distractors=2"))
    assert other.config["tasks"] == [] and other.config["eval_tasks"] == []
    # a given model is not warm-started unless asked, and is fine-tuned gently
    given = plan_run(RunOptions(model="/models/x"))
    assert given.tiny is None and given.warm_start_steps == 0
    assert given.config["train"]["learning_rate"] < plan.config["train"]["learning_rate"]
    # ... in micro-batches of 2 accumulated to the plan's batch (same optimizer steps, less memory)
    train, planned = given.config["train"], plan.config["train"]
    assert (train["batch_size"], train["grad_accumulation"]) == (2, planned["batch_size"] // 2)
    for method in (("dpo",), ("archer",)):  # the other learners keep the effective batch
        as_given = plan_run(RunOptions(model="/models/x", method=method)).config["train"]["batch_size"]
        assert as_given == plan_run(RunOptions(method=method)).config["train"]["batch_size"]
    quick = plan_run(RunOptions(model="/models/x", quick=True)).config["train"]
    assert (
        quick["batch_size"] * quick["grad_accumulation"]
        == plan_run(RunOptions(quick=True)).config["train"]["batch_size"]
    )


def test_bf16_option_sets_mixed_precision_for_the_warm_start_and_every_training() -> None:
    """``--bf16 on|off`` is obeyed everywhere the run trains (warm start, judge phase, SFT, DPO;
    ArCHer's own loop takes no such field); auto follows the CPU and keeps --quick in fp32."""
    from core.domain.config import RunConfig
    from core.runtime.cpu_features import native_bf16

    on = plan_run(RunOptions(mixed_bf16=True))
    assert on.mixed_bf16 is True and on.config["train"]["mixed_bf16"] is True
    assert RunConfig.from_data(on.config).training_problem() is None
    off = plan_run(RunOptions(mixed_bf16=False))
    assert off.mixed_bf16 is False and "mixed_bf16" not in off.config["train"]
    dpo = plan_run(RunOptions(mixed_bf16=True, method=("dpo",)))
    assert dpo.config["train"]["mixed_bf16"] is True
    assert RunConfig.from_data(dpo.config).training_problem() is None
    archer = plan_run(RunOptions(mixed_bf16=True, method=("archer",)))
    assert "mixed_bf16" not in archer.config["train"]
    assert RunConfig.from_data(archer.config).training_problem() is None
    assert plan_run(RunOptions(quick=True)).mixed_bf16 is False
    assert plan_run(RunOptions(quick=True, mixed_bf16=True)).mixed_bf16 is True
    assert plan_run(RunOptions()).mixed_bf16 is native_bf16()  # no CUDA here


def test_default_demo_decodes_with_constrained_actions_and_says_so() -> None:
    from core.domain.config import RunConfig
    from core.domain.mcts import SearchConfig
    from train_service.evaluation import EvalConfig
    from train_service.report import constrain_settings, report_markdown

    config = RunConfig.from_data(plan_run(RunOptions()).config)
    assert SearchConfig.from_dict(config.search).constrain_actions is True
    assert EvalConfig.from_data(config.evaluation).constrain_actions is True
    assert constrain_settings(config.search, config.evaluation) == {"search": True, "evaluation": True}
    for opts in (RunOptions(quick=True), RunOptions(env="textcraft?distractors=2")):
        other = RunConfig.from_data(plan_run(opts).config)
        assert constrain_settings(other.search, other.evaluation) == {"search": False, "evaluation": False}
    report = {"run_id": "r", "status": "running", "rows": [], "config": config.to_data()}
    assert "constrained decoding (Action line among the env's valid actions): search on, evaluation on" in (
        report_markdown(report)
    )


def test_a_pretrained_model_warm_starts_in_micro_batches_of_the_same_batch() -> None:
    from agentr.cli.warm_start import warm_start_batches

    assert warm_start_batches(plan_run(RunOptions())) == (8, 1)  # the tiny model: one batch of 8
    micro, accumulate = warm_start_batches(plan_run(RunOptions(model="/models/x", warm_start_steps=4)))
    assert micro < 8 and micro * accumulate == 8


def test_the_default_demo_trains_a_fixed_budget_of_optimizer_steps_per_iteration() -> None:
    """Not "8 epochs of whatever the search found": the same steps every iteration, so the run's
    length does not follow the search's luck; --quick, --env and --model runs, and runs cut to fewer
    goals (where 48 steps would be dozens of passes over the data), keep their epochs."""
    from core.domain.config import RunConfig

    default = plan_run(RunOptions()).config["train"]
    assert default["max_steps"] == DEMO_SFT_STEPS > 0
    assert RunConfig.from_data(plan_run(RunOptions()).config).training_problem() is None
    for opts in (
        RunOptions(quick=True),
        RunOptions(env="textcraft"),
        RunOptions(model="/models/x"),
        RunOptions(max_tasks=2),
        RunOptions(tasks=("goal:oak_planks",)),
    ):
        train = plan_run(opts).config["train"]
        assert "max_steps" not in train and train["epochs"] > 0, opts


def test_free_tool_calls_turns_the_tool_call_constraint_off_in_search_and_evaluation() -> None:
    from core.domain.config import RunConfig
    from core.domain.search_config import SearchConfig
    from train_service.episodes import EvalConfig

    default = RunConfig.from_data(plan_run(RunOptions(quick=True)).config)
    assert SearchConfig.from_dict(default.search).constrain_tool_calls is True  # on by default
    assert EvalConfig.from_data(default.evaluation).constrain_tool_calls is True
    free = RunConfig.from_data(plan_run(RunOptions(quick=True, constrain_tool_calls=False)).config)
    assert SearchConfig.from_dict(free.search).constrain_tool_calls is False
    assert EvalConfig.from_data(free.evaluation).constrain_tool_calls is False
