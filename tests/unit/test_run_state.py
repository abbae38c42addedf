"""The Run state machine (core.domain.runs): transitions, deterministic ids, stops and stale events."""

from __future__ import annotations

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
from core.domain.ids import run_stream, tree_stream
from core.domain.runs import EvaluateModel, TrainModel, apply, decide, fold, needs_tasks

RUN = "run-1"
TASKS = ("3", "7")


def requested(**config: object) -> RunRequested:
    cfg = RunConfig(model="/models/start", iterations=2, seed=5, search={"iterations": 4}, **config)  # type: ignore[arg-type]
    return RunRequested(RUN, "proj", cfg.to_data())


def drive(history: list[DomainEvent], event: DomainEvent, tasks: tuple[str, ...] = TASKS):  # type: ignore[no-untyped-def]
    decision = decide(fold(RUN, history), event, tasks)
    history.append(event)
    history.extend(p.event for p in decision.events if p.stream_id == run_stream(RUN))
    return decision


def test_full_two_iteration_run() -> None:
    history: list[DomainEvent] = []
    d = drive(history, requested())
    started = d.events[0].event
    assert isinstance(started, IterationStarted)
    assert (started.iteration, started.model_ref, started.alpha) == (0, "/models/start", 0.5)
    searches = [p for p in d.events if isinstance(p.event, SearchRequested)]
    assert [p.event.task_id for p in searches] == list(TASKS)  # type: ignore[attr-defined]
    assert tuple(p.event.tree_id for p in searches) == started.tree_ids  # type: ignore[attr-defined]
    assert all(p.stream_id == tree_stream(p.event.tree_id) for p in searches)  # type: ignore[attr-defined]
    first = searches[0].event
    assert isinstance(first, SearchRequested)
    assert first.search_config == {"iterations": 4, "alpha": 0.5, "beta": 0.2}
    assert len({p.event.seed for p in searches}) == 2  # type: ignore[attr-defined]

    d = drive(history, IterationDatasetReady(RUN, 0, "ds0", 3, 2, 0))
    assert d.events == () and d.effect == TrainModel(0, "/models/start", "ds0")
    d = drive(history, ModelTrained(RUN, 0, "ds0", "/ckpt/0"))
    assert d.effect == EvaluateModel(0, "/ckpt/0", "/models/start")
    d = drive(history, IterationEvaluated(RUN, 0, "/ckpt/0", {"success_rate": 0.25}))
    nxt = d.events[0].event
    assert isinstance(nxt, IterationStarted)
    assert (nxt.iteration, nxt.model_ref, nxt.alpha) == (1, "/ckpt/0", 0.7)
    assert set(nxt.tree_ids).isdisjoint(started.tree_ids)

    drive(history, IterationDatasetReady(RUN, 1, "ds1", 1, 1, 0))
    drive(history, ModelTrained(RUN, 1, "ds1", "/ckpt/1"))
    d = drive(history, IterationEvaluated(RUN, 1, "/ckpt/1", {"success_rate": 0.5}))
    done = d.events[0].event
    assert isinstance(done, RunCompleted)
    assert done.final_model_ref == "/ckpt/1"
    assert done.summary["evaluations"]["1"] == {"success_rate": 0.5}
    assert done.summary["checkpoints"] == {"0": "/ckpt/0", "1": "/ckpt/1"}
    state = fold(RUN, history)
    assert state.status == "completed" and state.final_model_ref == "/ckpt/1"
    # after completion nothing more happens
    assert decide(state, IterationEvaluated(RUN, 1, "/ckpt/1", {}), TASKS).events == ()


def test_decisions_are_deterministic_so_a_retry_appends_nothing_new() -> None:
    a = decide(fold(RUN, []), requested(), TASKS)
    b = decide(fold(RUN, []), requested(), TASKS)
    assert [p.event_id for p in a.events] == [p.event_id for p in b.events]
    assert [p.event for p in a.events] == [p.event for p in b.events]
    other = decide(fold("run-2", []), RunRequested("run-2", "proj", requested().config), TASKS)
    assert {p.event_id for p in a.events}.isdisjoint(p.event_id for p in other.events)


def test_redelivered_and_stale_events_decide_nothing() -> None:
    history: list[DomainEvent] = []
    drive(history, requested())
    assert decide(fold(RUN, history), requested(), TASKS).events == ()  # request redelivered
    # dataset of an iteration that is not the current one
    assert decide(fold(RUN, history), IterationDatasetReady(RUN, 3, "x", 1, 0, 0), TASKS).effect is None
    drive(history, IterationDatasetReady(RUN, 0, "ds0", 1, 0, 0))
    drive(history, ModelTrained(RUN, 0, "ds0", "/ckpt/0"))
    # a second ModelTrained for the same iteration after evaluation: nothing
    drive(history, IterationEvaluated(RUN, 0, "/ckpt/0", {}))
    assert decide(fold(RUN, history), ModelTrained(RUN, 0, "ds0", "/ckpt/0"), TASKS).effect is None


def test_an_empty_first_dataset_and_training_failure_fail_the_run_with_the_reason() -> None:
    history: list[DomainEvent] = []
    drive(history, requested())
    d = drive(history, IterationDatasetEmpty(RUN, 0, "no pairs and no good trajectory"))
    failed = d.events[0].event
    assert isinstance(failed, RunFailed)
    assert "iteration 0" in failed.reason and "no pairs and no good trajectory" in failed.reason
    assert fold(RUN, history).status == "failed"

    history = []
    drive(history, requested())
    drive(history, IterationDatasetReady(RUN, 0, "ds0", 1, 0, 0))
    d = drive(history, TrainingFailed(RUN, 0, "CUDA out of memory"))
    assert isinstance(d.events[0].event, RunFailed) and "CUDA out of memory" in d.events[0].event.reason


