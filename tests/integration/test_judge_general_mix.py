"""The warm start's judge set kept mixed into an iteration's SFT, on a real store: the judge examples
written next to the warm model (``write_judge_general``) become the run's general data
(``with_judge_general``), and the train service's dataset writer mixes them in by the eta rule
(G = round(A * (1 - eta) / eta), capped by what is available), each training only its answer word."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.domain.config import RunConfig
from core.domain.critic import LABEL_WORDS
from core.domain.events import GoodTrajectoryFound, NewEvent
from core.domain.ids import tree_stream
from core.domain.runs import RunState
from core.domain.trajectory import Step, Trajectory
from core.envs.textcraft import TextCraftEnv
from core.runtime.settings import load_settings
from core.store.sql import SqlEventStore
from train_service.judge_data import (
    JUDGE_GENERAL_FILE,
    judge_samples,
    with_judge_general,
    write_judge_general,
)
from train_service.runs import RunEffects

ENV = TextCraftEnv(distractors=1)
STEPS = (
    Step("t", "get 1 ink sac", "Got 1 ink sac"),
    Step("t", "craft 1 black dye using 1 ink sac", "Crafted 1 minecraft:black_dye", 1.0, True),
)


async def _dataset(store: SqlEventStore, home: Path, config: RunConfig, goods: int) -> tuple[list, dict]:  # type: ignore[type-arg]
    for i in range(goods):
        trajectory = Trajectory(
            task=f"Goal: craft black dye {i}.", instruction="You craft.", steps=STEPS, reward=1.0
        )
        found = GoodTrajectoryFound(f"good-{i}", f"tree-{i}", "run-1", 0, f"leaf-{i}", trajectory)
        await store.append([NewEvent(tree_stream(f"tree-{i}"), found)])
    effects = RunEffects(load_settings(home=home), store)
    path, summary = await effects.write_dataset(RunState(run_id="run-1", config=config), 0, "ds-1")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return rows, json.loads(path.with_name("iter-0.manifest.json").read_text())


@pytest.mark.parametrize(("eta", "goods", "general"), [(0.2, 2, 8), (0.5, 3, 3), (1.0, 2, 0)])
async def test_the_judge_set_is_mixed_in_by_the_eta_rule(
    store: SqlEventStore, tmp_path: Path, eta: float, goods: int, general: int
) -> None:
    warm = tmp_path / "warm"
    warm.mkdir()
    judge = judge_samples(ENV, ENV.task_ids("demo"), 2)
    assert write_judge_general(judge, warm) == warm / JUDGE_GENERAL_FILE
    data, note = with_judge_general(RunConfig(model=str(warm), eta=eta).to_data(), str(warm))
    assert data["general_data"] == str(warm / JUDGE_GENERAL_FILE) and f"eta {eta}" in note
    rows, manifest = await _dataset(store, tmp_path / "home", RunConfig.from_data(data), goods)
    mixed = [r for r in rows if r["kind"] == "general"]
    # G = round(A * (1 - eta) / eta) judge examples next to the A agent samples (2 * 4 = 8, 3 * 1 = 3, 0)
    assert len(mixed) == general and len(rows) == goods + general
    assert manifest["agent_share"] == pytest.approx(goods / (goods + general))
    assert manifest["general_source"].startswith(str(warm / JUDGE_GENERAL_FILE))
    asked = {tuple(m.content for m in s.messages) for s in judge}
    for row in mixed:  # each one of the judge examples, unchanged, training its answer word only
        assert tuple(m["content"] for m in row["messages"]) in asked
        weights = [m.get("weight", 0) for m in row["messages"] if m["role"] == "assistant"]
        assert weights[-1] == 1 and not any(weights[:-1])
        assert row["messages"][-1]["content"] in LABEL_WORDS.values()


def test_the_rule_is_never_silent_and_a_users_general_data_wins(tmp_path: Path) -> None:
    warm = tmp_path / "warm"
    warm.mkdir()
    config = RunConfig(model=str(warm)).to_data()
    assert with_judge_general(config, str(warm)) == (config, "")  # no judge set: nothing changes
    write_judge_general(judge_samples(ENV, ENV.task_ids("demo"), 1), warm)
    own = {**config, "general_data": str(tmp_path / "chat.jsonl")}
    kept, note = with_judge_general(own, str(warm))
    assert kept == own and "not mixed in" in note
    with pytest.raises(ValueError, match="no judge samples"):
        write_judge_general([], warm)


async def test_max_general_makes_the_judge_set_a_small_replay(store: SqlEventStore, tmp_path: Path) -> None:
    """RunConfig.max_general caps the judge examples mixed in (eta would ask for 8 next to 2 agent
    samples); the manifest says the cap bound."""
    warm = tmp_path / "warm"
    warm.mkdir()
    write_judge_general(judge_samples(ENV, ENV.task_ids("demo"), 2), warm)
    data, note = with_judge_general(RunConfig(model=str(warm), eta=0.2, max_general=3).to_data(), str(warm))
    assert "at most 3: a small replay" in note  # the decision printed names the cap
    rows, manifest = await _dataset(store, tmp_path / "home", RunConfig.from_data(data), 2)
    assert sum(r["kind"] == "general" for r in rows) == 3 and len(rows) == 5
    assert manifest["general_wanted"] == 8 and "max_general caps it at 3" in manifest["note"]
