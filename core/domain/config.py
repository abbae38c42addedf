"""Owns RunConfig: everything a Run needs to know, with documented defaults (pure, stdlib only).

A Run is N iterations of search -> critic -> splice -> dataset -> train -> evaluate. The API accepts
this shape (api/schemas/run_config.py mirrors it with pydantic for validation and OpenAPI),
RunRequested carries it serialised, and every worker reads it back with ``RunConfig.from_data``.

Served starting models: ``model`` may be an OpenAI-compatible base URL (``http://HOST:PORT/v1#name``,
vLLM or ``agentr model serve``). Search, critic and the starting model's evaluation then talk to that
server, but fine-tuning needs the weights themselves: ``train["model_path"]`` names the local folder
holding the same weights the server serves, and iteration 0 trains from it. Every later iteration
searches, critiques and evaluates with the trained checkpoint FOLDER, which the workers load locally
(the hf backend), not through the server. Without ``train["model_path"]`` such a run must be
``data_only``; :meth:`RunConfig.training_problem` says so at submission (API 422, ``agentr run`` exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.domain.serde import from_dict, to_dict
from core.domain.trainer_config import trainer_fields

TRAIN_MODEL_PATH = "model_path"  # the key of RunConfig.train naming the local weights of a served model
LAUNCH_KEYS = ("launcher", "nproc_per_node", "accelerate_config", "master_port")  # train.* launch settings
LAUNCHERS = ("inline", "torchrun")
TRAIN_METHODS = ("sft", "dpo", "archer")  # train.method: the learner (a list: one per iteration)
TRANSITIONS_KEY = "transitions"  # train.transitions: core.domain.transitions.TransitionConfig (archer)
TRAINER_FIELDS: dict[str, tuple[str, ...]] = {
    method: tuple(f.name for f in trainer_fields(method)) for method in TRAIN_METHODS
}
"""The trainer fields of each method: its config dataclass's (core.domain.trainer_config)."""


def method_schedule(train: dict[str, Any]) -> tuple[Any, ...]:
    """``train.method`` as a schedule: one method per iteration, the last repeating (a plain string
    is a schedule of one; unset is ``("sft",)``). Not validated: see ``method_problem``."""
    method = train.get("method", "sft")
    return tuple(method) if isinstance(method, list | tuple) else (method,)


def method_problem(train: dict[str, Any]) -> str | None:
    """Why ``train``'s method settings are invalid, or None: an unknown ``method`` (or an empty or
    bad schedule entry, named by its index), a field of no scheduled method's trainer,
    ``transitions`` without archer in the schedule, dpo / archer under torchrun, or both
    ``bf16`` and ``mixed_bf16``."""
    method = train.get("method", "sft")
    schedule = method_schedule(train)
    if isinstance(method, list | tuple):
        if not schedule:
            return (
                "train.method: a schedule needs at least one method (one per iteration, the last repeating)"
            )
        for index, name in enumerate(schedule):
            if not isinstance(name, str) or name not in TRAIN_METHODS:
                return f"train.method[{index}] must be one of {', '.join(TRAIN_METHODS)}, got {name!r}"
    elif not isinstance(method, str) or method not in TRAIN_METHODS:
        return (
            f"train.method must be one of {', '.join(TRAIN_METHODS)} (or a list of them, one per "
            f"iteration), got {method!r}"
        )
    scheduled = sorted(set(schedule), key=TRAIN_METHODS.index)
    own = {f for m in scheduled for f in TRAINER_FIELDS[m]}
    others = {f for m, names in TRAINER_FIELDS.items() if m not in scheduled for f in names}
    wrong = sorted((set(train) & others) - own)
    if wrong:
        if len(scheduled) == 1:
            return (
                f"train field(s) {wrong} do not apply to train.method {scheduled[0]!r}; its trainer takes "
                f"{', '.join(TRAINER_FIELDS[scheduled[0]])}"
            )
        return (
            f"train field(s) {wrong} do not apply to any method of train.method {list(schedule)}; "
            f"their trainers take {', '.join(sorted(own))}"
        )
    if TRANSITIONS_KEY in train and "archer" not in scheduled:
        return "train.transitions (the transition settings) only applies to train.method 'archer'"
    single = [m for m in scheduled if m != "sft"]
    if single and train.get("launcher", "inline") != "inline":
        return f"train.method {single[0]!r} trains in one process: train.launcher must be 'inline'"
    if train.get("bf16") and train.get("mixed_bf16"):
        return (
            "train.bf16 (bfloat16 weights) and train.mixed_bf16 (fp32 weights, bfloat16 autocast) "
            "exclude each other: set one"
        )
    return None


