"""Owns the train worker (`agentr worker train`): the run driver's composition root and handlers.

Handlers (all on the run's stream): ``RunRequested``, ``IterationDatasetReady``, ``ModelTrained``,
``IterationDatasetEmpty``, ``TrainingFailed``. Each folds the run's events BEFORE the one handled
into a ``core.domain.runs.RunState``, asks ``decide`` what follows, performs the effect it names
(training, evaluation: ``train_service.runs.RunEffects``) and returns the resulting events, whose ids
are deterministic, so a redelivered or retried message appends nothing twice. An effect's outcome
event (``ModelTrained`` after training, ``IterationEvaluated`` after evaluation) is returned together
with whatever it decides (e.g. the next iteration's ``IterationStarted`` + ``SearchRequested``).

Training runs inline in embedded mode (``agentr run``) and as the Celery task on the ``train`` queue
when ``AGENTR_REDIS_URL`` is set. A run cancelled while a step was running gets nothing more.

``MessageDeadLettered``: when one of this service's own run steps failed on every delivery (an
evaluation that keeps crashing, say), the run can never go on, so it FAILS (``RunFailed`` naming the
event, the deliveries and the last line of the error) instead of waiting forever; dead letters of
other services, or of events not on a run stream, are left to the dead-letter stream.
"""

from __future__ import annotations

import logging
from typing import Any

from core.domain.events import (
    IterationDatasetEmpty,
    IterationDatasetReady,
    IterationEvaluated,
    MessageDeadLettered,
    ModelTrained,
    NewEvent,
    RecordedEvent,
    RunRequested,
    TrainingFailed,
    caused_by,
)
from core.domain.ids import run_stream
from core.domain.runs import (
    Decision,
    EvaluateModel,
    PlannedEvent,
    RunState,
    RunStateError,
    TrainModel,
    decide,
    fold,
    needs_tasks,
    run_event_id,
)
from core.envs.base import EnvError
from core.llm.ports import PolicyError
from core.runtime.service import HandlerResult, Service
from core.runtime.settings import Settings
from train_service.runs import RunEffects

log = logging.getLogger(__name__)
SERVICE_NAME = "train"
# the event id kind of a training outcome (run_event_id): anything else is a failure
TRAIN_OUTCOME_KINDS: dict[type, str] = {ModelTrained: "trained", IterationDatasetEmpty: "method-data-empty"}

HANDLED = (
    RunRequested,
    IterationDatasetReady,
    ModelTrained,
    IterationDatasetEmpty,
    TrainingFailed,
)


def _run_id(recorded: RecordedEvent) -> str:
    run_id = getattr(recorded.event, "run_id", None)
    if not isinstance(run_id, str):
        raise TypeError(f"train service got {recorded.event_type} without a run id")
    return run_id


