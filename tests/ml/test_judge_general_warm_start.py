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


def test_judge_phase_steps_plans_and_refuses_clearly() -> None:
    """``--judge-phase-steps``: N sets the judge phase; 0 drops the judge examples (and so their
    replay); a pretrained --model learns the judge question only when asked, inside its own warm
    start, at the pretrained rate; what cannot work is refused by name."""
    from agentr.cli.demo import REAL_MODEL_JUDGE_PHASE_LR

    assert plan_run(RunOptions(judge_phase_steps=7)).judge_phase_steps == 7
    off = plan_run(RunOptions(judge_phase_steps=0))
    assert not off.judge_examples and not off.judge_general
    assert RunConfig.from_data(off.config).max_general is None
    given = plan_run(RunOptions(model="/some/model", warm_start_steps=4, judge_phase_steps=6))
    assert given.judge_examples and given.judge_phase_steps == 6
    assert given.judge_phase_lr == REAL_MODEL_JUDGE_PHASE_LR and not given.judge_general
    assert plan_run(RunOptions()).judge_phase_lr == 0.0  # the tiny model's JUDGE_PHASE_LR
    refused = {
        "--warm-start-steps": RunOptions(model="/some/model", judge_phase_steps=6),
        "served": RunOptions(model="http://127.0.0.1:9/v1#m", warm_start_steps=2, judge_phase_steps=6),
        "first-error oracle": RunOptions(env="sciworld", judge_phase_steps=6),
        "makes none": RunOptions(judge_mix=True, judge_phase_steps=0),
    }
    for words, opts in refused.items():
        try:
            plan_run(opts)
        except ValueError as exc:
            assert words in str(exc), (words, exc)
        else:
            raise AssertionError(f"plan_run accepted {opts}")


def test_a_pretrained_model_learns_the_judge_question_when_asked(tmp_path: Path) -> None:
    """--model DIR --warm-start-steps N --judge-phase-steps M: the mixed warm start, then a judge
    phase of M steps at the pretrained rate in the pretrained micro-batches, cached apart from the
    same model's warm start without judge examples."""
    from agentr.cli.demo import REAL_MODEL_JUDGE_PHASE_LR, micro_batches
    from train_service.checkpoint import read_meta

    home = tmp_path / "home"
    tiny = prepare_model(plan_run(RunOptions(quick=True, iterations=1, warm_start_steps=0)), home, 0)
    plain = Path(prepare_model(plan_run(RunOptions(model=tiny, quick=True, warm_start_steps=2)), home, 0))
    plan = plan_run(RunOptions(model=tiny, quick=True, warm_start_steps=2, judge_phase_steps=3))
    judged = Path(prepare_model(plan, home, 0))
    assert judged != plain and judged.with_name(judged.name + "-mixed").is_dir()
    phase = read_meta(judged)
    assert phase.dataset_id.startswith("judge-phase:") and phase.metrics["steps"] == 3
    micro, accumulate = micro_batches(8)
    assert phase.config["learning_rate"] == REAL_MODEL_JUDGE_PHASE_LR
    assert (phase.config["batch_size"], phase.config["grad_accumulation"]) == (micro, accumulate)
