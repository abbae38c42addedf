"""Owns what lets online ArCHer (``train_service.archer_online``) stop and go on: the log its
episodes are recorded in (``EpisodeLog``, and ``StoreEpisodeLog`` over the event store: one
``episodes-{buffer_id}`` stream per run iteration, a round appended in one transaction guarded by the
stream's version) and the learner's whole state after each round (``save_round`` / ``load_round``:
actor, critic, target, both optimizers, random states and counters, in ``<out>.rounds/latest``)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import torch

from core.domain.events import EpisodePlayed, Metadata, NewEvent
from core.domain.ids import episodes_stream
from core.store.ports import EventStore
from train_service.archer_updates import ArcherLearner

ROUNDS_DIR = "rounds"
LATEST = "latest"
LEARNER_STATE = "learner.pt"
ROUND_META = "round.json"


class EpisodeLog(Protocol):
    """Where the online learner's episodes are recorded (the event log in production)."""

    async def read(self, buffer: str) -> list[EpisodePlayed]: ...

    async def append_round(self, buffer: str, records: Sequence[EpisodePlayed], expected: int) -> None:
        """Append one round's records atomically; ``expected``: how many records the stream holds
        (a concurrent or repeated append of the same round fails instead of recording it twice)."""
        ...


class StoreEpisodeLog:
    """``EpisodeLog`` over the event store (``core.store``): one stream per buffer."""

    def __init__(self, store: EventStore, project_id: str | None = None) -> None:
        self.store = store
        self.project_id = project_id

    async def read(self, buffer: str) -> list[EpisodePlayed]:
        recorded = await self.store.read_stream(episodes_stream(buffer))
        return [r.event for r in recorded if isinstance(r.event, EpisodePlayed)]

    async def append_round(self, buffer: str, records: Sequence[EpisodePlayed], expected: int) -> None:
        stream = episodes_stream(buffer)
        meta = Metadata(producer="train", project_id=self.project_id)
        await self.store.append(  # stream versions are 0-based: an empty stream is at -1
            [NewEvent(stream, r, meta) for r in records], expected_versions={stream: expected - 1}
        )


def rounds_dir(out: Path) -> Path:
    return out.parent / f".{out.name}.{ROUNDS_DIR}"


def save_round(learner: ArcherLearner, folder: Path, state: dict[str, Any]) -> None:
    """The learner's whole state after a round, replacing the previous round's (atomic rename)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.parent / f".{folder.name}.part"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    torch.save(
        {
            "actor": learner.actor.state_dict(),
            "critic": learner.critic.state_dict(),
            "target": learner.target.state_dict(),
            "actor_opt": learner.actor_opt.state_dict(),
            "critic_opt": learner.critic_opt.state_dict(),
            "rng": learner.rng.getstate(),
            "torch_rng": torch.get_rng_state(),
        },
        tmp / LEARNER_STATE,
    )
    (tmp / ROUND_META).write_text(json.dumps(state, indent=1, sort_keys=True))
    old = folder.parent / f".{folder.name}.old"
    shutil.rmtree(old, ignore_errors=True)
    if folder.exists():
        folder.rename(old)
    tmp.rename(folder)
    shutil.rmtree(old, ignore_errors=True)


def load_round(learner: ArcherLearner, folder: Path) -> dict[str, Any] | None:
    """Restore the learner from ``folder`` (None when there is no saved round)."""
    if not (folder / LEARNER_STATE).is_file() or not (folder / ROUND_META).is_file():
        return None
    data = torch.load(folder / LEARNER_STATE, weights_only=False)
    learner.actor.load_state_dict(data["actor"])
    learner.critic.load_state_dict(data["critic"])
    learner.target.load_state_dict(data["target"])
    learner.actor_opt.load_state_dict(data["actor_opt"])
    learner.critic_opt.load_state_dict(data["critic_opt"])
    learner.rng.setstate(data["rng"])
    torch.set_rng_state(data["torch_rng"])
    return dict(json.loads((folder / ROUND_META).read_text()))
