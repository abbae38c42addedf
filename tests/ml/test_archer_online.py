"""Online ArCHer over the real parts: a tiny Llama plays TextCraft in-process, every round's episodes
are appended to the PostgreSQL event log as ``EpisodePlayed`` (and the replay buffer rebuilt from
them equals the learner's), the critic's TD loss falls on a fixed buffer, the actor moves away from
the starting model (KL > 0, parameters changed), and a job stopped mid-way resumes from its last
round without playing or recording any episode twice."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
import torch

from core.domain.events import EpisodePlayed
from core.domain.replay import buffer_id, rebuild_buffer, round_slots
from core.envs.registry import open_env
from core.store.factory import open_store
from core.store.sql import SqlEventStore
from tests.ml.learner_data import tiny_learner_model
from train_service.archer import ArcherConfig
from train_service.archer_online import OnlineSetup, StoreEpisodeLog, train_archer_online_async
from train_service.archer_updates import ArcherLearner
from train_service.checkpoint import read_meta
from train_service.hf_trainer import TrainingCancelled, TrainJob
from train_service.value_model import has_critic

ENV = "textcraft?distractors=2"


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_learner_model(tmp_path_factory.mktemp("tiny") / "m")


@pytest.fixture
async def store(pg_url: str) -> AsyncIterator[SqlEventStore]:
    opened = await open_store(pg_url, create_tables=True)
    try:
        yield opened
    finally:
        await opened.engine.dispose()


def tasks() -> tuple[str, ...]:
    return tuple(open_env(ENV).task_ids("train")[:3])


def online(**kw: object) -> ArcherConfig:
    base: dict[str, object] = dict(
        mode="online",
        iterations=2,
        warmup_iters=0,
        critic_epochs=2,
        actor_epochs=1,
        batch_size=2,
        grad_accumulation=1,
        rollout_episodes=2,
        episode_max_steps=3,
        head_hidden=16,
        max_state_tokens=96,
        max_action_tokens=24,
        max_length=192,
        critic_lr=1e-3,
        actor_lr=1e-2,
        kl_coef=0.01,
        max_new_tokens=8,
        seed=3,
    )
    base.update(kw)
    return ArcherConfig(**base)  # type: ignore[arg-type]


def setup(store: SqlEventStore, log: StoreEpisodeLog | None = None) -> OnlineSetup:
    return OnlineSetup(lambda: open_env(ENV), tasks(), log or StoreEpisodeLog(store, "proj-1"))


def test_round_slots_cycle_over_tasks_across_rounds() -> None:
    first = round_slots(("a", "b", "c"), 0, 2, seed=1)
    second = round_slots(("a", "b", "c"), 1, 2, seed=1)
    assert [s.task_id for s in first + second] == ["a", "b", "c", "a"]
    assert len({s.seed for s in first + second}) == 4


async def test_online_rounds_log_their_episodes_and_move_the_actor(
    base_model: Path, store: SqlEventStore, tmp_path: Path
) -> None:
    cfg = online()
    report = await train_archer_online_async(
        TrainJob(base_model, tmp_path / "out", run_id="run-1", iteration=0, dataset_id="d1"),
        cfg,
        setup(store),
    )
    m = report.metrics
    assert m["mode"] == "online" and m["rounds"] == 2 and m["episodes"] == 4
    assert m["critic_updates"] == 4 and m["actor_updates"] == 2
    assert m["env_steps"] == sum(m["env_steps_by_round"]) and m["env_steps"] > 0
    assert m["kl_last"] is not None and m["kl_last"] > 0
    # the episodes are in the event log, one stream for the iteration's buffer, in round order
    recorded = await store.read_stream(f"episodes-{buffer_id('run-1', 0)}")
    events = [r.event for r in recorded]
    assert all(isinstance(e, EpisodePlayed) for e in events)
    played = [e for e in events if isinstance(e, EpisodePlayed)]
    assert [(e.round, e.index) for e in played] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(r.metadata.project_id == "proj-1" and r.metadata.producer == "train" for r in recorded)
    assert [e.task_id for e in played] == list(tasks()) + [tasks()[0]]
    assert sum(len(e.trajectory.steps) for e in played) == m["env_steps"]
    # the buffer rebuilt from the log holds every transition the learner trained on
    assert len(rebuild_buffer(played, cfg.buffer_capacity)) == m["buffer"] == m["env_steps"]
    # the actor moved: its weights differ from the starting model's
    start = ArcherLearner(base_model, online(kl_coef=0.0)).actor.state_dict()
    from transformers import AutoModelForCausalLM

    trained = AutoModelForCausalLM.from_pretrained(report.checkpoint).state_dict()
    assert any(not torch.equal(start[k], trained[k]) for k in start)
    assert has_critic(report.checkpoint)
    meta = read_meta(report.checkpoint)
    assert meta.config["mode"] == "online" and meta.metrics["episodes"] == 4


async def test_critic_loss_falls_on_a_fixed_buffer(
    base_model: Path, store: SqlEventStore, tmp_path: Path
) -> None:
    cfg = online(iterations=1, critic_epochs=1, actor_epochs=0, rollout_episodes=3)
    await train_archer_online_async(
        TrainJob(base_model, tmp_path / "o", run_id="run-2", dataset_id="d"), cfg, setup(store)
    )
    recorded = await StoreEpisodeLog(store).read(buffer_id("run-2", 0))
    buffer = rebuild_buffer(recorded, 100).items()
    assert len(buffer) >= 3
    learner = ArcherLearner(base_model, online(kl_coef=0.0))
    batch = list(buffer[:6])
    with torch.no_grad():
        before, _ = learner.critic_loss(batch)
    for _ in range(5):
        learner.critic_update([batch])
    with torch.no_grad():
        after, _ = learner.critic_loss(batch)
    assert float(after) < float(before)


class _StopAfterRounds(StoreEpisodeLog):
    """The real log, counting the rounds appended (the test cancels once it has seen enough)."""

    def __init__(self, store: SqlEventStore, rounds: int) -> None:
        super().__init__(store, "proj-1")
        self.appended = 0
        self.rounds = rounds

    async def append_round(self, buffer: str, records: Sequence[EpisodePlayed], expected: int) -> None:
        await super().append_round(buffer, records, expected)
        self.appended += 1


async def test_a_stopped_job_resumes_from_its_last_round(
    base_model: Path, store: SqlEventStore, tmp_path: Path
) -> None:
    cfg = online(iterations=3)
    log = _StopAfterRounds(store, rounds=2)
    out = tmp_path / "ckpt"
    with pytest.raises(TrainingCancelled):
        # cancelled right after round 1's episodes are logged, before its updates and checkpoint
        await train_archer_online_async(
            TrainJob(base_model, out, run_id="run-3", dataset_id="d3", should_stop=lambda: log.appended >= 2),
            cfg,
            setup(store, log),
        )
    assert not out.exists()
    again = _StopAfterRounds(store, rounds=99)
    report = await train_archer_online_async(
        TrainJob(base_model, out, run_id="run-3", dataset_id="d3"), cfg, setup(store, again)
    )
    m = report.metrics
    assert m["resumed_at_round"] == 1  # round 0 was checkpointed; round 1 starts again
    assert again.appended == 1  # round 1's logged episodes were reused, only round 2 was played
    assert m["rounds"] == 3 and m["episodes"] == 6
    recorded = await StoreEpisodeLog(store).read(buffer_id("run-3", 0))
    assert sorted((e.round, e.index) for e in recorded) == [(r, i) for r in range(3) for i in range(2)]
    assert len({e.episode_id for e in recorded}) == 6


async def test_the_online_baselines_share_the_loop_but_not_the_critic(
    base_model: Path, store: SqlEventStore, tmp_path: Path
) -> None:
    cfg = online(iterations=1, kl_coef=0.0)
    reinforce = await train_archer_online_async(
        TrainJob(base_model, tmp_path / "r", run_id="run-4", dataset_id="r"),
        cfg,
        setup(store),
        algorithm="reinforce",
    )
    assert reinforce.metrics["algorithm"] == "reinforce"
    assert reinforce.metrics["critic_updates"] == 0 and reinforce.metrics["actor_updates"] == 1
    # filtered BC learns only from successes: the untrained tiny model has none, so nothing moves
    bc = await train_archer_online_async(
        TrainJob(base_model, tmp_path / "b", run_id="run-5", dataset_id="b"),
        cfg,
        setup(store),
        algorithm="filtered_bc",
    )
    assert bc.metrics["episodes"] == 2 and bc.metrics["actor_updates"] == 0
    with pytest.raises(ValueError, match="algorithm must be one of"):
        await train_archer_online_async(
            TrainJob(base_model, tmp_path / "x"), cfg, setup(store), algorithm="ppo"
        )
