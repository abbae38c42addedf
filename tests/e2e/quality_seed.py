"""Owns the critiqued pairs and revision samples the data-quality tests seed (API and browser).

``PAIRS`` describes each pair of a run's iteration 0 (shared steps, bad actions, the critic's t', the
oracle's first error, fallback, the one scored verdict's labels); ``REVISIONS`` the iteration's
revision samples (revision length, verified). ``quality_events`` turns them into the events the
search, critic and splice workers append (PairFound, FirstErrorMarked, RevisionMaterialized), plus
a pair only found (not judged) and a judged pair of iteration 1 that the iteration-0 figures must
leave out. The tests compute what the dashboard must show from these tables themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.domain import events as ev
from core.domain.events import Metadata, NewEvent
from core.domain.ids import new_id, pair_stream, run_stream
from core.domain.trajectory import Message, Step, TrainingSample, Trajectory


@dataclass(frozen=True)
class SeedPair:
    shared: int  # shared steps (the divergence)
    bad_actions: int  # steps of the bad path
    critic: int  # the critic's t' (index into the bad path's steps)
    oracle: int | None
    fallback: bool = False
    label: str = "bad"  # the label of the verdict at t'
    scores: tuple[tuple[str, float], ...] = ()  # that verdict's label scores (none: no margin)


PAIRS = (
    SeedPair(1, 4, 2, 2, scores=(("bad", -1.0), ("good", -1.1))),  # agree, margin 0.1
    SeedPair(1, 4, 3, 1, scores=(("bad", -1.0), ("good", -1.3))),  # disagree by 2, margin 0.3
    SeedPair(0, 2, 1, None, fallback=True, label="good"),  # fell back to the last action
    SeedPair(2, 3, 2, 2, label="uncertain", scores=(("uncertain", -0.2), ("bad", -3.0))),  # 2.8
)
REVISIONS = ((1, True), (2, True), (2, False), (4, None))  # (revision length, verified)


def _trajectory(actions: int, reward: float) -> Trajectory:
    steps = tuple(Step(f"think {i}", f"action {i}", f"obs {i}") for i in range(actions))
    return Trajectory("Goal: craft.", "inst", steps, reward)


def _pair(
    project_id: str, run_id: str, spec: SeedPair, iteration: int, judged: bool = True
) -> list[NewEvent]:
    pair_id = new_id()
    found = ev.PairFound(
        pair_id, "search", "craft", _trajectory(spec.bad_actions, 0.0), _trajectory(spec.shared + 1, 1.0),
        spec.shared, run_id=run_id, iteration=iteration,
    )  # fmt: skip
    verdicts = tuple(
        ev.StepVerdict(
            i, spec.label if i == spec.critic else "good", dict(spec.scores) if i == spec.critic else {}
        )  # type: ignore[arg-type]
        for i in range(spec.shared, spec.critic + 1)
    )
    marked = ev.FirstErrorMarked(
        pair_id, "model", spec.critic, verdicts, fallback=spec.fallback, oracle_index=spec.oracle
    )
    meta = Metadata(producer="search", project_id=project_id)
    out = [NewEvent(pair_stream(pair_id), found, meta)]
    if judged:
        out.append(NewEvent(pair_stream(pair_id), marked, Metadata(producer="critic", project_id=project_id)))
    return out


def _revision(project_id: str, run_id: str, length: int, verified: bool | None) -> NewEvent:
    sample_id, pair_id = new_id(), new_id()
    sample = TrainingSample(
        sample_id, "revision",
        (Message("system", "inst"), Message("user", "Goal: craft."), Message("assistant", "Action: look", 1)),
        1.0, {"task_id": "craft"},
    )  # fmt: skip
    made = ev.RevisionMaterialized(sample_id, pair_id, run_id, 0, sample, "r01", length, verified)
    return NewEvent(pair_stream(pair_id), made, Metadata(producer="splice", project_id=project_id))


def quality_events(project_id: str, run_id: str) -> list[list[NewEvent]]:
    """The batches to append for a run that already has iteration 0 (IterationStarted): its
    pairs, one found-only pair, iteration 1 (started) with one judged pair, and the revisions."""
    batches = [_pair(project_id, run_id, spec, 0) for spec in PAIRS]
    batches.append(_pair(project_id, run_id, SeedPair(0, 3, 1, 1), 0, judged=False))
    started = ev.IterationStarted(run_id, 1, "tiny", 0.5, ())
    batches.append([NewEvent(run_stream(run_id), started, Metadata(producer="train", project_id=project_id))])
    batches.append(_pair(project_id, run_id, SeedPair(0, 5, 4, 0, scores=(("bad", -1.0), ("good", -9.0))), 1))
    batches.append([_revision(project_id, run_id, length, verified) for length, verified in REVISIONS])
    return batches
