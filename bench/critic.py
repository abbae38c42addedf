"""Benchmark: the prefix-sharing model critic against the naive one-prompt-per-step critic.

On the tiny Llama model (built locally, as the tests do), judge every step of 20-step TextCraft paths
(real observations) with the SAME prompts and labels three ways, side by side in one run:

- ours: ``PrefixScorer`` with KV reuse (the shared history is computed once per path);
- naive: ``PrefixScorer`` with reuse off (one full prompt per step, same code otherwise);
- port-naive: ``HFPolicy.score_labels`` called once per step (what a plain Policy client would do).

Early exit is OFF so every step is judged (the full cost). Prints one JSON line per comparison:
tokens processed and wall time, ratio = baseline / ours (higher is better).

``first_error_match``: the critic's quality, not its cost. It runs the real demo (``agentr run
--iterations 1 --data-only``: the default demo config, tiny model, warm start with its judge
examples, MCTS on the demo goals; its pairs judged by the ``model`` critic, re-judged with the
iteration-0 actor where the run's critic is the default ``first``) in ``--home`` (a fresh one by
default), then
reads the stored FirstErrorMarked events of iteration 0: "ours" is the share of pairs whose t'
equals the TextCraft oracle's first error, "baseline" the same share for Direct-Revision (t' = the
last action) on the same pairs; ratio = ours / baseline. ``first_error_match_two_plus_actions``:
the same on the pairs whose bad path has two or more actions after the divergence (on a pair with
one, every critic names that action, Direct-Revision included). The same pairs are then judged by
the ``reflect`` strategy with the same model (``first_error_match_reflect``) and by the ``value``
strategy, with an ArCHer critic trained on that iteration's trees (``first_error_match_value``;
``bench/learners.py``).
``first_error_match_multi``: on the pairs with two or more actions after the divergence (where
critics can differ at all), the model critic ("ours") against the BEST of the trivial critics on
the same pairs - first-after-divergence, last action (Direct-Revision) and rules ("baseline") -
with the pair count and each critic's share (and reflect's, which the critic worker records on every
search pair: ``FirstErrorMarked.baselines``); ratio = ours / baseline.
Also printed: the model critic's fallback share (lower is better; baseline = Direct-Revision's 1.0);
``first_error_match_vs_first_step``: the same match rate against the trivial critic that always
blames the first action after the divergence (the pairing makes that the oracle's answer on most
pairs, so a critic answering Bad to everything scores it); ``judge_accuracy_unseen_tasks``: the
model's Good/Bad accuracy on oracle-labelled judge examples of 8 goals it never saw, against always
answering the more common label (the examples' mistakes are the run's mode: valid actions only
where its search constrains them, ``train_service.judge_data.judge_mistakes``).
Retention (``*_after_sft_judge_mix_vs_agent_only``): iteration 0's SFT run twice from the same model
with the run's trainer settings, on the run's dataset (agent samples + the warm start's judge set
as general data, ``train_service.judge_data.with_judge_general``) and on its agent samples alone;
then each model's judge accuracy on unseen goals, its ``model`` critic's match and fallback on the
iteration-0 pairs. Ours = with the judge mix.
``--goals multi``: the same match measures on pairs the critic may have more to find in: the
default demo's warm-started model (not retrained) searches ``MULTI_INGREDIENT_GOALS`` (boats,
fences, signs and fence gates of planks and sticks, 4-8 actions, never searched, held out or judged
in the demo) at depth 10, one data-only iteration per ``--seeds`` seed, and the pairs of all seeds
are pooled; the metrics' names end in ``_multi_ingredient`` (value and retention, when not
skipped, use the first seed's run). A completed run of the same configuration in ``--home`` is
reused, so seeds can be added later.
``--model DIR --warm-start-steps N --judge-phase-steps N [--max-tasks N]`` (demo goals): the same
match measures with a pretrained actor as its own critic (SmolLM2-135M-Instruct imported by
``agentr model import``), warm-started on the demo's expert episodes and taught the judge question by
a judge phase of its own; the metrics' names end in ``_given_model``.
Usage: python bench/critic.py [--quick] [--only cost|match] [--home DIR (reuse a warm start)]
       [--skip value,retention] [--goals demo|multi] [--seeds 0,1,2]
       [--model DIR --warm-start-steps N --judge-phase-steps N --max-tasks N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from core.store.ports import EventStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


async def build_paths(n_paths: int, length: int) -> list:
    from core.domain.trajectory import Step, Trajectory
    from core.envs.textcraft import TextCraftEnv
    from core.envs.textcraft.solver import solve

    env = TextCraftEnv(distractors=2)
    paths = []
    deep = [t for t in env.task_ids("test") if len(solve(env.goal_of(t))) >= 3]
    for task_id in deep[:n_paths]:
        task = await env.reset(task_id)
        gold = solve(env.goal_of(task_id))
        actions = (gold[:-1] + ["inventory", "get 1 stick", "craft 1 torch using 1 stick"] * length)[:length]
        steps = []
        for action in actions:
            result = await env.step(action)
            steps.append(Step(f"I will {action}.", action, result.observation, result.reward, result.done))
        paths.append(Trajectory(task=task, instruction=env.instruction, steps=tuple(steps), reward=0.0))
    return paths


async def main(quick: bool) -> None:
    import torch

    from core.llm.hf import HFPolicy
    from core.llm.tiny import build_tiny_model
    from critic_service.critic import LABEL_TEXTS, judge_batched, judge_conversation, judge_prefix

    torch.set_num_threads(1)
    n_paths, length = (2, 20) if quick else (6, 20)
    paths = await build_paths(n_paths, length)
    corpus = [judge_conversation(p, len(p.steps) - 1) for p in paths]
    texts = [m.content for conv in corpus for m in conv] * 4
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_tiny_model(
            Path(tmp) / "tiny", texts, hidden=128 if quick else 256, layers=2 if quick else 4
        )
        policy = HFPolicy.from_folder(folder, device="cpu")
        steps = list(range(length))
        await judge_prefix(policy, paths[0], steps[:2], early_exit=False)  # warm-up

        ours_t = naive_t = port_t = 0.0
        ours_tok = naive_tok = port_tok = 0
        for path in paths:
            start = time.perf_counter()
            got, tokens = await judge_prefix(policy, path, steps, early_exit=False, reuse=True)
            ours_t += time.perf_counter() - start
            ours_tok += tokens
            start = time.perf_counter()
            base, tokens = await judge_prefix(policy, path, steps, early_exit=False, reuse=False)
            naive_t += time.perf_counter() - start
            naive_tok += tokens
            start = time.perf_counter()
            for step in steps:
                _, used = await judge_batched(policy, path, [step])
                port_tok += used
            port_t += time.perf_counter() - start
            assert [v.label for v in got] == [v.label for v in base], "prefix reuse changed a verdict"
        assert len(LABEL_TEXTS) == 3
        for metric, ours, baseline, unit in (
            (f"critic_tokens_{length}step_prefix_vs_naive", ours_tok, naive_tok, "tokens"),
            (f"critic_time_{length}step_prefix_vs_naive", ours_t, naive_t, "s"),
            (f"critic_tokens_{length}step_prefix_vs_score_labels_per_step", ours_tok, port_tok, "tokens"),
            (f"critic_time_{length}step_prefix_vs_score_labels_per_step", ours_t, port_t, "s"),
        ):
            ratio = baseline / ours if ours else float("inf")
            print(json.dumps({"metric": metric, "ours": round(ours, 4), "baseline": round(baseline, 4),
                              "unit": unit, "ratio": round(ratio, 2)}))  # fmt: skip


def _line(metric: str, ours: float, baseline: float, unit: str, ratio: float | None = None) -> None:
    if ratio is None:
        ratio = ours / baseline if baseline else float("inf") if ours else 0.0
    print(json.dumps({"metric": metric, "ours": round(ours, 4), "baseline": round(baseline, 4),
                      "unit": unit, "ratio": round(ratio, 2)}), flush=True)  # fmt: skip


def _several_actions(judged: list[Any]) -> list[Any]:
    """The pairs whose bad path has two or more actions after the divergence: on a pair with ONE,
    every critic (Direct-Revision and the first-step critic included) names the same action."""
    return [(p, m) for p, m in judged if len(p.bad.steps) - p.shared_steps >= 2]


async def _critique_all(judged: list[Any], config: Any, policy: Any) -> list[Any]:
    """The same pairs judged again by ``config``'s strategy with ``policy`` (oracle kept)."""
    from core.domain.events import FirstErrorMarked
    from critic_service.critic import critique

    out = []
    for pair, marked in judged:
        result = await critique(config, pair.bad, pair.shared_steps, policy)
        out.append((pair, FirstErrorMarked(
            marked.pair_id, config.strategy, result.transition_index, result.verdicts,
            fallback=result.fallback, oracle_index=marked.oracle_index,
        )))  # fmt: skip
    return out


