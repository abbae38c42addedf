"""Owns the judge examples of the warm start (``train_service.judge_data`` mixes them in): TextCraft
expert episodes with injected mistakes, each step labelled Good or Bad by the environment's
first-error oracle, rendered EXACTLY as the critic asks.

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

Under constrained decoding (``search.constrain_actions``) the policy can only emit actions the state
accepts, so most of those kinds (wrong ingredients, crafting too early, ``get`` of a craftable item)
cannot occur in the trees the critic judges. ``mistakes="valid"`` then draws every mistake from the
state's own valid actions (``TextCraftEnv.valid_actions_sync``): kind ``valid_choice``, one of the
actions a constrained sample could take that the oracle calls the first error (a wrong craft
first: a sibling item that spends what the plan needs, another batch of what is held; else a
distractor's item, a get of what is already held, ``inventory``), and every other task's expert
fetches twice the raw items it needs (still progress), so that redundant crafts exist to be judged.
The judge then learns the errors it will be asked about: decisions, not syntax.

Deterministic: ``random.Random`` seeded with a string per (seed, task, step).
"""

from __future__ import annotations

import hashlib
import logging
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

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
VALID_MISTAKE = "valid_choice"
"""The mistake kind of ``mistakes="valid"``: a valid action of the state that the oracle calls an error."""
MISTAKE_MODES = ("all", "valid")
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


def _valid_mistakes(env: TextCraftEnv, gold: str, rng: random.Random) -> list[str]:
    """The state's valid actions other than ``gold``, crafts first, each group in a seeded random
    order (candidates for a ``valid_choice`` mistake; the oracle decides which are errors). Crafts
    first because a wrong craft (a sibling item that spends the planks the goal needs, a second
    batch of what is held) is the error a constrained policy makes most, while ``get`` variants
    outnumber crafts in the valid list by far (measured on the default demo's iteration-0 pairs:
    most first errors the critic missed were such crafts; docs/critic.md)."""
    actions = [a for a in (env.valid_actions_sync() or []) if a != gold]
    crafts = [a for a in actions if a.startswith("craft ")]
    others = [a for a in actions if not a.startswith("craft ")]
    rng.shuffle(crafts)
    rng.shuffle(others)
    return crafts + others


def _over_fetched(gold: Sequence[str]) -> list[str]:
    """The expert plan with every ``get N item`` doubled: still progress at every step for the
    oracle (getting more than needed is progress), and its states hold spare raw items, so a
    redundant craft (another batch of planks) becomes a valid mistake, as in the policy's own
    over-fetching episodes."""
    out = []
    for action in gold:
        get = _GET.match(action)
        out.append(f"get {2 * int(get.group(1))} {get.group(2)}" if get else action)
    return out


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
    mistakes: str = "all",
) -> list[JudgeExample]:
    """Good examples on every expert step and ``mistakes_per_step`` Bad ones per step (module
    docstring). Mistakes the oracle does not call the first error are dropped. ``mistakes``: "all"
    (the injected kinds of ``MISTAKE_KINDS``) or "valid" (``valid_choice``: the state's valid
    actions only, what a constrained policy can emit)."""
    if mistakes not in MISTAKE_MODES:
        raise JudgeDataError(
            f"judge examples: mistakes must be one of {', '.join(MISTAKE_MODES)}, got {mistakes!r}"
        )
    oracle = oracle or TextCraftOracle(env)
    out: list[JudgeExample] = []
    for position, task_id in enumerate(task_ids):
        task = env.reset_sync(task_id)
        gold = solve(env.goal_of(task_id), env.book)
        if mistakes == "valid" and position % 2 == 1:
            gold = _over_fetched(gold)  # every other task: an expert with spare raw items
        steps: list[Step] = []
        for k, action in enumerate(gold):
            rng = random.Random(f"judge:{seed}:{task_id}:{k}")
            candidates: Iterator[tuple[str, str | None]]
            if mistakes == "valid":
                candidates = ((VALID_MISTAKE, a) for a in _valid_mistakes(env, action, rng))
            else:
                kinds = list(MISTAKE_KINDS)
                rng.shuffle(kinds)
                # lazily: each kind draws from rng only when it is tried (the examples of a seed stay put)
                candidates = ((kind, _mistake(kind, env, gold, k, rng)) for kind in kinds)
            made = 0
            for kind, wrong in candidates:
                if made >= mistakes_per_step:
                    break
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
            if oracle.first_error(task_id, [s.action for s in steps], start=k) is None:
                out.append(JudgeExample(task_id, path, k, "good", ""))  # the oracle's progress only
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
    env: TextCraftEnv,
    exclude: Sequence[str],
    n_tasks: int,
    *,
    seed: int = 0,
    mistakes_per_step: int = 1,
    mistakes: str = "all",
) -> list[TrainingSample]:
    """Judge samples on ``n_tasks`` judge tasks (``judge_task_ids``: never a task in ``exclude``)."""
    tasks = judge_task_ids(env, exclude, n_tasks)
    examples = judge_examples(env, tasks, seed=seed, mistakes_per_step=mistakes_per_step, mistakes=mistakes)
    return [judge_sample(e) for e in examples]
