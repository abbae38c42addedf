"""train.method as a schedule (one method per iteration, the last repeating) in the train service
on a real store: each iteration's training reads that iteration's learner and dataset kind.
Iteration 0 of ``["sft", "dpo"]`` writes the SFT dataset (iter-0.jsonl) from the good trajectory;
iterations 1 and 2 are DPO's, whose dataset is the iteration's pairs (none here: the training
effect returns ``IterationDatasetEmpty`` naming dpo and the missing pairs, which ends a run early
as an empty SFT dataset does, and no SFT file is written for them)."""

from __future__ import annotations

from pathlib import Path

from core.domain.config import RunConfig
from core.domain.events import GoodTrajectoryFound, IterationDatasetEmpty, NewEvent, TrainingFailed
from core.domain.ids import tree_stream
from core.domain.runs import RunState, TrainModel
from core.domain.trajectory import Step, Trajectory
from core.runtime.settings import load_settings
from core.store.sql import SqlEventStore
from train_service.runs import RunEffects


async def test_each_iteration_trains_with_its_scheduled_method(store: SqlEventStore, tmp_path: Path) -> None:
    steps = (Step("t", "craft 1 black dye using 1 ink sac", "Crafted 1 minecraft:black_dye", 1.0, True),)
    good = Trajectory(task="Goal: craft black dye.", instruction="You craft.", steps=steps, reward=1.0)
    await store.append(
        [NewEvent(tree_stream("tree-1"), GoodTrajectoryFound("good-1", "tree-1", "run-1", 0, "leaf-1", good))]
    )
    missing = str(tmp_path / "no-such-model")
    config = RunConfig(model=missing, train={"method": ["sft", "dpo"], "beta": 0.2, "epochs": 1})
    effects = RunEffects(load_settings(home=tmp_path), store, inline_training=True)
    state = RunState(run_id="run-1", config=config)
    datasets = effects.run_dir("run-1") / "datasets"

    sft = await effects.train(state, TrainModel(0, missing, "ds-0"))
    assert (datasets / "iter-0.jsonl").is_file()  # SFT's dataset: the iteration's samples
    assert isinstance(sft, TrainingFailed) and "no-such-model" in sft.reason  # got as far as loading
    for iteration in (1, 2):  # dpo, then the last entry repeats
        dpo = await effects.train(state, TrainModel(iteration, missing, f"ds-{iteration}"))
        # no preference pair in the log: DPO's data is empty, decided as an empty SFT dataset
        assert isinstance(dpo, IterationDatasetEmpty), dpo
        assert dpo.iteration == iteration
        assert dpo.reason.startswith("train.method dpo:") and "no preference pairs" in dpo.reason
        assert not (datasets / f"iter-{iteration}.jsonl").exists()