# Goals for ``--goals multi``: wooden products with two ingredients (planks and sticks) or two
# crafts of planks (boats), so several orders are progress and the divergence action is progress
# more often than on the demo's one-ingredient goals (docs/critic.md, "Why first-after-divergence is
# so hard to beat"). Neither searched, held out, nor among the warm start's judge goals or the
# judge accuracy's unseen ones (``multi_ingredient_goals`` checks this against the plan).
MULTI_INGREDIENT_GOALS: tuple[str, ...] = (
    *(f"goal:{w}_boat" for w in ("birch", "spruce", "acacia", "dark_oak")),
    *(f"goal:{w}_fence" for w in ("oak", "spruce", "jungle", "dark_oak", "crimson")),
    *(f"goal:{w}_sign" for w in ("spruce", "jungle", "acacia", "crimson", "warped")),
    *(f"goal:{w}_fence_gate" for w in ("oak", "jungle", "acacia", "warped")),
)
MULTI_INGREDIENT_DEPTH = 10  # the longest goal (a fence gate) takes 8 actions


def multi_ingredient_goals(config: Any) -> list[str]:
    """``MULTI_INGREDIENT_GOALS``, checked against the demo run ``config`` (a RunConfig): ValueError
    when one is a searched or held-out goal, or its item is one of the judge set's goals."""
    from core.envs.registry import open_env
    from train_service.judge_data import JUDGE_TASKS, judge_task_ids, run_exclusions

    env = open_env(config.env)
    excluded = run_exclusions(env, config, list(config.tasks))
    judged = judge_task_ids(env, excluded, JUDGE_TASKS)
    judged += judge_task_ids(env, excluded + judged, 8)  # judge_accuracy's unseen goals
    judge_items = {env.goal_of(t) for t in judged}
    clash = [g for g in MULTI_INGREDIENT_GOALS if g in excluded or env.goal_of(g) in judge_items]
    if clash:
        raise ValueError(f"multi-ingredient goals already used by the demo run: {clash}")
    return list(MULTI_INGREDIENT_GOALS)


