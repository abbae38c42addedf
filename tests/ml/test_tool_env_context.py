"""A tool environment's context in the model's tokens (agentr.cli.warm_start, issue #49 item 1): the
tiny tokenizer learns tau2 mock's own text, the warm start plays the run's training tasks, and the
run's training ``max_length`` and generation budgets are raised to what the gold episodes take, so no
gold sample loses a trained token; a window too small for them is refused by name. Real tiny models
built on the environment's text, real tau2 mock episodes."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("tau2.domains.mock.environment", reason="tau2-bench's domains (the tau2 extra)")

from agentr.cli.demo import RunOptions, plan_run  # noqa: E402
from agentr.cli.warm_start import (  # noqa: E402
    _expert,
    env_corpus,
    fit_context,
    measure_context,
    warm_start_task_ids,
)
from core.domain.config import RunConfig  # noqa: E402
from core.domain.good_samples import trajectory_to_sample  # noqa: E402
from core.domain.ids import derived_id  # noqa: E402
from core.envs.registry import open_env  # noqa: E402
from core.llm.tiny import build_tiny_model, default_corpus, react_corpus  # noqa: E402
from train_service.tokenize import tokenize_sample  # noqa: E402


@pytest.fixture(scope="module")
def mock_gold() -> list:
    env = open_env("tau2:mock")
    return _expert(env, env.task_ids("train"))


def _samples(trajectories: list) -> list:
    return [trajectory_to_sample(t, derived_id("expert", str(i))) for i, t in enumerate(trajectories)]


def test_the_warm_start_plays_the_runs_own_training_tasks() -> None:
    for options in (RunOptions(env="tau2:mock", quick=True), RunOptions(quick=True)):
        plan = plan_run(options)
        cfg = RunConfig.from_data(plan.config)
        env = open_env(cfg.env)  # the searched tasks: the split cut to max_tasks
        assert warm_start_task_ids(plan, env, cfg) == env.task_ids(cfg.split)[: cfg.max_tasks]
        assert len(warm_start_task_ids(plan, env, cfg)) == cfg.max_tasks == 2


def test_the_envs_own_tokenizer_shortens_its_samples_and_the_fit_keeps_every_trained_token(
    tmp_path: Path, mock_gold: list
) -> None:
    from transformers import AutoTokenizer

    own = build_tiny_model(
        tmp_path / "own", itertools.chain(env_corpus(mock_gold), react_corpus()), hidden=32, layers=1,
        heads=2, vocab_size=768,
    )  # fmt: skip
    shape = {"hidden": 32, "layers": 1, "heads": 2, "vocab_size": 768}
    textcraft = build_tiny_model(tmp_path / "tc", default_corpus(), **shape)
    samples = _samples(mock_gold)
    fit, other = measure_context(own, samples), measure_context(textcraft, samples)
    assert 512 < fit.longest_sample < other.longest_sample  # 512: the --quick TextCraft plan's max_length
    assert fit.longest_sample * 3 < other.longest_sample * 2  # at least a third fewer tokens
    assert fit.window == 4096 and fit.longest_prompt < fit.longest_sample
    assert 0 < fit.longest_turn < fit.longest_step
    # every gold sample keeps all its trained tokens at the fitted max_length, and every gold turn
    # fits the generation budget
    tokenizer = AutoTokenizer.from_pretrained(own)
    max_length = fit.train_max_length(max_depth=4)
    assert max_length % 64 == 0 and max_length >= fit.longest_sample
    for sample in samples:
        assert tokenize_sample(tokenizer, sample, max_length).trained_tokens == (
            tokenize_sample(tokenizer, sample).trained_tokens
        )
    assert fit.max_tokens() > fit.longest_turn

    # the run fits the context to the gold episodes of the tasks it warm-starts on and searches
    plan = plan_run(RunOptions(env="tau2:mock", quick=True))
    cfg = RunConfig.from_data(plan.config)
    env = open_env(cfg.env)
    searched = measure_context(own, _samples(_expert(env, warm_start_task_ids(plan, env, cfg))))
    config, notes = fit_context({**plan.config, "model": str(own)}, plan)
    assert config["train"]["max_length"] == searched.train_max_length(max_depth=cfg.search["max_depth"])
    assert config["train"]["max_length"] > plan.config["train"]["max_length"]
    assert config["search"]["max_tokens"] == config["evaluation"]["max_tokens"] == searched.max_tokens()
    assert len(notes) == 1 and "tau2:mock's expert episodes take up to" in notes[0]
    # TextCraft runs are left as they are
    quick = plan_run(RunOptions(quick=True))
    textcraft_config = {**quick.config, "model": str(own)}
    assert fit_context(textcraft_config, quick) == (textcraft_config, [])
    assert replace(fit, window=0).train_max_length(4) == max_length  # no window: the need itself


def test_a_window_too_small_for_the_gold_episodes_is_refused_by_name(tmp_path: Path, mock_gold: list) -> None:
    small = build_tiny_model(
        tmp_path / "small", itertools.chain(env_corpus(mock_gold), react_corpus()), hidden=32, layers=1,
        heads=2, vocab_size=768, max_positions=128,
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"expert episodes take up to \d+ tokens; .* holds 128"):
        measure_context(small, _samples(mock_gold))


def test_a_quick_tool_run_searches_the_training_tasks_with_the_shortest_gold_tool_paths() -> None:
    from agentr.cli.demo import shortest_gold_tasks

    retail = open_env("tau2:retail")
    chosen = plan_run(RunOptions(env="tau2:retail", quick=True))
    assert (
        tuple(chosen.config["tasks"])
        == chosen.warm_start_tasks
        == shortest_gold_tasks("tau2:retail", "train", 2)
    )
    train = retail.task_ids("train")
    lengths = {t: len(retail.gold_actions(t)) for t in train}
    calling = [t for t in train if any("(" in a for a in retail.gold_actions(t)[:-1])]
    assert all(t in train for t in chosen.warm_start_tasks)
    assert max(lengths[t] for t in chosen.warm_start_tasks) == min(lengths[t] for t in calling) == 2
    assert lengths[train[0]] > 2  # tau2's own first training tasks are longer (6 gold actions)
    # an explicit task list is kept
    assert plan_run(RunOptions(env="tau2:retail", quick=True, tasks=("5",))).config["tasks"] == ["5"]
