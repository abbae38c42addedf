"""Owns the iteration's dataset file of a run (the ``write_dataset`` effect of ``RunEffects``): the
iteration's samples read from the store's ``samples`` read model, mixed by
``core.domain.datasets.build_dataset`` (alpha of the iteration, eta, general data) and written as
``<home>/runs/<run>/datasets/iter-<i>.jsonl`` (internal ``samples`` format) + ``.manifest.json``."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

from core.domain.config import RunConfig
from core.domain.datasets import Candidate, DatasetConfig, DatasetError, build_dataset
from core.domain.good_samples import trajectory_to_sample
from core.domain.runs import RunState
from core.domain.serde import from_dict
from core.domain.trajectory import TrainingSample, Trajectory
from core.runtime.settings import Settings
from core.store.ports import EventStore
from core.store.queries.samples import iteration_samples

log = logging.getLogger("train_service.runs")  # the run effects' one logger name, as before the split


class BadTrainingInput(Exception):
    """The iteration cannot be trained as configured; the run fails with this message."""


class RunDatasets:
    """``RunEffects``' dataset side; ``RunEffects.__init__`` sets the attributes below."""

    settings: Settings
    store: EventStore

    def run_dir(self, run_id: str) -> Path:
        return Path(self.settings.home).resolve() / "runs" / run_id

    async def load_samples(
        self, run_id: str, iteration: int, config: RunConfig | None = None
    ) -> tuple[list[Candidate], list[Candidate]]:
        """Revision and good candidates of an iteration; good trajectories become samples with the
        run's weight-0 rule for rejected steps and loop repeats (defaults when ``config`` is None)."""
        mask = {
            "mask_invalid_steps": config.mask_invalid_steps if config else True,
            "mask_loop_steps": config.mask_loop_steps if config else True,
        }
        rows = await iteration_samples(self.store, run_id, iteration)
        revisions: list[Candidate] = []
        good: list[Candidate] = []
        for row in rows:
            if row.kind == "good":
                sample = trajectory_to_sample(from_dict(Trajectory, row.data), row.sample_id, **mask)
                good.append(Candidate(sample, row.position, row.template_id))
            elif row.kind == "revision":
                sample = from_dict(TrainingSample, row.data)
                revisions.append(Candidate(sample, row.position, row.template_id))
        return revisions, good

    async def write_dataset(
        self, state: RunState, iteration: int, dataset_id: str
    ) -> tuple[Path, dict[str, Any]]:
        """The iteration's dataset file (samples JSONL) and a summary of its manifest."""
        from core.formats.export import file_fingerprint, read_general_chat, write_jsonl

        config = state.config
        revisions, good = await self.load_samples(state.run_id, iteration, config)
        general: list[TrainingSample] = []
        source = None
        if config.general_data:
            try:
                general = list(read_general_chat(config.general_data))
            except FileNotFoundError as exc:
                raise BadTrainingInput(str(exc)) from None
            source = file_fingerprint(config.general_data)
        try:
            built = build_dataset(
                run_id=state.run_id,
                iteration=iteration,
                revisions=revisions,
                good=good,
                general=general,
                config=DatasetConfig(
                    alpha_schedule=config.alpha_schedule,
                    eta=config.eta,
                    max_general=config.max_general,
                    seed=config.seed,
                    mask_invalid_steps=config.mask_invalid_steps,
                    mask_loop_steps=config.mask_loop_steps,
                    include_revisions=config.include_revisions,
                ),
                general_source=source,
            )
        except DatasetError as exc:
            raise BadTrainingInput(str(exc)) from None
        m = built.manifest
        if m.note:
            log.info("run %s iteration %d dataset: %s", state.run_id, iteration, m.note)
        log.info(
            "run %s iteration %d dataset: agent share %.3f (eta %s); good-sample turns at weight 0: "
            "%d rejected by the environment, %d loop repeats; revision continuations: %d rejected, %d loop "
            "repeats",
            state.run_id,
            iteration,
            m.agent_share,
            config.eta,
            m.masked_invalid_steps,
            m.masked_loop_steps,
            m.revision_masked_invalid_steps,
            m.revision_masked_loop_steps,
        )
        folder = self.run_dir(state.run_id) / "datasets"
        path = folder / f"iter-{iteration}.jsonl"
        await asyncio.to_thread(write_jsonl, path, built.samples, "samples")
        from core.domain.serde import to_dict

        manifest = {"dataset_id": dataset_id, **to_dict(built.manifest)}
        (folder / f"iter-{iteration}.manifest.json").write_text(
            json.dumps(manifest, indent=1, sort_keys=True)
        )
        counts = {"revision": 0, "good": 0, "general": 0}
        for sample in built.samples:
            counts[sample.kind] = counts.get(sample.kind, 0) + 1
        masked = {"invalid": m.masked_invalid_steps, "loop": m.masked_loop_steps}
        return path, {
            "content_id": m.dataset_id,
            "samples": counts,
            "agent_share": m.agent_share,
            "masked_good_steps": masked,
            "masked_revision_steps": {
                "invalid": m.revision_masked_invalid_steps,
                "loop": m.revision_masked_loop_steps,
            },
        }
