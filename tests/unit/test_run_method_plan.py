"""``agentr run --method``: the option's parsing and its usage errors (the real command, exit 2
naming the bad value), the demo plan's trainer settings per learner (``agentr.cli.methods``: the
plan's SFT budget carried over, the rule ``bench/learners.method_variant`` shares), a schedule's
merged train section and its notes, the critic a schedule needs, and the training summary."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agentr.cli.demo import DEMO_ARCHER_ROUNDS, QUICK_ARCHER_ROUNDS, RunOptions, plan_run
from agentr.cli.methods import parse_methods
from core.domain.config import RunConfig
from core.runtime.cpu_features import native_bf16
from train_service.report import report_markdown, training_markdown

AGENTR = str(Path(sys.executable).parent / "agentr")


def test_parse_methods_reads_a_method_or_a_schedule() -> None:
    assert parse_methods("dpo") == ("dpo",)
    assert parse_methods(" SFT, archer ") == ("sft", "archer")
    assert parse_methods("sft,dpo,dpo") == ("sft", "dpo", "dpo")
    with pytest.raises(ValueError, match=r"'ppo' is not a learner; choose sft, dpo, archer"):
        parse_methods("ppo")
    with pytest.raises(ValueError, match=r"'grpo' \(entry 2 of 'sft,grpo'\) is not a learner"):
        parse_methods("sft,grpo")
    with pytest.raises(ValueError, match=r"empty entry \(position 2\)"):
        parse_methods("sft,,dpo")
    with pytest.raises(ValueError, match="no method given"):
        parse_methods(" , ")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("ppo", "'ppo' is not a learner"),
        ("sft,rlhf", "'rlhf' (entry 2 of 'sft,rlhf') is not a learner"),
        ("dpo,", "empty entry (position 2)"),
    ],
)
def test_agentr_run_refuses_a_bad_method_naming_it(value: str, expected: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [AGENTR, "run", "--quick", "--method", value, "--home", str(tmp_path / "home")],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "200", "NO_COLOR": "1"},
    )
    assert proc.returncode == 2, proc.stderr
    message = " ".join(proc.stderr.replace("│", " ").split())  # rich's box, unwrapped
    assert "Invalid value for '--method'" in message and expected in message, message
    assert not (tmp_path / "home").exists()  # refused before anything was set up


def test_agentr_run_help_explains_each_method() -> None:
    proc = subprocess.run(
        [AGENTR, "run", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "200", "NO_COLOR": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.replace("│", " ").split())
    assert "--method" in text and "docs/learners.md" in text
    for phrase in ("sft = Agent-R SFT", "dpo = DPO at the divergence node", "archer = ArCHer", "sft,dpo"):
        assert phrase in text, phrase


def test_judge_mix_with_no_sft_iteration_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--judge-mix .* --method dpo trains no SFT iteration"):
        plan_run(RunOptions(method=("dpo",), judge_mix=True))
    proc = subprocess.run(
        [AGENTR, "run", "--judge-mix", "--method", "archer", "--home", str(tmp_path / "home")],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "200", "NO_COLOR": "1", "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 2 and "cannot start the run" in proc.stderr, proc.stderr[-2000:]
    assert "--method archer trains no SFT iteration" in " ".join(proc.stderr.split())
    assert not list((tmp_path / "home").glob("runs/*"))


@pytest.mark.parametrize("quick", [True, False])
def test_each_learner_trains_on_the_plans_sft_budget(quick: bool) -> None:
    sft = plan_run(RunOptions(quick=quick)).config
    assert "method" not in sft["train"] and sft["critic"] == {"strategy": "first"}  # the default
    budget = sft["train"]
    dpo = plan_run(RunOptions(quick=quick, method=("dpo",))).config
    assert dpo["train"] == {
        "method": "dpo",
        "epochs": budget["epochs"],
        "batch_size": budget["batch_size"] // 2,  # a pair is two sequences
        "max_length": budget["max_length"],
        "learning_rate": pytest.approx(budget["learning_rate"] / 10),  # measured: SFT's collapsed it
        "warmup": 0.0,
        "logging_steps": 5,
        "time_budget_s": budget["time_budget_s"],
        # the default demo's fixed budget of optimizer steps is DPO's too (--quick trains epochs)
        **({"max_steps": budget["max_steps"]} if not quick else {}),
        # the training precision (--bf16) carries over; --quick stays fp32 under auto
        **({"mixed_bf16": True} if budget.get("mixed_bf16") else {}),
    }
    assert quick is ("mixed_bf16" not in budget) or not native_bf16()
    assert dpo["critic"] == {"strategy": "direct"}  # no learner reads revision samples
    archer = plan_run(RunOptions(quick=quick, method=("archer",))).config["train"]
    rounds = QUICK_ARCHER_ROUNDS if quick else DEMO_ARCHER_ROUNDS
    assert archer["method"] == "archer" and archer["mode"] == "offline"
    assert archer["iterations"] == rounds and archer["warmup_iters"] == 5 < rounds  # actor updates happen
    assert archer["critic_lr"] == budget["learning_rate"] == pytest.approx(100 * archer["actor_lr"])
    assert archer["batch_size"] == budget["batch_size"] and archer["grad_accumulation"] == 1
    assert archer["time_budget_s"] == budget["time_budget_s"]  # a safety cap, as SFT's
    for method in (("dpo",), ("archer",), ("sft", "dpo"), ("dpo", "archer", "sft")):
        config = RunConfig.from_data(plan_run(RunOptions(quick=quick, method=method, iterations=3)).config)
        assert config.training_problem() is None, method
        assert config.method_schedule() == method


def test_bench_arms_use_the_same_rule() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from learners import method_variant

    base = plan_run(RunOptions(quick=True)).config
    dpo = plan_run(RunOptions(quick=True, method=("dpo",))).config
    bench_dpo = method_variant(base, "dpo")  # DPO at SFT's learning rate (its stored results)
    assert bench_dpo["train"]["learning_rate"] == pytest.approx(10 * dpo["train"]["learning_rate"])
    assert bench_dpo == {
        **base,
        "train": {**dpo["train"], "learning_rate": base["train"]["learning_rate"]},
        "critic": {"strategy": "direct"},
    }
    bench_archer = method_variant(base, "archer")["train"]
    command_archer = plan_run(RunOptions(quick=True, method=("archer",))).config["train"]
    # the bench runs ArCHer until its time budget ends it, its actor at SFT's rate / 10 (its stored
    # results); the command a fixed number of rounds at SFT's rate / 100 (measured: / 10 collapsed
    # the demo model)
    assert bench_archer["iterations"] == 100_000 and command_archer["iterations"] == QUICK_ARCHER_ROUNDS
    assert bench_archer["actor_lr"] == pytest.approx(10 * command_archer["actor_lr"])
    same = {**bench_archer, "iterations": QUICK_ARCHER_ROUNDS, "actor_lr": command_archer["actor_lr"]}
    assert same == command_archer


def test_a_schedule_merges_one_train_section_and_says_what_it_decided() -> None:
    plan = plan_run(RunOptions(method=("sft", "dpo"), iterations=2))
    train = plan.config["train"]
    assert train["method"] == ["sft", "dpo"] and plan.config["critic"] == {"strategy": "first"}
    sft = plan_run(RunOptions()).config["train"]
    assert {k: train[k] for k in sft} == sft  # SFT (scheduled first) trains exactly as alone
    assert train["warmup"] == 0.0  # SFT's default, DPO's own choice too: no note
    # one train section: DPO runs with SFT's rate and batch, and the notes say so
    assert plan.notes == (
        "train.learning_rate: dpo runs with sft's 0.0003 instead of 3e-05 (one train section serves "
        "every iteration)",
        "train.batch_size: dpo runs with sft's 8 instead of 4 (one train section serves every iteration)",
    )
    config = RunConfig.from_data(plan.config)
    assert config.sft_overrides(0)["batch_size"] == config.sft_overrides(1)["batch_size"] == 8
    assert "packing" not in config.sft_overrides(1)  # DPO's trainer gets only its own fields
    # ArCHer after SFT keeps its one-step accumulation (SFT's default is the same 1: no note)
    archer = plan_run(RunOptions(method=("sft", "archer"), iterations=2))
    assert archer.config["train"]["grad_accumulation"] == 1 and archer.notes == ()
    # a schedule longer than the run is cut, with a note naming what never trains
    cut = plan_run(RunOptions(method=("sft", "dpo", "archer"), iterations=2))
    assert cut.config["train"]["method"] == ["sft", "dpo"]
    assert any("archer never trains" in note for note in cut.notes)
    single = plan_run(RunOptions(method=("sft", "dpo"), iterations=1))
    assert single.config["train"] == sft and single.config["critic"] == {"strategy": "first"}


def test_a_served_model_keeps_its_weights_folder_under_every_learner() -> None:
    opts = RunOptions(model="http://127.0.0.1:9/v1#m", train_from="/weights", method=("dpo",))
    config = RunConfig.from_data(plan_run(opts).config)
    assert config.train["model_path"] == "/weights" and config.training_problem() is None
    # a pretrained model's gentle SFT rate, divided as the tiny model's is
    assert config.train["learning_rate"] == pytest.approx(5e-6)


def test_the_reports_training_table_names_each_iterations_learner() -> None:
    def it(i: int, metrics: dict[str, object]) -> dict[str, object]:  # a report["iterations"] entry
        return {"iteration": i, "model_ref": "m", "train": metrics or None}

    table = training_markdown(
        [
            it(0, {"method": "sft", "steps": 12, "train_loss": 1.25, "seconds": 3.0, "bf16": False,
                   "mixed_bf16": True}),
            it(1, {"method": "dpo", "steps": 4, "first_loss": 0.693, "last_loss": 0.5, "seconds": 2.5,
                   "bf16": False, "mixed_bf16": False}),
            it(2, {"method": "archer", "critic_updates": 50, "actor_updates": 15, "td_loss_first": 0.9,
                   "td_loss_last": 0.1, "seconds": 30.0, "stopped_by_time_budget": True}),
            it(3, {}),  # not trained (yet)
        ]
    )  # fmt: skip
    rows = [line for line in table.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert rows == [
        "| 0 | sft | 12 steps | mean 1.250 | 3.0 | no | mixed bf16 |",
        "| 1 | dpo | 4 steps | 0.693 -> 0.500 | 2.5 | no | fp32 |",
        "| 2 | archer | 50 critic, 15 actor | TD 0.900 -> 0.100 | 30.0 | yes | - |",
    ]
    assert training_markdown([it(0, {})]) == ""
    report = {"run_id": "r", "status": "completed", "rows": [], "iterations": [it(0, {"steps": 3})]}
    assert "| 0 | sft | 3 steps | - | - | no | - |" in report_markdown(report)  # in report.md
