"""The paper's evaluation protocol through ``RunEffects.evaluate`` with real tiny models (loaded by
``from_pretrained`` like any model folder) on real TextCraft and the run's store.

The starting model is the warm-started tiny model of ``agentr run --quick``; the "trained" model
of each iteration is the un-warm-started base model it came from (a different model, so a prefix
that matches the starting model's episodes cannot have come from the evaluated one). The recovery
set is built only from the STARTING model's failed episodes on the HELD-OUT tasks (stratified over
depths, never a search task), truncated at seeded steps; iteration 1 continues the same prefixes.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from core.domain.config import RunConfig
from core.domain.eval_protocol import RecoveryPrefix, episode_seed, recovery_set_id
from core.domain.runs import EvaluateModel, IterationState, RunState
from core.envs.registry import open_env
from core.llm.registry import open_policy
from core.runtime.settings import load_settings
from tests.e2e.helpers import quick_tiny_model
from train_service.evaluation import EvalConfig, play, task_strata
from train_service.runs import RunEffects

pytestmark = pytest.mark.slow

ENV = "textcraft?distractors=0&max_steps=8"
EVALUATION = {
    "max_steps": 8,
    "max_tokens": 32,
    "episodes_per_task": 2,
    "temperature": 1.0,
    "recovery_episodes": 6,
    "seen_tasks": False,
}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    torch.set_num_threads(1)
    home = tmp_path_factory.mktemp("models-home")
    warm, _config = quick_tiny_model(home)
    base = next(p for p in (home / "models").iterdir() if p.name.startswith("tiny-"))
    return warm, str(base)


def _config(start: str) -> RunConfig:
    return RunConfig(
        env=ENV,
        model=start,
        split="demo",
        max_tasks=4,
        eval_split="test",
        max_eval_tasks=4,
        iterations=2,
        evaluation=EVALUATION,
        seed=5,
    )


async def _evaluate(
    effects: RunEffects, config: RunConfig, effect: EvaluateModel, done: dict[str, Any] | None
) -> dict[str, Any]:
    iterations = [IterationState(0, config.model, 0.5, (), eval_metrics=done)]
    if effect.iteration == 1:
        iterations.append(IterationState(1, effect.model_ref, 0.7, ()))
    state = RunState("run-eval-protocol", "running", "local", config, tuple(iterations))
    event = await effects.evaluate(state, effect)
    return event.metrics


async def test_recovery_set_comes_from_the_starting_models_held_out_failures(
    models: tuple[str, str], sqlite_url: str, tmp_path: Path
) -> None:
    from core.store.factory import open_store

    start, other = models
    config = _config(start)
    store = await open_store(sqlite_url, create_tables=True)
    try:
        effects = RunEffects(load_settings(home=tmp_path), store)
        held_out = await effects.eval_task_ids(config)
        searched = await effects.task_ids(config)
        probe = open_env(ENV)
        # held-out goals stratified over the four depths, none of them searched
        assert Counter(task_strata(probe, held_out)) == {
            "depth 1": 1,
            "depth 2": 1,
            "depth 3": 1,
            "depth 4": 1,
        }
        assert not set(held_out) & set(searched)
        seen_subset = await effects.seen_task_ids(config, EvalConfig(seen_max_tasks=2))
        assert len(seen_subset) == 2 and set(seen_subset) <= set(searched)
        assert await effects.seen_task_ids(config, EvalConfig(seen_tasks=False)) == []

        first = await _evaluate(effects, config, EvaluateModel(0, other, start), None)
        start_metrics = first["start"]
        assert start_metrics["model_version"] != first["model_version"]
        assert start_metrics["episodes"] == first["episodes"] == 2 * len(held_out)
        prefixes = [RecoveryPrefix.from_data(p) for p in start_metrics["recovery_set"]]
        assert prefixes, "the starting model failed some held-out episode, so the set is not empty"
        assert len(prefixes) <= EVALUATION["recovery_episodes"]
        assert {p.task_id for p in prefixes} <= set(held_out)
        # every prefix is the start of one of the STARTING model's failed episodes on that task:
        # replaying its seeded episode gives the same actions (and a failure)
        cfg = EvalConfig.from_data(EVALUATION)
        policy = open_policy(start)
        try:
            replayed = await play(
                policy,
                lambda: open_env(ENV),
                [p.task_id for p in prefixes],
                cfg,
                seeds=[episode_seed(config.seed, p.task_id, p.episode) for p in prefixes],
            )
        finally:
            await policy.close()
        for prefix, episode in zip(prefixes, replayed, strict=True):
            assert episode.reward < 1.0 and len(episode.actions) == prefix.source_steps
            assert episode.actions[: len(prefix.actions)] == prefix.actions
            assert 1 <= len(prefix.actions) < prefix.source_steps
        # the starting model and the iteration's model continued the same prefixes
        set_id = recovery_set_id(prefixes)
        # each prefix continued with cfg.recovery_seeds seeds (rates over prefixes x seeds)
        continued = cfg.recovery_seeds * len(prefixes)
        assert start_metrics["recovery"]["episodes"] == first["recovery"]["episodes"] == continued
        assert start_metrics["recovery"]["prefixes"] == first["recovery"]["prefixes"] == len(prefixes)
        assert start_metrics["recovery"]["set_id"] == first["recovery"]["set_id"] == set_id

        # iteration 1 reads the recorded set from iteration 0; the starting model is not re-run
        second = await _evaluate(effects, config, EvaluateModel(1, other, start), first)
        assert "start" not in second
        assert second["recovery"]["episodes"] == continued
        assert second["recovery"]["set_id"] == set_id
    finally:
        await store.close()
