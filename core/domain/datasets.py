"""Owns the per-iteration dataset mix: which samples go in, how general data is mixed, the manifest.

Pure logic (stdlib only, no I/O). The dataset of iteration ``i`` is

* every revision sample of the iteration (deduplicated by sample id), plus
* every good trajectory whose reward is ``>= alpha_i`` (INCLUSIVE, so ``alpha = 1.0`` still admits
  perfect runs), where ``alpha_i = alpha_schedule[min(i, len(alpha_schedule) - 1)]``
  (default schedule 0.5, 0.7, 1.0), plus
* general chat data, mixed so that training follows the paper's objective (after AgentTuning)
  ``L = eta * L_agent + (1 - eta) * L_general`` with ``L_agent`` over good + revision samples and
  ``eta = 0.2`` by default.

How eta is applied (the exact rule): as a MIXING RATIO, counted in samples. ``eta`` is the AGENT
share of the mix: with ``A`` agent samples (revisions + admitted good trajectories) the number of
general samples is ``G = round(A * (1 - eta) / eta)`` (Python's round, half to even), capped by the
general samples available and by ``max_general`` when set. So with eta = 0.2 and A = 80, G = 320 and
agent data is 80/400 = 0.2 of the mix. Why a mixing ratio and not loss weights: the trainer averages
the loss over a shuffled mix, so drawing agent and general samples in the ratio eta : (1 - eta)
makes the expected per-sample loss exactly ``eta * L_agent + (1 - eta) * L_general`` (AgentTuning
trains its mixture the same way), needs no weighted loss in any trainer, and the exported dataset
(JSONL / Parquet, for teams that train elsewhere) carries the objective with it. ``eta = 1`` means
agent data only; ``eta`` must be in (0, 1] (``eta = 0`` would train on general data alone). Without
general data (none configured, or a shortfall) the agent samples are all kept - never dropped to
restore the ratio - and the manifest says so: ``agent_share`` is the share actually reached and
``note`` explains it (the train service logs it).

Good trajectories are turned into samples by ``core.domain.good_samples.trajectory_to_sample``,
which gives the steps the environment rejected and the repeats of a loop weight 0 and records the
rule in the sample's provenance (``loss_masked``); the manifest counts the masked turns per reason
and refuses a good sample built with another rule than the dataset's config.

Selection is deterministic: the general samples are drawn without replacement with
``random.Random(f"{seed}:{iteration}")`` from the general pool in its given (file) order, and the
final mix is shuffled with ``random.Random(f"{seed}:{iteration}:order")``. Agent samples are sorted
by their CONTENT (a digest of kind, messages, weights, reward and tools; then event position and
sample id) before that, so the result depends neither on the order in which a caller read them nor
on the order in which concurrent trees happened to append them, nor on ids (derived from the random
run id): two runs with the same seeds that find the same samples train on the same sequence. The
manifest records every sample id in final order, its kind, the
event position it came from, its template id, the general pool's source and indexes and the config,
so ``rebuild`` produces the identical dataset, and the dataset id is derived from that content.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from core.domain.ids import derived_id
from core.domain.serde import from_dict, to_dict
from core.domain.trajectory import TrainingSample
from core.domain.weight_reasons import trained_dict

DEFAULT_ALPHA_SCHEDULE: tuple[float, ...] = (0.5, 0.7, 1.0)


class DatasetError(ValueError):
    """A dataset cannot be built or rebuilt as asked; the message says why."""


class EmptyDatasetError(DatasetError):
    """The iteration has no agent samples to train on (general data alone is not a dataset)."""


@dataclass(frozen=True)
class DatasetConfig:
    """How an iteration's dataset is mixed.

    alpha_schedule: good-trajectory reward threshold per iteration (inclusive); iterations past the
        end of the schedule use its last value.
    eta: the AGENT share of the objective ``eta * L_agent + (1 - eta) * L_general``, applied as a
        mixing ratio, in (0, 1]; 1 = agent data only (see the module docstring).
    seed: seeds the general-data draw and the final shuffle.
    max_general: upper bound on general samples (None = no bound beyond eta).
    include_revisions / include_good: switch either source off (ablations).
    mask_invalid_steps / mask_loop_steps: the weight-0 rule the good samples were built with
        (``trajectory_to_sample``); a good sample built with another rule is an error.
    """

    alpha_schedule: tuple[float, ...] = DEFAULT_ALPHA_SCHEDULE
    eta: float = 0.2
    seed: int = 0
    max_general: int | None = None
    include_revisions: bool = True
    include_good: bool = True
    mask_invalid_steps: bool = True
    mask_loop_steps: bool = True

    def __post_init__(self) -> None:
        if not self.alpha_schedule:
            raise DatasetError("alpha_schedule must name at least one threshold")
        for alpha in self.alpha_schedule:
            if not isinstance(alpha, int | float) or isinstance(alpha, bool) or not 0.0 <= alpha <= 1.0:
                raise DatasetError(f"alpha_schedule values must be numbers in [0, 1], got {alpha!r}")
        if not isinstance(self.eta, int | float) or isinstance(self.eta, bool) or not 0.0 < self.eta <= 1.0:
            raise DatasetError(
                f"eta must be a number in (0, 1] - the agent share of the objective "
                f"eta * L_agent + (1 - eta) * L_general (1 = agent data only), got {self.eta!r}"
            )
        if self.max_general is not None and self.max_general < 0:
            raise DatasetError(f"max_general must be >= 0, got {self.max_general}")

    def alpha_for(self, iteration: int) -> float:
        if iteration < 0:
            raise DatasetError(f"iteration must be >= 0, got {iteration}")
        return float(self.alpha_schedule[min(iteration, len(self.alpha_schedule) - 1)])


@dataclass(frozen=True)
class Candidate:
    """An agent sample offered to the dataset, with the store position of the event that made it."""

    sample: TrainingSample
    position: int | None = None
    template_id: str | None = None


@dataclass(frozen=True)
class ManifestEntry:
    sample_id: str
    kind: str
    position: int | None = None  # event position (agent samples)
    template_id: str | None = None
    general_index: int | None = None  # index into the general pool (general samples)


@dataclass(frozen=True)
class DatasetManifest:
    """What a dataset was built from, enough to rebuild it identically."""

    dataset_id: str
    run_id: str | None
    iteration: int
    alpha: float
    config: dict[str, Any]
    entries: tuple[ManifestEntry, ...]
    general_source: str | None = None  # e.g. "path sha256=..." of the general-data file
    general_available: int = 0
    general_wanted: int = 0  # what eta asked for before capping
    good_rejected: int = 0  # good trajectories below alpha
    max_position: int | None = None
    agent_share: float = 1.0  # agent samples / all samples actually reached (eta when not short)
    masked_invalid_steps: int = 0  # good-sample assistant turns at weight 0: rejected by the env
    masked_loop_steps: int = 0  # good-sample assistant turns at weight 0: repeats of a loop
    revision_masked_invalid_steps: int = 0  # revision samples' good-continuation turns rejected by the env
    revision_masked_loop_steps: int = 0  # revision samples' good-continuation turns repeating a loop
    note: str | None = None  # why the mix differs from eta (no or too little general data)

    @property
    def counts(self) -> dict[str, int]:
        out = {"revision": 0, "good": 0, "general": 0}
        for entry in self.entries:
            out[entry.kind] = out.get(entry.kind, 0) + 1
        return out

    @property
    def template_ids(self) -> tuple[str, ...]:
        return tuple(sorted({e.template_id for e in self.entries if e.template_id}))

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = to_dict(self)
        data["counts"] = self.counts
        data["template_ids"] = list(self.template_ids)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DatasetManifest:
        clean = {k: v for k, v in data.items() if k not in ("counts", "template_ids")}
        return from_dict(cls, clean)


@dataclass(frozen=True)
class BuiltDataset:
    samples: tuple[TrainingSample, ...]
    manifest: DatasetManifest = field(repr=False)


def general_count(agent_samples: int, eta: float) -> int:
    """General samples wanted so that agent data is ``eta`` of the mix: round(A*(1-eta)/eta)."""
    if agent_samples < 0:
        raise DatasetError(f"agent_samples must be >= 0, got {agent_samples}")
    if not 0.0 < eta <= 1.0:
        raise DatasetError(f"eta must be in (0, 1] (the agent share), got {eta!r}")
    return int(round(agent_samples * (1.0 - eta) / eta))


def content_digest(sample: TrainingSample) -> str:
    """A digest of what a sample trains (no ids, no provenance, no weight reasons)."""
    messages = [trained_dict(m) for m in sample.messages]
    body = {"kind": sample.kind, "messages": messages, "reward": sample.reward}
    body["tools"] = list(sample.tools)
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _sort_key(c: Candidate) -> tuple[str, int, str]:
    return (content_digest(c.sample), c.position if c.position is not None else -1, c.sample.sample_id)


def _dedupe(cands: Sequence[Candidate]) -> list[Candidate]:
    seen: set[str] = set()
    out: list[Candidate] = []
    for c in sorted(cands, key=_sort_key):
        if c.sample.sample_id in seen:
            continue
        seen.add(c.sample.sample_id)
        out.append(c)
    return out


def _has_loss(sample: TrainingSample) -> bool:
    return any(m.role == "assistant" and m.weight == 1 for m in sample.messages)


def _content_id(
    run_id: str | None, iteration: int, entries: Sequence[ManifestEntry], cfg: dict[str, Any]
) -> str:
    blob = json.dumps(
        {"entries": [to_dict(e) for e in entries], "config": cfg}, sort_keys=True, separators=(",", ":")
    )
    digest = hashlib.sha256(blob.encode()).hexdigest()[:32]
    return derived_id("dataset", run_id or "-", iteration, digest)


def build_dataset(
    *,
    run_id: str | None,
    iteration: int,
    revisions: Sequence[Candidate],
    good: Sequence[Candidate],
    general: Sequence[TrainingSample] = (),
    config: DatasetConfig | None = None,
    general_source: str | None = None,
) -> BuiltDataset:
    """Mix one iteration's dataset (see the module docstring for the exact rule).

    Raises ``EmptyDatasetError`` when no agent sample qualifies (with the reason), and
    ``DatasetError`` when a sample has nothing to train on or a kind is wrong.
    """
    cfg = config or DatasetConfig()
    alpha = cfg.alpha_for(iteration)
    for c in (*revisions, *good):
        if not _has_loss(c.sample):
            raise DatasetError(f"sample {c.sample.sample_id} has no assistant message with weight 1")
    wanted_rule = {"invalid_steps": cfg.mask_invalid_steps, "loop_steps": cfg.mask_loop_steps}
    for c in revisions:
        if c.sample.kind != "revision":
            raise DatasetError(f"sample {c.sample.sample_id} offered as revision has kind {c.sample.kind!r}")
        rule = _masking_of(c.sample)
        if rule is not None and {k: rule.get(k) for k in wanted_rule} != wanted_rule:
            raise DatasetError(
                f"revision sample {c.sample.sample_id} was built with masking {rule}, but the dataset "
                f"config asks for {wanted_rule} (the splice worker follows the run's mask_invalid_steps "
                "and mask_loop_steps)"
            )
    for c in good:
        if c.sample.kind != "good":
            raise DatasetError(f"sample {c.sample.sample_id} offered as good has kind {c.sample.kind!r}")
        rule = _masking_of(c.sample)
        if rule is not None and {k: rule.get(k) for k in wanted_rule} != wanted_rule:
            raise DatasetError(
                f"good sample {c.sample.sample_id} was built with masking {rule}, but the dataset "
                f"config asks for {wanted_rule} (build it with trajectory_to_sample(..., "
                f"mask_invalid_steps={cfg.mask_invalid_steps}, mask_loop_steps={cfg.mask_loop_steps}))"
            )

    chosen_rev = _dedupe(revisions) if cfg.include_revisions else []
    good_all = _dedupe(good) if cfg.include_good else []
    chosen_good = [c for c in good_all if c.sample.reward is not None and c.sample.reward >= alpha]
    good_rejected = len(good_all) - len(chosen_good)
    agent = chosen_rev + chosen_good
    if not agent:
        raise EmptyDatasetError(
            f"iteration {iteration}: no training samples: {len(chosen_rev)} revision samples and "
            f"{len(chosen_good)} good trajectories with reward >= alpha={alpha} "
            f"({good_rejected} good trajectories were below alpha)"
        )

    wanted = general_count(len(agent), cfg.eta)
    take = min(wanted, len(general))
    if cfg.max_general is not None:
        take = min(take, cfg.max_general)
    rng = random.Random(f"{cfg.seed}:{iteration}")
    general_idx = sorted(rng.sample(range(len(general)), take)) if take else []

    pairs: list[tuple[TrainingSample, ManifestEntry]] = [
        (c.sample, ManifestEntry(c.sample.sample_id, c.sample.kind, c.position, c.template_id)) for c in agent
    ]
    for i in general_idx:
        s = general[i]
        if s.kind != "general":
            s = replace(s, kind="general")
        pairs.append((s, ManifestEntry(s.sample_id, "general", None, None, i)))
    random.Random(f"{cfg.seed}:{iteration}:order").shuffle(pairs)

    entries = tuple(e for _, e in pairs)
    cfg_dict: dict[str, Any] = to_dict(cfg)
    positions = [c.position for c in agent if c.position is not None]
    masked = [_masking_of(c.sample) or {} for c in chosen_good]
    masked_revisions = [_masking_of(c.sample) or {} for c in chosen_rev]
    agent_share = len(agent) / len(pairs)
    note = None
    if take < wanted:
        why = (
            "no general data is configured"
            if not general
            else f"general data has {len(general)} samples"
            if take == len(general)
            else f"max_general caps it at {cfg.max_general}"
        )
        note = (
            f"eta={cfg.eta} asks for {wanted} general samples beside {len(agent)} agent samples, but {why}: "
            f"training on {take} general samples (agent share {agent_share:.3f}"
            + (", agent-only training)" if take == 0 else ")")
        )
    manifest = DatasetManifest(
        dataset_id=_content_id(run_id, iteration, entries, cfg_dict),
        run_id=run_id,
        iteration=iteration,
        alpha=alpha,
        config=cfg_dict,
        entries=entries,
        general_source=general_source,
        general_available=len(general),
        general_wanted=wanted,
        good_rejected=good_rejected,
        max_position=max(positions) if positions else None,
        agent_share=agent_share,
        masked_invalid_steps=sum(int(m.get("invalid", 0)) for m in masked),
        masked_loop_steps=sum(int(m.get("loop", 0)) for m in masked),
        revision_masked_invalid_steps=sum(int(m.get("invalid", 0)) for m in masked_revisions),
        revision_masked_loop_steps=sum(int(m.get("loop", 0)) for m in masked_revisions),
        note=note,
    )
    return BuiltDataset(tuple(s for s, _ in pairs), manifest)


def rebuild(
    manifest: DatasetManifest,
    agent_samples: Mapping[str, TrainingSample],
    general: Sequence[TrainingSample] = (),
) -> tuple[TrainingSample, ...]:
    """The dataset a manifest describes, in its order; a missing or changed source is an error."""
    out: list[TrainingSample] = []
    missing: list[str] = []
    for e in manifest.entries:
        if e.kind == "general":
            if e.general_index is None or e.general_index >= len(general):
                raise DatasetError(
                    f"dataset {manifest.dataset_id}: general sample #{e.general_index} is not in the "
                    f"general pool ({len(general)} samples; expected {manifest.general_source})"
                )
            s = general[e.general_index]
            if s.sample_id != e.sample_id:
                raise DatasetError(
                    f"dataset {manifest.dataset_id}: general sample #{e.general_index} changed "
                    f"(id {s.sample_id}, manifest says {e.sample_id})"
                )
            if s.kind != "general":
                s = replace(s, kind="general")
            out.append(s)
        elif e.sample_id in agent_samples:
            out.append(agent_samples[e.sample_id])
        else:
            missing.append(e.sample_id)
    if missing:
        raise DatasetError(
            f"dataset {manifest.dataset_id}: {len(missing)} sample(s) not found, first: {missing[:3]}"
        )
    return tuple(out)


def _masking_of(sample: TrainingSample) -> dict[str, Any] | None:
    value = sample.provenance.get("loss_masked")
    return value if isinstance(value, dict) else None
