"""Owns ``TrainSettings`` (``train`` of a run: the trainer knobs of every method, ``model_path`` and
the launch settings) and its parts (``LoraIn``, ``TransitionSettings``), and the JSON Schema
statement of which trainer fields each ``train.method`` takes.

The trainer knobs are not written here: they are derived from the trainers' config dataclasses
(``core.domain.trainer_config``: each field's type, its ``Knob`` for the bounds and the sentence
the OpenAPI document shows, and its default per method), so a field added to a trainer is an API
field at once. ``LoraIn`` is derived from ``LoraSettings`` the same way.

``TRAINER_FIELDS_RULE`` is built from the constants ``core.domain.config.method_problem`` reads
(``TRAINER_FIELDS``, ``TRAIN_METHODS``, ``TRANSITIONS_KEY``): a field (even as null) only with a
scheduled method whose trainer takes it. It is written as one ``anyOf`` over the sets of methods a
schedule can hold, each branch naming the fields that set excludes (``false``), so schemathesis's
canonicaliser (jsonschema_rs) can both generate from it and negate it; a product of per-field
``if``/``then`` rules is more than it models (a Schema Error). The other ``train`` rules
(``launch_problem``: accelerate_config / nproc_per_node > 1 need torchrun; dpo and archer not under
torchrun; bf16 and mixed_bf16 exclusive) are checked by the validators and listed in
docs/security.md: stated beside this one they make the schema too large for the canonicaliser.

``launcher``, ``nproc_per_node`` and ``method`` sent as null mean their default (the schema admits
null): ``to_domain`` drops them, as the domain reads an absent key as the default.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from itertools import combinations
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from api.schemas.common import ModelRef, _Strict
from core.domain.config import LAUNCH_KEYS, TRAIN_METHODS, TRAINER_FIELDS, TRANSITIONS_KEY, launch_problem
from core.domain.trainer_config import TRAINER_CONFIGS, Knob, LoraSettings, knob_of, trainer_fields

NULL_IS_DEFAULT = ("launcher", "nproc_per_node", "method")
"""``train`` keys whose explicit null means unset."""


def field_owners() -> dict[str, tuple[str, ...]]:
    """Each ``train`` field that some method's trainer lacks -> the methods whose trainers take it."""
    owners: dict[str, list[str]] = {}
    for method in TRAIN_METHODS:
        for name in TRAINER_FIELDS[method]:
            owners.setdefault(name, []).append(method)
    owners[TRANSITIONS_KEY] = ["archer"]
    return {name: tuple(methods) for name, methods in owners.items() if len(methods) < len(TRAIN_METHODS)}


def _schedule_holding(methods: tuple[str, ...]) -> dict[str, Any]:
    """``train.method`` that names every one of ``methods`` (a name, or a schedule holding them)."""
    if len(methods) > 1:
        return {"type": "array", "allOf": [{"contains": {"const": m}} for m in methods]}
    branches: list[dict[str, Any]] = [
        {"const": methods[0]},
        {"type": "array", "contains": {"const": methods[0]}},
    ]
    if methods[0] == "sft":
        branches.append({"type": "null"})  # absent or null: the default, sft
    return {"anyOf": branches}


def trainer_fields_rule() -> dict[str, Any]:
    """``method_problem``'s field rule as JSON Schema: for some set of methods the schedule holds,
    no field that only the other methods' trainers take."""
    owners = field_owners()
    branches = []
    for size in range(1, len(TRAIN_METHODS) + 1):
        for held in combinations(TRAIN_METHODS, size):
            excluded = sorted(name for name, methods in owners.items() if not set(methods) & set(held))
            branch: dict[str, Any] = {
                "properties": {"method": _schedule_holding(held), **dict.fromkeys(excluded, False)}
            }
            if held != ("sft",):
                branch["required"] = ["method"]
            branches.append(branch)
    return {"anyOf": branches}


def _json(value: Any) -> str:
    return json.dumps(list(value) if isinstance(value, tuple) else value)


def _api_type(hint: Any, knob: Knob) -> Any:
    """The API type of a trainer field of type ``hint``: without None (every knob is optional),
    a nested settings dataclass as its derived model, a tuple as a list (its items' bounds from
    ``knob.bounds["items"]``)."""
    if get_origin(hint) in (Union, UnionType):
        (hint,) = [arg for arg in get_args(hint) if arg is not type(None)]
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return knob_model(hint, f"{hint.__name__.removesuffix('Settings')}In")
    if get_origin(hint) is tuple:
        item = get_args(hint)[0]
        return list[Annotated[item, Field(**knob.bounds.get("items", {}))]]  # type: ignore[valid-type]
    return hint


