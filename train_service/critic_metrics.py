"""Owns the critic's measured quality per iteration: how often its transition point t' is the
environment oracle's first error, how far off it is, and how often it fell back to the last action.

Computed from the stored events only (``PairFound`` + ``FirstErrorMarked`` of a run's pairs), so a
finished run can be re-measured at any time. Per iteration:

- ``pairs``: critiqued pairs; ``fallback_share``: share whose t' fell back to the last action because
  nothing was judged bad (the Direct-Revision case; a critic at 1.0 IS Direct-Revision);
- ``oracle_pairs``: pairs the oracle judged (it found a first error; TextCraft only);
- ``exact_match``: share of those whose t' equals the oracle's index; ``mean_abs_distance``: mean
  ``|t' - oracle|`` in actions; ``direct_exact_match``: the same share for the Direct-Revision
  baseline (t' = the bad path's last action) on the same pairs, side by side; ``first_step_match``:
  the same share for the trivial critic that always blames the first action after the divergence
  (the deepest-common-ancestor pairing makes that action the oracle's first error on most pairs, so
  a critic that answers Bad to everything scores this; a critic worth its cost must beat it);
- ``strategies``: the strategies that judged the iteration's pairs;
- ``actions_after_divergence``: the histogram of the pairs' bad actions after the divergence
  (``{"1": n, "2": n, ...}``, all critiqued pairs);
- ``split``: t' = oracle shares of every critic ON THE SAME PAIRS, for the pairs with one action
  after the divergence (``"1"``: every critic names that action, so they cannot differ), with two
  or more (``"2+"``: where they can) and for all (``"all"``); each holds ``pairs`` (oracle pairs in
  the group) and the share of ``critic`` (the run's strategy; ``first`` by default), ``model`` (the
  model strategy, the actor as judge: the critic itself when the run's strategy is ``model``, else
  ``FirstErrorMarked.baselines["model"]``), ``reflect`` (the reflect strategy with the same model:
  ``FirstErrorMarked.baselines``; None where a pair of the group lacks either),
  ``rules`` (invalid actions and loops, last action when none fires), ``direct`` (Direct-Revision:
  the last action) and ``first`` (the first action after the divergence). ``BASELINE_CRITICS``
  lists the baselines. ``versus`` holds, per baseline, the paired comparison on those same pairs:
  ``critic_only`` (pairs the critic gets right and the baseline not), ``baseline_only`` (the
  reverse) and ``p`` (exact McNemar, ``core.domain.stats.mcnemar_exact``): a share difference that
  rests on a pair or two is no difference.

Rates are None where there is nothing to measure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from core.domain.critic import rule_verdicts, transition_index
from core.domain.events import FirstErrorMarked, PairFound
from core.domain.stats import mcnemar_exact
from core.store.pair_repository import PairRepository
from core.store.ports import EventStore

BASELINE_CRITICS = ("model", "reflect", "rules", "direct", "first")
GROUPS = ("1", "2+", "all")


def actions_after_divergence(pair: PairFound) -> int:
    return len(pair.bad.steps) - pair.shared_steps


def critic_transitions(pair: PairFound, marked: FirstErrorMarked) -> dict[str, int | None]:
    """t' of the run's critic and of every baseline on ``pair`` (see the module docstring)."""
    n, shared = len(pair.bad.steps), pair.shared_steps
    reflect = marked.transition_index if marked.strategy == "reflect" else marked.baselines.get("reflect")
    model = marked.transition_index if marked.strategy == "model" else marked.baselines.get("model")
    return {
        "critic": marked.transition_index,
        "model": model,
        "reflect": reflect,
        "rules": transition_index(rule_verdicts(pair.bad.steps, start=shared), n, shared),
        "direct": n - 1,
        "first": shared,
    }


def split_matches(rows: Sequence[tuple[PairFound, FirstErrorMarked]]) -> dict[str, dict[str, Any]]:
    """``split`` of the module docstring, over ``rows`` (pairs without an oracle index are left out)."""
    with_oracle = [(p, m) for p, m in rows if m.oracle_index is not None]
    out: dict[str, dict[str, Any]] = {}
    for group in GROUPS:
        members = [
            (p, m)
            for p, m in with_oracle
            if group == "all" or (actions_after_divergence(p) == 1) == (group == "1")
        ]
        entry: dict[str, Any] = {"pairs": len(members)}
        right: dict[str, list[bool] | None] = {}
        for critic in ("critic", *BASELINE_CRITICS):
            chosen = [(critic_transitions(p, m)[critic], m.oracle_index) for p, m in members]
            known = members and all(t is not None for t, _ in chosen)
            right[critic] = [t == o for t, o in chosen] if known else None
            entry[critic] = sum(right[critic] or ()) / len(chosen) if known else None
        entry["versus"] = _versus(right)
        out[group] = entry
    return out


def _versus(right: dict[str, list[bool] | None]) -> dict[str, dict[str, Any]]:
    """Per baseline: pairs only the critic / only the baseline gets right, and McNemar's exact p."""
    ours = right.get("critic")
    out: dict[str, dict[str, Any]] = {}
    for baseline in BASELINE_CRITICS:
        theirs = right.get(baseline)
        if ours is None or theirs is None:
            continue
        only_critic = sum(a and not b for a, b in zip(ours, theirs, strict=True))
        only_baseline = sum(b and not a for a, b in zip(ours, theirs, strict=True))
        out[baseline] = {
            "critic_only": only_critic,
            "baseline_only": only_baseline,
            "p": round(mcnemar_exact(only_critic, only_baseline), 4),
        }
    return out


