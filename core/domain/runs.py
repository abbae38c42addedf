"""Owns the Run state machine: a run's state folded from its events, and what must happen next.

Pure (stdlib only, no I/O). A Run is ``config.iterations`` iterations of
search -> critic -> splice -> dataset -> train -> evaluate. The train service feeds every run
event it handles to :func:`decide`, which returns a :class:`Decision`: the events to append (with
DETERMINISTIC event ids derived from the run id, the iteration and the event's role, so a worker that
crashed after committing and redoes a step appends nothing twice) and at most one side effect the
service must carry out (train a model, evaluate a model). The outcome of an effect is itself an event
(``ModelTrained`` / ``TrainingFailed`` / ``IterationEvaluated``) that goes through ``decide`` again.

Transitions:

* ``RunRequested`` -> ``IterationStarted(0, config.model, alpha(0), tree_ids)`` on the run stream and
  one ``SearchRequested`` per task on its tree stream (tree ids and seeds derived from the run id,
  iteration, task and ``config.seed``).
* ``IterationDatasetReady(i)`` -> effect :class:`TrainModel`; a ``data_only`` run instead goes straight
  to the next iteration with the same model, or completes.
* ``ModelTrained(i)`` -> effect :class:`EvaluateModel` on the new checkpoint.
* ``IterationEvaluated(i)`` -> ``IterationStarted(i + 1, model = checkpoint of i)`` + its searches, or
  ``RunCompleted`` after the last iteration.
* ``IterationDatasetEmpty(i)`` of an iteration whose learner plays for its own data (ArCHer online,
  ``RunConfig.learns_online``) -> :class:`TrainModel` all the same.
* ``IterationDatasetEmpty(0)`` / ``TrainingFailed`` -> ``RunFailed`` with the reason (nothing was
  trained, or training broke).
* ``IterationDatasetEmpty(i > 0)`` -> ``RunCompleted`` with the model that searched iteration i (the
  checkpoint of i - 1, already evaluated) and ``summary["stopped_early"] = {"iteration": i,
  "reason": ...}``: the model found nothing left to learn from on these tasks, which is a result of
  the loop, not a fault; searching again with the same model would repeat the same seeds' luck.
* Anything after ``RunCompleted`` / ``RunFailed`` / ``RunCancelled``, or about an iteration that is
  not the current one, decides nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from core.domain.config import RunConfig
from core.domain.events import (
    DomainEvent,
    IterationDatasetEmpty,
    IterationDatasetReady,
    IterationEvaluated,
    IterationStarted,
    ModelTrained,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunRequested,
    SearchRequested,
    TrainingFailed,
)
from core.domain.ids import derived_id, run_stream, tree_stream

RunStatus = Literal["new", "running", "completed", "failed", "cancelled"]
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})


class RunStateError(ValueError):
    """The run's events or its config cannot drive the state machine (the message says why)."""


@dataclass(frozen=True)
class IterationState:
    iteration: int
    model_ref: str
    alpha: float
    tree_ids: tuple[str, ...]
    dataset_id: str | None = None
    dataset_empty_reason: str | None = None
    checkpoint: str | None = None
    train_metrics: dict[str, Any] = field(default_factory=dict)
    eval_metrics: dict[str, Any] | None = None
    training_failed: str | None = None


@dataclass(frozen=True)
class RunState:
    """A run folded from its stream's events (see :func:`fold`)."""

    run_id: str
    status: RunStatus = "new"
    project_id: str = ""
    config: RunConfig = field(default_factory=RunConfig)
    iterations: tuple[IterationState, ...] = ()
    reason: str = ""
    final_model_ref: str | None = None

    @property
    def current(self) -> IterationState | None:
        return self.iterations[-1] if self.iterations else None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def iteration(self, index: int) -> IterationState | None:
        for it in self.iterations:
            if it.iteration == index:
                return it
        return None


@dataclass(frozen=True)
class PlannedEvent:
    """An event to append to ``stream_id`` under the deterministic ``event_id``."""

    stream_id: str
    event: DomainEvent
    event_id: str


@dataclass(frozen=True)
class TrainModel:
    """Effect: fine-tune ``model_ref`` on dataset ``dataset_id`` for iteration ``iteration``."""

    iteration: int
    model_ref: str
    dataset_id: str


@dataclass(frozen=True)
class EvaluateModel:
    """Effect: evaluate ``model_ref`` (the checkpoint trained in ``iteration``) on held-out tasks."""

    iteration: int
    model_ref: str
    start_model_ref: str  # the run's starting model (whose failed paths feed the recovery test)


Effect = TrainModel | EvaluateModel


@dataclass(frozen=True)
class Decision:
    events: tuple[PlannedEvent, ...] = ()
    effect: Effect | None = None