def _knob_field(hint: Any, knob: Knob, defaults: dict[str, Any]) -> tuple[Any, Any]:
    """``(type, FieldInfo)`` of one knob: optional (None keeps the trainer's default), strict for
    numbers, the knob's bounds, its sentence and the default of each method that takes it."""
    api_type = _api_type(hint, knob)
    bounds = {k: v for k, v in knob.bounds.items() if k != "items"}
    strict = True if api_type in (int, float) else None
    said = "; ".join(f"{owner}: {_json(value)}" for owner, value in defaults.items())
    return api_type | None, Field(None, strict=strict, description=f"{knob.doc} ({said})", **bounds)


@functools.cache
def knob_model(cls: type, name: str) -> type[BaseModel]:
    """A nested settings dataclass (``LoraSettings``) as a strict model of optional knobs (one
    model per dataclass: the OpenAPI document names it once)."""
    hints = get_type_hints(cls)
    fields: dict[str, Any] = {
        f.name: _knob_field(hints[f.name], knob_of(f), {"default": f.default})
        for f in dataclasses.fields(cls)
    }
    return create_model(name, __base__=_Strict, __doc__=f"{cls.__doc__}", **fields)


def trainer_knob_fields() -> dict[str, tuple[Any, Any]]:
    """Every field of every method's trainer config as an API field (``_knob_field``), in the
    order the methods and their fields are declared; a field several trainers take has ONE knob
    (``TypeError`` naming it otherwise)."""
    seen: dict[str, tuple[Any, Knob, dict[str, Any]]] = {}
    for method in TRAIN_METHODS:
        hints = get_type_hints(TRAINER_CONFIGS[method])
        for f in trainer_fields(method):
            knob = knob_of(f)
            hint, first_knob, defaults = seen.setdefault(f.name, (hints[f.name], knob, {}))
            if first_knob != knob or hint != hints[f.name]:
                raise TypeError(f"trainer field {f.name!r}: {method}'s type or knob differs from another's")
            defaults[method] = f.default
    return {name: _knob_field(hint, knob, defaults) for name, (hint, knob, defaults) in seen.items()}


LoraIn = knob_model(LoraSettings, "LoraIn")


class TransitionSettings(_Strict):
    """archer: how the trees become transitions (core.domain.transitions.TransitionConfig)."""

    invalid_action_penalty: float | None = Field(
        None,
        strict=True,
        ge=0,
        le=1,
        description="Subtracted from the reward of an action the environment rejected (0).",
    )
    include_open_edges: bool | None = Field(
        None, description="Keep edges into never-expanded nodes (done false, bootstrapped; true)."
    )


class _TrainSettingsBase(_Strict):
    """What ``train`` holds besides the trainer knobs: ``model_path``, the launch settings,
    ``method`` and archer's ``transitions``."""

    model_config = ConfigDict(json_schema_extra=trainer_fields_rule())

    model_path: ModelRef | None = Field(
        None,
        description="When `model` is a served URL: the local folder with the weights that server serves "
        "(required unless `data_only`); not allowed with a local `model` folder.",
    )
    launcher: Literal["inline", "torchrun"] | None = Field(
        None, description="How training starts: inline (in the worker) or torchrun (a process group)."
    )
    nproc_per_node: int | None = Field(
        None, strict=True, ge=1, le=1024, description="Training processes (torchrun)."
    )
    accelerate_config: str | None = Field(
        None, min_length=1, max_length=1000, description="An accelerate config file (DeepSpeed / FSDP)."
    )
    master_port: int | None = Field(
        None, strict=True, ge=1, le=65535, description="torchrun rendezvous port."
    )
    # a field of another method's trainer than train.method's is refused (core.domain.config.method_problem)
    method: (
        Literal["sft", "dpo", "archer"]
        | Annotated[list[Literal["sft", "dpo", "archer"]], Field(min_length=1, max_length=100)]
        | None
    ) = Field(
        None,
        description="The learner: sft (Agent-R SFT, default), dpo (at the divergence node), archer; "
        "or a list, one per iteration, the last repeating (e.g. [sft, archer]).",
    )
    transitions: TransitionSettings | None = Field(None, description="archer: how transitions are read.")

    @model_validator(mode="after")
    def _launch_settings(self) -> _TrainSettingsBase:
        problem = launch_problem(self.model_dump(exclude_none=True, include=set(LAUNCH_KEYS)))
        if problem is not None:
            raise ValueError(problem)
        return self

    def to_domain(self) -> dict[str, Any]:
        """``RunConfig.train``: the fields sent (explicit nulls mean something: bf16 null = auto),
        without the ``NULL_IS_DEFAULT`` keys sent as null."""
        data = self.model_dump(exclude_unset=True)
        return {k: v for k, v in data.items() if not (k in NULL_IS_DEFAULT and v is None)}


class TrainSettings(create_model("_TrainerKnobs", __base__=_TrainSettingsBase, **trainer_knob_fields())):  # type: ignore[misc]
    """Overrides of the trainer configuration of each ``train.method`` (train_service.sft.SFTConfig,
    train_service.dpo.DPOConfig, train_service.archer.ArcherConfig); unset fields keep its defaults.
    Its knobs come from those dataclasses (core.domain.trainer_config)."""
