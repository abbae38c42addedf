"""train.method in RunConfig: sft | dpo | archer, or a list (one per iteration, the last repeating);
fields checked against the scheduled methods' trainers at submission (the table in core.domain.config
matches the trainers' config dataclasses), each iteration's trainer getting only its own fields."""

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
    assert "exclude each other" in (method_problem({"bf16": True, "mixed_bf16": True}) or "")
    assert method_problem({"method": "dpo", "mixed_bf16": True}) is None
    assert "['mixed_bf16']" in (method_problem({"method": "archer", "mixed_bf16": True}) or "")
    config = RunConfig(
        model="/m", train={"method": "archer", "gamma": 0.9, "transitions": {"invalid_action_penalty": 0.1}}
    )
    assert config.training_problem() is None
    assert config.train_method() == "archer" and config.sft_overrides() == {"gamma": 0.9}
    assert config.transition_settings() == {"invalid_action_penalty": 0.1}
    assert RunConfig(model="/m").train_method() == "sft"
    assert "train.method" in (RunConfig(model="/m", train={"method": "x"}).training_problem() or "")


def test_a_method_schedule_picks_each_iteration_s_learner_and_fields() -> None:
    train = {"method": ["sft", "archer"], "epochs": 2, "gamma": 0.9, "batch_size": 4, "transitions": {}}
    config = RunConfig(model="/m", iterations=4, train=train)
    assert config.training_problem() is None
    assert config.method_schedule() == ("sft", "archer")
    assert [config.train_method(i) for i in range(4)] == ["sft", "archer", "archer", "archer"]
    # each trainer gets the fields it takes; a shared one (batch_size) goes to both
    assert config.sft_overrides(0) == {"epochs": 2, "batch_size": 4}
    assert config.sft_overrides(1) == config.sft_overrides(3) == {"gamma": 0.9, "batch_size": 4}
    assert RunConfig(model="/m", train={"method": "dpo", "beta": 0.2}).sft_overrides(5) == {"beta": 0.2}


@pytest.mark.parametrize(
    ("train", "needle"),
    [
        ({"method": []}, "train.method: a schedule needs at least one method"),
        ({"method": ["sft", "ppo"]}, "train.method[1] must be one of sft, dpo, archer, got 'ppo'"),
        ({"method": ["sft", 3]}, "train.method[1]"),
        ({"method": 3}, "or a list of them, one per iteration"),
        ({"method": ["sft", "dpo"], "gamma": 0.9}, "['gamma'] do not apply to any method of train.method"),
        ({"method": ["sft", "dpo"], "transitions": {}}, "only applies to train.method 'archer'"),
        ({"method": ["sft", "dpo"], "launcher": "torchrun"}, "'dpo' trains in one process"),
    ],
)
def test_bad_schedules_name_the_field(train: dict[str, object], needle: str) -> None:
    assert needle in (method_problem(train) or ""), method_problem(train)
    assert needle in (RunConfig(model="/m", train=train).training_problem() or "")
    assert method_problem({"method": ["sft", "sft"], "launcher": "torchrun", "nproc_per_node": 2}) is None


def test_api_train_settings_are_derived_from_the_trainer_configs() -> None:
    """Every trainer field is an optional API field with its knob's bounds and sentence and each
    taking method's default; a field two trainers declare with different knobs is refused."""
    import dataclasses

    from api.schemas.train_settings import TrainSettings, trainer_knob_fields
    from core.domain.trainer_config import TRAINER_CONFIGS, DPOConfig, knob, knob_of

    schema = TrainSettings.model_json_schema()
    for method, cls in TRAINER_CONFIGS.items():
        for f in dataclasses.fields(cls):
            prop = schema["properties"][f.name]
            assert knob_of(f).doc in prop["description"] and f"{method}: " in prop["description"], f.name
    beta = schema["properties"]["beta"]
    assert beta["anyOf"][0] == {"type": "number", "exclusiveMinimum": 0, "maximum": 100}
    assert "(dpo: 0.1)" in beta["description"]
    assert "(sft: 0.0005; dpo: 1e-06)" in schema["properties"]["learning_rate"]["description"]
    assert "(archer: 2000)" in schema["properties"]["iterations"]["description"]
    with pytest.raises(ValueError, match="gamma"):
        TrainSettings.model_validate({"method": "archer", "gamma": 2})
    with pytest.raises(ValueError, match="declares no knob"):
        knob_of(dataclasses.field(default=1))  # type: ignore[arg-type]

    @dataclasses.dataclass(frozen=True)
    class Clashing(DPOConfig):
        seed: int = dataclasses.field(default=0, metadata=knob("Another seed.", ge=0))

    saved = dict(TRAINER_CONFIGS)
    TRAINER_CONFIGS["dpo"] = Clashing
    try:
        with pytest.raises(TypeError, match="'seed'"):
            trainer_knob_fields()
    finally:
        TRAINER_CONFIGS.clear()
        TRAINER_CONFIGS.update(saved)