def critic_metrics(judged: Sequence[tuple[PairFound, FirstErrorMarked]]) -> dict[int, dict[str, Any]]:
    """Per iteration metrics (module docstring) from (pair, its FirstErrorMarked) tuples."""
    by_iteration: dict[int, list[tuple[PairFound, FirstErrorMarked]]] = {}
    for pair, marked in judged:
        if marked.pair_id != pair.pair_id:
            raise ValueError(f"FirstErrorMarked of {marked.pair_id} given with pair {pair.pair_id}")
        by_iteration.setdefault(pair.iteration, []).append((pair, marked))
    out: dict[int, dict[str, Any]] = {}
    for iteration, rows in sorted(by_iteration.items()):
        with_oracle = [(p, m) for p, m in rows if m.oracle_index is not None]
        exact = sum(m.transition_index == m.oracle_index for _, m in with_oracle)
        direct = sum(len(p.bad.steps) - 1 == m.oracle_index for p, m in with_oracle)
        first_step = sum(p.shared_steps == m.oracle_index for p, m in with_oracle)
        distance = sum(abs(m.transition_index - (m.oracle_index or 0)) for _, m in with_oracle)
        n = len(with_oracle)
        out[iteration] = {
            "pairs": len(rows),
            "fallback_share": sum(m.fallback for _, m in rows) / len(rows),
            "oracle_pairs": n,
            "exact_match": exact / n if n else None,
            "mean_abs_distance": distance / n if n else None,
            "direct_exact_match": direct / n if n else None,
            "first_step_match": first_step / n if n else None,
            "strategies": sorted({m.strategy for _, m in rows}),
            "actions_after_divergence": _histogram(actions_after_divergence(p) for p, _ in rows),
            "split": split_matches(rows),
        }
    return out