NOTHING = Decision()


# --------------------------------------------------------------------------------------------
# Folding
# --------------------------------------------------------------------------------------------


def _replace_current(state: RunState, iteration: int, **changes: Any) -> RunState:
    items = []
    for it in state.iterations:
        if it.iteration == iteration:
            values = {**it.__dict__, **changes}
            it = IterationState(**values)
        items.append(it)
    return RunState(**{**state.__dict__, "iterations": tuple(items)})


def _with(state: RunState, **changes: Any) -> RunState:
    return RunState(**{**state.__dict__, **changes})


def apply(state: RunState, event: DomainEvent) -> RunState:
    """The state after ``event`` (events of other types, or after a terminal event, change nothing)."""
    if isinstance(event, RunRequested):
        if state.status != "new":
            return state
        return _with(
            state,
            status="running",
            project_id=event.project_id,
            config=RunConfig.from_data(dict(event.config)),
        )
    if state.terminal:
        return state
    if isinstance(event, RunCancelled):
        return _with(state, status="cancelled", reason=event.reason)
    if isinstance(event, RunCompleted):
        stopped = event.summary.get("stopped_early")
        reason = ""
        if isinstance(stopped, dict):
            reason = f"stopped early at iteration {stopped.get('iteration')}: {stopped.get('reason')}"
        return _with(state, status="completed", final_model_ref=event.final_model_ref, reason=reason)
    if isinstance(event, RunFailed):
        return _with(state, status="failed", reason=event.reason)
    if isinstance(event, IterationStarted):
        if state.iteration(event.iteration) is not None:
            return state
        started = IterationState(event.iteration, event.model_ref, event.alpha, tuple(event.tree_ids))
        return _with(state, iterations=(*state.iterations, started))
    if isinstance(event, IterationDatasetReady) and state.iteration(event.iteration):
        return _replace_current(state, event.iteration, dataset_id=event.dataset_id)
    if isinstance(event, IterationDatasetEmpty) and state.iteration(event.iteration):
        return _replace_current(state, event.iteration, dataset_empty_reason=event.reason)
    if isinstance(event, ModelTrained) and state.iteration(event.iteration):
        return _replace_current(
            state, event.iteration, checkpoint=event.checkpoint, train_metrics=dict(event.metrics)
        )
    if isinstance(event, TrainingFailed) and state.iteration(event.iteration):
        return _replace_current(state, event.iteration, training_failed=event.reason)
    if isinstance(event, IterationEvaluated) and state.iteration(event.iteration):
        return _replace_current(state, event.iteration, eval_metrics=dict(event.metrics))
    return state


def fold(run_id: str, events: Iterable[DomainEvent]) -> RunState:
    """The run's state after all of ``events`` (its stream, in order)."""
    state = RunState(run_id)
    for event in events:
        state = apply(state, event)
    return state


# --------------------------------------------------------------------------------------------
# Deterministic ids and seeds
# --------------------------------------------------------------------------------------------


def tree_id_for(run_id: str, iteration: int, task_id: str) -> str:
    return derived_id("run-tree", run_id, iteration, task_id)


def search_seed(run_seed: int, iteration: int, task_index: int) -> int:
    """A distinct, reproducible search seed per (run seed, iteration, task)."""
    return (run_seed * 1_000_003 + iteration * 10_007 + task_index) % (1 << 31)


def run_event_id(run_id: str, kind: str, iteration: int | None = None) -> str:
    """The id of the run-level event ``kind`` (per iteration when given): the same on every retry."""
    return derived_id("run-event", run_id, kind, "-" if iteration is None else iteration)


# --------------------------------------------------------------------------------------------
# Decisions
# --------------------------------------------------------------------------------------------


def start_iteration(state: RunState, iteration: int, model_ref: str, task_ids: Sequence[str]) -> Decision:
    """``IterationStarted`` + one ``SearchRequested`` per task (tree streams)."""
    config = state.config
    if not task_ids:
        raise RunStateError(f"run {state.run_id}: no tasks to search in iteration {iteration}")
    if len(set(task_ids)) != len(task_ids):
        raise RunStateError(f"run {state.run_id}: duplicate task ids {sorted(task_ids)}")
    if not model_ref:
        raise RunStateError(f"run {state.run_id}: no model to search with (RunConfig.model is empty)")
    alpha = config.alpha(iteration)
    tree_ids = tuple(tree_id_for(state.run_id, iteration, t) for t in task_ids)
    search_config = {**dict(config.search), "alpha": alpha, "beta": config.beta}
    started = IterationStarted(state.run_id, iteration, model_ref, alpha, tree_ids)
    events = [
        PlannedEvent(run_stream(state.run_id), started, run_event_id(state.run_id, "started", iteration))
    ]
    for index, (task_id, tree_id) in enumerate(zip(task_ids, tree_ids, strict=True)):
        request = SearchRequested(
            tree_id=tree_id,
            run_id=state.run_id,
            iteration=iteration,
            env_uri=config.env,
            task_id=task_id,
            model_ref=model_ref,
            search_config=search_config,
            seed=search_seed(config.seed, iteration, index),
        )
        events.append(PlannedEvent(tree_stream(tree_id), request, derived_id("run-search", tree_id)))
    return Decision(tuple(events))


