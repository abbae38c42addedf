"""The train service's dataset writer on a real store: good trajectories from GoodTrajectoryFound
events become samples whose env-rejected steps and loop repeats are at weight 0 (RunConfig switches),
the manifest file counts them, and without general data the mix is agent-only with a logged note."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from core.domain.config import RunConfig
from core.domain.events import GoodTrajectoryFound, NewEvent
from core.domain.ids import tree_stream
from core.domain.runs import RunState
from core.domain.trajectory import Step, Trajectory
from core.runtime.settings import load_settings
from core.store.sql import SqlEventStore
from train_service.runs import RunEffects

STEPS = (
    Step("t", "get 1 ink sac", "Got 1 ink sac"),
    Step("t", "craft 1 orange bone using 1 orange tulip", "Could not find a valid recipe for orange bone"),
    Step("t", "inventory", "Inventory: [ink sac] (1)"),
    Step("t", "inventory", "Inventory: [ink sac] (1)"),
    Step("t", "inventory", "Inventory: [ink sac] (1)"),
    Step("t", "craft 1 black dye using 1 ink sac", "Crafted 1 minecraft:black_dye", 1.0, True),
)


async def _write(store: SqlEventStore, tmp_path: Path, config: RunConfig) -> tuple[list[dict], dict]:  # type: ignore[type-arg]
    trajectory = Trajectory(task="Goal: craft black dye.", instruction="You craft.", steps=STEPS, reward=1.0)
    found = GoodTrajectoryFound("good-1", "tree-1", "run-1", 0, "leaf-1", trajectory)
    await store.append([NewEvent(tree_stream("tree-1"), found)])
    effects = RunEffects(load_settings(home=tmp_path), store)
    path, summary = await effects.write_dataset(RunState(run_id="run-1", config=config), 0, "ds-1")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    manifest = json.loads(path.with_name("iter-0.manifest.json").read_text())
    assert summary["masked_good_steps"] == {
        "invalid": manifest["masked_invalid_steps"],
        "loop": manifest["masked_loop_steps"],
    }
    return rows, manifest


def _assistant_weights(row: dict) -> list[int]:  # type: ignore[type-arg]
    return [m.get("weight", 0) for m in row["messages"] if m["role"] == "assistant"]


async def test_good_samples_mask_rejected_steps_and_loops_and_the_manifest_counts_them(
    store: SqlEventStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="train_service.runs")
    rows, manifest = await _write(store, tmp_path, RunConfig(model="m"))
    (row,) = rows
    assert _assistant_weights(row) == [1, 0, 1, 0, 0, 1]
    assert any("orange bone" in m["content"] for m in row["messages"] if m["role"] == "assistant")  # context
    assert manifest["masked_invalid_steps"] == 1 and manifest["masked_loop_steps"] == 2
    assert manifest["agent_share"] == 1.0 and "agent-only" in manifest["note"]
    assert any("agent-only" in r.getMessage() for r in caplog.records)


async def test_run_config_switches_the_masking_off(store: SqlEventStore, tmp_path: Path) -> None:
    config = RunConfig(model="m", mask_invalid_steps=False, mask_loop_steps=False)
    rows, manifest = await _write(store, tmp_path, config)
    assert _assistant_weights(rows[0]) == [1] * 6
    assert manifest["masked_invalid_steps"] == 0 and manifest["masked_loop_steps"] == 0
    assert manifest["config"]["mask_invalid_steps"] is False
