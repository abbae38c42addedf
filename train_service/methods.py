"""Owns ``train.method`` beyond SFT: each method's dataset from the event log and its trainer call.

* ``dpo``: the iteration's pairs (``PairFound`` on each pair's stream, every pair of the run's
  iteration, whatever the critic / splice later decided: the pair itself is the preference) ->
  ``core.domain.preferences.preference_pair`` -> ``<run>/datasets/iter-<i>.dpo.jsonl`` +
  manifest -> ``train_service.dpo.train_dpo``.
* ``archer``: the iteration's completed trees (each tree's stream replayed into a ``SearchTree``)
  -> ``core.domain.transitions.build_transitions`` with ``train.transitions`` ->
  ``<run>/datasets/iter-<i>.transitions.jsonl`` + manifest -> ``train_service.archer.train_archer``.

``write_method_dataset`` runs in the train service (it reads the store); ``run_method`` is what the
training task (inline or Celery) calls with the file. The state machine, events (``ModelTrained`` /
``TrainingFailed``), checkpoints (weights + ``meta.json``) and evaluation are SFT's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.domain.datasets import DatasetError
from core.domain.preferences import PreferenceError, PreferencePair, preference_manifest, preference_pair
from core.domain.transitions import TransitionConfig, TreeSource, build_transitions
from core.store.pair_reads import iteration_trees
from core.store.pair_repository import PairRepository
from core.store.ports import EventStore
from core.store.queries.pairs import pair_ids
from train_service.hf_trainer import TrainJob
from train_service.rl_data import read_preference_pairs, read_transitions, write_records

log = logging.getLogger(__name__)


async def preference_pairs(
    store: EventStore, run_id: str, iteration: int
) -> tuple[list[PreferencePair], dict[str, str]]:
    """The iteration's preference pairs and the pairs refused (id -> why)."""
    found: list[PreferencePair] = []
    refused: dict[str, str] = {}
    repository = PairRepository(store)
    for pair_id in await pair_ids(store, run_id, iteration):
        source = await repository.source(pair_id)
        if source is None:
            continue
        pair = source.pair
        try:
            found.append(preference_pair(pair_id, pair.bad, pair.good, pair.shared_steps, source.position))
        except PreferenceError as exc:
            refused[pair_id] = str(exc)
    return found, refused


async def tree_sources(store: EventStore, run_id: str, iteration: int) -> list[TreeSource]:
    """The iteration's completed trees, rebuilt from their streams."""
    return await iteration_trees(store, None, run_id, iteration)


async def write_method_dataset(
    store: EventStore, folder: Path, run_id: str, iteration: int, method: str, transitions: dict[str, Any]
) -> tuple[Path, dict[str, Any]]:
    """The iteration's file for ``method`` and a summary of its manifest (``DatasetError`` when the
    iteration has nothing for it: the run then records ``TrainingFailed`` with the message)."""
    if method == "dpo":
        pairs, refused = await preference_pairs(store, run_id, iteration)
        ordered, manifest = preference_manifest(run_id, iteration, pairs, refused)
        path = folder / f"iter-{iteration}.dpo.jsonl"
        await asyncio.to_thread(write_records, path, ordered, manifest)
        return path, {"content_id": manifest.dataset_id, "pairs": len(ordered), "pairs_refused": len(refused)}
    if method == "archer":
        cfg = TransitionConfig.from_dict(transitions)
        built = build_transitions(
            run_id=run_id, iteration=iteration, trees=await tree_sources(store, run_id, iteration), config=cfg
        )
        path = folder / f"iter-{iteration}.transitions.jsonl"
        await asyncio.to_thread(write_records, path, built.transitions, built.manifest)
        m = built.manifest
        return path, {
            "content_id": m.dataset_id,
            "transitions": len(built.transitions),
            "trees": len(m.sources),
            "done": m.done,
            "invalid": m.invalid,
        }
    raise DatasetError(f"train.method {method!r} has no dataset builder here")


def run_method(
    method: str,
    *,
    run_id: str | None,
    iteration: int,
    dataset_id: str,
    dataset_path: str,
    model_path: str,
    out_dir: str,
    config: dict[str, Any],
    online: dict[str, Any] | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_step: Callable[[int, int, float | None], None] | None = None,
) -> dict[str, Any]:
    """Train one iteration with ``method`` (dpo | archer) from its dataset file; online ArCHer
    (``mode: online``) plays in the environment ``online`` names instead (``env_uri``, ``task_ids``,
    ``store_url``, ``project_id``: ``train_service.archer_online``)."""
    job = TrainJob(model_path, out_dir, iteration, dataset_id, run_id, should_stop, on_step)
    if method == "dpo":
        from train_service.dpo import DPOConfig, train_dpo

        dpo_cfg = DPOConfig.from_dict(config)  # bad fields fail before any model loads
        report = train_dpo(job, read_preference_pairs(dataset_path), dpo_cfg)
    elif method == "archer":
        from train_service.archer import ArcherConfig, train_archer

        archer_cfg = ArcherConfig.from_dict(config)
        if archer_cfg.mode == "online":
            from train_service.archer_online import train_archer_online

            if not online:
                raise ValueError(
                    "online ArCHer plays in the run's environment: the training job names none "
                    "(use mode 'offline' to train on the logged trees alone)"
                )
            report = train_archer_online(job, archer_cfg, **online)
        else:
            report = train_archer(job, read_transitions(dataset_path), archer_cfg)
    else:
        raise ValueError(f"train.method must be one of sft, dpo, archer, got {method!r}")
    return {"checkpoint": str(report.checkpoint), "metrics": report.metrics, "reused": report.reused}