def trainer_settings(train: dict[str, Any], method: str) -> dict[str, Any]:
    """``train`` without ``model_path``, ``method``, ``transitions``, the launch keys and the
    fields that belong only to other methods' trainers: what ``method``'s trainer config gets (a
    field shared by several scheduled methods, e.g. ``batch_size``, goes to each of them)."""
    skip = {TRAIN_MODEL_PATH, "method", TRANSITIONS_KEY, *LAUNCH_KEYS}
    own = set(TRAINER_FIELDS.get(method, ()))
    others = {f for m, names in TRAINER_FIELDS.items() if m != method for f in names} - own
    return {k: v for k, v in train.items() if k not in skip and k not in others}


def launch_problem(data: dict[str, Any]) -> str | None:
    """Why ``train``'s launch settings are invalid, or None (see train_service/launcher.py)."""
    launcher = data.get("launcher", "inline")
    if launcher not in LAUNCHERS:
        return f"train.launcher must be one of {', '.join(LAUNCHERS)}, got {launcher!r}"
    nproc = data.get("nproc_per_node", 1)
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        return f"train.nproc_per_node must be an integer >= 1, got {nproc!r}"
    if launcher == "inline" and nproc != 1:
        return "train.nproc_per_node > 1 needs train.launcher 'torchrun'"
    config = data.get("accelerate_config")
    if config is not None and launcher != "torchrun":
        return "train.accelerate_config needs train.launcher 'torchrun'"
    if config is not None and (not isinstance(config, str) or not config.strip()):
        return f"train.accelerate_config must be a path to an accelerate config file, got {config!r}"
    port = data.get("master_port")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535):
        return f"train.master_port must be a port number, got {port!r}"
    return None


def is_served_model(ref: str) -> bool:
    """True when ``ref`` names a model behind an OpenAI-compatible server (http(s) URL)."""
    return ref.strip().lower().startswith(("http://", "https://"))