class RunDriver:
    """The train service's handler: one run step per event (see the module docstring)."""

    def __init__(self, effects: RunEffects) -> None:
        self.effects = effects
        self.store = effects.store

    async def _state_before(self, recorded: RecordedEvent) -> RunState:
        run_id = _run_id(recorded)
        history = await self.store.read_stream(run_stream(run_id))
        before = [r.event for r in history if r.stream_version < recorded.stream_version]
        if recorded.stream_id != run_stream(run_id):
            before = [r.event for r in history]
        return fold(run_id, before)

    async def _cancelled(self, run_id: str) -> bool:
        history = await self.store.read_stream(run_stream(run_id))
        return fold(run_id, [r.event for r in history]).terminal

    async def _decide(self, state: RunState, event: Any) -> Decision:
        tasks: list[str] = []
        if needs_tasks(state, event):
            from core.domain.config import RunConfig

            config = (
                RunConfig.from_data(dict(event.config)) if isinstance(event, RunRequested) else state.config
            )
            self.effects.check_egress(config)
            tasks = await self.effects.task_ids(config)
        return decide(state, event, tasks)

    async def __call__(self, recorded: RecordedEvent) -> HandlerResult:
        state = await self._state_before(recorded)
        event = recorded.event
        meta = caused_by(recorded, SERVICE_NAME)
        try:
            decision = await self._decide(state, event)
        except (RunStateError, EnvError, PolicyError) as exc:
            decision = _failure(state, str(exc))
        planned: list[PlannedEvent] = list(decision.events)
        effect = decision.effect
        while effect is not None:
            outcome: Any
            if isinstance(effect, TrainModel):
                outcome = await self.effects.train(state, effect)
                kind = TRAIN_OUTCOME_KINDS.get(type(outcome), "training-failed")
            elif isinstance(effect, EvaluateModel):
                outcome = await self.effects.evaluate(state, effect)
                kind = "evaluated"
            else:  # pragma: no cover - Effect is a closed union
                raise TypeError(f"unknown effect {effect!r}")
            planned.append(
                PlannedEvent(
                    run_stream(state.run_id), outcome, run_event_id(state.run_id, kind, effect.iteration)
                )
            )
            if isinstance(outcome, IterationEvaluated):
                # the evaluation's consequences are decided now (next iteration or completion);
                # ModelTrained / TrainingFailed / IterationDatasetEmpty come back through the bus
                from core.domain.runs import apply

                try:
                    follow = await self._decide(state, outcome)
                except (RunStateError, EnvError, PolicyError) as exc:
                    follow = _failure(apply(state, outcome), str(exc))
                planned.extend(follow.events)
                state = apply(state, outcome)
                effect = follow.effect
            else:
                effect = None
        if planned and await self._cancelled(state.run_id):
            log.info(
                "run %s ended while %s was handled; dropping %d event(s)",
                state.run_id,
                recorded.event_type,
                len(planned),
            )
            return HandlerResult()
        for p in planned:
            log.info("run %s: %s", state.run_id, _describe(p))
        return HandlerResult([NewEvent(p.stream_id, p.event, meta, p.event_id) for p in planned])


class DeadLetterHandler:
    """Fails the run whose step this service dead-lettered (module docstring)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    async def __call__(self, recorded: RecordedEvent) -> HandlerResult:
        dead = recorded.event
        if not isinstance(dead, MessageDeadLettered) or dead.consumer != SERVICE_NAME:
            return HandlerResult()
        failed = await self.store.get(dead.position)
        run_id = getattr(failed.event, "run_id", None) if failed is not None else None
        if failed is None or not isinstance(run_id, str) or failed.stream_id != run_stream(run_id):
            return HandlerResult()
        history = await self.store.read_stream(run_stream(run_id))
        state = fold(run_id, [r.event for r in history])
        if state.terminal:
            return HandlerResult()
        last = (dead.error.strip().splitlines() or ["(no message)"])[-1]
        iteration = getattr(failed.event, "iteration", None)
        where = f"iteration {iteration}: " if iteration is not None else ""
        reason = f"{where}{failed.event_type} could not be handled after {dead.deliveries} deliveries: {last}"
        log.error("run %s failed: %s", run_id, reason)
        planned = _failure(state, reason).events
        meta = caused_by(recorded, SERVICE_NAME)
        return HandlerResult([NewEvent(p.stream_id, p.event, meta, p.event_id) for p in planned])


def _failure(state: RunState, reason: str) -> Decision:
    from core.domain.events import RunFailed

    failed = RunFailed(state.run_id, reason)
    return Decision((PlannedEvent(run_stream(state.run_id), failed, run_event_id(state.run_id, "failed")),))


def _describe(p: PlannedEvent) -> str:
    event = p.event
    name = type(event).__name__
    iteration = getattr(event, "iteration", None)
    reason = getattr(event, "reason", None)
    return (
        name
        + (f" (iteration {iteration})" if iteration is not None else "")
        + (f": {reason}" if reason else "")
    )


def build_service(settings: Settings, store: Any, **effects_options: Any) -> Service:
    """The train worker's composition root (``effects_options`` go to ``RunEffects``: env / policy
    openers, inline training, progress callbacks)."""
    effects = RunEffects(settings, store, **effects_options)
    driver = RunDriver(effects)
    handlers: dict[str, Any] = {cls.event_type: driver for cls in HANDLED}
    handlers[MessageDeadLettered.event_type] = DeadLetterHandler(store)
    return Service(name=SERVICE_NAME, handlers=handlers, concurrency=1)
