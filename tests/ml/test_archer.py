"""ArCHer on a real tiny Llama: a critic update lowers the TD loss on a fixed batch, the target moves
by exactly tau, the actor's loss follows the advantage's sign, AWR weights, online sampling, and a
checkpoint with its critic that loads back."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from core.domain.transitions import Transition
from tests.ml.learner_data import hand_transitions, tiny_learner_model
from train_service.archer import ArcherConfig, train_archer
from train_service.archer_updates import ArcherLearner, awr_weights, expectile_loss
from train_service.checkpoint import read_meta
from train_service.hf_trainer import TrainJob
from train_service.value_model import has_critic, load_critic


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_learner_model(tmp_path_factory.mktemp("tiny") / "m")


def transitions() -> list[Transition]:
    return hand_transitions()


def small(**kw: object) -> ArcherConfig:
    base: dict[str, object] = dict(
        head_hidden=16,
        max_state_tokens=96,
        max_action_tokens=24,
        max_length=160,
        batch_size=3,
        grad_accumulation=1,
        critic_lr=1e-3,
        actor_lr=1e-2,
        kl_coef=0.0,
        max_new_tokens=6,
    )
    base.update(kw)
    return ArcherConfig(**base)  # type: ignore[arg-type]


def test_one_critic_update_lowers_the_td_loss_on_a_fixed_batch(base_model: Path) -> None:
    learner = ArcherLearner(base_model, small())
    batch = transitions()
    with torch.no_grad():
        before, _ = learner.critic_loss(batch)
    learner.critic_update([batch])
    with torch.no_grad():
        after, _ = learner.critic_loss(batch)
    assert float(after) < float(before)


def test_target_moves_by_tau(base_model: Path) -> None:
    learner = ArcherLearner(base_model, small(tau=0.25))
    target_before = [p.detach().clone() for p in learner.target.parameters()]
    online_before = [p.detach().clone() for p in learner.critic.parameters()]
    assert all(
        torch.equal(a, b) for a, b in zip(target_before, online_before, strict=True)
    )  # starts as a copy
    learner.critic_update([transitions()])
    moved = 0
    for t_old, t_new, o_new in zip(
        target_before, learner.target.parameters(), learner.critic.parameters(), strict=True
    ):
        assert torch.allclose(t_new, 0.75 * t_old + 0.25 * o_new, atol=1e-6)
        moved += int(not torch.equal(t_new, t_old))
    assert moved > 0 and not any(p.requires_grad for p in learner.target.parameters())


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_actor_loss_follows_the_advantage_sign(base_model: Path, sign: float) -> None:
    learner = ArcherLearner(base_model, small(actor_loss="pg", actor_lr=1e-3))
    t = transitions()[0]
    histories, actions = [t.state_messages()], [t.action_text()]
    batch = learner.turn_batch(histories, actions)
    with torch.no_grad():
        before = float(learner.turn_logps(learner.actor, batch)[0][0])
    learner.actor_opt.zero_grad()
    loss, _ = learner.actor_loss(histories, actions, torch.tensor([sign]))
    loss.backward()
    learner.actor_opt.step()
    with torch.no_grad():
        after = float(learner.turn_logps(learner.actor, batch)[0][0])
    assert (after - before) * sign > 0  # positive advantage: log-prob rises; negative: it falls


def test_turn_labels_cover_only_the_turn(base_model: Path) -> None:
    learner = ArcherLearner(base_model, small())
    t = transitions()[2]  # a -> b: history holds the first turn
    batch = learner.turn_batch([t.state_messages()], [t.action_text()])
    ids = batch["input_ids"][0].tolist()
    labels = batch["labels"][0].tolist()
    trained = learner.tokenizer.decode([i for i, lab in zip(ids, labels, strict=True) if lab != -100])
    assert "craft 4 stick using 2 oak planks" in trained
    assert "get 2 oak planks" not in trained and "Got 2 oak planks" not in trained


def test_awr_weights_and_expectile() -> None:
    adv = torch.tensor([-1.0, 0.0, 2.0])
    assert awr_weights(adv, 3.0, 100.0).tolist() == pytest.approx(
        [torch.exp(torch.tensor(-3.0)).item(), 1.0, 100.0]
    )
    diff = torch.tensor([1.0, -1.0])
    assert float(expectile_loss(diff, 0.7)) == pytest.approx((0.7 + 0.3) / 2)
    advantages = ArcherLearner.advantages  # A = min Q - min V is what the actor is weighted by
    assert advantages.__doc__ and "min(Q1, Q2)" in advantages.__doc__


def test_online_mode_samples_actions_from_the_actor(base_model: Path) -> None:
    learner = ArcherLearner(base_model, small(mode="online"))
    batch = transitions()
    sampled = learner.sample_actions([t.state_messages() for t in batch])
    assert len(sampled) == len(batch) and all(isinstance(a, str) for a in sampled)
    loss, parts = learner.critic_loss(batch)
    assert torch.isfinite(loss) and parts["v_loss"] >= 0
    info = learner.actor_update([batch])
    assert set(info) == {"pg_loss", "kl", "advantage"}


def test_train_archer_writes_actor_and_critic(base_model: Path, tmp_path: Path) -> None:
    cfg = small(iterations=3, warmup_iters=1, critic_epochs=2, actor_epochs=1, kl_coef=0.1)
    report = train_archer(
        TrainJob(base_model, tmp_path / "ckpt", iteration=0, dataset_id="tr-1"), transitions(), cfg
    )
    m = report.metrics
    assert m["critic_updates"] == 6 and m["actor_updates"] == 2 and m["actor_objective"] == "awr"
    assert m["critic_updates_per_s"] > 0 and m["actor_tokens_per_s"] > 0 and m["kl_last"] >= 0
    assert read_meta(report.checkpoint).config["method"] == "archer"
    assert has_critic(report.checkpoint)
    critic = load_critic(report.checkpoint)
    learner = ArcherLearner(report.checkpoint, small())
    t = transitions()[0]
    s, a = learner._states([t.state_messages()]), learner._actions([t.action_text()])
    with torch.no_grad():
        assert torch.isfinite(critic(s, a)[0]).all()
    with pytest.raises(ValueError, match="train.method 'archer'"):
        load_critic(base_model)
    assert train_archer(TrainJob(base_model, tmp_path / "ckpt", dataset_id="tr-1"), transitions(), cfg).reused


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="tau"):
        ArcherConfig(tau=0)
    with pytest.raises(ValueError, match="unknown field"):
        ArcherConfig.from_dict({"lr": 1})
    assert ArcherConfig().gamma == 0.95 and ArcherConfig(mode="online").actor_objective == "pg"


def test_cancel_and_time_budget_are_checked_after_every_update(base_model: Path, tmp_path: Path) -> None:
    from train_service.sft import TrainingCancelled

    cfg = small(iterations=5, warmup_iters=0, critic_epochs=3, actor_epochs=2)
    with pytest.raises(TrainingCancelled, match="step 1"):
        train_archer(
            TrainJob(base_model, tmp_path / "cancelled", should_stop=lambda: True), transitions(), cfg
        )
    assert not (tmp_path / "cancelled").exists()  # nothing written
    budget = small(iterations=5, warmup_iters=0, critic_epochs=3, actor_epochs=2, time_budget_s=1e-9)
    report = train_archer(TrainJob(base_model, tmp_path / "budget"), transitions(), budget)
    assert report.metrics["stopped_by_time_budget"] and report.metrics["critic_updates"] == 1
