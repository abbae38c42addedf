"""Owns the judge examples of the warm start: TextCraft expert episodes with injected mistakes, each
step labelled Good or Bad by the environment's first-error oracle, rendered EXACTLY as the critic asks.

Why: the paper's actor is an instruction-tuned model that can already answer "was that action good?";
a random-init tiny model cannot, so its ``model`` critic would be noise and fall back to the last
action (Direct-Revision). The warm start therefore also teaches the judge question — on tasks of
its own: ``judge_task_ids`` takes train-split goals that are neither searched nor held out (callers
pass every searched / evaluated task id to exclude, and the held-out ``test`` split is never used),
so no searched or held-out task's own path is ever shown. This brings the model's judging close to a
learned rule (the oracle's); the report measures it against the oracle, next to Direct-Revision.

An example is ``core.llm.judge_prompt.judge_conversation(path, k)`` + the assistant answer ``Good`` /
``Bad`` (weight 1; every earlier assistant turn is context at weight 0), where ``path`` is:

- **Good**: the expert's first ``k + 1`` steps (every expert step is progress for the oracle);
- **Bad**: the expert's first ``k`` steps and then one injected mistake, played in the environment
  (so its observation is the environment's own) and kept only if the oracle calls it the first error
  (``core.envs.textcraft.oracle``). Mistake kinds, as the demo's sampled actions go wrong: a craft
  with a wrong ingredient or count, crafting a later step too early, ``get`` of a craftable item, a
  ``get`` of a raw item the goal does not need, a repeat of the last get, and ``inventory``.

Deterministic: ``random.Random`` seeded with a string per (seed, task, step).

Also owned here: the judge set kept through the loop. ``write_judge_general`` writes the warm
start's judge samples next to the warm-started model, and ``with_judge_general`` makes them the
run's general data (the default demo sets ``Plan.judge_general``), so every iteration's SFT mixes
them in by the paper's eta rule and the actor-as-critic does not forget how to judge.
"""

from __future__ import annotations

import hashlib
import logging
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.domain.critic import LABEL_WORDS
from core.domain.ids import derived_id
from core.domain.trajectory import Message, Step, TrainingSample, Trajectory
from core.envs.textcraft import TextCraftEnv, solve, split_task_ids
from core.envs.textcraft.oracle import TextCraftOracle
from core.envs.textcraft.recipes import display_name
from core.llm.judge_prompt import judge_conversation
from train_service.warm_start import expert_thought

log = logging.getLogger(__name__)

MISTAKE_KINDS = (
    "wrong_ingredient",
    "wrong_count",
    "too_early",
    "get_craftable",
    "unneeded_get",
    "repeat",
    "inventory",
)
_CRAFT = re.compile(r"craft (\d+) (.+?) using (.+)")
_GET = re.compile(r"get (\d+) (.+)")


class JudgeDataError(ValueError):
    """No judge example could be made (names why: no tasks left, unknown split, ...)."""


@dataclass(frozen=True)
class JudgeExample:
    task_id: str
    path: Trajectory
    step_index: int
    label: str  # "good" | "bad"
    mistake: str  # the mistake kind, "" for a Good example


def judge_task_ids(
    env: TextCraftEnv, exclude: Sequence[str], n: int, depths: Sequence[int] = (1, 2)
) -> list[str]:
    """``n`` train-split goals of the given crafting depths, none in ``exclude`` (task ids of any
    form: ``"308"`` or ``"goal:oak_button"``) and none of the test split, in a fixed shuffled order
    within each depth, round-robin over ``depths``."""
    if n < 1:
        raise JudgeDataError(f"judge tasks: n must be >= 1, got {n}")
    # compared by goal item, so "goal:oak_planks" and its numeric id are the same task
    excluded = {env.goal_of(str(t)) for t in exclude}
    excluded |= {env.goal_of(t) for t in split_task_ids(env.book, "test")}
    by_depth: dict[int, list[str]] = {}
    for task_id in split_task_ids(env.book, "train"):
        if env.goal_of(task_id) in excluded:
            continue
        by_depth.setdefault(env.book.depth[env.goal_of(task_id)], []).append(task_id)
    pools = [by_depth.get(d, []) for d in depths]
    if not any(pools):
        raise JudgeDataError(f"judge tasks: no train goal of depth {list(depths)} is left after exclusions")
    # a fixed shuffled order within each depth (sha256 of the id), then round-robin over depths
    spread = [
        sorted(pool, key=lambda t: hashlib.sha256(f"judge-task:{t}".encode()).hexdigest()) for pool in pools
    ]
    chosen: list[str] = []
    seen: set[str] = set()
    position = 0
    while len(chosen) < n and any(position < len(p) for p in spread):
        for pool in spread:
            if position < len(pool) and pool[position] not in seen and len(chosen) < n:
                seen.add(pool[position])
                chosen.append(pool[position])
        position += 1
    return chosen


