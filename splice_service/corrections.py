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
"""

from __future__ import annotations

import dataclasses
import logging

from core.domain.events import (
    CorrectionRejected,
    FirstErrorCorrected,
    NewEvent,
    RecordedEvent,
    RevisionRejected,
    SampleRespliced,
    caused_by,
)
from core.domain.ids import derived_id, pair_stream
from core.domain.reflections import Reflection, ReflectionError
from core.domain.review import HUMAN_CORRECTED
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
