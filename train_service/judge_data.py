"""Owns the judge set's place in training: the warm start's mix of expert episodes and judge
examples (``warm_start_mix``), the judge phase after it (the judge question alone), and the judge set
kept through the loop. ``write_judge_general`` writes the warm start's judge samples next to the
warm-started model, and ``with_judge_general`` makes them the run's general data (the default demo
sets ``Plan.judge_general``), so every iteration's SFT mixes them in by the paper's eta rule and the
actor-as-critic does not forget how to judge.

The examples themselves (TextCraft expert episodes with injected mistakes, labelled by the
environment's first-error oracle, rendered exactly as the critic asks) are
``train_service.judge_examples``'s; their names are re-exported here.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core.domain.trajectory import TrainingSample
from core.envs.textcraft import TextCraftEnv
from train_service.judge_examples import (
    MISTAKE_KINDS,
    JudgeDataError,
    JudgeExample,
    judge_examples,
    judge_sample,
    judge_samples,
    judge_task_ids,
)

__all__ = [
    "JUDGE_DATA_VERSION",
    "JUDGE_GENERAL_FILE",
    "JUDGE_PHASE_LR",
    "JUDGE_PHASE_STEPS",
    "JUDGE_SHARE",
    "JUDGE_TASKS",
    "JudgeDataError",
    "JudgeExample",
    "MISTAKE_KINDS",
    "judge_examples",
    "judge_mistakes",
    "judge_phase",
    "judge_phase_samples",
    "judge_sample",
    "judge_samples",
    "judge_task_ids",
    "run_exclusions",
    "warm_start_judge_key",
    "warm_start_judge_samples",
    "warm_start_mix",
    "with_judge_general",
    "write_judge_general",
]

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------
# The warm start's mix
# --------------------------------------------------------------------------------------------

JUDGE_TASKS = 16
"""Judge tasks of the demo's warm start (8 of depth 1, 8 of depth 2: about 130 examples)."""
JUDGE_SHARE = 0.3
"""Share of the warm start's training text that is judge examples (by characters)."""
JUDGE_DATA_VERSION = "judge-v5"
"""Changes whenever the judge data's rule or mix changes (part of the warm-start cache key)."""


def run_exclusions(env: TextCraftEnv, config: object, searched: Sequence[str]) -> list[str]:
    """Every task a run may search or evaluate: the searched ids, the run's whole search split and
    evaluation split, and its explicit evaluation tasks (``config`` is a RunConfig)."""
    out = [str(t) for t in searched]
    for split in (getattr(config, "split", None), getattr(config, "eval_split", None)):
        if split:
            out.extend(env.task_ids(split))
    out.extend(str(t) for t in getattr(config, "eval_tasks", ()) or ())
    return out


def warm_start_mix(
    expert: Sequence[TrainingSample],
    judge: Sequence[TrainingSample],
    steps: int,
    judge_share: float = JUDGE_SHARE,
) -> tuple[list[TrainingSample], int]:
    """The warm start's samples and optimizer steps with judge examples mixed in.

    Expert samples are repeated so that judge examples are about ``judge_share`` of the text, and the
    step count grows by ``1 / (1 - judge_share)``, so the model sees as much expert text as it would
    without judge examples (the demo's tuning of the warm start stays valid). No judge samples: the
    inputs unchanged.
    """
    if not judge:
        return list(expert), steps
    if not 0.0 < judge_share < 1.0:
        raise JudgeDataError(f"judge_share must be in (0, 1), got {judge_share}")
    if not expert:
        raise JudgeDataError("the warm start has judge examples but no expert episodes")

    def chars(samples: Sequence[TrainingSample]) -> int:
        return sum(len(m.content) for s in samples for m in s.messages)

    wanted_expert = chars(judge) * (1.0 - judge_share) / judge_share
    repeats = max(1, round(wanted_expert / max(1, chars(expert))))
    mixed = [s for _ in range(repeats) for s in expert] + list(judge)
    return mixed, max(1, round(steps / (1.0 - judge_share)))


