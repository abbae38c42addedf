"""Benchmark: the oracle ceiling (issue #51). With a PERFECT critic, does revision data help the tiny
agent more than good trajectories alone? If not, the critic's accuracy is moot at this scale.

Design (iteration 0 only). Four arms, each an SFT of the SAME starting model (the default ``agentr
run``'s warm-started tiny model, ``agentr.cli.warm_start.prepare_model``: built once and cached
under ``--home``) on the data of the SAME search:

- ``good_only``       the good trajectories only (``include_revisions = false``);
- ``agent_r_first``   + revision samples spliced at t' = the first action after the divergence
  (critic strategy ``first``);
- ``agent_r_oracle``  + revision samples spliced at t' = TextCraft's first-error oracle (``oracle``:
  the perfect critic);
- ``direct``          + revision samples spliced at t' = the last action (Direct-Revision).

Per seed, the starting model searches the default run's 24 goals ONCE (its search settings, alpha
0.5, beta 0.2, tree seeds ``core.domain.runs.search_seed(seed, 0, i)``; cached under ``--home``);
the arms of that seed share those trees, good trajectories and pairs and differ only in the
critic's t' and so in the spliced revision samples (the splice worker's own code,
``splice_service.splicer.SpliceHandlers.splice``: template reflections, replay-verified, unverified
ones dropped). Common random numbers: the same search, the same SFT seed, the same evaluation
episode seeds and recovery continuation seeds for every arm of a seed.

Budgets are matched in optimizer steps and tokens: every arm trains exactly ``DEMO_SFT_STEPS`` (48)
optimizer steps of batch 8 packed blocks of at most 768 tokens (the default run's SFT settings,
``train.max_steps``; packing fills every block, so each step sees about the same number of tokens
whatever the data: a smaller dataset is passed over more often). Each result line reports what was
actually trained: steps, epochs, the dataset's tokens and trained (loss-weighted) tokens, and
``tokens_seen`` = dataset tokens x epochs. No general (judge replay) data: no arm has a model critic.

Evaluation: the same 20 held-out goals (``agentr.cli.demo.DEMO_HELD_OUT``), ``--episodes-per-task``
(4) seeded episodes each, constrained decoding, 12 actions; and recovery on a FIXED bank of
``--bank-size`` (200) failed prefixes of the starting model: its failed episodes on the held-out
goals, each truncated at a seeded random step (``core.domain.eval_protocol.recovery_set``: the run
protocol's "success after a seeded mistake"), built once, stored in ``--bank`` (committed beside the
results) and continued once by every arm of every seed.

PRIMARY OUTCOME (stated before the run, 2026-12-07): held-out success rate and recovery success rate
of each arm's model, each a per-seed rate (episodes pooled within the seed); tested at the SEED
level, paired over seeds against ``good_only``, by the EXACT two-sided sign-flip test over all 2^n
sign assignments of the per-seed differences (``core.domain.stats.seed_test``), with Holm's
correction over the family of the six tests {agent_r_first, agent_r_oracle, direct} x {held-out
success, recovery success} vs good_only. A difference is claimed only where its Holm-adjusted p
is <= 0.05. At least 10 seeds per arm (``--seeds``, default 0-9). The minimal detectable effect
at 80% power, two-sided alpha 0.05 (``core.domain.stats.minimal_detectable_effect``: (z_0.975 +
z_0.8) x SD / sqrt(n)) is printed from the observed SD of the per-seed differences once 3 seeds are
in, before that from the planning SDs ``PLANNING_SD`` (held-out 0.08: the per-seed Agent-R minus
good-only differences of docs/results.md's 24-goal comparison, 0 / +0.10 / -0.05, SD 0.076;
recovery 0.05: 200 continuations per seed give a binomial SD of about 0.02 per arm, plus training
noise). With 10 seeds and those SDs the MDE is 0.071 (held-out) and 0.044 (recovery); at Holm's
first step (alpha 0.05 / 6) 0.088 and 0.055. Secondary (descriptive only): dead loops, invalid
actions, the pooled rates with Wilson intervals, the data each arm trained on.

Resumable: each finished (arm, seed) is ONE JSON line appended to ``--out``
(``bench/results/ceiling.jsonl``) with its design (starting model digest, bank id, settings); a
rerun skips the (arm, seed) already there, and refuses to append to a file of another design
(another starting model, bank or settings: results of two experiments never mix). One process,
sequential over seeds.

``python bench/ceiling.py --from bench/results/ceiling.jsonl`` recomputes everything from the raw
lines alone and prints ONE JSON line ``{"metric": "ceiling_primary", "arms", "seeds", "mde",
"p_holm", ...}`` (the Markdown table goes to stderr).

Usage: python bench/ceiling.py [--seeds 0-9] [--home DIR] [--out FILE] [--bank FILE]
       [--episodes-per-task 4] [--bank-size 200] [--smoke]
       python bench/ceiling.py --from bench/results/ceiling.jsonl
``--smoke``: the ``agentr run --quick`` model and goals with a bank of 4, to check the pipeline in
a minute or two (its results are not the experiment's; write them elsewhere with ``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import resource
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.domain.stats import (  # noqa: E402
    holm_adjust,
    minimal_detectable_effect,
    seed_test,
    sign_flip_interval,
    wilson_interval,
)

ARMS: tuple[str, ...] = ("good_only", "agent_r_first", "agent_r_oracle", "direct")
BASELINE = "good_only"
CRITIC: dict[str, str | None] = {
    "good_only": None,
    "agent_r_first": "first",
    "agent_r_oracle": "oracle",
    "direct": "direct",
}
OUTCOMES: tuple[str, ...] = ("heldout_success", "recovery_success")
# the family Holm corrects over: each revision arm against good-only, on both outcomes
FAMILY: tuple[tuple[str, str], ...] = tuple((arm, o) for arm in ARMS if arm != BASELINE for o in OUTCOMES)
PLANNED_SEEDS = 10
PLANNING_SD: dict[str, float] = {"heldout_success": 0.08, "recovery_success": 0.05}
ALPHA, POWER = 0.05, 0.8
BANK_SIZE = 200
BANK_SEED = 51  # the bank's episode and truncation seeds (the number): fixed for every run
BANK_ROUND = 12  # the starting model's episodes per held-out goal per round, until the bank is full
BANK_MAX_ROUNDS = 6
EPISODES_PER_TASK = 4
DESIGN_VERSION = 1
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "ceiling.jsonl"
DEFAULT_BANK = Path(__file__).resolve().parent / "results" / "ceiling-bank.json"


class CeilingError(RuntimeError):
    """The experiment cannot go on as asked (a malformed results file, another design, a short bank)."""


def test_name(arm: str, outcome: str) -> str:
    return f"{arm}_vs_{BASELINE}:{outcome}"


# --------------------------------------------------------------------------------------------
# The results file: one JSON line per finished (arm, seed), appended; a rerun skips what is there
# --------------------------------------------------------------------------------------------


def read_results(path: Path) -> list[dict[str, Any]]:
    """The result lines of ``path`` (none when it does not exist); a line that is not a JSON object
    with ``arm`` and ``seed`` is an error naming its line number (a results file is never guessed at)."""
    if not path.is_file():
        return []
    lines: list[dict[str, Any]] = []
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        if not text.strip():
            continue
        try:
            line = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CeilingError(f"{path}:{number}: not a JSON line ({exc}); remove or repair it") from None
        if not isinstance(line, dict) or line.get("arm") not in ARMS or not isinstance(line.get("seed"), int):
            raise CeilingError(
                f"{path}:{number}: not a ceiling result (needs an arm of {ARMS} and an int seed)"
            )
        lines.append(line)
    seen: set[tuple[str, int]] = set()
    for line in lines:
        key = (line["arm"], line["seed"])
        if key in seen:
            raise CeilingError(f"{path}: arm {key[0]} seed {key[1]} appears twice")
        seen.add(key)
    return lines


def check_design(lines: Iterable[dict[str, Any]], design: dict[str, Any], path: Path) -> None:
    """Refuse to add results of another design to ``path`` (CeilingError naming what differs)."""
    for line in lines:
        theirs = line.get("design") or {}
        if theirs != design:
            keys = sorted(k for k in set(theirs) | set(design) if theirs.get(k) != design.get(k))
            raise CeilingError(
                f"{path} holds results of another design (arm {line['arm']} seed {line['seed']} differs in "
                f"{', '.join(keys)}): continue it with the same starting model, bank and settings, or "
                "write to another --out"
            )


def append_result(path: Path, line: dict[str, Any]) -> None:
    """Append ``line`` as one JSON line, written whole and synced before returning."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(line, sort_keys=True) + "\n"
    with path.open("a", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def missing(
    lines: Iterable[dict[str, Any]], seeds: Sequence[int], arms: Sequence[str]
) -> list[tuple[int, str]]:
    """The (seed, arm) still to run, in run order: seed by seed, arms in ``arms``' order."""
    done = {(line["seed"], line["arm"]) for line in lines}
    return [(seed, arm) for seed in seeds for arm in arms if (seed, arm) not in done]


def run_missing(
    path: Path,
    design: dict[str, Any],
    seeds: Sequence[int],
    arms: Sequence[str],
    run_one: Callable[[int, str], dict[str, Any]],
    log: Callable[[str], None] = lambda _text: None,
) -> int:
    """Run every (seed, arm) not yet in ``path`` (``run_one`` returns the result fields), appending
    each line as it finishes, with its arm, seed and ``design``; returns how many ran. An exception
    stops the loop: what finished before it stays in the file, and a rerun continues after it."""
    lines = read_results(path)
    check_design(lines, design, path)
    todo = missing(lines, seeds, arms)
    log(f"{len(lines)} result(s) in {path}; {len(todo)} (seed, arm) to run")
    for seed, arm in todo:
        result = run_one(seed, arm)
        append_result(path, {**result, "arm": arm, "seed": seed, "design": design})
        log(f"seed {seed} {arm}: appended to {path}")
    return len(todo)


# --------------------------------------------------------------------------------------------
# The table, from the raw lines alone
# --------------------------------------------------------------------------------------------


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None or math.isinf(value) or math.isnan(value) else round(value, digits)


def _pooled_sd(sds: Sequence[float | None]) -> float | None:
    present = [s for s in sds if s is not None]
    return math.sqrt(sum(s * s for s in present) / len(present)) if present else None


def _interval(differences: Sequence[float]) -> list[float | None]:
    interval = sign_flip_interval(differences)
    return [_r(interval.low), _r(interval.high)]


def summarize(lines: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The ``ceiling_primary`` line of the results ``lines`` (see the module docstring): the family's
    seed-level tests with Holm-adjusted p, the MDE, and per arm the mean over seeds and the pooled
    rates with Wilson intervals, the tokens trained."""
    if not lines:
        raise CeilingError("no results to summarize")
    designs = {json.dumps(line.get("design"), sort_keys=True) for line in lines}
    if len(designs) > 1:
        raise CeilingError(f"the results mix {len(designs)} designs: one experiment per file")
    by = {(line["arm"], line["seed"]): line for line in lines}
    arms = [arm for arm in ARMS if any(a == arm for a, _ in by)]
    seeds_by_arm = {arm: sorted(seed for a, seed in by if a == arm) for arm in arms}
    tests: dict[str, Any] = {}
    raw: list[float | None] = []
    sds: dict[str, list[float | None]] = {o: [] for o in OUTCOMES}
    n_paired: list[int] = []
    for arm, outcome in FAMILY:
        ours = {s: float(by[(arm, s)][outcome]) for s in seeds_by_arm.get(arm, [])}
        base = {s: float(by[(BASELINE, s)][outcome]) for s in seeds_by_arm.get(BASELINE, [])}
        test = seed_test(ours, base)
        tests[test_name(arm, outcome)] = test
        raw.append(test.p_value)
        sds[outcome].append(test.sd)
        n_paired.append(test.n)
    adjusted = dict(zip(tests, holm_adjust(raw), strict=True))
    n = min(n_paired) if n_paired else 0
    observed = n >= 3 and all(s is not None for values in sds.values() for s in values)
    sd = {o: (_pooled_sd(sds[o]) if observed else PLANNING_SD[o]) for o in OUTCOMES}

    def mde(seeds: int, alpha: float) -> float | None:
        if seeds < 1:
            return None
        return _r(max(minimal_detectable_effect(float(sd[o] or 0.0), seeds, alpha=alpha) for o in OUTCOMES))

    m = len(FAMILY)
    means: dict[str, dict[str, float | None]] = {}
    pooled: dict[str, dict[str, Any]] = {}
    trained: dict[str, dict[str, Any]] = {}
    for arm in arms:
        rows = [by[(arm, s)] for s in seeds_by_arm[arm]]
        means[arm] = {o: _r(sum(float(r[o]) for r in rows) / len(rows)) for o in OUTCOMES}
        pooled[arm] = {}
        for outcome in OUTCOMES:
            k = sum(int(r["counts"][outcome]["successes"]) for r in rows)
            total = sum(int(r["counts"][outcome]["episodes"]) for r in rows)
            interval = wilson_interval(k, total)
            pooled[arm][outcome] = {
                "successes": k,
                "episodes": total,
                "rate": _r(interval.mean),
                "wilson95": [_r(interval.low), _r(interval.high)],
            }
        trained[arm] = {
            key: _r(sum(float(r["train"][key]) for r in rows) / len(rows), 1)
            for key in ("steps", "tokens_seen", "trained_tokens_seen", "revision", "good")
        }
    return {
        "metric": "ceiling_primary",
        "arms": arms,
        "seeds": min(len(seeds_by_arm.get(arm, [])) for arm in ARMS),  # of the arm with fewest (absent: 0)
        "seeds_by_arm": seeds_by_arm,
        "partial": any(len(seeds_by_arm.get(arm, [])) < PLANNED_SEEDS for arm in ARMS),
        "mde": mde(n, ALPHA),
        "mde_holm_first_step": mde(n, ALPHA / m),
        "mde_at_planned_seeds": mde(PLANNED_SEEDS, ALPHA),
        "mde_sd": {o: _r(sd[o]) for o in OUTCOMES},
        "mde_sd_source": "observed (pooled over the family's per-seed differences)"
        if observed
        else "planning",
        "mde_power": POWER,
        "mde_alpha": ALPHA,
        "difference": {name: _r(t.mean) for name, t in tests.items()},
        "seed_differences": {name: [_r(d) for d in t.differences] for name, t in tests.items()},
        # the 95% interval of each mean difference that inverts the same exact sign-flip test
        "ci95": {name: _interval(t.differences) for name, t in tests.items()},
        "p": {name: _r(t.p_value) for name, t in tests.items()},
        "p_holm": {name: _r(adjusted[name]) for name in tests},
        "significant_holm": [name for name in tests if (adjusted[name] or 1.0) <= ALPHA],
        "means": means,
        "pooled": pooled,
        "trained": trained,
        "design": lines[0].get("design"),
    }


def table(summary: dict[str, Any]) -> str:
    """The Markdown tables of a ``summarize`` result."""
    arms = summary["arms"]
    counts = ", ".join(f"{a} {len(summary['seeds_by_arm'][a])}" for a in arms)
    out = [
        f"Seeds per arm: {counts}" + (" (PARTIAL: fewer than the planned 10)" if summary["partial"] else ""),
        "",
        "| arm | held-out success (mean of seeds) | pooled [Wilson 95%] | recovery (mean of seeds) | "
        "pooled [Wilson 95%] | steps | tokens seen | trained tokens seen | revisions | good |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for arm in arms:
        cells = []
        for outcome in OUTCOMES:
            p = summary["pooled"][arm][outcome]
            cells.append(f"{summary['means'][arm][outcome]:.3f}")
            cells.append(f"{p['successes']}/{p['episodes']} [{p['wilson95'][0]:.3f}, {p['wilson95'][1]:.3f}]")
        t = summary["trained"][arm]
        cells += [f"{t[k]:g}" for k in ("steps", "tokens_seen", "trained_tokens_seen", "revision", "good")]
        out.append(f"| {arm} | " + " | ".join(cells) + " |")
    out += [
        "",
        f"Each arm minus {BASELINE}, paired by seed: mean of the per-seed differences, exact sign-flip p "
        f"over all 2^n sign assignments, Holm-adjusted over these {len(FAMILY)} tests (claimed only "
        "where p (Holm) <= 0.05):",
        "",
        "| test | seeds | difference | 95% interval (inverted test) | per-seed differences | p | p (Holm) |",
        "|---|---:|---:|---|---|---:|---:|",
    ]
    for name, p in summary["p"].items():
        diffs = summary["seed_differences"][name]
        diff = summary["difference"][name]
        low, high = summary["ci95"][name]
        interval = "unbounded (too few seeds)" if low is None else f"[{low:+.3f}, {high:+.3f}]"
        out.append(
            f"| {name} | {len(diffs)} | {'-' if diff is None else f'{diff:+.3f}'} | {interval} | "
            f"{' '.join(f'{d:+.3f}' for d in diffs)} | {p} | {summary['p_holm'][name]} |"
        )
    mde = summary["mde"]
    out += [
        "",
        f"MDE at {summary['mde_power']:.0%} power, two-sided alpha {summary['mde_alpha']} over "
        f"{summary['seeds']} seeds: {'none reachable' if mde is None else mde} (Holm's first step: "
        f"{summary['mde_holm_first_step']}; at the planned {PLANNED_SEEDS} seeds: "
        f"{summary['mde_at_planned_seeds']}); SD of the per-seed differences: {summary['mde_sd']} "
        f"({summary['mde_sd_source']}).",
    ]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------
# The experiment
# --------------------------------------------------------------------------------------------


@dataclass
class Setup:
    """What every (arm, seed) shares: the starting model, goals, settings and the recovery bank."""

    home: Path
    model: str
    model_digest: str
    env: str
    searched: tuple[str, ...]
    heldout: tuple[str, ...]
    search: dict[str, Any]
    alpha: float
    beta: float
    train: dict[str, Any]
    evaluation: dict[str, Any]
    run_config: Any  # core.domain.config.RunConfig: masking, splice and dataset settings
    bank: list[Any]  # core.domain.eval_protocol.RecoveryPrefix
    bank_id: str

    def design(self) -> dict[str, Any]:
        return {
            "version": DESIGN_VERSION,
            "env": self.env,
            "start_model_sha256": self.model_digest,
            "bank_id": self.bank_id,
            "bank_size": len(self.bank),
            "searched": list(self.searched),
            "heldout": list(self.heldout),
            "search": {**self.search, "alpha": self.alpha, "beta": self.beta},
            "train": self.train,
            "evaluation": self.evaluation,
        }


def model_digest(folder: str | Path) -> str:
    """sha256 of the model folder's weight files (names and bytes): which starting model this is."""
    digest = hashlib.sha256()
    for path in sorted(Path(folder).glob("*.safetensors")) + sorted(Path(folder).glob("*.bin")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _eval_config(setup_evaluation: dict[str, Any]) -> Any:
    from train_service.evaluation import EvalConfig

    return EvalConfig.from_data(setup_evaluation)


async def build_bank(
    model: str, env_uri: str, heldout: Sequence[str], evaluation: dict[str, Any], size: int
) -> tuple[list[Any], dict[str, Any]]:
    """``size`` failed prefixes of the starting model on the held-out goals: its episodes (seeded by
    ``BANK_SEED``) in rounds of ``BANK_ROUND`` per goal until enough failed, then
    ``recovery_set`` (a seeded choice of ``size`` of them, each truncated at a seeded random step)."""
    from core.domain.eval_protocol import episode_seed, recovery_set
    from core.envs.registry import open_env
    from core.llm.registry import open_policy
    from train_service.episodes import play

    cfg = _eval_config(evaluation)
    policy = open_policy(model)
    episodes: list[tuple[int, Any]] = []
    try:
        for round_index in range(BANK_MAX_ROUNDS):
            runs = [
                (task, e)
                for task in heldout
                for e in range(round_index * BANK_ROUND, (round_index + 1) * BANK_ROUND)
            ]
            results = await play(
                policy,
                lambda: open_env(env_uri),
                [task for task, _ in runs],
                cfg,
                seeds=[episode_seed(BANK_SEED, task, e, "ceiling-bank") for task, e in runs],
            )
            episodes += [(e, r) for (_, e), r in zip(runs, results, strict=True)]
            usable = recovery_set(
                episodes, limit=10**9, seed=BANK_SEED, success_threshold=cfg.success_threshold
            )
            print(
                f"# bank: {len(episodes)} episodes of the starting model, {len(usable)} failed",
                file=sys.stderr,
            )
            if len(usable) >= size:
                break
    finally:
        await policy.close()
    bank = recovery_set(episodes, limit=size, seed=BANK_SEED, success_threshold=cfg.success_threshold)
    if len(bank) < size:
        raise CeilingError(
            f"the starting model failed only {len(bank)} usable episodes; the bank needs {size}"
        )
    successes = sum(1 for _, r in episodes if r.reward >= cfg.success_threshold)
    return bank, {"episodes": len(episodes), "successes": successes}


def load_or_build_bank(setup_args: dict[str, Any], bank_path: Path, size: int) -> tuple[list[Any], str]:
    """The bank stored at ``bank_path`` when it is this starting model's and size, else a new one
    (written there). Another model's bank is never reused silently: it is an error."""
    from core.domain.eval_protocol import RecoveryPrefix, recovery_set_id

    digest = setup_args["model_digest"]
    if bank_path.is_file():
        stored = json.loads(bank_path.read_text())
        if stored.get("start_model_sha256") != digest or stored.get("size") != size:
            raise CeilingError(
                f"{bank_path} is the bank of starting model {stored.get('start_model_sha256')} (size "
                f"{stored.get('size')}), not of {digest} (size {size}): this machine's warm start differs; "
                "use another --bank and --out for a new experiment"
            )
        bank = [RecoveryPrefix.from_data(item) for item in stored["prefixes"]]
        return bank, recovery_set_id(bank)
    bank, played = asyncio.run(
        build_bank(
            setup_args["model"], setup_args["env"], setup_args["heldout"], setup_args["evaluation"], size
        )
    )
    bank_path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "start_model_sha256": digest,
        "size": size,
        "seed": BANK_SEED,
        "bank_id": recovery_set_id(bank),
        "start_episodes": played,
        "prefixes": [p.to_data() for p in bank],
    }
    tmp = bank_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    tmp.replace(bank_path)
    return bank, recovery_set_id(bank)


def prepare(args: argparse.Namespace) -> Setup:
    """The warm-started starting model (cached under ``--home``), the goals, settings and the bank."""
    from agentr.cli.demo import DEMO_SFT_STEPS, RunOptions, plan_run
    from agentr.cli.embedded_run import embedded_settings
    from agentr.cli.warm_start import prepare_model
    from core.domain.config import RunConfig
    from core.envs.registry import open_env
    from train_service.evaluation import held_out_tasks

    _, home = embedded_settings(args.home)
    plan = plan_run(RunOptions(quick=args.smoke, iterations=1))
    config = RunConfig.from_data(plan.config)
    model = prepare_model(plan, home, 0)
    env = open_env(config.env)
    searched = tuple(config.tasks or env.task_ids(config.split)[: config.max_tasks])
    heldout_ids = list(config.eval_tasks or env.task_ids(config.eval_split))
    heldout = tuple(held_out_tasks(env, heldout_ids, config.max_eval_tasks))
    train = {
        k: v
        for k, v in config.sft_overrides(0).items()
        if k not in ("time_budget_s", "logging_steps", "seed")
    }
    if not args.smoke:
        train["max_steps"] = DEMO_SFT_STEPS  # the default run's fixed budget, whatever the goal count
    evaluation = {
        **{
            k: v
            for k, v in config.evaluation.items()
            if k in ("max_steps", "max_tokens", "constrain_actions")
        },
        "episodes_per_task": args.episodes_per_task,
        "recovery_seeds": 1,
        "temperature": 0.7,
        "baseline": False,
        "seen_tasks": False,
    }
    digest = model_digest(model)
    bank, bank_id = load_or_build_bank(
        {
            "model": model,
            "model_digest": digest,
            "env": config.env,
            "heldout": heldout,
            "evaluation": evaluation,
        },
        Path(args.bank),
        args.bank_size,
    )
    return Setup(
        home=home,
        model=model,
        model_digest=digest,
        env=config.env,
        searched=searched,
        heldout=heldout,
        search=dict(config.search),
        alpha=config.alpha(0),
        beta=config.beta,
        train=train,
        evaluation=evaluation,
        run_config=config,
        bank=bank,
        bank_id=bank_id,
    )


async def _discard(_events: Sequence[Any]) -> None:
    return None


async def search_seed_data(setup: Setup, seed: int) -> dict[str, Any]:
    """The starting model's search of every searched goal with the seed's tree seeds: its good
    trajectories, pairs and each pair's oracle first error, cached under ``--home`` (the arms of
    the seed, and a resumed run, read the same search)."""
    from core.domain.events import GoodTrajectoryFound, PairFound
    from core.domain.mcts import SearchConfig
    from core.domain.runs import search_seed
    from core.domain.serde import to_dict
    from core.envs.registry import open_env
    from core.llm.registry import open_policy
    from critic_service.oracles import Oracles
    from search_service.engine import TreeRequest, TreeSearch

    cache = setup.home / "ceiling" / f"search-{setup.model_digest}-s{seed}.json"
    if cache.is_file():
        data: dict[str, Any] = json.loads(cache.read_text())
        return data
    policy = open_policy(setup.model)
    goods: list[dict[str, Any]] = []
    pairs: list[dict[str, Any]] = []
    oracles = Oracles()
    oracle: dict[str, int | None] = {}
    started = time.monotonic()
    try:
        for index, task in enumerate(setup.searched):
            config = SearchConfig.from_dict(
                {
                    **setup.search,
                    "alpha": setup.alpha,
                    "beta": setup.beta,
                    "seed": search_seed(seed, 0, index),
                }
            )
            request = TreeRequest(f"ceiling-s{seed}-{index}", setup.env, task, setup.model, config)
            env = open_env(setup.env)
            search = TreeSearch(request, env, policy, _discard)
            try:
                await search.run()
                events = search.final_events()
            finally:
                await search.close()
                await env.close()
            for new in events:
                if isinstance(new.event, GoodTrajectoryFound):
                    goods.append(to_dict(new.event))
                elif isinstance(new.event, PairFound):
                    pair = new.event
                    pairs.append(to_dict(pair))
                    oracle[pair.pair_id] = oracles.oracle_index(
                        pair.env_uri, pair.task_id, pair.bad, pair.shared_steps
                    )
    finally:
        await policy.close()
    data = {
        "seed": seed,
        "goods": goods,
        "pairs": pairs,
        "oracle": oracle,
        "seconds": round(time.monotonic() - started, 1),
    }
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(cache)
    return data


def search_digest(data: dict[str, Any]) -> str:
    """A content id of a seed's search (its goods and pairs): equal ids = the arms shared one search."""
    text = json.dumps({"goods": data["goods"], "pairs": data["pairs"]}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


async def arm_samples(setup: Setup, data: dict[str, Any], arm: str, seed: int) -> tuple[Any, dict[str, Any]]:
    """The arm's iteration-0 dataset (core.domain.datasets.build_dataset) and what went into it."""
    from core.domain.critic import CriticInputError
    from core.domain.datasets import Candidate, DatasetConfig, build_dataset
    from core.domain.events import FirstErrorMarked, GoodTrajectoryFound, PairFound, RevisionMaterialized
    from core.domain.good_samples import trajectory_to_sample
    from core.domain.serde import from_dict
    from core.domain.splice import rejection_kind
    from core.envs.registry import open_env
    from core.runtime.settings import Settings
    from critic_service.critic import CriticConfig, CriticConfigError, critique
    from splice_service.splicer import SpliceConfig, SpliceHandlers

    rc = setup.run_config
    mask = {"mask_invalid_steps": rc.mask_invalid_steps, "mask_loop_steps": rc.mask_loop_steps}
    goods = [from_dict(GoodTrajectoryFound, g) for g in data["goods"]]
    good = [
        Candidate(trajectory_to_sample(g.trajectory, g.sample_id, **mask), position)
        for position, g in enumerate(goods)
    ]
    revisions: list[Candidate] = []
    info: dict[str, Any] = {"pairs": len(data["pairs"]), "rejected": {}, "t_prime_is_oracle": None}
    critic = CRITIC[arm]
    if critic is not None:
        splice_config, masking = SpliceConfig.of_run(rc)
        splicer = SpliceHandlers(Settings(), None, lambda uri: open_env(uri))  # type: ignore[arg-type]
        rejected: Counter[str] = Counter()
        matches = judged = 0
        lengths: list[int] = []
        for position, raw in enumerate(data["pairs"], start=len(goods)):
            pair = from_dict(PairFound, raw)
            oracle_index = data["oracle"].get(pair.pair_id)
            try:
                result = await critique(CriticConfig(strategy=critic), pair.bad, pair.shared_steps)  # type: ignore[arg-type]
            except (CriticInputError, CriticConfigError) as exc:
                rejected[rejection_kind(f"critic: {exc}")] += 1
                continue
            if oracle_index is not None:
                judged += 1
                matches += int(result.transition_index == oracle_index)
            marked = FirstErrorMarked(
                pair.pair_id,
                result.strategy,
                result.transition_index,
                result.verdicts,
                fallback=result.fallback,
                oracle_index=oracle_index,
            )
            outcome = await splicer.splice(pair, marked, splice_config, masking)
            if isinstance(outcome, RevisionMaterialized):
                revisions.append(Candidate(outcome.sample, position, outcome.template_id))
                lengths.append(outcome.revision_length)
            else:
                rejected[rejection_kind(outcome.reason)] += 1
        info["rejected"] = dict(sorted(rejected.items()))
        info["t_prime_is_oracle"] = {"matches": matches, "pairs_with_oracle": judged}
        info["revision_length_mean"] = _r(sum(lengths) / len(lengths)) if lengths else None
    built = build_dataset(
        run_id=f"ceiling-s{seed}-{arm}",
        iteration=0,
        revisions=revisions,
        good=good,
        config=DatasetConfig(
            alpha_schedule=rc.alpha_schedule,
            eta=1.0,  # no general data: agent samples only, every arm alike
            seed=seed,
            include_revisions=critic is not None,
            **mask,
        ),
    )
    kinds = Counter(sample.kind for sample in built.samples)
    info["revision"], info["good"] = kinds.get("revision", 0), kinds.get("good", 0)
    return built, info


def run_arm(setup: Setup, seed: int, arm: str) -> dict[str, Any]:
    """One (arm, seed): its dataset from the seed's search, its SFT from the starting model, its
    evaluation on the held-out goals and the bank (the result line's fields)."""
    from core.formats.export import write_jsonl
    from core.llm.registry import open_policy
    from train_service.celery_app import run_train_iteration
    from train_service.evaluation import evaluate

    t0, c0 = time.monotonic(), _cpu_seconds()
    data = asyncio.run(search_seed_data(setup, seed))
    built, info = asyncio.run(arm_samples(setup, data, arm, seed))
    work = setup.home / "ceiling" / f"s{seed}-{arm}"
    shutil.rmtree(work, ignore_errors=True)  # a fresh SFT: never a checkpoint of an interrupted try
    dataset = work / "dataset.jsonl"
    write_jsonl(dataset, built.samples, "samples")
    trained = run_train_iteration(
        run_id=None,
        iteration=0,
        dataset_id=built.manifest.dataset_id,
        dataset_path=str(dataset),
        model_path=setup.model,
        out_dir=str(work / "checkpoint"),
        config={**setup.train, "seed": seed, "time_budget_s": 3600.0, "logging_steps": 10},
        method="sft",
    )
    metrics = dict(trained.get("metrics") or {})
    cfg = _eval_config(setup.evaluation)

    async def evaluated() -> dict[str, Any]:
        from core.envs.registry import open_env

        policy = open_policy(str(trained["checkpoint"]))
        try:
            return await evaluate(
                policy, lambda: open_env(setup.env), list(setup.heldout), cfg, seed=seed, recovery=setup.bank
            )
        finally:
            await policy.close()

    result = asyncio.run(evaluated())
    shutil.rmtree(work, ignore_errors=True)
    recovery = result["recovery"]
    epochs = float(metrics.get("epochs", 0.0))
    counts = {
        "heldout_success": {
            "successes": round(float(result["success_rate"]) * int(result["episodes"])),
            "episodes": int(result["episodes"]),
        },
        "recovery_success": {
            "successes": round(float(recovery["success_rate"]) * int(recovery["episodes"])),
            "episodes": int(recovery["episodes"]),
        },
    }
    return {
        "critic": CRITIC[arm],
        "heldout_success": _r(float(result["success_rate"])),
        "recovery_success": _r(float(recovery["success_rate"])),
        "counts": counts,
        "heldout_by_task": {t: _r(v["success_rate"]) for t, v in sorted(result["by_task"].items())},
        "dead_loop_rate": _r(result.get("dead_loop_rate")),
        "invalid_action_rate": _r(result.get("invalid_action_rate")),
        "recovery_set_id": recovery.get("set_id"),
        "search_digest": search_digest(data),
        "data": info,
        "train": {
            "steps": int(metrics.get("steps", 0)),
            "batch_size": setup.train.get("batch_size"),
            "max_length": setup.train.get("max_length"),
            "epochs": _r(epochs),
            "tokens": int(metrics.get("tokens", 0)),
            "trained_tokens": int(metrics.get("trained_tokens", 0)),
            "tokens_seen": round(int(metrics.get("tokens", 0)) * epochs),
            "trained_tokens_seen": round(int(metrics.get("trained_tokens", 0)) * epochs),
            "blocks": metrics.get("blocks"),
            "train_loss": _r(metrics.get("train_loss")),
            "seconds": metrics.get("seconds"),
            "stopped_by_time_budget": bool(metrics.get("stopped_by_time_budget")),
            "revision": info["revision"],
            "good": info["good"],
        },
        "seconds": round(time.monotonic() - t0, 1),
        "cpu_seconds": round(_cpu_seconds() - c0, 1),
        "load": round(os.getloadavg()[0], 2),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def parse_seeds(text: str) -> list[int]:
    """``0-9`` or ``0,1,2`` (or a mix) -> the seeds, each once, in order."""
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        low, sep, high = part.partition("-")
        try:
            values = range(int(low), int(high) + 1) if sep else [int(part)]
        except ValueError:
            raise ValueError(f"--seeds: {part!r} is not an integer or a range like 0-9") from None
        seeds += [s for s in values if s not in seeds]
    if not seeds:
        raise ValueError("--seeds names no seed")
    return seeds


def _args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--from", dest="from_file", default="", help="print the table of this results file")
    parser.add_argument("--seeds", default=f"0-{PLANNED_SEEDS - 1}")
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated, of " + ", ".join(ARMS))
    parser.add_argument("--home", default=str(Path.home() / ".cache" / "agentr-ceiling"))
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--bank", default=str(DEFAULT_BANK))
    parser.add_argument("--bank-size", type=int, default=BANK_SIZE)
    parser.add_argument("--episodes-per-task", type=int, default=EPISODES_PER_TASK)
    parser.add_argument("--smoke", action="store_true", help="the --quick model and goals (a pipeline check)")
    args = parser.parse_args(argv)
    try:
        args.seed_list = parse_seeds(args.seeds)
    except ValueError as exc:
        parser.error(str(exc))
    args.arm_list = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in args.arm_list if a not in ARMS]
    if unknown or not args.arm_list:
        parser.error(f"unknown arm(s) {unknown}; known: {', '.join(ARMS)}")
    if args.bank_size < 1 or args.episodes_per_task < 1:
        parser.error("--bank-size and --episodes-per-task must be >= 1")
    if args.smoke and (Path(args.out).resolve() == DEFAULT_OUT or Path(args.bank).resolve() == DEFAULT_BANK):
        parser.error("--smoke results are not the experiment's: give --out and --bank elsewhere")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _args(argv)
    if args.from_file:
        try:
            summary = summarize(read_results(Path(args.from_file)))
        except CeilingError as exc:
            raise SystemExit(f"bench/ceiling.py: {exc}") from None
        print(json.dumps(summary, sort_keys=False))
        print(table(summary), file=sys.stderr)
        return 0
    setup = prepare(args)
    n = len(args.seed_list)
    planned = {
        o: _r(minimal_detectable_effect(PLANNING_SD[o], n, alpha=ALPHA)) if n >= 1 else None for o in OUTCOMES
    }
    print(
        f"# design: {len(setup.searched)} searched goals, {len(setup.heldout)} held-out goals x "
        f"{args.episodes_per_task} episodes, bank {len(setup.bank)} ({setup.bank_id}), starting model "
        f"{setup.model} ({setup.model_digest}); MDE at 80% power, alpha 0.05, {n} seeds, planning SDs "
        f"{PLANNING_SD}: {planned}",
        file=sys.stderr,
        flush=True,
    )
    out = Path(args.out)
    try:
        run_missing(
            out,
            setup.design(),
            args.seed_list,
            args.arm_list,
            lambda seed, arm: run_arm(setup, seed, arm),
            log=lambda text: print(f"# {time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True),
        )
    except CeilingError as exc:
        raise SystemExit(f"bench/ceiling.py: {exc}") from None
    summary = summarize(read_results(out))
    print(json.dumps(summary))
    print(table(summary), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