def test_an_empty_later_iteration_completes_the_run_with_the_last_trained_model() -> None:
    history: list[DomainEvent] = []
    drive(history, requested())
    drive(history, IterationDatasetReady(RUN, 0, "ds0", 3, 2, 1))
    drive(history, ModelTrained(RUN, 0, "ds0", "/ckpt/0"))
    d = drive(history, IterationEvaluated(RUN, 0, "/ckpt/0", {"success_rate": 0.5}))
    assert any(isinstance(p.event, IterationStarted) and p.event.iteration == 1 for p in d.events)
    d = drive(history, IterationDatasetEmpty(RUN, 1, "0 pair(s) and no good trajectory reached alpha 0.7"))
    assert d.effect is None and len(d.events) == 1
    done = d.events[0].event
    assert isinstance(done, RunCompleted)
    # the model that searched iteration 1 (iteration 0's checkpoint) is the run's result
    assert done.final_model_ref == "/ckpt/0"
    assert done.summary["stopped_early"]["iteration"] == 1
    assert "no good trajectory" in done.summary["stopped_early"]["reason"]
    assert done.summary["checkpoints"] == {"0": "/ckpt/0"} and done.summary["datasets"] == {"0": "ds0"}
    state = fold(RUN, history)
    assert state.status == "completed" and state.final_model_ref == "/ckpt/0"
    assert state.reason.startswith("stopped early at iteration 1: the dataset is empty")
    # the same event redelivered decides nothing more
    assert decide(state, IterationDatasetEmpty(RUN, 1, "again"), TASKS).events == ()


def test_a_learner_with_no_data_after_the_dataset_was_ready_ends_the_run_early_too() -> None:
    # DPO's pairs are read when it trains (train_service.runs): the SFT dataset was ready, the
    # learner's own data is empty -> the same outcome as an empty dataset, never a failure
    history: list[DomainEvent] = []
    drive(history, requested())
    drive(history, IterationDatasetReady(RUN, 0, "ds0", 3, 2, 1))
    drive(history, ModelTrained(RUN, 0, "ds0", "/ckpt/0"))
    drive(history, IterationEvaluated(RUN, 0, "/ckpt/0", {"success_rate": 0.5}))
    drive(history, IterationDatasetReady(RUN, 1, "ds1", 4, 0, 4))
    d = drive(history, IterationDatasetEmpty(RUN, 1, "train.method dpo: no preference pairs"))
    done = d.events[0].event
    assert d.effect is None and isinstance(done, RunCompleted) and done.final_model_ref == "/ckpt/0"
    assert "no preference pairs" in done.summary["stopped_early"]["reason"]
    assert fold(RUN, history).status == "completed"


def test_cancel_stops_the_run() -> None:
    history: list[DomainEvent] = []
    drive(history, requested())
    history.append(RunCancelled(RUN, "user said stop"))
    state = fold(RUN, history)
    assert state.status == "cancelled" and state.reason == "user said stop"
    d = decide(state, IterationDatasetReady(RUN, 0, "ds0", 1, 0, 0), TASKS)
    assert d.events == () and d.effect is None
    # a completion after a cancel does not revive it
    assert apply(state, RunCompleted(RUN, "/x")).status == "cancelled"


def test_data_only_runs_skip_training() -> None:
    history: list[DomainEvent] = []
    drive(history, requested(data_only=True))
    d = drive(history, IterationDatasetReady(RUN, 0, "ds0", 1, 0, 0))
    assert d.effect is None
    nxt = d.events[0].event
    assert isinstance(nxt, IterationStarted) and nxt.iteration == 1 and nxt.model_ref == "/models/start"
    d = drive(history, IterationDatasetReady(RUN, 1, "ds1", 1, 0, 0))
    assert isinstance(d.events[0].event, RunCompleted)


def test_bad_requests_fail_clearly() -> None:
    d = decide(fold(RUN, []), RunRequested(RUN, "p", RunConfig(model="m", iterations=0).to_data()), TASKS)
    assert isinstance(d.events[0].event, RunFailed) and "iterations must be >= 1" in d.events[0].event.reason
    import pytest

    from core.domain.runs import RunStateError

    with pytest.raises(RunStateError, match="no tasks"):
        decide(fold(RUN, []), requested(), ())
    with pytest.raises(RunStateError, match="no model"):
        decide(fold(RUN, []), RunRequested(RUN, "p", RunConfig(model="").to_data()), TASKS)


def test_needs_tasks() -> None:
    assert needs_tasks(fold(RUN, []), requested())
    assert not needs_tasks(fold(RUN, [requested()]), ModelTrained(RUN, 0, "d", "c"))


def test_an_online_learner_trains_although_the_search_found_no_data() -> None:
    """ArCHer online plays for its own data: an empty search dataset still leads to TrainModel."""
    from core.domain.runs import TrainModel

    history: list[DomainEvent] = []
    drive(history, requested(train={"method": "archer", "mode": "online"}))
    d = drive(history, IterationDatasetEmpty(RUN, 0, "no pairs and no good trajectory"))
    assert isinstance(d.effect, TrainModel) and d.effect.iteration == 0 and not d.events
    assert fold(RUN, history).status != "failed"
    # offline ArCHer learns from the trees: the empty dataset still fails iteration 0
    history = []
    drive(history, requested(train={"method": "archer", "mode": "offline"}))
    d = drive(history, IterationDatasetEmpty(RUN, 0, "no pairs"))
    assert isinstance(d.events[0].event, RunFailed)