def judge_mistakes(config: object) -> str:
    """The judge examples' mistake mode for a run (``judge_examples``' ``mistakes``): "valid" when the
    run's search constrains the policy to valid actions (its trees then hold no rejected action, so
    the judge learns the valid-but-wrong choices it will be asked about), else "all"."""
    search = getattr(config, "search", None)  # RunConfig.search: the settings as a mapping
    constrained = search.get("constrain_actions") if isinstance(search, dict) else None
    return "valid" if constrained is True else "all"


def warm_start_judge_samples(
    env: object, config: object, searched: Sequence[str], seed: int = 0, n_tasks: int = JUDGE_TASKS
) -> list[TrainingSample]:
    """The judge samples of a run's warm start: TextCraft only (other environments have no oracle
    to label steps; an empty list, logged), on judge tasks outside ``run_exclusions``, with the
    run's mistake mode (``judge_mistakes``)."""
    if not isinstance(env, TextCraftEnv):
        log.info("warm start: no judge examples (%s has no first-error oracle)", getattr(env, "name", env))
        return []
    exclude = run_exclusions(env, config, searched)
    return judge_samples(env, exclude, n_tasks, seed=seed, mistakes=judge_mistakes(config))


def warm_start_judge_key(
    env: object, phase_steps: int | None = None, mistakes: str = "all", lr: float = 0.0
) -> str:
    """What the judge data adds to the warm-start cache key ("" without judge data); the mistake
    mode is part of it (the "all" mode adds nothing, its key has the version alone), and so is the
    judge phase's learning rate (``lr``; 0 = ``JUDGE_PHASE_LR``, the tiny model's)."""
    if not isinstance(env, TextCraftEnv):
        return ""
    steps = JUDGE_PHASE_STEPS if phase_steps is None else phase_steps
    key = f"{JUDGE_DATA_VERSION}:{JUDGE_TASKS}:{JUDGE_SHARE}:{steps}:{lr or JUDGE_PHASE_LR}"
    return key if mistakes == "all" else f"{key}:{mistakes}"


# --------------------------------------------------------------------------------------------
# The judge phase: the judge question alone, after the mixed warm start
# --------------------------------------------------------------------------------------------

JUDGE_PHASE_STEPS = 40
"""Optimizer steps of the judge phase (about 16 examples per packed step: ~4.5 passes over them)."""
JUDGE_PHASE_LR = 1e-3
"""Peak learning rate of the judge phase (cosine, 10% warmup)."""


def judge_phase_samples(
    judge: Sequence[TrainingSample], expert: Sequence[TrainingSample]
) -> list[TrainingSample]:
    """The judge phase's data: every judge example twice and every expert episode three times. The expert
    episodes are rehearsal: trained alone, the judge examples wiped out the actions (measured: after
    40 judge-only steps the demo's search found no success in 24 trees)."""
    return [*judge, *judge, *expert, *expert, *expert]