def _histogram(values: Iterable[int]) -> dict[str, int]:
    counts: dict[int, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return {str(k): counts[k] for k in sorted(counts)}


async def load_critic_metrics(store: EventStore, run_id: str) -> dict[int, dict[str, Any]]:
    """``critic_metrics`` of a run's pairs, read from the store (``load_judged``)."""
    return critic_metrics(await load_judged(store, run_id))


async def load_judged(store: EventStore, run_id: str) -> list[tuple[PairFound, FirstErrorMarked]]:
    """A run's critiqued pairs, each PairFound with the critic's own FirstErrorMarked (pairs not
    critiqued yet are left out): ``PairRepository.judged``."""
    return await PairRepository(store).judged(run_id)


def _fmt(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def critic_markdown(metrics: dict[Any, dict[str, Any]]) -> str:
    """The report's critic section (empty string when no pair was critiqued)."""
    if not metrics:
        return ""
    lines = [
        "## Critic (first error)",
        "",
        "t' against the environment oracle's first error (TextCraft: the first step after the divergence "
        "that is rejected or takes no step toward any plan the expert solver accepts); fallback: nothing "
        "judged bad, t' = the last action (Direct-Revision); direct / first step: the exact-match rate "
        "on the same pairs of Direct-Revision and of always blaming the first action after the divergence.",
        "",
        "| iteration | strategy | pairs | fallback | oracle pairs | exact match | mean distance "
        "| direct | first step |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for iteration in sorted(metrics, key=int):
        m = metrics[iteration]
        cells = (
            ", ".join(m.get("strategies") or []) or "-",
            _fmt(m.get("pairs")),
            _fmt(m.get("fallback_share")),
            _fmt(m.get("oracle_pairs")),
            _fmt(m.get("exact_match")),
            _fmt(m.get("mean_abs_distance"), 2),
            _fmt(m.get("direct_exact_match")),
            _fmt(m.get("first_step_match")),
        )
        lines.append(f"| {iteration} | " + " | ".join(cells) + " |")
    lines += _all_fallback_warnings(metrics)
    lines += _split_markdown(metrics)
    return "\n".join(lines) + "\n"


def _all_fallback_warnings(metrics: dict[Any, dict[str, Any]]) -> list[str]:
    """A plain line for each iteration whose model critic judged no step Bad on any pair: its t' was
    the last action on every pair, so that iteration's revisions are Direct-Revision's, not
    Agent-R's (what an instruct model that was never taught the judge question does, docs/critic.md)."""
    lines = []
    for iteration in sorted(metrics, key=int):
        m = metrics[iteration]
        if "model" in (m.get("strategies") or []) and m.get("pairs") and m.get("fallback_share") == 1.0:
            lines.append(
                f"**Iteration {iteration}: the model critic judged no step Bad on any of its {m['pairs']} "
                "pairs, so every t' fell back to the last action: this iteration's revision samples are "
                "Direct-Revision's.** A model that cannot answer the judge question does this "
                "(docs/critic.md); `critic.strategy: reflect` needs no judge answers."
            )
    return ["", *lines] if lines else []


def _split_markdown(metrics: dict[Any, dict[str, Any]]) -> list[str]:
    """The critic-vs-baselines table, split by actions after the divergence, and the histogram."""
    rows = [(iteration, metrics[iteration]) for iteration in sorted(metrics, key=int)]
    rows = [(i, m) for i, m in rows if m.get("split")]
    if not rows:
        return []
    lines = [
        "",
        "t' = oracle share of each critic on the SAME pairs, by bad actions after the divergence (on a "
        "pair with one, every critic names that action). critic: the run's strategy (first by default); "
        "model: the actor judging each action (the paper's critic); reflect: the "
        "likelihood of a reflection after each step, same model; rules: invalid actions and loops; "
        "direct: the last action (Direct-Revision); first: the first action after the divergence.",
        "",
        "| iteration | actions after divergence | oracle pairs | critic | model | reflect | rules | direct "
        "| first |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for iteration, m in rows:
        for group in GROUPS:
            g = m["split"].get(group) or {}
            label = {"1": "1", "2+": ">= 2", "all": "all"}[group]
            cells = [label, _fmt(g.get("pairs"))] + [_fmt(g.get(c)) for c in ("critic", *BASELINE_CRITICS)]
            lines.append(f"| {iteration} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "On the pairs with >= 2 actions after the divergence, the critic against each baseline, pair by "
        "pair: right where the baseline is not / the reverse (exact McNemar p; a difference of a pair "
        "or two is none):",
        "",
    ]
    for iteration, m in rows:
        versus = (m["split"].get("2+") or {}).get("versus") or {}
        shown = "; ".join(
            f"{name} {v['critic_only']} / {v['baseline_only']} (p {v['p']:.2f})" for name, v in versus.items()
        )
        lines.append(f"- iteration {iteration}: {shown or '-'}")
    lines += ["", "Pairs by bad actions after the divergence (all critiqued pairs):", ""]
    for iteration, m in rows:
        histogram = m.get("actions_after_divergence") or {}
        shown = ", ".join(f"{k}: {v}" for k, v in histogram.items()) or "-"
        lines.append(f"- iteration {iteration}: {shown}")
    return lines
