"""Owns reading a run's context out of its stream: the run's config and the model an iteration
runs with (the ``model_ref`` of its ``IterationStarted``). The critic and the splice worker both ask
it, so it lives below them rather than in either service.
"""

from __future__ import annotations

from core.domain.config import RunConfig
from core.domain.events import IterationStarted, RunRequested
from core.domain.ids import run_stream
from core.store.ports import EventStore


async def run_context(store: EventStore, run_id: str, iteration: int) -> tuple[RunConfig, str | None]:
    """The run's config and the model_ref of the iteration's IterationStarted (None when missing)."""
    config = RunConfig()
    model_ref = None
    for recorded in await store.read_stream(run_stream(run_id)):
        event = recorded.event
        if isinstance(event, RunRequested):
            config = RunConfig.from_data(event.config)
            model_ref = model_ref or config.model or None
        elif isinstance(event, IterationStarted) and event.iteration == iteration:
            model_ref = event.model_ref
    return config, model_ref
