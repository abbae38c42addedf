"""Owns re-splicing a pair from a reviewer's correction (the splice worker's ``FirstErrorCorrected`` handler).

A reviewer (``POST /v1/pairs/{id}/corrections`` or ``/v1/traces/{id}/corrections``, ``review`` scope)
moves a pair's first-error step t' and/or rewrites its reflection; the API appends
``FirstErrorCorrected`` to the pair's stream. Here the pair is spliced again exactly as the splicer
does it (``SpliceHandlers._splice``: same cut, same environment replay and verification, same run
settings), at the reviewer's t' and with the reviewer's reflection when one was given (template id
``human``; otherwise the run's reflection choice for the new wrong action). The result is
``SampleRespliced``: the same sample id, provenance ``origin: human-corrected`` plus who corrected it
and the correction id, which replaces the pair's sample in the ``samples`` read model, so the
iteration's dataset and later trace datasets pick it up on their next build. A correction that
cannot be spliced (e.g. the replay no longer reaches the good reward) becomes
``CorrectionRejected`` with the reason, and the earlier sample stays.

With more than one reviewer the splicer follows the majority (``core.domain.reviewers``): a correction
whose t' is not the one most of the pair's reviewers name (tied: "disputed", outnumbered: "outvoted")
becomes ``CorrectionRejected`` with that reason, before any splicing.

A reviewer's undo (``ReviewUndone``) of the correction whose sample is the pair's current one takes the
same path back: the sample that was current before it is restored (``SampleRespliced`` with the undo's
id as ``correction_id``, provenance ``restored_by_undo``), replacing the undone correction's sample in
the ``samples`` read model; when the pair had no sample before, ``SampleWithdrawn`` takes it out. New
datasets then no longer hold the undone correction's sample.
"""

from __future__ import annotations

import dataclasses
import logging

from core.domain.events import (
    CorrectionRejected,
    FirstErrorCorrected,
    NewEvent,
    RecordedEvent,
    ReviewUndone,
    RevisionRejected,
    SampleRespliced,
    SampleWithdrawn,
    caused_by,
)
from core.domain.ids import derived_id, pair_stream
from core.domain.reflections import Reflection, ReflectionError
from core.domain.review import HUMAN_CORRECTED
from core.domain.reviewers import splice_refusal, undo_plan
from core.domain.splice import SpliceError
from core.runtime.service import HandlerResult
from core.store.pair_repository import PairRepository
from core.store.run_reads import run_context
from splice_service.splicer import SERVICE_NAME, LossMasking, SpliceConfig, SpliceHandlers

log = logging.getLogger(__name__)
HUMAN_TEMPLATE_ID = "human"


class CorrectionHandlers:
    """``FirstErrorCorrected`` -> ``SampleRespliced`` | ``CorrectionRejected`` (see the module docstring)."""

    def __init__(self, splice: SpliceHandlers) -> None:
        self.splice = splice

    async def on_correction(self, recorded: RecordedEvent) -> HandlerResult:
        correction = recorded.event
        assert isinstance(correction, FirstErrorCorrected)
        meta = caused_by(recorded, SERVICE_NAME)
        stream = pair_stream(correction.pair_id)
        review = await PairRepository(self.splice.store).load(correction.pair_id)
        pair, marked = review.pair, review.marked
        if pair is None or marked is None:
            raise LookupError(f"corrections: no PairFound / FirstErrorMarked in stream {stream}")
        event_id = derived_id(SERVICE_NAME, "correction", correction.correction_id)

        def rejected(reason: str) -> HandlerResult:
            log.warning(
                "corrections: pair %s correction %s rejected: %s",
                pair.pair_id,
                correction.correction_id,
                reason,
            )
            event = CorrectionRejected(pair.pair_id, correction.correction_id, reason)
            return HandlerResult([NewEvent(stream, event, meta, event_id)])

        refusal = splice_refusal(
            await PairRepository(self.splice.store).load(correction.pair_id, recorded.position),
            correction.correction_id,
        )
        if refusal is not None:
            return rejected(refusal)
        config, model_ref, masking = SpliceConfig(), None, LossMasking()
        if pair.run_id is not None:
            run_config, model_ref = await run_context(self.splice.store, pair.run_id, pair.iteration)
            config, masking = SpliceConfig.of_run(run_config)
        reflection = (
            Reflection(HUMAN_TEMPLATE_ID, correction.new_reflection) if correction.new_reflection else None
        )
        moved = dataclasses.replace(marked, transition_index=correction.new_transition_index)
        try:
            outcome = await self.splice._splice(
                pair, moved, config, model_ref, reflection=reflection, masking=masking
            )
        except (SpliceError, ReflectionError) as exc:
            return rejected(f"splice: {exc}")
        if isinstance(outcome, RevisionRejected):
            return rejected(outcome.reason)
        provenance = {
            **outcome.sample.provenance,
            "origin": HUMAN_CORRECTED,
            "correction_id": correction.correction_id,
            "corrected_by": correction.reviewer,
            "corrected_at": correction.corrected_at,
            "critic_transition_index": marked.transition_index,
        }
        sample = dataclasses.replace(outcome.sample, provenance=provenance)
        respliced = SampleRespliced(
            sample_id=outcome.sample_id,
            pair_id=pair.pair_id,
            correction_id=correction.correction_id,
            run_id=pair.run_id,
            iteration=pair.iteration,
            sample=sample,
            template_id=outcome.template_id,
            revision_length=outcome.revision_length,
            verified=outcome.verified,
        )
        log.info(
            "corrections: pair %s re-spliced at t'=%d (correction %s by %s)",
            pair.pair_id, correction.new_transition_index, correction.correction_id, correction.reviewer,
        )  # fmt: skip
        return HandlerResult([NewEvent(stream, respliced, meta, event_id)])

    async def on_undo(self, recorded: RecordedEvent) -> HandlerResult:
        """``ReviewUndone`` -> the sample before the undone correction restored, or withdrawn."""
        undo = recorded.event
        assert isinstance(undo, ReviewUndone)
        review = await PairRepository(self.splice.store).load(undo.pair_id, recorded.position)
        plan = undo_plan(review, undo)
        if plan is None or review.pair is None:
            return HandlerResult([])
        meta = caused_by(recorded, SERVICE_NAME)
        stream = pair_stream(undo.pair_id)
        event_id = derived_id(SERVICE_NAME, "undo", undo.undo_id)
        action, state = plan
        if action == "withdraw":
            reason = (
                f"undone: {undo.reviewer} took back correction {undo.target_id}, the only sample the pair had"
            )
            withdrawn = SampleWithdrawn(undo.pair_id, state.sample_id, undo.undo_id, reason)
            log.info("corrections: pair %s sample withdrawn (undo %s)", undo.pair_id, undo.undo_id)
            return HandlerResult([NewEvent(stream, withdrawn, meta, event_id)])
        provenance = {**state.sample.provenance, "restored_by_undo": undo.undo_id}
        restored = SampleRespliced(
            sample_id=state.sample_id,
            pair_id=undo.pair_id,
            correction_id=undo.undo_id,
            run_id=review.pair.run_id,
            iteration=review.pair.iteration,
            sample=dataclasses.replace(state.sample, provenance=provenance),
            template_id=state.template_id,
            revision_length=state.revision_length,
            verified=state.verified,
        )
        log.info("corrections: pair %s sample restored (undo %s)", undo.pair_id, undo.undo_id)
        return HandlerResult([NewEvent(stream, restored, meta, event_id)])
