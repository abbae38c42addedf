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
- ``strategies``: the strategies that judged the iteration's pairs.

Rates are None where there is nothing to measure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.domain.events import FirstErrorMarked, PairFound


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
        }
    return out


async def load_critic_metrics(store: Any, run_id: str) -> dict[int, dict[str, Any]]:
    """``critic_metrics`` of a run's pairs, read from the store (``load_judged``)."""
    return critic_metrics(await load_judged(store, run_id))


async def load_judged(store: Any, run_id: str) -> list[tuple[PairFound, FirstErrorMarked]]:
    """A run's critiqued pairs: the ``pairs`` read model lists the run's pair ids; each pair stream
    holds its PairFound and FirstErrorMarked (pairs not critiqued yet are left out)."""
    from sqlalchemy import select

    from core.domain.ids import pair_stream
    from core.store.tables import pairs

    async with store.engine.connect() as conn:
        pair_ids = (
            (
                await conn.execute(
                    select(pairs.c.pair_id).where(pairs.c.run_id == run_id).order_by(pairs.c.pair_id)
                )
            )
            .scalars()
            .all()
        )
    judged: list[tuple[PairFound, FirstErrorMarked]] = []
    for pair_id in pair_ids:
        found: PairFound | None = None
        marked: FirstErrorMarked | None = None
        for recorded in await store.read_stream(pair_stream(pair_id)):
            event = recorded.event
            if isinstance(event, PairFound):
                found = event
            elif isinstance(event, FirstErrorMarked):
                marked = event
        if found is not None and marked is not None:
            judged.append((found, marked))
    return judged


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
    return "\n".join(lines) + "\n"