def multi_ingredient_config(folder: Path, seed: int) -> dict[str, Any]:
    """The demo's warm-started model (the default plan's, built once and cached under ``folder``),
    then ONE data-only iteration (search, model critic, splice) on ``MULTI_INGREDIENT_GOALS`` with
    search depth ``MULTI_INGREDIENT_DEPTH``, run seed ``seed``: the run's configuration."""
    from agentr.cli.demo import RunOptions, plan_run
    from agentr.cli.embedded_run import embedded_settings
    from agentr.cli.warm_start import prepare_model
    from core.domain.config import RunConfig

    _, where = embedded_settings(folder)
    plan = plan_run(RunOptions(iterations=1, data_only=True))
    goals = multi_ingredient_goals(RunConfig.from_data(plan.config))
    model = prepare_model(plan, where, 0)  # the warm start's own seed stays the demo's
    search = {**plan.config["search"], "max_depth": MULTI_INGREDIENT_DEPTH}
    return {**plan.config, "model": model, "tasks": goals, "max_tasks": None, "search": search, "seed": seed}


async def multi_ingredient_runs(folder: Path, seeds: list[int]) -> list[str]:
    """One run of ``multi_ingredient_config`` per seed (a completed run of the same configuration
    in ``folder``'s store is reused): their run ids."""
    from agentr.cli.embedded_run import embedded_settings, run_config
    from core.domain.config import RunConfig
    from core.domain.events import RunCompleted, RunRequested
    from core.store.factory import open_store

    def same_settings(config: dict[str, Any]) -> dict[str, Any]:
        """A run configuration without what a run records of its machine ("runtime")."""
        return {k: v for k, v in RunConfig.from_data(config).to_data().items() if k != "runtime"}

    settings, where = embedded_settings(folder)
    run_ids = []
    for seed in seeds:
        config = await asyncio.to_thread(multi_ingredient_config, folder, seed)
        wanted = same_settings(config)
        store = await open_store(settings.effective_database_url, create_tables=True)
        try:
            done = {r.event.run_id for r in await store.read_all(event_types=["RunCompleted"], limit=10_000)
                    if isinstance(r.event, RunCompleted)}  # fmt: skip
            same = [
                r.event.run_id
                for r in await store.read_all(event_types=["RunRequested"], limit=10_000)
                if isinstance(r.event, RunRequested)
                and r.event.run_id in done
                and same_settings(r.event.config) == wanted
            ]
        finally:
            await store.close()
        if same:
            print(f"# seed {seed}: completed run {same[-1]} of this configuration reused", file=sys.stderr)
            run_ids.append(same[-1])
            continue
        code, run_id = await asyncio.to_thread(run_config, settings, where, config, show_report=False)
        if code != 0:
            raise SystemExit(f"the multi-ingredient run {run_id} failed ({code}); see {where}/runs/{run_id}")
        run_ids.append(run_id)
    return run_ids