def _raw_items(env: TextCraftEnv) -> list[str]:
    """Items a ``get`` accepts (raw, not a tag), sorted (the book's item set is never iterated)."""
    book = env.book
    return sorted(i for i in book.items if not book.is_craftable(i) and i not in book.tags)


def _mistake(kind: str, env: TextCraftEnv, gold: Sequence[str], k: int, rng: random.Random) -> str | None:
    """One candidate mistake of ``kind`` instead of gold step ``k`` (None: the kind does not apply)."""
    book = env.book
    action = gold[k]
    craft = _CRAFT.match(action)
    if kind not in MISTAKE_KINDS:
        raise JudgeDataError(f"unknown mistake kind {kind!r} (known: {', '.join(MISTAKE_KINDS)})")
    if kind in ("wrong_ingredient", "wrong_count") and not craft:
        return None
    if kind == "wrong_ingredient" and craft:
        count, item, using = craft.groups()
        parts = [p.strip() for p in using.split(",")]
        swap = rng.randrange(len(parts))
        n, _name = parts[swap].split(" ", 1)
        raw = [display_name(i) for i in _raw_items(env)]
        parts[swap] = f"{n} {rng.choice(raw)}" if raw else parts[swap]
        return f"craft {count} {item} using {', '.join(parts)}"
    if kind == "wrong_count" and craft:
        count, item, using = craft.groups()
        parts = [p.strip() for p in using.split(",")]
        swap = rng.randrange(len(parts))
        n, name = parts[swap].split(" ", 1)
        parts[swap] = f"{int(n) + rng.choice([1, 2, 3]) if int(n) < 2 else int(n) - 1} {name}"
        return f"craft {count} {item} using {', '.join(parts)}"
    if kind == "too_early":
        later = [a for a in gold[k + 1 :] if a.startswith("craft ")]
        return later[-1] if later else None
    if kind == "get_craftable":
        crafts = [m.group(2) for a in gold if (m := _CRAFT.match(a))]
        return f"get {rng.choice([1, 2, 4])} {rng.choice(crafts)}" if crafts else None
    if kind == "unneeded_get":
        goal = env.goal_of(env.task_id or "0")
        needed = {ing.name for r in book.tree(goal) for ing in r.inputs}
        raw = [i for i in _raw_items(env) if i not in needed]
        return f"get {rng.choice([1, 2, 3])} {display_name(rng.choice(raw))}" if raw else None
    if kind == "repeat":
        gets = [a for a in gold[:k] if _GET.match(a)]
        return gets[-1] if gets else None
    return "inventory"


def _step(env: TextCraftEnv, action: str) -> Step:
    result = env.step_sync(action)
    return Step(expert_thought(action), action, result.observation, result.reward, result.done, result.valid)


def judge_examples(
    env: TextCraftEnv,
    task_ids: Sequence[str],
    *,
    seed: int = 0,
    mistakes_per_step: int = 1,
    oracle: TextCraftOracle | None = None,
) -> list[JudgeExample]:
    """Good examples on every expert step and ``mistakes_per_step`` Bad ones per step (module
    docstring). Mistakes the oracle does not call the first error are dropped."""
    oracle = oracle or TextCraftOracle(env)
    out: list[JudgeExample] = []
    for task_id in task_ids:
        task = env.reset_sync(task_id)
        gold = solve(env.goal_of(task_id), env.book)
        steps: list[Step] = []
        for k, action in enumerate(gold):
            rng = random.Random(f"judge:{seed}:{task_id}:{k}")
            kinds = list(MISTAKE_KINDS)
            rng.shuffle(kinds)
            made = 0
            for kind in kinds:
                if made >= mistakes_per_step:
                    break
                wrong = _mistake(kind, env, gold, k, rng)
                if wrong is None or wrong == action:
                    continue
                twin = env.clone_sync()
                bad_steps = (*steps, _step(twin, wrong))
                actions = [s.action for s in bad_steps]
                if oracle.first_error(task_id, actions, start=k) != k:
                    continue  # the oracle calls it progress: not a mistake
                path = Trajectory(task=task, instruction=env.instruction, steps=bad_steps, reward=0.0)
                out.append(JudgeExample(task_id, path, k, "bad", kind))
                made += 1
            steps.append(_step(env, action))
            path = Trajectory(task=task, instruction=env.instruction, steps=tuple(steps), reward=None)
            out.append(JudgeExample(task_id, path, k, "good", ""))
            if steps[-1].done:
                break
    if not out:
        raise JudgeDataError("judge examples: none could be made from the given tasks")
    return out


