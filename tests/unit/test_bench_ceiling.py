"""bench/ceiling.py's bookkeeping and statistics, on results files the tests write themselves (a
test of the code, not a result): one JSON line per finished (arm, seed), a rerun skips what is
there and never mixes designs, and ``--from`` recomputes the seed-level table (exact sign-flip,
Holm over the family, MDE, Wilson intervals) from the raw lines alone."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import ceiling  # noqa: E402

DESIGN = {"version": 1, "bank_id": "bank-a", "start_model_sha256": "m1"}


def _result(arm: str, seed: int, heldout: float, recovery: float) -> dict[str, Any]:
    """A result line as run_arm writes it (80 held-out episodes, 200 recovery continuations)."""
    return {
        "arm": arm,
        "seed": seed,
        "design": DESIGN,
        "heldout_success": heldout,
        "recovery_success": recovery,
        "counts": {
            "heldout_success": {"successes": round(heldout * 80), "episodes": 80},
            "recovery_success": {"successes": round(recovery * 200), "episodes": 200},
        },
        "train": {
            "steps": 48,
            "tokens_seen": 290_000,
            "trained_tokens_seen": 60_000,
            "revision": 0 if arm == "good_only" else 12,
            "good": 40,
        },
    }


def test_each_result_is_one_line_and_a_rerun_runs_only_what_is_missing(tmp_path: Path) -> None:
    out = tmp_path / "results" / "ceiling.jsonl"
    calls: list[tuple[int, str]] = []

    def crashing(seed: int, arm: str) -> dict[str, Any]:
        if len(calls) == 2:
            raise RuntimeError("killed")  # the process dies in the third (arm, seed)
        calls.append((seed, arm))
        return {"heldout_success": 0.5, "recovery_success": 0.1}

    with pytest.raises(RuntimeError, match="killed"):
        ceiling.run_missing(out, DESIGN, [0, 1], ceiling.ARMS, crashing)
    lines = ceiling.read_results(out)
    assert [(line["seed"], line["arm"]) for line in lines] == [(0, "good_only"), (0, "agent_r_first")]
    assert all(line["design"] == DESIGN and line["heldout_success"] == 0.5 for line in lines)
    assert len(out.read_text().splitlines()) == 2  # one JSON line each, nothing half-written

    resumed: list[tuple[int, str]] = []

    def working(seed: int, arm: str) -> dict[str, Any]:
        resumed.append((seed, arm))
        return {"heldout_success": 0.25, "recovery_success": 0.0}

    assert ceiling.run_missing(out, DESIGN, [0, 1], ceiling.ARMS, working) == 6
    assert resumed == [(0, "agent_r_oracle"), (0, "direct")] + [(1, arm) for arm in ceiling.ARMS]
    assert len(ceiling.read_results(out)) == 8
    # everything there: a third run runs nothing; a new seed runs only its arms
    assert ceiling.run_missing(out, DESIGN, [0, 1], ceiling.ARMS, working) == 0
    assert ceiling.run_missing(out, DESIGN, [0, 1, 2], ["good_only"], working) == 1
    assert resumed[-1] == (2, "good_only")
    # the earlier lines were never rewritten
    assert [json.loads(t)["heldout_success"] for t in out.read_text().splitlines()][:2] == [0.5, 0.5]


def test_results_of_another_design_or_a_malformed_file_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "ceiling.jsonl"
    ceiling.append_result(out, _result("good_only", 0, 0.5, 0.1))
    other = {**DESIGN, "bank_id": "bank-b"}
    with pytest.raises(ceiling.CeilingError, match="another design .* differs in bank_id"):
        ceiling.run_missing(out, other, [0], ceiling.ARMS, lambda s, a: {})
    assert len(ceiling.read_results(out)) == 1  # nothing appended
    with out.open("a") as handle:
        handle.write('{"arm": "direct", "seed": 0, "heldout')  # a line cut by a crash mid-write
    with pytest.raises(ceiling.CeilingError, match=r"ceiling.jsonl:2: not a JSON line"):
        ceiling.read_results(out)
    twice = tmp_path / "twice.jsonl"
    for _ in range(2):
        ceiling.append_result(twice, _result("direct", 3, 0.5, 0.1))
    with pytest.raises(ceiling.CeilingError, match="arm direct seed 3 appears twice"):
        ceiling.read_results(twice)
    stranger = tmp_path / "stranger.jsonl"
    stranger.write_text('{"arm": "dpo", "seed": 0}\n')
    with pytest.raises(ceiling.CeilingError, match="stranger.jsonl:1: not a ceiling result"):
        ceiling.read_results(stranger)


def test_from_recomputes_the_seed_level_table_from_the_raw_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ceiling.jsonl"
    for seed in range(10):
        ceiling.append_result(out, _result("good_only", seed, 0.5, 0.1))
        # the oracle arm better by 0.1 on every seed; first-after-divergence identical to good-only;
        # Direct-Revision +-0.05 in turn (no effect); recovery the same everywhere
        ceiling.append_result(out, _result("agent_r_oracle", seed, 0.6, 0.1))
        ceiling.append_result(out, _result("agent_r_first", seed, 0.5, 0.1))
        ceiling.append_result(out, _result("direct", seed, 0.55 if seed % 2 else 0.45, 0.1))
    assert ceiling.main(["--from", str(out)]) == 0
    captured = capsys.readouterr()
    stdout = captured.out.strip().splitlines()
    assert len(stdout) == 1  # ONE JSON line
    line = json.loads(stdout[0])
    assert line["metric"] == "ceiling_primary" and line["seeds"] == 10 and line["partial"] is False
    assert line["arms"] == ["good_only", "agent_r_first", "agent_r_oracle", "direct"]
    oracle = "agent_r_oracle_vs_good_only:heldout_success"
    # 10 seeds all +0.1: exact p = 2 / 2^10; Holm over the 6 tests multiplies the smallest by 6
    assert line["p"][oracle] == round(2 / 1024, 4) and line["p_holm"][oracle] == round(6 * 2 / 1024, 4)
    assert line["difference"][oracle] == 0.1
    assert line["p"]["agent_r_first_vs_good_only:heldout_success"] == 1.0
    assert line["p"]["direct_vs_good_only:heldout_success"] == 1.0  # five +0.05, five -0.05
    assert line["significant_holm"] == [oracle]
    # the 95% interval inverts the same test: every seed +0.1 admits only 0.1; +-0.05 admits 0
    assert line["ci95"][oracle] == [0.1, 0.1]
    low, high = line["ci95"]["direct_vs_good_only:heldout_success"]
    assert -0.05 <= low < 0 < high <= 0.05
    assert (
        set(line["p_holm"]) == {f"{a}_vs_good_only:{o}" for a, o in ceiling.FAMILY}
        and len(ceiling.FAMILY) == 6
    )
    # MDE from the observed per-seed differences: held-out SDs 0, 0 and sqrt(10 * 0.05^2 / 9) pooled
    # as sqrt(mean of variances); recovery SD 0; (z_0.975 + z_0.8) = 2.80158
    sd = ((10 * 0.05**2 / 9) / 3) ** 0.5
    assert line["mde_sd"]["heldout_success"] == round(sd, 4)
    assert line["mde"] == pytest.approx(2.80158 * sd / 10**0.5, abs=1e-4)
    assert line["mde_sd_source"].startswith("observed")
    # pooled rates with Wilson intervals: good-only 400 of 800 held-out episodes
    pooled = line["pooled"]["good_only"]["heldout_success"]
    assert (pooled["successes"], pooled["episodes"], pooled["rate"]) == (400, 800, 0.5)
    assert pooled["wilson95"] == [0.4654, 0.5346]
    assert line["trained"]["agent_r_oracle"] == {
        "steps": 48.0,
        "tokens_seen": 290000.0,
        "trained_tokens_seen": 60000.0,
        "revision": 12.0,
        "good": 40.0,
    }
    # the Markdown table (stderr) says the same, and claims only the Holm-significant difference
    assert f"| {oracle} | 10 | +0.100 |" in captured.err
    assert "PARTIAL" not in captured.err


def test_a_partial_file_is_marked_partial_with_the_planning_mde(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ceiling.jsonl"
    for seed in range(3):
        ceiling.append_result(out, _result("good_only", seed, 0.5, 0.1))
        ceiling.append_result(out, _result("agent_r_oracle", seed, 0.6, 0.2))
    ceiling.append_result(out, _result("agent_r_oracle", 3, 0.6, 0.2))  # its partner not in yet
    assert ceiling.main(["--from", str(out)]) == 0
    captured = capsys.readouterr()
    line = json.loads(captured.out)
    assert line["arms"] == ["good_only", "agent_r_oracle"] and line["partial"] is True
    assert line["seeds_by_arm"] == {"good_only": [0, 1, 2], "agent_r_oracle": [0, 1, 2, 3]}
    assert line["seeds"] == 0  # the seeds of the arm with fewest: two arms have none yet
    # 3 paired seeds, all +0.1: p = 2/8 whatever the effect; the missing arms' tests have no seeds
    assert line["p"]["agent_r_oracle_vs_good_only:heldout_success"] == 0.25
    assert line["p"]["direct_vs_good_only:heldout_success"] is None
    assert line["significant_holm"] == []
    # too few paired seeds for an observed SD of every test: the planning SDs; 0 seeds paired in
    # the missing arms' tests, so no MDE for now, and the planned design's
    assert line["mde_sd_source"] == "planning" and line["mde"] is None
    assert line["mde_at_planned_seeds"] == pytest.approx(2.80158 * 0.08 / 10**0.5, abs=1e-4)
    assert "PARTIAL" in captured.err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(SystemExit, match="no results to summarize"):
        ceiling.main(["--from", str(empty)])


def test_seeds_parse_as_lists_and_ranges() -> None:
    assert ceiling.parse_seeds("0-9") == list(range(10))
    assert ceiling.parse_seeds("3,0-2,3") == [3, 0, 1, 2]
    with pytest.raises(ValueError, match="not an integer"):
        ceiling.parse_seeds("a-b")


async def test_the_arms_differ_only_in_the_critics_t_prime_on_the_same_pairs() -> None:
    """arm_samples on one real TextCraft pair: the same good trajectory in every arm; the revision
    arms splice it at t' = first (a correct step), oracle (the first error) and the last action,
    each replay-verified by the splice worker's own code."""
    from core.domain.config import RunConfig
    from core.domain.events import GoodTrajectoryFound, PairFound
    from core.domain.serde import to_dict
    from core.domain.trajectory import Step, Trajectory
    from core.envs.textcraft import TextCraftEnv

    env_uri, task_id = "textcraft?distractors=0", "goal:oak_door"

    async def played(actions: list[str]) -> Trajectory:
        env = TextCraftEnv(distractors=0)
        task = await env.reset(task_id)
        steps = []
        for action in actions:
            r = await env.step(action)
            steps.append(Step(f"I will {action}.", action, r.observation, r.reward, r.done, valid=r.valid))
        provenance = {"env_uri": env_uri, "task_id": task_id, "iteration": 0}
        return Trajectory(task, env.instruction, tuple(steps), steps[-1].reward, provenance)

    expert = [
        "get 2 oak logs",
        "craft 4 oak planks using 1 oak logs",
        "craft 4 oak planks using 1 oak logs",
        "craft 3 oak door using 6 oak planks",
    ]
    good = await played(expert)
    assert good.reward == 1.0
    # after the divergence (step 0): a useful get (progress), an inventory look-up (the oracle's
    # first error), a useless spruce log
    bad = await played(["get 1 oak logs", "inventory", "get 1 spruce logs"])
    pair = PairFound("p1", "search", f"{env_uri}#{task_id}", bad, good, 0, env_uri=env_uri, task_id=task_id)
    data = {
        "goods": [to_dict(GoodTrajectoryFound("g1", "t1", None, 0, "leaf-g", good))],
        "pairs": [to_dict(pair)],
        "oracle": {"p1": 1},
    }
    setup = ceiling.Setup(
        home=Path("."),
        model="",
        model_digest="",
        env=env_uri,
        searched=(),
        heldout=(),
        search={},
        alpha=0.5,
        beta=0.2,
        train={},
        evaluation={},
        run_config=RunConfig(env=env_uri),
        bank=[],
        bank_id="",
    )
    t_prime: dict[str, int] = {}
    for arm in ceiling.ARMS:
        built, info = await ceiling.arm_samples(setup, data, arm, seed=0)
        kinds = sorted(sample.kind for sample in built.samples)
        assert info["good"] == 1 and info["pairs"] == 1
        if arm == "good_only":
            assert kinds == ["good"] and info["revision"] == 0
            continue
        assert kinds == ["good", "revision"], (arm, info)
        (revision,) = [s for s in built.samples if s.kind == "revision"]
        assert revision.provenance["verified"] is True
        t_prime[arm] = revision.provenance["transition_index"]
        assert info["t_prime_is_oracle"] == {"matches": int(t_prime[arm] == 1), "pairs_with_oracle": 1}
    assert t_prime == {"agent_r_first": 0, "agent_r_oracle": 1, "direct": 2}