async def first_error_match(
    quick: bool,
    home: str,
    skip: set[str],
    goals: str = "demo",
    seeds: tuple[int, ...] = (0,),
    run_args: tuple[str, ...] = (),
) -> None:
    import os
    import subprocess

    from core.domain.config import RunConfig
    from core.domain.events import IterationStarted, RunRequested
    from core.domain.ids import run_stream
    from core.llm.hf import HFPolicy
    from core.runtime.settings import load_settings
    from core.store.factory import open_store
    from critic_service.critic import CriticConfig
    from train_service.critic_metrics import critic_metrics, load_judged

    folder = Path(home or tempfile.mkdtemp(prefix="agentr-bench-critic-"))
    tag = "" if goals == "demo" else "_multi_ingredient"  # the metrics' names say which goals
    if run_args:  # a given --model (its own warm start and judge phase): the names say so
        tag += "_given_model"
    started = time.perf_counter()
    run_ids: list[str] = []
    if goals == "multi":
        if quick:
            raise SystemExit("--goals multi runs the default demo's model; --quick has no such plan")
        run_ids = await multi_ingredient_runs(folder, list(seeds))
    else:
        agentr = Path(sys.executable).with_name("agentr")
        command = [str(agentr), "run", "--iterations", "1", "--data-only", "--home", str(folder)]
        if quick:
            command.append("--quick")
        command += run_args
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        done = await asyncio.to_thread(subprocess.run, command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"agentr run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    seconds = time.perf_counter() - started
    print(f"# {goals} run (warm start + iteration 0 search + critic) took {seconds:.0f}s", file=sys.stderr)
    settings = load_settings(home=folder, redis_url=None)
    store = await open_store(settings.effective_database_url)
    try:
        runs = await store.read_all(event_types=["RunRequested"], limit=10_000)
        requested = [r.event for r in runs if isinstance(r.event, RunRequested)]
        run_ids = run_ids or [requested[-1].run_id]  # the demo: the run just made
        run_id = run_ids[0]
        config = RunConfig.from_data(next(e.config for e in requested if e.run_id == run_id))
        judged = [(p, m) for rid in run_ids for p, m in await load_judged(store, rid) if p.iteration == 0]
        if judged and any(m.strategy != "model" for _, m in judged):
            # the run's critic is the default first-after-divergence: this bench measures the MODEL
            # critic, so the same pairs are judged again by it with the iteration-0 actor
            history = [r.event for r in await store.read_stream(run_stream(run_id))]
            actor = next(e.model_ref for e in history if isinstance(e, IterationStarted) and e.iteration == 0)
            judged = await _critique_all(
                judged, CriticConfig(strategy="model"), HFPolicy.from_folder(actor, device="cpu")
            )
        metrics = critic_metrics(judged).get(0)
        if not metrics or not metrics["oracle_pairs"]:
            raise SystemExit(f"the demo's iteration 0 produced no pair the oracle could judge: {metrics}")
        oracle = [(p, m) for p, m in judged if m.oracle_index is not None]
        several = _several_actions(oracle)
        print(
            f"# iteration 0 of run(s) {', '.join(run_ids)} (critic {config.critic}): {json.dumps(metrics)}",
            file=sys.stderr,
        )
        one = len(oracle) - len(several)
        print(
            f"# {len(oracle)} pairs the oracle judged: {one} with ONE action after the divergence "
            f"(every critic names it), {len(several)} with two or more",
            file=sys.stderr,
        )
        # ours: the model critic's t' = the oracle's; baseline: Direct-Revision's (the last action)
        _line("first_error_match" + tag, metrics["exact_match"], metrics["direct_exact_match"], "share")
        if several:  # where the critics can disagree at all
            m = critic_metrics(several)[0]
            _line(
                "first_error_match_two_plus_actions" + tag, m["exact_match"], m["direct_exact_match"], "share"
            )
        # the trivial critic that blames the first action after the divergence, on the same pairs
        _line(
            "first_error_match_vs_first_step" + tag,
            metrics["exact_match"],
            metrics["first_step_match"],
            "share",
        )
        multi_line(metrics["split"]["2+"], "first_error_match_multi" + tag)
        fallback = metrics["fallback_share"]
        _line(
            "critic_fallback_share" + tag,
            fallback,
            1.0,
            "share",
            ratio=1.0 / fallback if fallback else float("inf"),
        )
        history = [r.event for r in await store.read_stream(run_stream(run_id))]
        model_ref = next(e.model_ref for e in history if isinstance(e, IterationStarted) and e.iteration == 0)
        policy = HFPolicy.from_folder(model_ref, device="cpu")  # the iteration-0 actor and critic
        # the reflect strategy on the same pairs, with the same (warm-started) model
        reflect = critic_metrics(await _critique_all(judged, CriticConfig(strategy="reflect"), policy))[0]
        print(f"# iteration 0 reflect metrics: {json.dumps(reflect)}", file=sys.stderr)
        _line(
            "first_error_match_reflect" + tag, reflect["exact_match"], reflect["direct_exact_match"], "share"
        )
        if "value" not in skip:
            # the value strategy (ArCHer's advantage) on the same pairs: bench/learners.py trains its critic
            from learners import value_critic_match

            value = await value_critic_match(store, run_id, model_ref, folder / "value-critic", quick)
            print(f"# iteration 0 value metrics: {json.dumps(value)}", file=sys.stderr)
            _line("first_error_match_value" + tag, value["exact_match"], value["direct_exact_match"], "share")
        accuracy, majority = await judge_accuracy(policy, config)
        _line("judge_accuracy_unseen_tasks" + tag, accuracy, majority, "share")
        if "retention" not in skip:
            await judge_retention(settings, store, run_id, model_ref, oracle, folder / "retention")
    finally:
        await store.close()


def given_model_args(
    model: str,
    warm_start_steps: int | None,
    judge_phase_steps: int | None,
    max_tasks: int | None,
    goals: str = "demo",
    quick: bool = False,
) -> tuple[str, ...]:
    """The ``agentr run`` flags of ``--model`` (and its warm start, judge phase and goal cap), checked:
    a given model runs the demo goals' match only, and the other three need it."""
    if not model:
        if (warm_start_steps, judge_phase_steps, max_tasks) != (None, None, None):
            raise ValueError("--warm-start-steps, --judge-phase-steps and --max-tasks go with --model")
        return ()
    if goals != "demo" or quick:
        raise ValueError("--model: the demo goals' match only (not --goals multi, not --quick)")
    args: tuple[str, ...] = ("--model", model)
    for flag, value in (
        ("--warm-start-steps", warm_start_steps),
        ("--judge-phase-steps", judge_phase_steps),
        ("--max-tasks", max_tasks),
    ):
        if value is not None:
            args += (flag, str(value))
    return args


def multi_line(multi: dict[str, Any], metric: str = "first_error_match_multi") -> None:
    """``first_error_match_multi``: the critic against the best trivial critic on the pairs with
    >= 2 actions after the divergence (``critic_metrics``' ``split["2+"]``), with the pair count."""
    trivial = {name: multi.get(name) for name in ("first", "direct", "rules")}
    known = {k: v for k, v in trivial.items() if v is not None}
    if not multi.get("pairs") or multi.get("critic") is None or not known:
        print(f"# {metric}: no oracle pair with two or more actions after the divergence", file=sys.stderr)
        return
    best = max(known, key=lambda k: known[k])
    ours, baseline = float(multi["critic"]), float(known[best])
    line = {
        "metric": metric,
        "ours": round(ours, 4),
        "baseline": round(baseline, 4),
        "unit": "share of pairs with t' = oracle",
        "ratio": round(ours / baseline, 2) if baseline else None,
        "pairs": multi["pairs"],
        "baseline_critic": best,
        "first": trivial["first"],
        "last_action": trivial["direct"],
        "rules": trivial["rules"],
        "reflect": multi.get("reflect"),
        # pair by pair against the best baseline: right where it is not / the reverse, McNemar's p
        "discordant": (multi.get("versus") or {}).get(best),
    }
    print(json.dumps(line), flush=True)


async def judge_retention(
    settings: Any, store: EventStore, run_id: str, model_ref: str, judged: list[Any], folder: Path
) -> None:
    """Does the critic survive iteration 0's SFT? The iteration-0 dataset as the run builds it (its
    general data: the warm start's judge set, ``train_service.judge_data.with_judge_general``)
    against the same agent samples alone, each trained from the iteration-0 model with the run's
    trainer settings; then each model's judge accuracy on unseen goals and its ``model`` critic on
    the iteration-0 pairs, side by side (ours = with the judge mix)."""
    from core.domain.ids import run_stream
    from core.domain.runs import fold
    from core.formats.export import read_samples_jsonl, write_jsonl
    from core.llm.hf import HFPolicy
    from critic_service.critic import CriticConfig
    from train_service.celery_app import run_train_iteration
    from train_service.critic_metrics import critic_metrics
    from train_service.runs import RunEffects

    state = fold(run_id, [r.event for r in await store.read_stream(run_stream(run_id))])
    if not state.config.general_data:
        print("# retention: the run has no general data (no judge set to mix in): skipped", file=sys.stderr)
        return
    path, summary = await RunEffects(settings, store).write_dataset(state, 0, "bench-critic-retention")
    mixed = list(read_samples_jsonl(path))
    variants = {"judge_mix": mixed, "agent_only": [s for s in mixed if s.kind != "general"]}
    print(
        f"# retention: iteration-0 dataset {summary['samples']} (general = judge examples)", file=sys.stderr
    )
    results: dict[str, dict[str, Any]] = {}
    for name, samples in variants.items():
        data = folder / f"{name}.jsonl"
        data.parent.mkdir(parents=True, exist_ok=True)
        write_jsonl(data, samples, "samples")
        t0 = time.perf_counter()
        trained = await asyncio.to_thread(
            run_train_iteration, run_id=None, iteration=0, dataset_id=f"bench-critic:{name}:{len(samples)}",
            dataset_path=str(data), model_path=model_ref, out_dir=str(folder / name),
            config=state.config.sft_overrides(),
        )  # fmt: skip
        policy = HFPolicy.from_folder(trained["checkpoint"], device="cpu")
        accuracy, _ = await judge_accuracy(policy, state.config)
        marked = await _critique_all(judged, CriticConfig.from_data(state.config.critic), policy)
        several = _several_actions(marked)
        results[name] = {
            "judge_accuracy": accuracy,
            "all": critic_metrics(marked)[0],
            "several": critic_metrics(several)[0] if several else None,
        }
        reused = " (reused)" if trained.get("reused") else ""
        seconds = time.perf_counter() - t0
        print(
            f"# retention {name}: {len(samples)} samples, trained in {seconds:.0f}s{reused}: "
            f"{json.dumps(results[name])}",
            file=sys.stderr,
        )
    ours, base = results["judge_mix"], results["agent_only"]
    _line(
        "judge_accuracy_after_sft_judge_mix_vs_agent_only",
        ours["judge_accuracy"],
        base["judge_accuracy"],
        "share",
    )
    _line("first_error_match_after_sft_judge_mix_vs_agent_only",
          ours["all"]["exact_match"], base["all"]["exact_match"], "share")  # fmt: skip
    if ours["several"] and base["several"]:
        _line("first_error_match_two_plus_after_sft_judge_mix_vs_agent_only",
              ours["several"]["exact_match"], base["several"]["exact_match"], "share")  # fmt: skip
    fo, fb = ours["all"]["fallback_share"], base["all"]["fallback_share"]
    _line(
        "critic_fallback_after_sft_judge_mix_vs_agent_only",
        fo,
        fb,
        "share",
        ratio=fb / fo if fo else float("inf"),
    )


async def judge_accuracy(policy: Any, config: Any) -> tuple[float, float]:
    """The model critic's label accuracy on judge examples of 8 tasks it never trained, searched or was
    evaluated on (fresh TextCraft goals, labelled by the oracle), and the accuracy of always answering
    the most common label."""
    from core.envs.registry import open_env
    from critic_service.critic import judge_prefix
    from train_service.judge_data import (
        JUDGE_TASKS,
        judge_examples,
        judge_mistakes,
        judge_task_ids,
        run_exclusions,
    )

    env = open_env(config.env)
    excluded = run_exclusions(env, config, list(config.tasks))
    trained = judge_task_ids(env, excluded, JUDGE_TASKS)
    # the run's own mistake mode (valid-action mistakes where its search constrains actions)
    unseen = judge_task_ids(env, excluded + trained, 8)
    examples = judge_examples(env, unseen, seed=1, mistakes=judge_mistakes(config))
    right = 0
    for example in examples:
        (verdict,), _ = await judge_prefix(policy, example.path, [example.step_index], early_exit=False)
        right += verdict.label == example.label
    majority = max(sum(e.label == "good" for e in examples), sum(e.label == "bad" for e in examples))
    return right / len(examples), majority / len(examples)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 paths on a smaller model (< 1 minute)")
    parser.add_argument("--only", choices=("cost", "match"), default=None, help="run one part only")
    parser.add_argument("--home", default="", help="agentr home for the demo run (reuses its warm start)")
    parser.add_argument(
        "--goals",
        choices=("demo", "multi"),
        default="demo",
        help="match: the demo's searched goals, or multi-ingredient goals (boats, fences, signs, gates)",
    )
    parser.add_argument(
        "--seeds",
        default="0",
        help="--goals multi: run seeds (comma-separated); the pairs of all are pooled",
    )
    parser.add_argument(
        "--skip", default="", help="comma-separated match parts to leave out: value, retention"
    )
    parser.add_argument(
        "--model", default="", help="match, demo goals: a local model folder as actor and critic"
    )
    parser.add_argument("--warm-start-steps", type=int, default=None, help="with --model: its warm start")
    parser.add_argument(
        "--judge-phase-steps", type=int, default=None, help="with --model: its judge phase (agentr run's)"
    )
    parser.add_argument("--max-tasks", type=int, default=None, help="with --model: demo goals searched")
    args = parser.parse_args()
    try:
        run_args = given_model_args(
            args.model, args.warm_start_steps, args.judge_phase_steps, args.max_tasks, args.goals, args.quick
        )
    except ValueError as exc:
        parser.error(str(exc))
    skip = {p.strip() for p in args.skip.split(",") if p.strip()}
    if skip - {"value", "retention"}:
        parser.error(f"--skip: unknown part(s) {sorted(skip - {'value', 'retention'})} (value, retention)")
    try:
        seeds = tuple(int(s) for s in args.seeds.split(",") if s.strip())
    except ValueError:
        parser.error(f"--seeds: comma-separated whole numbers, got {args.seeds!r}")
    if not seeds:
        parser.error("--seeds: at least one seed")
    if args.only in (None, "cost"):
        asyncio.run(main(args.quick))
    if args.only in (None, "match"):
        asyncio.run(first_error_match(args.quick, args.home, skip, args.goals, seeds, run_args))