def judge_phase(
    model_dir: str | Path,
    judge: Sequence[TrainingSample],
    out: str | Path,
    *,
    expert: Sequence[TrainingSample] = (),
    seed: int = 0,
    cap_s: float | None = None,
    steps: int | None = None,
    mixed_bf16: bool = False,
    learning_rate: float = JUDGE_PHASE_LR,
    batch: tuple[int, int] = (8, 1),
) -> Any:
    """Fine-tune ``model_dir`` on the judge samples alone into ``out`` (a ``TrainReport``), for
    ``steps`` optimizer steps (default ``JUDGE_PHASE_STEPS``; the default demo takes
    ``agentr.cli.demo.DEMO_JUDGE_PHASE_STEPS``), under bfloat16 autocast with ``mixed_bf16``
    (``SFTConfig.mixed_bf16``), at ``learning_rate`` (the tiny model's ``JUDGE_PHASE_LR``; a
    pretrained model takes ``agentr.cli.demo.REAL_MODEL_JUDGE_PHASE_LR``) in batches of
    ``batch`` = (micro-batch, accumulation).

    Why a phase of its own: a judge example trains ONE answer token after ~250 tokens of context,
    while an expert episode trains every action; mixed in (``warm_start_mix``) the answers get about
    1% of the gradient and the model only learns the labels' prior (measured: it answered Bad to
    every step). Alone, with the actions' knowledge already in place, they move the model: on the
    demo's warm start, judge accuracy on judge examples of tasks it never saw went from 0.50 (every
    answer Bad) to 0.62 (docs/critic.md).
    """
    from train_service.sft import SFTConfig, TrainJob, train_sft

    cfg = SFTConfig(
        max_steps=JUDGE_PHASE_STEPS if steps is None else steps,
        learning_rate=learning_rate,
        lr_scheduler="cosine",
        warmup=0.1,
        packing=True,
        max_length=768,
        batch_size=batch[0],
        grad_accumulation=batch[1],
        logging_steps=5,
        seed=seed,
        time_budget_s=cap_s,
        mixed_bf16=mixed_bf16,
    )
    samples = judge_phase_samples(judge, expert)
    job = TrainJob(model_dir, out, iteration=-1, dataset_id=f"judge-phase:{JUDGE_DATA_VERSION}")
    return train_sft(job, samples, cfg)


# --------------------------------------------------------------------------------------------
# The judge set as general data: kept mixed into every iteration's SFT
# --------------------------------------------------------------------------------------------

JUDGE_GENERAL_FILE = "judge-general.jsonl"
"""The warm start's judge samples as general chat data (OpenAI JSONL, assistant ``weight``), written
next to the warm-started model."""


def write_judge_general(samples: Sequence[TrainingSample], model_dir: str | Path) -> Path:
    """Write the warm start's judge samples into ``model_dir/JUDGE_GENERAL_FILE`` in the OpenAI
    fine-tuning format the run's ``general_data`` reads (only the answer word at weight 1)."""
    from core.formats.export import write_jsonl

    if not samples:
        raise JudgeDataError("no judge samples to write as general data")
    path = Path(model_dir) / JUDGE_GENERAL_FILE
    write_jsonl(path, samples, "openai")
    return path


def with_judge_general(config: dict[str, Any], model_ref: str) -> tuple[dict[str, Any], str]:
    """``config`` (RunConfig data) with the warm start's judge set as its general data, and a note
    saying what was decided (never silent).

    The rule: a run whose starting model was warm-started with judge examples (``model_ref`` holds
    ``JUDGE_GENERAL_FILE``) and that names no ``general_data`` of its own keeps the judge set as its
    general data, so every iteration's SFT mixes it in through the paper's eta rule
    (``core.domain.datasets``: ``G = round(A * (1 - eta) / eta)`` judge samples next to the A agent
    samples, capped by the ~130 available). Why: the paper's ``(1 - eta)`` general data keeps the
    instruct model's general skills while it trains on agent data; for the tiny demo model the judge
    question IS the general skill the critic needs, and without it iteration 0's SFT made the model
    forget how to judge (docs/critic.md). The judge tasks are train goals never searched or held out
    (``judge_task_ids``), so no searched or evaluated task's path enters the mix. A user's own
    ``general_data`` wins; ``eta = 1`` (agent data only) mixes nothing in."""
    path = Path(model_ref) / JUDGE_GENERAL_FILE if model_ref else None
    if path is None or not path.is_file():
        return config, ""
    if config.get("general_data"):
        return config, f"general data: {config['general_data']} (the warm start's judge set is not mixed in)"
    eta = config.get("eta", 0.2)
    cap = config.get("max_general")
    capped = f", at most {cap}: a small replay" if cap is not None else ""
    note = (
        f"general data: the warm start's judge examples ({path}), mixed into every iteration's SFT "
        f"by the eta rule (eta {eta}: round(A * (1 - eta) / eta) of them next to A agent samples{capped})"
    )
    return {**config, "general_data": str(path)}, note
