"""The evaluation protocol's pure choices: stratified held-out tasks, episode seeds, the recovery set."""

from __future__ import annotations

from collections import Counter

import pytest

from core.domain.eval_protocol import (
    RecoveryPrefix,
    episode_seed,
    recovery_set,
    recovery_set_id,
    stratified_tasks,
)
from core.domain.metrics import EpisodeResult
from core.envs.textcraft import TextCraftEnv
from train_service.evaluation import held_out_tasks, task_strata


def test_stratified_tasks_covers_every_stratum_in_proportion() -> None:
    ids = [str(i) for i in range(100)]
    strata = ["d1"] * 25 + ["d2"] * 40 + ["d3"] * 24 + ["d4"] * 11
    chosen = stratified_tasks(ids, strata, 8)
    depth = dict(zip(ids, strata, strict=True))
    counts = Counter(depth[t] for t in chosen)
    assert counts == {"d1": 2, "d2": 3, "d3": 2, "d4": 1}
    assert chosen == sorted(chosen, key=int)  # the split's order is kept
    assert len(set(chosen)) == 8
    # fewer slots than strata: the first strata get one each
    assert Counter(depth[t] for t in stratified_tasks(ids, strata, 3)) == {"d1": 1, "d2": 1, "d3": 1}
    # a cap at or above the size, or none, keeps everything
    assert stratified_tasks(ids, strata, None) == ids and stratified_tasks(ids, strata, 500) == ids
    twenty = Counter(depth[t] for t in stratified_tasks(ids, strata, 20))
    assert sum(twenty.values()) == 20 and min(twenty.values()) >= 2 and twenty["d2"] == max(twenty.values())


def test_stratified_tasks_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="strata labels"):
        stratified_tasks(["a", "b"], ["x"], 1)
    with pytest.raises(ValueError, match=">= 1"):
        stratified_tasks(["a", "b"], ["x", "x"], 0)


def test_textcraft_held_out_tasks_are_stratified_by_depth() -> None:
    env = TextCraftEnv(distractors=0)
    test = env.task_ids("test")
    assert task_strata(env, test[:1]) == ["depth 1"]
    chosen = held_out_tasks(env, test, 8)
    assert Counter(task_strata(env, chosen)) == {"depth 1": 2, "depth 2": 3, "depth 3": 2, "depth 4": 1}
    assert set(chosen) <= set(test)
    # without stratification the cap takes the first ids: all depth 1
    assert set(task_strata(env, held_out_tasks(env, test, 8, stratify=False))) == {"depth 1"}


def test_episode_seed_is_stable_and_distinct() -> None:
    assert episode_seed(0, "12", 0) == episode_seed(0, "12", 0)
    seeds = {episode_seed(s, t, e) for s in (0, 1) for t in ("1", "2") for e in range(3)}
    assert len(seeds) == 12 and all(0 <= x < 2**31 for x in seeds)
    assert episode_seed(0, "1", 0) != episode_seed(0, "1", 0, "recovery")


def _episode(task: str, actions: int, reward: float) -> EpisodeResult:
    return EpisodeResult(
        task, tuple(f"get {i} stick" for i in range(actions)), (True,) * actions, reward, False
    )


def test_recovery_set_takes_failed_episodes_truncated_at_seeded_steps() -> None:
    episodes = [
        (0, _episode("1", 10, 0.0)),
        (1, _episode("1", 6, 1.0)),  # a success: never a recovery prefix
        (0, _episode("2", 1, 0.0)),  # one action cannot be cut
        (1, _episode("2", 30, 0.0)),
        (0, _episode("3", 2, 0.0)),
    ]
    prefixes = recovery_set(episodes, limit=8, seed=3)
    assert [(p.task_id, p.episode) for p in prefixes] == [("1", 0), ("2", 1), ("3", 0)]
    for prefix in prefixes:
        source = next(r for e, r in episodes if (r.task_id, e) == (prefix.task_id, prefix.episode))
        assert prefix.source_steps == len(source.actions)
        assert 1 <= len(prefix.actions) <= prefix.source_steps - 1
        assert prefix.actions == source.actions[: len(prefix.actions)]
    assert recovery_set(episodes, limit=8, seed=3) == prefixes  # seeded: the same every time
    cuts = {len(p.actions) for seed in range(20) for p in recovery_set(episodes, limit=8, seed=seed)[1:2]}
    assert len(cuts) > 3  # the cut is a random step, not a fixed rule
    limited = recovery_set(episodes, limit=2, seed=3)
    assert len(limited) == 2 and set(limited) <= set(prefixes)  # a seeded choice among the same
    assert recovery_set(episodes, limit=0, seed=3) == []


def test_recovery_prefix_round_trips_and_rejects_bad_cuts() -> None:
    prefix = RecoveryPrefix("7", ("get 1 oak logs", ""), 2, 5)
    assert RecoveryPrefix.from_data(prefix.to_data()) == prefix
    assert recovery_set_id([prefix]) == recovery_set_id([RecoveryPrefix.from_data(prefix.to_data())])
    assert recovery_set_id([prefix]) != recovery_set_id([])
    with pytest.raises(ValueError, match="drop at least 1"):
        RecoveryPrefix("7", ("a", "b"), 0, 2)
    with pytest.raises(ValueError, match="keep at least 1"):
        RecoveryPrefix("7", (), 0, 2)


async def test_recovery_budget_is_counted_after_the_replayed_prefix() -> None:
    """A continuation gets ``max_steps`` actions of its own AFTER the prefix (the prefix used to
    use the budget up, leaving the model nothing to recover with)."""
    from search_service.noisy_expert import NoisyExpertPolicy
    from train_service.evaluation import EvalConfig, play

    env = TextCraftEnv(distractors=0, max_steps=50)
    task = env.task_ids("test")[0]
    prefix = ("inventory", "get 1 nothing", "inventory", "inventory")
    policy = NoisyExpertPolicy(garbage_rate=1.0)  # never a parseable action: never done
    cfg = EvalConfig(max_steps=3, temperature=0.0, episodes_per_task=1)
    fresh, continued = await play(
        policy, lambda: TextCraftEnv(distractors=0, max_steps=50), [task, task], cfg, seeds=[1, 2],
        prefixes=[(), prefix],
    )  # fmt: skip
    assert len(fresh.actions) == 3 and fresh.prefix_steps == 0
    assert continued.prefix_steps == len(prefix) == 4
    assert len(continued.actions) == 4 + 3  # the prefix, then the model's own three
    assert continued.actions[:4] == prefix
    with pytest.raises(ValueError, match="recovery_seeds"):
        EvalConfig(recovery_seeds=0)