def judge_sample(example: JudgeExample) -> TrainingSample:
    """The example as a training sample: the critic's conversation + the label word (weight 1)."""
    conversation = judge_conversation(example.path, example.step_index)
    messages = [Message(m.role, m.content, 0) for m in conversation]
    messages.append(Message("assistant", LABEL_WORDS[example.label], 1))  # type: ignore[index]
    return TrainingSample(
        sample_id=derived_id("judge", example.task_id, example.step_index, example.label, example.mistake),
        kind="good",
        messages=tuple(messages),
        reward=None,
        provenance={
            "source": "judge",
            "task_id": example.task_id,
            "label": example.label,
            "mistake": example.mistake,
            "judged_step": example.step_index,
        },
    )


def judge_samples(
    env: TextCraftEnv, exclude: Sequence[str], n_tasks: int, *, seed: int = 0, mistakes_per_step: int = 1
) -> list[TrainingSample]:
    """Judge samples on ``n_tasks`` judge tasks (``judge_task_ids``: never a task in ``exclude``)."""
    tasks = judge_task_ids(env, exclude, n_tasks)
    examples = judge_examples(env, tasks, seed=seed, mistakes_per_step=mistakes_per_step)
    return [judge_sample(e) for e in examples]


# --------------------------------------------------------------------------------------------
# The warm start's mix
# --------------------------------------------------------------------------------------------

JUDGE_TASKS = 16
"""Judge tasks of the demo's warm start (8 of depth 1, 8 of depth 2: about 130 examples)."""
JUDGE_SHARE = 0.3
"""Share of the warm start's training text that is judge examples (by characters)."""
JUDGE_DATA_VERSION = "judge-v4"
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


def warm_start_judge_samples(
    env: object, config: object, searched: Sequence[str], seed: int = 0, n_tasks: int = JUDGE_TASKS
) -> list[TrainingSample]:
    """The judge samples of a run's warm start: TextCraft only (other environments have no oracle
    to label steps; an empty list, logged), on judge tasks outside ``run_exclusions``."""
    if not isinstance(env, TextCraftEnv):
        log.info("warm start: no judge examples (%s has no first-error oracle)", getattr(env, "name", env))
        return []
    return judge_samples(env, run_exclusions(env, config, searched), n_tasks, seed=seed)


def warm_start_judge_key(env: object, phase_steps: int | None = None) -> str:
    """What the judge data adds to the warm-start cache key ("" without judge data)."""
    if not isinstance(env, TextCraftEnv):
        return ""
    steps = JUDGE_PHASE_STEPS if phase_steps is None else phase_steps
    return f"{JUDGE_DATA_VERSION}:{JUDGE_TASKS}:{JUDGE_SHARE}:{steps}:{JUDGE_PHASE_LR}"


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
) -> Any:
    """Fine-tune ``model_dir`` on the judge samples alone into ``out`` (a ``TrainReport``), for
    ``steps`` optimizer steps (default ``JUDGE_PHASE_STEPS``; the default demo takes
    ``agentr.cli.demo.DEMO_JUDGE_PHASE_STEPS``), under bfloat16 autocast with ``mixed_bf16``
    (``SFTConfig.mixed_bf16``).

    Why a phase of its own: a judge example trains ONE answer token after ~250 tokens of context,
    while an expert episode trains every action; mixed in (``warm_start_mix``) the answers get about
    1% of the gradient and the model only learns the labels' prior (measured: it answered Bad to
    every step). Alone, with the actions' knowledge already in place, they move the model: on the
    demo's warm start, judge accuracy on judge examples of tasks it never saw went from 0.50 (every
    answer Bad) to 0.62 (docs/critic.md).
    """
    from train_service.sft import SFTConfig, train_sft

    cfg = SFTConfig(
        max_steps=JUDGE_PHASE_STEPS if steps is None else steps,
        learning_rate=JUDGE_PHASE_LR,
        lr_scheduler="cosine",
        warmup=0.1,
        packing=True,
        max_length=768,
        batch_size=8,
        logging_steps=5,
        seed=seed,
        time_budget_s=cap_s,
        mixed_bf16=mixed_bf16,
    )
    samples = judge_phase_samples(judge, expert)
    return train_sft(
        model_dir, samples, out, cfg, iteration=-1, dataset_id=f"judge-phase:{JUDGE_DATA_VERSION}"
    )


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
    note = (
        f"general data: the warm start's judge examples ({path}), mixed into every iteration's SFT "
        f"by the eta rule (eta {eta}: round(A * (1 - eta) / eta) of them next to A agent samples)"
    )
    return {**config, "general_data": str(path)}, note
