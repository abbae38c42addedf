"""bench/paper.py's plumbing: the variants' run configurations (same goals, seeds, search,
evaluation and training cap; only the named settings differ), stored results and their keys, and
what the table and JSON lines read out of a run's report (a run that ended early included)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import paper  # noqa: E402
import paper_table  # noqa: E402

from agentr.cli.demo import RunOptions, plan_run  # noqa: E402
from core.domain.config import RunConfig  # noqa: E402


@pytest.fixture()
def base() -> dict:
    return dict(plan_run(RunOptions(quick=True)).config, model="/data/home/models/warm-x")


SHARED = ("env", "model", "tasks", "split", "max_tasks", "eval_tasks", "eval_split", "seed", "search")


def test_every_variant_shares_goals_seeds_search_and_the_training_cap(base: dict) -> None:
    configs = {}
    for index, variant in enumerate(paper.DEFAULT_VARIANTS):
        ckpt = "/data/home/runs/r1/checkpoints/iter-0" if variant == "agent_r_value" else None
        configs[variant] = paper.variant_config(
            base, variant, train_budget_s=42.0, first=index == 0, archer_checkpoint=ckpt
        )
        RunConfig.from_data(configs[variant])  # a valid run configuration
    for variant, config in configs.items():
        for key in SHARED:
            assert config[key] == base[key], (variant, key)
        assert config["train"]["time_budget_s"] == 42.0, variant
        evaluation = dict(config["evaluation"])
        assert evaluation.pop("baseline") is (variant == paper.DEFAULT_VARIANTS[0])
        assert evaluation == {k: v for k, v in base["evaluation"].items() if k != "baseline"}
    assert configs["agent_r_model"]["critic"]["strategy"] == "model"
    assert configs["agent_r_reflect"]["critic"]["strategy"] == "reflect"
    assert configs["agent_r_first"]["critic"]["strategy"] == "first"
    assert configs["agent_r_first"].get("include_revisions", True) is True  # it trains revisions
    assert configs["direct"]["critic"]["strategy"] == "direct"
    assert configs["good_only"]["include_revisions"] is False
    assert configs["dpo"]["train"]["method"] == "dpo" and configs["dpo"]["include_revisions"] is False
    assert configs["archer_offline"]["train"]["method"] == "archer"
    assert configs["archer_offline"]["train"]["mode"] == "offline"
    assert configs["archer_online"]["train"]["mode"] == "online"
    value = configs["agent_r_value"]
    assert value["critic"] == {"strategy": "value", "value_model": "/data/home/runs/r1/checkpoints/iter-0"}
    assert value["train"].get("method", "sft") == "sft" and value.get("include_revisions", True)
    # the base configuration is not changed by building variants from it
    assert "time_budget_s" not in base["train"] or base["train"]["time_budget_s"] != 42.0


def test_variant_config_refuses_bad_input(base: dict) -> None:
    with pytest.raises(ValueError, match="unknown variant 'nope'"):
        paper.variant_config(base, "nope", train_budget_s=10, first=True)
    with pytest.raises(ValueError, match="train_budget_s must be > 0"):
        paper.variant_config(base, "direct", train_budget_s=0, first=True)
    with pytest.raises(ValueError, match="archer_offline run's iteration-0 checkpoint"):
        paper.variant_config(base, "agent_r_value", train_budget_s=10, first=False)


def test_stored_results_are_keyed_by_config_relative_to_home(tmp_path: Path, base: dict) -> None:
    home_a, home_b = tmp_path / "a", tmp_path / "b"
    config_a = paper.variant_config(
        dict(base, model=str(home_a / "models" / "w")), "direct", train_budget_s=10, first=False
    )
    config_b = paper.variant_config(
        dict(base, model=str(home_b / "models" / "w")), "direct", train_budget_s=10, first=False
    )
    key = paper.config_key(config_a, home_a)
    assert key == paper.config_key(config_b, home_b)
    assert key != paper.config_key(dict(config_a, seed=1), home_a)
    assert key != paper.config_key(paper.merge(config_a, {"train": {"time_budget_s": 11.0}}), home_a)
    results = home_a / "paper-results"
    assert paper.stored_result(results, "direct", key) is None
    paper.store_result(results, "direct", key, {"run_id": "r9", "status": "completed"})
    assert paper.stored_result(results, "direct", key) == {"run_id": "r9", "status": "completed"}
    assert paper.stored_result(results, "good_only", key) is None


def _row(model: str, success: float, recovery: float, loops: float) -> dict:
    return {
        "model": model,
        "success_rate": success,
        "avg_reward": success,
        "invalid_action_rate": 0.5,
        "dead_loop_rate": loops,
        "recovery_success": recovery,
        "recovery_episodes": 4,
        "recovery_set_id": "set1",
        "episodes": 8,
        "seen_success_rate": 0.75,
    }


def _report(status: str = "completed", reason: str = "", iterations: int = 2) -> dict:
    rows = [_row("start", 0.25, 0.0, 0.5), _row("iter 0", 0.5, 0.25, 0.0), _row("iter 1", 0.25, 0.5, 0.25)]
    return {
        "status": status,
        "reason": reason,
        "rows": rows[: 1 + iterations],
        "datasets": {
            "0": {"pairs": 5, "revision": 4, "good": 3, "revision_length_mean": 1.5},
            "1": {"pairs": 2, "revision": 2, "good": 1, "revision_length_mean": 2.0},
        },
        "critic": {"0": {"exact_match": 0.75, "fallback_share": 0.0}},
        "iterations": [
            {"iteration": 0, "train": {"steps": 6, "seconds": 12.34, "samples": 7}},
            {"iteration": 1, "train": {"steps": 3, "seconds": 5.0, "stopped_by_time_budget": True}},
        ],
    }


def test_numbers_read_a_run_report() -> None:
    start, it0, it1 = paper_table.numbers(_report(), "agent_r_model")
    assert start["model"] == "start" and start["revision_length"] is None and start["updates"] is None
    assert it0["success_rate"] == 0.5 and it0["recovery_success"] == 0.25 and it0["dead_loop_rate"] == 0.0
    assert it0["revision_samples"] == 4 and it0["revision_length"] == 1.5
    assert it0["trained_on"] == "4 rev + 3 good"
    assert it0["critic_exact_match"] == 0.75 and it0["critic_fallback_share"] == 0.0
    assert it0["train_seconds"] == 12.3 and it0["updates"] == "6"
    assert it1["updates"] == "3 (cap)" and it1["critic_exact_match"] is None
    # good-only SFT trains no revision: none counted, no revision length
    good = paper_table.numbers(_report(), "good_only")[1]
    assert good["revision_samples"] == 0 and good["revision_length"] is None
    assert good["trained_on"] == "0 rev + 3 good"


def test_numbers_of_the_other_learners_count_their_own_data() -> None:
    report = _report()
    report["iterations"][0]["train"] = {
        "critic_updates": 20,
        "actor_updates": 9,
        "transitions": 31,
        "seconds": 60.0,
        "stopped_by_time_budget": True,
    }
    report["iterations"][1]["train"] = {"steps": 2, "pairs": 2, "seconds": 1.0}
    archer = paper_table.numbers(report, "archer_offline")[1]
    assert archer["trained_on"] == "31 transitions" and archer["updates"] == "20 c + 9 a (cap)"
    assert archer["revision_length"] is None and archer["revision_samples"] == 0
    dpo = paper_table.numbers(report, "dpo")[2]
    assert dpo["trained_on"] == "2 pairs" and dpo["updates"] == "2"


def test_a_run_that_ended_early_is_shown_with_its_reason() -> None:
    reason = "iteration 1's dataset is empty: no pair and no good trajectory"
    early = {
        "status": "completed",
        "reason": reason,
        "numbers": paper_table.numbers(_report(iterations=1), "direct"),
    }
    full = {"status": "completed", "reason": "", "numbers": paper_table.numbers(_report(), "agent_r_model")}
    failed = {"status": "failed", "reason": "boom", "numbers": []}
    assert paper_table.ended_early(full, 2) is None
    assert paper_table.ended_early(early, 2) == f"1 of 2 iterations evaluated; run completed: {reason}"
    assert paper_table.ended_early(failed, 2) == "0 of 2 iterations evaluated; run failed: boom"
    text = paper_table.table({"agent_r_model": full, "direct": early, "dpo": failed}, 2)
    lines = text.splitlines()
    assert sum("(all: starting model)" in line for line in lines) == 1  # the start is shown once
    assert f"| Direct-Revision | (1 of 2 iterations evaluated; run completed: {reason}) |" in text
    assert "run failed: boom" in text
    assert "| 12.3 | 6 |" in text  # training seconds (one decimal) and optimizer updates
    assert len([line for line in lines if line.startswith("| Direct-Revision | iter")]) == 1
    # every row has the header's number of cells
    assert {line.count("|") for line in lines} == {len(paper_table.COLUMNS) + 3}
    # the comparison lines: the missing iteration compares against None (ratio None)
    lines_json = {
        line["metric"]: line for line in paper_table.comparisons({"agent_r_model": full, "direct": early})
    }
    assert lines_json["heldout_success_iter1_vs_direct"]["baseline"] is None
    assert lines_json["heldout_success_iter1_vs_direct"]["ratio"] is None


def test_comparison_ratios_say_how_many_times_better_agent_r_is() -> None:
    ours = {"status": "completed", "numbers": paper_table.numbers(_report(), "agent_r_model")}
    theirs_report = _report()
    theirs_report["rows"][1] = _row("iter 0", 0.25, 0.5, 0.5)
    theirs_report["datasets"]["0"]["revision_length_mean"] = 3.0
    lines = {
        line["metric"]: line
        for line in paper_table.comparisons(
            {
                "agent_r_model": ours,
                "direct": {"status": "completed", "numbers": paper_table.numbers(theirs_report, "direct")},
                "dpo": {"status": "completed", "numbers": paper_table.numbers(theirs_report, "dpo")},
            }
        )
    }
    assert lines["heldout_success_iter0_vs_direct"]["ratio"] == 2.0  # 0.5 / 0.25
    assert lines["recovery_success_iter0_vs_direct"]["ratio"] == 0.5  # 0.25 / 0.5
    # ours 0.0 dead loops against 0.5: baseline / ours is undefined, not a number
    assert lines["heldout_dead_loops_iter0_vs_direct"]["ratio"] is None
    assert lines["heldout_dead_loops_iter1_vs_direct"]["ratio"] == 1.0  # 0.25 against 0.25
    assert lines["revision_length_iter0_vs_direct"]["ratio"] == 2.0  # 3.0 / 1.5 (shorter is better)
    assert "revision_length_iter0_vs_dpo" not in lines  # DPO trains no revision
    assert paper_table.ratio(0.0, 0.0, True) == 1.0
    assert paper_table.ratio(0.5, 0.0, True) is None
    assert paper_table.ratio(None, 0.5, True) is None


def test_archer_warmup_changes_only_the_archer_variants(base: dict) -> None:
    for variant in ("archer_offline", "archer_online"):
        default = paper.variant_config(base, variant, train_budget_s=10, first=False)
        short = paper.variant_config(base, variant, train_budget_s=10, first=False, archer_warmup=1)
        assert short["train"]["warmup_iters"] == 1 != default["train"]["warmup_iters"]
        assert paper.merge(short, {"train": {"warmup_iters": default["train"]["warmup_iters"]}}) == default
        RunConfig.from_data(short)
    for variant in ("dpo", "direct"):
        assert paper.variant_config(
            base, variant, train_budget_s=10, first=False, archer_warmup=1
        ) == paper.variant_config(base, variant, train_budget_s=10, first=False)
    with pytest.raises(ValueError, match="archer_warmup must be >= 0"):
        paper.variant_config(base, "archer_online", train_budget_s=10, first=False, archer_warmup=-1)


def test_stored_by_seed_takes_the_newest_result_of_each_seed_of_a_variant(tmp_path: Path) -> None:
    """--print-stored combines variants run in separate homes: per variant and seed the newest file."""
    import os

    def stored(variant: str, key: str, run: str, seed: int, later: float = 0.0) -> None:
        path = paper.store_result(
            tmp_path, variant, key, {"run_id": run, "report": {"config": {"seed": seed}}}
        )
        os.utime(path, (path.stat().st_mtime + later, path.stat().st_mtime + later))

    stored("archer_offline", "k1", "old", 0)
    stored("archer_offline", "k2", "new", 0, later=10)  # the same seed, stored later (other settings)
    stored("archer_offline", "k3", "seed 1", 1)
    stored("archer_offline", "k4", "seed 7", 7)  # not asked for
    stored("archer_online", "k5", "other variant", 0)
    found = paper.stored_by_seed(tmp_path, "archer_offline", [0, 1, 2])
    assert {seed: r["run_id"] for seed, r in found.items()} == {0: "new", 1: "seed 1"}
    assert paper.stored_by_seed(tmp_path, "archer_online", [0])[0]["run_id"] == "other variant"
    assert paper.stored_by_seed(tmp_path, "dpo", [0, 1]) == {}


def test_train_steps_match_every_sft_and_dpo_variant(base: dict) -> None:
    for variant in ("agent_r_model", "direct", "good_only", "dpo", "archer_offline"):
        config = paper.variant_config(base, variant, train_budget_s=60.0, first=False, train_steps=7)
        RunConfig.from_data(config)
        method = config["train"].get("method", "sft")
        assert config["train"].get("max_steps") == (7 if method in ("sft", "dpo") else None), variant
        assert config["train"]["time_budget_s"] == 60.0
    with pytest.raises(ValueError, match="train_steps"):
        paper.variant_config(base, "direct", train_budget_s=60.0, first=False, train_steps=0)


def test_statistics_over_tasks_and_seeds_pair_agent_r_with_each_baseline() -> None:
    def report(success: dict[str, float], revision: float | None) -> dict:
        by_task = {
            t: {"success_rate": v, "dead_loop_rate": 0.0, "invalid_action_rate": 0.5}
            for t, v in success.items()
        }
        row = {"model": "iter 1", "by_task": by_task, "recovery_by_task": {"t1": {"success_rate": 0.0}}}
        datasets = {"1": {"revision_length_mean": revision, "revision": 0 if revision is None else 3}}
        return {"rows": [row], "datasets": {"0": {"revision": 0 if revision is None else 1}, **datasets}}

    per_seed = {
        "agent_r_model": {s: report({"t1": 1.0, "t2": 0.5}, 2.0) for s in (0, 1, 2)},
        "good_only": {s: report({"t1": 0.5, "t2": 0.0}, None) for s in (0, 1, 2)},
        "direct": {s: report({"t1": 1.0, "t2": 0.5}, 1.0 + s) for s in (0, 1, 2)},
        "dpo": {s: report({"t1": 0.0, "t2": 0.0}, None) for s in (0, 1, 2)},
    }
    assert paper_table.paired_against(per_seed) == ["good_only", "direct", "dpo"]
    lines, text = paper_table.statistics(per_seed, 1, resamples=500)
    by_metric = {line["metric"]: line for line in lines}
    good = by_metric["heldout_success_iter1_vs_good_only"]
    assert good["paired_units"] == 6 and good["ours"] == 0.75 and good["baseline"] == 0.25
    assert good["difference"] == 0.5 and good["difference_ci"] == [0.5, 0.5]
    assert good["p_value"] == round(2 / 64, 4)
    # seed level: each seed's mean over the paired tasks, 0.75 - 0.25 on all 3 seeds; the exact
    # sign-flip p over 2^3 assignments is 2/8, whatever the effect: 3 seeds cannot show one
    assert good["seeds"] == 3 and good["seed_differences"] == [0.5, 0.5, 0.5]
    assert good["seed_difference"] == 0.5 and good["seed_p_value"] == 0.25
    same = by_metric["heldout_success_iter1_vs_direct"]
    assert same["difference"] == 0.0 and same["p_value"] == 1.0 and same["significant"] is False
    # revision length: run-level units, only between the variants that train revisions
    rev = by_metric["revision_length_iter1_vs_direct"]
    assert rev["paired_units"] == 3 and rev["ours"] == 2.0 and rev["baseline"] == 2.0
    assert "revision_length_iter1_vs_good_only" not in by_metric
    assert (
        "heldout_invalid_rate_iter1_vs_direct" in by_metric
        and "recovery_success_iter1_vs_direct" in by_metric
    )
    ours_cell = "0.750 [0.583, 0.917] (n=6; seeds 0.75 / 0.75 / 0.75)"
    assert f"| heldout_success | {ours_cell} | 0.250 [0.083, 0.417] (n=6; seeds 0.25 / 0.25 / 0.25) |" in text
    # the revision samples each Agent-R variant trained, per seed: what sets it apart from good-only
    assert (
        "| revision samples trained (all iterations) | 12 (seeds 4 / 4 / 4) | - | 12 (seeds 4 / 4 / 4) | - |"
        in text
    )
    assert paper_table.revision_counts({1: {"datasets": {"0": {"good": 3}}}, 0: {}}) == {0: 0, 1: 0}
    # a run that stopped early (completed) counts with its final model; a failed one drops out
    rows = [{"model": "start"}, {"model": "iter 0", "by_task": {"t1": {"success_rate": 1.0}}}]
    early = {"status": "completed", "rows": rows}
    assert paper_table.task_units({0: early}, "iter 1", "by_task", "success_rate") == {("t1", 0): 1.0}
    assert (
        paper_table.task_units({0: {**early, "status": "failed"}}, "iter 1", "by_task", "success_rate") == {}
    )
    assert paper_table.seed_means({("t1", 0): 1.0, ("t2", 0): 0.0, ("t1", 1): 0.5}) == {0: 0.5, 1: 0.5}
    # every other variant that ran is tested against Agent-R too (here DPO: 0.75 against 0)
    dpo = by_metric["heldout_success_iter1_vs_dpo"]
    assert dpo["paired_units"] == 6 and dpo["difference"] == 0.75
    assert "revision_length_iter1_vs_dpo" not in by_metric  # DPO trains no revision
    # Holm over the whole family of paired tests: never below the raw p, and the text's paired
    # table shows both
    assert all(line["p_holm"] >= line["p_value"] for line in lines)
    family = len(lines)
    assert good["p_holm"] == round(min(1.0, family * 2 / 64), 4)
    assert good["significant_holm"] is (good["p_holm"] <= 0.05)
    assert same["p_holm"] == 1.0 and same["significant_holm"] is False
    # significance is the Holm-adjusted p's decision only: the raw 2/64 does not survive 13 tests
    assert good["p_holm"] > 0.05 and good["significant"] is False and dpo["significant"] is False
    assert all(line["significant"] is line["significant_holm"] for line in lines)
    # the seed-level family is Holm-adjusted too
    assert good["seed_p_holm"] == 1.0 and good["seed_significant_holm"] is False
    assert f"Holm-adjusted p over these {family} tests" in text
    row = f"| heldout_success | good trajectories only | +0.500 [+0.500, +0.500] | {good['p_value']} |"
    assert row in text
    assert f"| {good['paired_units']} | +0.500 | 0.25 | 1.0 | 3 |" in text


def test_learner_arms_take_the_runs_stable_rates_and_a_fixed_archer_round_count(base: dict) -> None:
    from agentr.cli.demo import DEMO_ARCHER_ROUNDS, QUICK_ARCHER_ROUNDS
    from agentr.cli.methods import RUN_ACTOR_LR_RATIO, RUN_DPO_LR_RATIO

    sft_lr = float(base["train"]["learning_rate"])
    for quick, rounds in ((True, QUICK_ARCHER_ROUNDS), (False, DEMO_ARCHER_ROUNDS)):
        dpo = paper.variant_config(base, "dpo", train_budget_s=60.0, first=False, quick=quick)["train"]
        assert dpo["learning_rate"] == pytest.approx(sft_lr / RUN_DPO_LR_RATIO)
        for variant in ("archer_offline", "archer_online"):
            archer = paper.variant_config(base, variant, train_budget_s=60.0, first=False, quick=quick)
            RunConfig.from_data(archer)
            # a count of rounds, not "until the time budget ends it" (learner_train's default)
            assert archer["train"]["iterations"] == rounds, (variant, quick)
            assert archer["train"]["actor_lr"] == pytest.approx(sft_lr / RUN_ACTOR_LR_RATIO)
            assert archer["train"]["critic_lr"] == pytest.approx(sft_lr)
    # the SFT arms are untouched by the learner rates
    sft = paper.variant_config(base, "agent_r_model", train_budget_s=60.0, first=False)["train"]
    assert sft["learning_rate"] == sft_lr and "actor_lr" not in sft


def test_each_run_goes_in_a_process_of_its_own_and_a_dead_one_gives_none() -> None:
    """bench/paper.py runs every variant in a spawned process (a process that ran SmolLM2 runs one
    after another grew to 24.7 GB and was killed): the value comes back from the other process, and
    a process that dies gives None with its exit code instead of a result to store."""
    import os

    value, code = paper.in_child(os.getpid)
    assert code == 0 and isinstance(value, int) and value != os.getpid()
    assert paper.in_child(max, [3, 1, 2]) == (3, 0)
    assert paper.in_child(os._exit, 3) == (None, 3)
