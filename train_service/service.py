"""Owns the train worker (`agentr worker train`): the run driver's composition root and handlers.

Handlers (all on the run's stream): ``RunRequested``, ``IterationDatasetReady``, ``ModelTrained``,
``IterationDatasetEmpty``, ``TrainingFailed``. Each folds the run's events BEFORE the one handled
into a ``core.domain.runs.RunState``, asks ``decide`` what follows, performs the effect it names
(training, evaluation: ``train_service.runs.RunEffects``) and returns the resulting events, whose ids
are deterministic, so a redelivered or retried message appends nothing twice. An effect's outcome
event (``ModelTrained`` after training, ``IterationEvaluated`` after evaluation) is returned together
with whatever it decides (e.g. the next iteration's ``IterationStarted`` + ``SearchRequested``).

Training runs inline in embedded mode (``agentr run``) and as the Celery task on the ``train`` queue
when ``AGENTR_REDIS_URL`` is set; there the handler waits on the job (``RunEffects.train``: a job
whose trainer died is queued again) while the worker handles up to ``AGENTR_TRAIN_CONCURRENCY``
messages at once, so one run's training never holds up another run's steps (embedded: one at a
time). A stopping train worker (SIGTERM) cancels its waits instead of sitting them out: the
messages stay pending and the next train worker resumes waiting on the same jobs.

Cancel: a step of a run that has ended (``RunCancelled`` / ``RunFailed`` / ``RunCompleted``, read
from the WHOLE stream, not only the events before the one handled) performs no effect, and events
decided while the run ended are dropped. ``RunCancelled`` itself (``CancelHandler``) stops the run's
training: the run's stop flag for every job of the run (running ones stop after their current
optimizer step, later deliveries never start) and the current iteration's job revoked.

``MessageDeadLettered``: a step of a run that failed on every delivery can never go on, so the run
FAILS (``RunFailed`` naming the event, the worker that dead-lettered it unless it is this one, the
deliveries and the last line of the error) instead of waiting forever: this service's own steps (an
evaluation that keeps crashing, say), and the search, critic and splice steps of a run (an event
carrying the ``run_id`` of a run that has not ended); a dead-lettered ``SearchRequested`` also
ends its tree in ``SearchFailed`` with the same reason (the id the search worker would give it), so
the tree shows why. Dead letters of events of no run are left to the dead-letter stream.
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
    RunCancelled,
    RunRequested,
    SearchFailed,
    SearchRequested,
    TrainingFailed,
    caused_by,
)
from core.domain.ids import derived_id, run_stream, tree_stream
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
from core.store.ports import EventStore
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
        if effect is not None and await self._cancelled(state.run_id):
            # e.g. a dataset redelivered after RunCancelled: a run that ended trains nothing
            log.info("run %s has ended: %s starts no %s", state.run_id, recorded.event_type,
                     type(effect).__name__)  # fmt: skip
            return HandlerResult()
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


class CancelHandler:
    """``RunCancelled``: stops the run's training jobs (module docstring)."""

    def __init__(self, effects: RunEffects) -> None:
        self.effects = effects

    async def __call__(self, recorded: RecordedEvent) -> HandlerResult:
        run_id = _run_id(recorded)
        history = await self.effects.store.read_stream(run_stream(run_id))
        state = fold(run_id, [r.event for r in history])
        current = state.current
        tasks = []
        if current is not None and current.dataset_id is not None:
            tasks.append(self.effects.train_task_id(run_id, current.iteration, current.dataset_id))
        await self.effects.stop_run_training(run_id, tasks)
        return HandlerResult()


class DeadLetterHandler:
    """Fails the run whose step was dead-lettered (module docstring)."""

    def __init__(self, store: EventStore) -> None:
        self.store = store

    async def __call__(self, recorded: RecordedEvent) -> HandlerResult:
        dead = recorded.event
        if not isinstance(dead, MessageDeadLettered):
            return HandlerResult()
        failed = await self.store.get(dead.position)
        run_id = getattr(failed.event, "run_id", None) if failed is not None else None
        if failed is None or not isinstance(run_id, str):
            return HandlerResult()
        if dead.consumer == SERVICE_NAME and failed.stream_id != run_stream(run_id):
            return HandlerResult()
        history = await self.store.read_stream(run_stream(run_id))
        if not history:
            return HandlerResult()  # not a run this deployment drives (e.g. a trace's pair)
        state = fold(run_id, [r.event for r in history])
        if state.terminal:
            return HandlerResult()
        last = (dead.error.strip().splitlines() or ["(no message)"])[-1]
        iteration = getattr(failed.event, "iteration", None)
        where = f"iteration {iteration}: " if iteration is not None else ""
        tree_id = getattr(failed.event, "tree_id", None)
        step = failed.event_type + (f" of tree {tree_id}" if tree_id else "")
        by = "" if dead.consumer == SERVICE_NAME else f" by the {dead.consumer} worker"
        reason = f"{step} could not be handled{by} after {dead.deliveries} deliveries: {last}"
        log.error("run %s failed: %s%s", run_id, where, reason)
        meta = caused_by(recorded, SERVICE_NAME)
        planned = list(_failure(state, f"{where}{reason}").events)
        if isinstance(failed.event, SearchRequested):
            tree = await self.store.read_stream(tree_stream(failed.event.tree_id))
            if not any(r.event_type in ("TreeCompleted", "SearchFailed") for r in tree):
                ended = SearchFailed(failed.event.tree_id, run_id, failed.event.iteration, reason)
                planned.append(
                    PlannedEvent(
                        tree_stream(failed.event.tree_id),
                        ended,
                        derived_id(failed.event.tree_id, "SearchFailed"),  # the search worker's id
                    )
                )
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


def build_service(settings: Settings, store: EventStore, **effects_options: Any) -> Service:
    """The train worker's composition root (``effects_options`` go to ``RunEffects``: env / policy
    openers, inline training, progress callbacks)."""
    effects = RunEffects(settings, store, **effects_options)
    driver = RunDriver(effects)
    handlers: dict[str, Any] = {cls.event_type: driver for cls in HANDLED}
    handlers[RunCancelled.event_type] = CancelHandler(effects)
    handlers[MessageDeadLettered.event_type] = DeadLetterHandler(store)
    # waiting on a Celery job must not hold up other runs; inline training runs one step at a time
    concurrency = 1 if effects.inline_training else settings.train_concurrency
    # a stopping worker does not wait for training jobs: their messages are handled again (the
    # wait resumes on the same job) by the next train worker
    return Service(
        name=SERVICE_NAME,
        handlers=handlers,
        concurrency=concurrency,
        cancel_on_stop=not effects.inline_training,
    )
