"""The warm start leaves its judge set next to the model, and `agentr run`'s default demo (only it,
unless --no-judge-mix) mixes a small replay of that set into every iteration's SFT as general data:
a real tiny model warm-started by ``agentr.cli.warm_start.prepare_model`` (a few steps), the file
read back by the run's reader."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from agentr.cli.demo import DEMO_JUDGE_PHASE_STEPS, DEMO_JUDGE_REPLAY, RunOptions, plan_run
from agentr.cli.warm_start import prepare_model
from core.domain.config import RunConfig
from core.envs.registry import open_env
from core.formats.export import read_general_chat
from train_service.judge_data import JUDGE_GENERAL_FILE, warm_start_judge_samples, with_judge_general


def test_only_the_demo_keeps_a_small_judge_replay_mixed_in() -> None:
    assert plan_run(RunOptions(judge_mix=True)).judge_general
    default = plan_run(RunOptions())
    assert default.judge_general  # the default demo: on, capped (a small replay)
    assert RunConfig.from_data(default.config).max_general == DEMO_JUDGE_REPLAY
    off = plan_run(RunOptions(judge_mix=False))
    assert not off.judge_general and RunConfig.from_data(off.config).max_general is None
    assert not plan_run(RunOptions(method=("dpo",))).judge_general  # no SFT iteration to mix into
    assert plan_run(RunOptions()).judge_phase_steps == DEMO_JUDGE_PHASE_STEPS
    assert plan_run(RunOptions(quick=True)).judge_phase_steps is None
    assert not plan_run(RunOptions(quick=True)).judge_general
    assert not plan_run(RunOptions(model="/some/model")).judge_general
    assert not plan_run(RunOptions(env="textcraft")).judge_general


def test_prepare_model_writes_the_warm_starts_judge_set_next_to_it(tmp_path: Path) -> None:
    plan = plan_run(RunOptions(quick=True, iterations=1, warm_start_steps=4))
    off = prepare_model(plan, tmp_path / "home", 0)
    assert not (Path(off) / JUDGE_GENERAL_FILE).exists()  # the flag off: nothing is written
    assert with_judge_general(dict(plan.config, model=off), off)[1] == ""
    warm = prepare_model(replace(plan, judge_general=True), tmp_path / "home", 0)
    assert warm == off  # the same (cached) model; the judge set is written next to it
    general = list(read_general_chat(Path(warm) / JUDGE_GENERAL_FILE))
    config = RunConfig.from_data(plan.config)
    trained = warm_start_judge_samples(open_env(config.env), config, list(plan.warm_start_tasks), 0)
    # exactly the judge examples the warm start trained on, as general samples
    assert [[(m.role, m.content, m.weight) for m in s.messages] for s in general] == [
        [(m.role, m.content, m.weight) for m in s.messages] for s in trained
    ]
    assert all(s.kind == "general" for s in general)
    data, note = with_judge_general(dict(plan.config, model=warm), warm)
    assert data["general_data"] == str(Path(warm) / JUDGE_GENERAL_FILE) and "judge examples" in note


def test_a_pretrained_model_is_warm_started_without_judge_examples(tmp_path: Path) -> None:
    """A --model folder is asked the judge question as it is (an instruct model, as in the paper):
    its warm start trains the expert episodes only, with no judge phase (no "-mixed" stage)."""
    assert plan_run(RunOptions()).judge_examples and plan_run(RunOptions(quick=True)).judge_examples
    home = tmp_path / "home"
    tiny = prepare_model(plan_run(RunOptions(quick=True, iterations=1, warm_start_steps=0)), home, 0)
    plan = plan_run(RunOptions(model=tiny, quick=True, iterations=1, warm_start_steps=2))
    assert not plan.judge_examples
    warm = Path(prepare_model(plan, home, 0))
    assert (warm / "config.json").is_file() and warm != Path(tiny)
    assert sorted(p.name for p in (home / "models").iterdir() if p.name.endswith("-mixed")) == []
    with_judge = Path(prepare_model(replace(plan, judge_examples=True), home, 0))
    assert with_judge != warm  # the judge data is part of the warm start's cache key
    assert with_judge.with_name(with_judge.name + "-mixed").is_dir()


def test_a_mixed_bf16_warm_start_is_its_own_cached_model(tmp_path: Path) -> None:
    """``--bf16 on``: the warm start and its judge phase train under mixed_bf16 (their checkpoints
    say so) into a model cached apart from the fp32 one, which a later fp32 run still finds."""
    from train_service.checkpoint import read_meta

    home = tmp_path / "home"
    fp32 = prepare_model(plan_run(RunOptions(quick=True, iterations=1, warm_start_steps=2)), home, 0)
    plan = plan_run(RunOptions(quick=True, iterations=1, warm_start_steps=2, mixed_bf16=True))
    mixed = Path(prepare_model(plan, home, 0))
    assert mixed != Path(fp32)
    assert read_meta(mixed).metrics["mixed_bf16"] is True  # the judge phase
    assert read_meta(mixed.with_name(mixed.name + "-mixed")).metrics["mixed_bf16"] is True
    assert read_meta(Path(fp32)).metrics["mixed_bf16"] is False
    again = prepare_model(plan_run(RunOptions(quick=True, iterations=1, warm_start_steps=2)), home, 0)
    assert again == fp32