def _complete(state: RunState, final_model_ref: str, stopped_early: dict[str, Any] | None = None) -> Decision:
    summary: dict[str, Any] = {
        "iterations": len(state.iterations),
        "evaluations": {
            str(it.iteration): it.eval_metrics for it in state.iterations if it.eval_metrics is not None
        },
        "checkpoints": {str(it.iteration): it.checkpoint for it in state.iterations if it.checkpoint},
        "datasets": {str(it.iteration): it.dataset_id for it in state.iterations if it.dataset_id},
    }
    if stopped_early is not None:
        summary["stopped_early"] = stopped_early
    done = RunCompleted(state.run_id, final_model_ref, summary)
    return Decision((PlannedEvent(run_stream(state.run_id), done, run_event_id(state.run_id, "completed")),))


def _fail(state: RunState, reason: str) -> Decision:
    failed = RunFailed(state.run_id, reason)
    return Decision((PlannedEvent(run_stream(state.run_id), failed, run_event_id(state.run_id, "failed")),))


def _next_or_complete(state: RunState, finished: int, model_ref: str, task_ids: Sequence[str]) -> Decision:
    if finished + 1 < state.config.iterations:
        return start_iteration(state, finished + 1, model_ref, task_ids)
    return _complete(state, model_ref)


def decide(state: RunState, event: DomainEvent, task_ids: Sequence[str] = ()) -> Decision:
    """What follows ``event`` for a run in ``state`` (the state BEFORE ``event`` was applied).

    ``task_ids`` are the tasks to search when the decision starts an iteration (resolved by the
    caller from ``config.tasks`` or the environment's split); they are ignored otherwise.
    """
    if isinstance(event, RunRequested):
        if state.status != "new":
            return NOTHING  # a redelivered request
        after = apply(state, event)
        if after.config.iterations < 1:
            return _fail(after, f"run {state.run_id}: iterations must be >= 1, got {after.config.iterations}")
        return start_iteration(after, 0, after.config.model, task_ids)
    if state.terminal or state.status == "new":
        return NOTHING
    current = state.current
    iteration = getattr(event, "iteration", None)
    if current is None or iteration != current.iteration:
        return NOTHING  # stale: about an iteration that is over (or never started)
    if isinstance(event, IterationDatasetEmpty):
        if state.config.learns_online(current.iteration) and not state.config.data_only:
            # an online learner plays for its own data: the search's empty dataset does not stop it
            online = derived_id("online-data", state.run_id, current.iteration)
            return Decision(effect=TrainModel(current.iteration, current.model_ref, online))
        if current.iteration == 0:
            return _fail(state, f"iteration {iteration}: the dataset is empty: {event.reason}")
        stopped = {"iteration": current.iteration, "reason": f"the dataset is empty: {event.reason}"}
        return _complete(state, current.model_ref, stopped_early=stopped)
    if isinstance(event, TrainingFailed):
        return _fail(state, f"iteration {iteration}: training failed: {event.reason}")
    if isinstance(event, IterationDatasetReady):
        if current.checkpoint is not None or current.eval_metrics is not None:
            return NOTHING
        if state.config.data_only:
            return _next_or_complete(state, current.iteration, current.model_ref, task_ids)
        return Decision(effect=TrainModel(current.iteration, current.model_ref, event.dataset_id))
    if isinstance(event, ModelTrained):
        if current.eval_metrics is not None:
            return NOTHING
        return Decision(effect=EvaluateModel(current.iteration, event.checkpoint, state.config.model))
    if isinstance(event, IterationEvaluated):
        after = apply(state, event)
        model_ref = current.checkpoint or event.model_ref
        return _next_or_complete(after, current.iteration, model_ref, task_ids)
    return NOTHING


def needs_tasks(state: RunState, event: DomainEvent) -> bool:
    """Whether ``decide(state, event)`` may start an iteration (so the caller must resolve tasks)."""
    if isinstance(event, RunRequested):
        return state.status == "new"
    if isinstance(event, IterationEvaluated):
        return True
    return isinstance(event, IterationDatasetReady) and state.config.data_only