@dataclass(frozen=True)
class RunConfig:
    env: str = "textcraft"
    """Environment URI (``textcraft``, ``sciworld``, ``agentgym+http://HOST:PORT/NAME``,
    ``python:package.module:factory`` or an ``agentr.envs`` entry-point name; docs/envs.md)."""
    model: str = ""
    """Starting model: a local model folder or an OpenAI-compatible base URL."""
    tasks: tuple[str, ...] = ()
    """Explicit task ids to search; empty means ``split`` (cut to ``max_tasks``)."""
    split: str = "train"
    """Named task split used when ``tasks`` is empty."""
    max_tasks: int | None = None
    """Cap on the number of tasks per iteration (first ones of the split, in its order)."""
    eval_tasks: tuple[str, ...] = ()
    """Held-out task ids for evaluation; empty means ``eval_split``."""
    eval_split: str = "test"
    """Named split used for evaluation when ``eval_tasks`` is empty."""
    max_eval_tasks: int | None = 20
    """Cap on evaluation tasks."""
    iterations: int = 3
    """Number of search -> train iterations."""
    alpha_schedule: tuple[float, ...] = (0.5, 0.7, 1.0)
    """Good-trajectory threshold per iteration (inclusive); the last value repeats."""
    beta: float = 0.2
    """A bad leaf's reward must be at most good reward - beta."""
    eta: float = 0.2
    """Agent share of the paper's objective eta * L_agent + (1 - eta) * L_general, in (0, 1], applied
    as a mixing ratio (general samples = round(A * (1 - eta) / eta)); 1 = agent data only. Without
    general data training is agent-only and the dataset manifest notes it (core/domain/datasets.py)."""
    general_data: str | None = None
    """Path to general chat data (ShareGPT or OpenAI JSONL); None = no general data."""
    max_general: int | None = None
    """At most this many general samples per iteration (None: eta's count, up to what the data
    holds). With the warm start's judge set as the general data (``agentr run --judge-mix``), a
    small cap makes it a small replay of judge examples: the critic keeps its judging at a bounded
    cost (the manifest's ``note`` says when the cap binds)."""
    mask_invalid_steps: bool = True
    """In good trajectories, assistant turns the environment rejected get loss weight 0 (kept as context)."""
    mask_loop_steps: bool = True
    """In good trajectories, the repeats of an action loop get loss weight 0 (kept as context)."""
    include_revisions: bool = True
    """Train on the revision samples; False = good trajectories only (the paper's Figure 3 "good"
    rows, the ablation bench/paper.py compares against; pairs and revisions are still recorded)."""
    search: dict[str, Any] = field(default_factory=dict)
    """Overrides of the search configuration (n_candidates, iterations, max_depth, c_uct, ...)."""
    critic: dict[str, Any] = field(default_factory=lambda: {"strategy": "first"})
    """Critic settings: ``strategy`` in first (the default: the first action after the divergence,
    the most accurate critic measured on search pairs, docs/critic.md) | model | direct | rules |
    reflect | value | replay, ``compare_model`` / ``compare_reflect`` (the model and reflect critics'
    t' recorded beside it), ``plan``,
    ``early_exit``, ``reflect_margin``, ``value_threshold``, ``value_model`` (an archer checkpoint
    folder for ``value``; default the actor's) (critic_service.critic.CriticConfig)."""
    splice: dict[str, Any] = field(default_factory=lambda: {"verify": True, "keep_unverified": False})
    """Splicer settings: replay verification and whether unverified samples are kept."""
    train: dict[str, Any] = field(default_factory=dict)
    """Overrides of the SFT configuration (epochs, learning_rate, ...), plus ``model_path``: when
    ``model`` is a served URL, the local folder with the weights that server serves; iteration 0
    fine-tunes it, later iterations use (and load locally) the trained checkpoint folder. Required
    for a URL model unless ``data_only``; not allowed with a local ``model`` folder. Launch keys:
    ``launcher`` (``inline`` default | ``torchrun``), ``nproc_per_node`` (>= 1, torchrun),
    ``accelerate_config`` (a DeepSpeed / FSDP accelerate config file, torchrun), ``master_port``.
    ``method``: ``sft`` (default, Agent-R SFT) | ``dpo`` (DPO at the divergence node,
    train_service/dpo.py) | ``archer`` (ArCHer actor-critic on the trees' transitions,
    train_service/archer.py), or a list of them, one per iteration with the last repeating (e.g.
    ``["sft", "archer"]``: SFT in iteration 0, ArCHer from iteration 1 on); the other keys are the
    scheduled methods' trainer fields (TRAINER_FIELDS; each trainer gets the fields it takes);
    ``transitions`` (archer): ``invalid_action_penalty``, ``include_open_edges``."""
    evaluation: dict[str, Any] = field(default_factory=dict)
    """Overrides of the evaluation (max_steps, max_tokens, recovery_episodes, baseline, ...)."""
    data_only: bool = False
    """Stop each iteration once its dataset is ready (no training): for teams that train elsewhere."""
    seed: int = 0
    """Seed of everything random in the run."""
    runtime: dict[str, Any] = field(default_factory=dict)
    """The conditions the run computes under, recorded by ``agentr run`` (core.runtime.torch_threads.
    run_conditions): ``threads`` (training, inference, ...), ``precision`` and ``cpu`` (model, ISA).
    Float results (trained weights, hence samples) depend on them; ``--resume`` takes the recorded
    training threads. Empty when a run was submitted without it (the API's services)."""

    def alpha(self, iteration: int) -> float:
        schedule = self.alpha_schedule or (1.0,)
        return schedule[min(iteration, len(schedule) - 1)]

    def training_problem(self) -> str | None:
        """Why this configuration cannot train as asked (checked at submission), or None."""
        if (problem := launch_problem(self.launch_settings())) is not None:
            return problem
        if (problem := method_problem(self.train)) is not None:
            return problem
        path = self.train.get(TRAIN_MODEL_PATH)
        if path is not None and (not isinstance(path, str) or not path.strip()):
            return f"train.{TRAIN_MODEL_PATH} must be a non-empty path to a local model folder, got {path!r}"
        if is_served_model(self.model):
            if path is None and not self.data_only:
                return (
                    f"train.{TRAIN_MODEL_PATH} is required: model {self.model!r} is a served URL and "
                    "training needs local weights; set train.model_path to the folder holding the weights "
                    "that server serves (agentr run --train-from FOLDER), or set data_only (agentr run "
                    "--data-only) to "
                    "stop each iteration at its dataset"
                )
        elif path is not None:
            return (
                f"train.{TRAIN_MODEL_PATH} only applies when model is an http(s) URL; model {self.model!r} "
                "is a local folder, which is trained itself"
            )
        return None

    def train_weights(self, model_ref: str) -> str:
        """The local folder to fine-tune when the iteration's model is ``model_ref``: the folder
        itself, or ``train.model_path`` when ``model_ref`` is a served URL (ValueError without it)."""
        if not is_served_model(model_ref):
            return model_ref
        path = self.train.get(TRAIN_MODEL_PATH)
        if not isinstance(path, str) or not path.strip():
            raise ValueError(
                f"cannot train the served model {model_ref!r}: train.{TRAIN_MODEL_PATH} names no local folder"
            )
        return path

    def sft_overrides(self, iteration: int = 0) -> dict[str, Any]:
        """The configuration of iteration ``iteration``'s trainer proper (SFTConfig, DPOConfig or
        ArcherConfig): ``train`` without ``model_path``, ``method``, ``transitions``, the launch
        keys and the fields only other methods' trainers take (``trainer_settings``)."""
        return trainer_settings(self.train, self.train_method(iteration))

    def method_schedule(self) -> tuple[str, ...]:
        """``train.method`` as one method per iteration (the last repeats); ``("sft",)`` unset."""
        return tuple(str(m) for m in method_schedule(self.train))

    def train_method(self, iteration: int = 0) -> str:
        """The learner of iteration ``iteration``: ``sft`` (default), ``dpo`` or ``archer``, from
        ``train.method`` (a string: every iteration; a list: one per iteration, the last repeating)."""
        schedule = self.method_schedule() or ("sft",)
        return schedule[min(max(iteration, 0), len(schedule) - 1)]

    def learns_online(self, iteration: int = 0) -> bool:
        """Whether iteration ``iteration``'s learner gathers its own data in the environment (ArCHer
        with ``mode: online``): it then trains even when the search's dataset is empty."""
        method = self.train_method(iteration)
        return method == "archer" and self.sft_overrides(iteration).get("mode") == "online"

    def transition_settings(self) -> dict[str, Any]:
        """``train.transitions`` (core.domain.transitions.TransitionConfig fields) for archer."""
        return dict(self.train.get(TRANSITIONS_KEY) or {})

    def launch_settings(self) -> dict[str, Any]:
        """``train``'s launch keys (``launcher`` inline | torchrun, ``nproc_per_node``,
        ``accelerate_config``, ``master_port``): how the trainer is started."""
        return {k: self.train[k] for k in LAUNCH_KEYS if k in self.train}

    def to_data(self) -> dict[str, Any]:
        return to_dict(self)  # type: ignore[no-any-return]

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> RunConfig:
        return from_dict(cls, data)
