"""train.method in RunConfig: sft | dpo | archer, fields checked against each method's trainer at
submission (the table in core.domain.config matches the trainers' config dataclasses)."""

from __future__ import annotations

import pytest

from core.domain.config import TRAINER_FIELDS, RunConfig, method_problem


def test_trainer_field_table_matches_the_trainers() -> None:
    pytest.importorskip("torch")
    from train_service.archer import ArcherConfig
    from train_service.dpo import DPOConfig
    from train_service.sft import SFTConfig

    for method, cls in (("sft", SFTConfig), ("dpo", DPOConfig), ("archer", ArcherConfig)):
        assert TRAINER_FIELDS[method] == tuple(cls.__dataclass_fields__), method


def test_method_problems_name_the_field() -> None:
    assert method_problem({}) is None and method_problem({"method": "dpo", "beta": 0.2}) is None
    assert "must be one of sft, dpo, archer" in (method_problem({"method": "ppo"}) or "")
    assert "['beta']" in (method_problem({"beta": 0.1}) or "")  # a DPO field on an SFT run
    assert "['packing']" in (method_problem({"method": "archer", "packing": True}) or "")
    assert "transitions" in (method_problem({"method": "dpo", "transitions": {}}) or "")
    assert "launcher" in (method_problem({"method": "archer", "launcher": "torchrun"}) or "")
    config = RunConfig(
        model="/m", train={"method": "archer", "gamma": 0.9, "transitions": {"invalid_action_penalty": 0.1}}
    )
    assert config.training_problem() is None
    assert config.train_method() == "archer" and config.sft_overrides() == {"gamma": 0.9}
    assert config.transition_settings() == {"invalid_action_penalty": 0.1}
    assert RunConfig(model="/m").train_method() == "sft"
    assert "train.method" in (RunConfig(model="/m", train={"method": "x"}).training_problem() or "")
