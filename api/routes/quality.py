"""Owns the data-quality dashboard route: one run iteration's critic and revision figures.

``GET /v1/runs/{run_id}/iterations/{iteration}/quality`` (scope ``read``, project-scoped: another
project's run is a 404) answers, for the iteration's critiqued pairs and revision samples:

* the run report's critic figures (``train_service.critic_metrics.critic_metrics`` over the same
  ``load_judged`` tuples: PairFound + the critic's own FirstErrorMarked, before any reviewer
  correction): critic-oracle agreement, mean distance, the Direct-Revision and first-step
  baselines, the fallback share and the histogram of bad actions after the divergence;
* the t' distribution: where the critic (and the oracle, when it judged) placed the first error,
  counted as the k-th action after the divergence (1 = the first one);
* every histogram of values (t', actions after the divergence, revision lengths) keeps its empty
  bins: one bin per value from the smallest to the largest, a missing one counting 0;
* verdict margins (``core.domain.review.review_signals``: the smallest best-minus-second label
  score of a pair's verdicts), binned, and how many fall under the review queue's threshold;
* revision lengths and the verified share of the iteration's revision samples (``samples`` read
  model).

Every rate is null where there is nothing to measure (no oracle verdict, no checked sample).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi import APIRouter, Depends, Path
from pydantic import BaseModel, Field

from api.deps import ApiServices, Principal, require, services
from api.errors import not_found
from api.routes.runs import RunId, run_row
from api.schemas import ERROR_RESPONSES
from core.domain.review import DEFAULT_MAX_MARGIN, review_signals
from core.store.queries import pairs as pair_reads
from core.store.queries import runs as run_reads
from core.store.queries import samples as sample_reads
from train_service.critic_metrics import actions_after_divergence, critic_metrics, load_judged

router = APIRouter(prefix="/v1", tags=["runs"], responses=ERROR_RESPONSES)

MARGIN_EDGES = (0.25, 0.5, 1.0, 2.0, 4.0)
"""Upper edges of the margin bins: [0, 0.25), [0.25, 0.5), ..., [4, +inf)."""


class Bin(BaseModel):
    label: str = Field(
        description="The bin: a value ('3') or a range ('0.5-1', '4+'); value bins run from the smallest "
        "value to the largest with none left out (an empty one counts 0)."
    )
    count: int


class TPrimeBin(BaseModel):
    label: str = Field(description="k: the k-th action after the divergence (1 = the first).")
    critic: int = Field(description="Pairs whose critic t' is that action.")
    oracle: int = Field(description="Pairs whose oracle first error is that action.")


class QualityOut(BaseModel):
    run_id: str
    iteration: int
    pairs: int = Field(description="The iteration's pairs (judged or not).")
    critiqued: int = Field(description="Pairs the critic judged (FirstErrorMarked).")
    strategies: list[str]
    oracle_pairs: int = Field(description="Critiqued pairs with an oracle first error.")
    agree: int = Field(description="Oracle pairs whose critic t' equals the oracle's first error.")
    agreement: float | None = Field(description="agree / oracle_pairs (the report's exact_match).")
    mean_abs_distance: float | None = Field(description="Mean |t' - oracle| in actions.")
    direct_exact_match: float | None = Field(description="The same share for t' = the last action.")
    first_step_match: float | None = Field(description="The same share for t' = the first action.")
    fallback: int = Field(description="Critiqued pairs whose t' fell back to the last action.")
    fallback_share: float | None
    uncertain: int = Field(description="Critiqued pairs with at least one 'uncertain' verdict.")
    t_prime: list[TPrimeBin]
    actions_after_divergence: list[Bin] = Field(description="Bad actions after the divergence.")
    margin_threshold: float = Field(description="The review queue's low-margin threshold.")
    margin_pairs: int = Field(description="Critiqued pairs whose verdicts carry label scores.")
    low_margin: int = Field(description="Pairs whose margin is under margin_threshold.")
    margins: list[Bin]
    revision_samples: int
    revision_length_mean: float | None
    revision_lengths: list[Bin] = Field(description="Revision samples by revision length (actions).")
    checked: int = Field(description="Revision samples the splice replayed (verified is set).")
    verified: int
    verified_share: float | None = Field(description="verified / checked.")


def _span(keys: Iterable[int]) -> list[int]:
    """Every integer from the smallest key to the largest: a histogram keeps its empty bins (counts
    of 1 and 5 are drawn with 2, 3 and 4 between them, not side by side)."""
    present = set(keys)
    return list(range(min(present), max(present) + 1)) if present else []


def _bins(values: Iterable[int]) -> list[Bin]:
    counts: dict[int, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return [Bin(label=str(k), count=counts.get(k, 0)) for k in _span(counts)]


def _margin_labels() -> list[str]:
    lows = (0.0, *MARGIN_EDGES)
    return [f"{lo:g}-{hi:g}" for lo, hi in zip(lows, MARGIN_EDGES, strict=False)] + [f"{MARGIN_EDGES[-1]:g}+"]


def _margin_bins(margins: list[float]) -> list[Bin]:
    """Margins counted into [0, 0.25), [0.25, 0.5), ... [4, +inf)."""
    counts = [0] * (len(MARGIN_EDGES) + 1)
    for margin in margins:
        counts[sum(1 for edge in MARGIN_EDGES if margin >= edge)] += 1
    return [Bin(label=label, count=n) for label, n in zip(_margin_labels(), counts, strict=True)]


def _t_prime(rows: list[tuple[int, int | None]]) -> list[TPrimeBin]:
    """(critic k, oracle k or None) per pair -> one bin per k from the smallest either of them names
    to the largest (empty ones kept)."""
    keys = _span({c for c, _ in rows} | {o for _, o in rows if o is not None})
    return [
        TPrimeBin(
            label=str(k), critic=sum(1 for c, _ in rows if c == k), oracle=sum(1 for _, o in rows if o == k)
        )
        for k in keys
    ]


@router.get(
    "/runs/{run_id}/iterations/{iteration}/quality",
    response_model=QualityOut,
    summary="An iteration's data quality: critic vs oracle, t', fallbacks, margins, revisions",
)
async def iteration_quality(
    run_id: str = RunId,
    iteration: int = Path(ge=0, le=10_000, description="0-based iteration."),
    principal: Principal = Depends(require("read")),
    svc: ApiServices = Depends(services),
) -> Any:
    project_id = principal.project()
    await run_row(svc, project_id, run_id)
    if await run_reads.iteration(svc.store, run_id, iteration) is None:
        raise not_found("iteration", iteration)
    pair_count = len(await pair_reads.pair_ids(svc.store, run_id, iteration, project_id))
    revision_rows = await sample_reads.revision_facts(svc.store, project_id, run_id, iteration)
    judged = [(p, m) for p, m in await load_judged(svc.store, run_id) if p.iteration == iteration]
    report = critic_metrics(judged).get(iteration, {})
    signals = [(p, m, review_signals(m)) for p, m in judged]
    margins = [s.margin for _, _, s in signals if s.margin is not None]
    with_oracle = [m for _, m in judged if m.oracle_index is not None]
    lengths = [r.revision_length for r in revision_rows if r.revision_length is not None]
    checked = [r.verified for r in revision_rows if r.verified is not None]
    fallback = sum(1 for _, m in judged if m.fallback)
    return QualityOut(
        run_id=run_id,
        iteration=iteration,
        pairs=pair_count,
        critiqued=len(judged),
        strategies=report.get("strategies", []),
        oracle_pairs=len(with_oracle),
        agree=sum(1 for m in with_oracle if m.transition_index == m.oracle_index),
        agreement=report.get("exact_match"),
        mean_abs_distance=report.get("mean_abs_distance"),
        direct_exact_match=report.get("direct_exact_match"),
        first_step_match=report.get("first_step_match"),
        fallback=fallback,
        fallback_share=report.get("fallback_share"),
        uncertain=sum(1 for _, _, s in signals if s.uncertain),
        t_prime=_t_prime(
            [
                (
                    m.transition_index - p.shared_steps + 1,
                    None if m.oracle_index is None else m.oracle_index - p.shared_steps + 1,
                )
                for p, m in judged
            ]
        ),
        actions_after_divergence=_bins(actions_after_divergence(p) for p, _ in judged),
        margin_threshold=DEFAULT_MAX_MARGIN,
        margin_pairs=len(margins),
        low_margin=sum(1 for m in margins if m < DEFAULT_MAX_MARGIN),
        margins=_margin_bins(margins) if margins else [],
        revision_samples=len(revision_rows),
        revision_length_mean=sum(lengths) / len(lengths) if lengths else None,
        revision_lengths=_bins(lengths),
        checked=len(checked),
        verified=sum(1 for v in checked if v),
        verified_share=sum(1 for v in checked if v) / len(checked) if checked else None,
    )
