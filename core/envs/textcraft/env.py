"""Owns the TextCraft environment: task ids (by index and by goal name), the rules of ``get`` /
``craft ... using ...`` / ``inventory`` and their messages, the episode (ours and AgentGym's), the
valid actions of a state, and cheap cloning. The named splits are drawn by
``core.envs.textcraft.tasks`` and the first observation is built by ``core.envs.textcraft.observation``;
this docstring describes the whole environment, those two parts included.

Task ids are the goal indices ``"0"`` ... ``"543"`` of :attr:`RecipeBook.goals` (depth 1: 0-124,
depth 2: 125-415, depth 3: 416-532, depth 4: 533-543). Splits:

- ``test``: 100 goals spread evenly over the four depth buckets — 25 / 40 / 24 / 11 goals, the i-th
  of n taken at position ``lo + (i * size) // n`` of its bucket (all 11 depth-4 goals);
- ``train``: every other goal (444);
- ``demo``: a small easy split for the tiny-model demo — 12 depth-1 and 4 depth-2 train goals spread
  evenly the same way.

Goals by name: a task id ``goal:NAME`` (``goal:stone_pickaxe``; spaces or underscores, with or
without ``minecraft:``) is the same task as the index of that goal — same observation, same rules —
so results can be reported and compared by goal. ``TextCraftEnv(goals=(...))`` (URI
``textcraft?goal=a,b``) makes those the default task ids. ``goal_name(task_id)`` gives the name of
any id. AgentGym's TextCraft server indexes the same 544 goals by depth too, but within a depth in
the order its recipe files happen to be listed by the file system (``os.listdir``, unsorted), so its
index -> goal mapping differs between machines and cannot be reproduced; compare by goal name.

The observation lists the goal's recipe tree plus up to ``distractors`` (default 10) recipes that use
the same ingredients, in an order fixed by the task id (``random.Random("textcraft:<id>")`` is seeded
with a string, which Python hashes with SHA-512, so it does not depend on PYTHONHASHSEED).
``reward`` is the task's score so far: 1.0 once the goal has been crafted, else 0.0.

``rules="agentgym"`` (URI ``textcraft?rules=agentgym``) plays by AgentGym's TextCraft server instead
(WooooDyy/AgentGym ``agentenv-textcraft``, read, not copied): goal ids in their order
(``recipes.agentgym_book``: depth, then the recipe folder's listing order); splits ``test`` = ids
0-99 and ``train`` = 100-543 (``demo``: 12 depth-1 and 4 depth-2 train ids, spread); the first
observation built by their procedure (their recipe tree walk with repeats, up to 10 sampled uses of
every ingredient, 10 distractors drawn and the lines shuffled by a ``random.Random(42)``, as their
reset seeds the global generator with 42) except that where they iterate a Python ``set`` of recipe
lines (an order that changes with the process's string-hash seed) we keep first-seen order; their
messages to the letter (``Could not find a valid recipe for ItemTagWithCount(...)``, ``Could not find
enough items to craft None`` for a tag); and their episode: the step that crafts the goal answers
reward 1 and done, every other step reward 0 and not done, stepping on after the goal is allowed, and
the environment cuts no episode short (``max_steps`` is left to the client, as their server leaves it).
"""

from __future__ import annotations

import itertools
import re

from core.envs.base import EnvError, StepResult, UnknownTask
from core.envs.textcraft.observation import listed_recipes, observation_text
from core.envs.textcraft.recipes import (
    Recipe,
    RecipeBook,
    agentgym_book,
    display_name,
    item_id_of,
    recipe_book,
)
from core.envs.textcraft.tasks import SPLITS, split_task_ids

__all__ = ["INSTRUCTION", "RULES", "SPLITS", "TextCraftEnv", "split_task_ids"]

INSTRUCTION = (
    "You craft Minecraft items from the given crafting commands. Reply with one action per turn:\n"
    "get N item | craft N item using a X, b Y | inventory\n"
    "Use only the listed crafting commands and exact counts. A generic ingredient (planks) may be any "
    "specific kind (oak planks)."
)

_CRAFT = re.compile(r"craft (.*) using (.*)")
_GET = re.compile(r"get ([0-9]+) (.*)")
_INVENTORY = re.compile(r"inventory")
_COUNT = re.compile(r"([0-9]+) (.*)")

RULES = ("agentr", "agentgym")
CRAFT_VARIANTS = 8  # instantiations of one recipe's generic ingredients listed by valid_actions()
GET_MULTIPLES = 4  # valid_actions() lists ``get`` of 1..4 times each count a listed recipe asks
SMALL_GETS = 4  # ... and of 1..4 of any obtainable item


class _ActionFailed(Exception):
    pass


class TextCraftEnv:
    """One TextCraft episode at a time; ``clone()`` copies only the small mutable state."""

    name = "textcraft"
    instruction = INSTRUCTION

    def __init__(
        self,
        distractors: int = 10,
        max_steps: int = 50,
        split: str | None = None,
        book: RecipeBook | None = None,
        goals: tuple[str, ...] = (),
        rules: str = "agentr",
    ) -> None:
        if distractors < 0:
            raise EnvError(f"textcraft: distractors must be >= 0, got {distractors}")
        if max_steps < 1:
            raise EnvError(f"textcraft: max_steps must be >= 1, got {max_steps}")
        if rules not in RULES:
            raise EnvError(f"textcraft: rules must be one of {', '.join(RULES)}, got {rules!r}")
        self.rules = rules
        # AgentGym's episode (module docstring); ``agentr env serve`` sets it on any TextCraft it serves
        self.open_ended = rules == "agentgym"
        self.book = book or (agentgym_book() if rules == "agentgym" else recipe_book())
        self.distractors = distractors
        self.max_steps = max_steps
        self.default_split = split
        if split is not None:
            split_task_ids(self.book, split)  # validates the name
        self._goal_index = {goal: index for index, goal in enumerate(self.book.goals)}
        self.goal_ids = [f"goal:{self.goal_name(self.goal_of(f'goal:{g}'))}" for g in goals]
        self._observations: dict[str, str] = {}  # first observations, shared with clones
        self.task_id: str | None = None
        self.goal: str | None = None
        self.inventory: dict[str, int] = {}
        self.steps = 0
        self.done = False
        self.reward = 0.0
        self._crafted_goal = False

    # ---- tasks -----------------------------------------------------------------------------------
    def task_ids(self, split: str | None = None) -> list[str]:
        """Ids of ``split``; without one, the goals named when opening (``?goal=``), else the split
        named when opening (``?split=``), else ``test``."""
        if split is None and self.goal_ids:
            return list(self.goal_ids)
        return split_task_ids(self.book, split or self.default_split or "test")

    def index_of(self, task_id: str) -> int:
        """The goal index of ``task_id`` (``"12"`` or ``"goal:NAME"``); UnknownTask when unknown."""
        text = str(task_id).strip()
        if text.startswith("goal:"):
            name = text.removeprefix("goal:").strip().removeprefix("minecraft:").replace(" ", "_")
            index = self._goal_index.get(f"minecraft:{name}")
            if index is None:
                raise UnknownTask(
                    f"textcraft: unknown goal {name!r} in task id {task_id!r} (not one of the "
                    f"{len(self.book.goals)} craftable goals)"
                )
            return index
        if not text.isdigit() or int(text) >= len(self.book.goals):
            raise UnknownTask(
                f"textcraft: unknown task id {task_id!r} (task ids are 0-{len(self.book.goals) - 1} "
                "or goal:NAME)"
            )
        return int(text)

    def goal_of(self, task_id: str) -> str:
        """The goal item id of ``task_id``; UnknownTask when there is no such task."""
        return self.book.goals[self.index_of(task_id)]

    @staticmethod
    def goal_name(goal: str) -> str:
        """``minecraft:stone_pickaxe`` -> ``stone_pickaxe`` (the NAME of ``goal:NAME``)."""
        return goal.removeprefix("minecraft:")

    def listed_recipes(self, task_id: str) -> list[Recipe]:
        """The recipes the first observation of ``task_id`` lists, in its order: the goal's recipe
        tree plus up to ``distractors`` recipes using the same ingredients (seeded by the id)."""
        return listed_recipes(self.book, self.index_of(task_id), self.distractors, self.rules)

    def observation_for(self, task_id: str) -> str:
        """The first observation of ``task_id`` (pure function of the id and ``distractors``)."""
        return observation_text(self.goal_of(task_id), self.listed_recipes(task_id))

    # ---- episode ---------------------------------------------------------------------------------
    def reset_sync(self, task_id: str) -> str:
        observation = self._observations.get(task_id)
        if observation is None:
            observation = self._observations[task_id] = self.observation_for(task_id)
        self.task_id = str(task_id).strip()
        self.goal = self.goal_of(task_id)
        self.inventory = {}
        self.steps = 0
        self.done = False
        self.reward = 0.0
        self._crafted_goal = False
        return observation

    def step_sync(self, action: str) -> StepResult:
        if self.goal is None:
            raise EnvError("textcraft: step() before reset()")
        if self.open_ended:
            return self._open_ended_step(action)
        if self.done:
            return StepResult("The episode is over.", self.reward, True, valid=False, raw_score=self.reward)
        self.steps += 1
        valid = True
        try:
            observation = self._execute(action)
        except _ActionFailed as failure:
            observation = str(failure)
            valid = False
        info: dict[str, object] = {}
        if not self.done and self.steps >= self.max_steps:
            self.done = True
            info["truncated"] = True
        return StepResult(observation, self.reward, self.done, valid=valid, raw_score=self.reward, info=info)

    def _open_ended_step(self, action: str) -> StepResult:
        """One step of AgentGym's episode: reward 1 and done only on the step that crafts the goal."""
        self.steps += 1
        self._crafted_goal = False
        valid = True
        try:
            observation = self._execute(action)
        except _ActionFailed as failure:
            observation, valid = str(failure), False
        crafted = self._crafted_goal
        self.done = False  # their episode never ends on the server's side
        if crafted:
            self.reward = 1.0
        reward = 1.0 if crafted else 0.0
        return StepResult(observation, reward, crafted, valid=valid, raw_score=reward)

    def _execute(self, action: str) -> str:
        if self.rules == "agentr":
            action = action.strip()
        match = _CRAFT.match(action)
        if match:
            return self._craft(match.group(1), match.group(2))
        match = _GET.match(action)
        if match:
            return self._get(int(match.group(1)), match.group(2))
        if _INVENTORY.match(action):
            if not self.inventory:
                return "Inventory: You are not carrying anything."
            held = "".join(f"[{display_name(item)}] ({count}) " for item, count in self.inventory.items())
            return "Inventory: " + held
        raise _ActionFailed(f"Could not execute {action}")

    def _get(self, amount: int, name: str) -> str:
        item = item_id_of(name)
        book = self.book
        if book.is_craftable(item) or item in book.tags or item not in book.items:
            raise _ActionFailed(f"Could not find {name}")
        self.inventory[item] = self.inventory.get(item, 0) + amount
        return f"Got {amount} {name}"

    def _craft(self, output_text: str, inputs_text: str) -> str:
        book = self.book
        counted = _COUNT.match(output_text)
        output = item_id_of(counted.group(2) if counted else output_text)
        given: list[tuple[str, int]] = []
        for part in inputs_text.split(","):
            part = part.strip()
            counted = _COUNT.match(part)
            if not counted:
                raise _ActionFailed(f"Wrong item format: {part}")
            given.append((item_id_of(counted.group(2)), int(counted.group(1))))
        for item, count in given:
            if item in book.tags or self.inventory.get(item, 0) < count:
                shown = "None" if self.rules == "agentgym" and output in book.tags else output
                raise _ActionFailed(f"Could not find enough items to craft {shown}")
        for recipe in book.item_recipes.get(output, []) if output not in book.tags else []:
            remaining = list(given)
            matched = True
            for ing in recipe.inputs:
                found = None
                for entry in remaining:
                    if entry[0] == ing.name or (ing.is_tag and book.item_tag.get(entry[0]) == ing.name):
                        found = entry
                        break
                if found is None or found[1] != ing.count:
                    matched = False
                    break
                remaining.remove(found)
            if matched and not remaining:
                for item, count in given:
                    left = self.inventory[item] - count
                    if left:
                        self.inventory[item] = left
                    else:
                        del self.inventory[item]
                self.inventory[output] = self.inventory.get(output, 0) + recipe.output_count
                if output == self.goal:
                    self.done = True
                    self.reward = 1.0
                    self._crafted_goal = True
                return f"Crafted {recipe.output_count} {output}"
        if self.rules == "agentgym":  # their message shows their dataclass (what they typed)
            typed = _COUNT.match(output_text)
            count = int(typed.group(1)) if typed else 1
            tag, item = (f"'{output}'", "None") if output in book.tags else ("None", f"'{output}'")
            raise _ActionFailed(
                "Could not find a valid recipe for ItemTagWithCount(item_tag=ItemTag("
                f"tag={tag}, item_id={item}), count={count})"
            )
        raise _ActionFailed(f"Could not find a valid recipe for {display_name(output)}")

    # ---- action space ------------------------------------------------------------------------------
    def valid_actions_sync(self) -> list[str] | None:
        """The actions this state accepts (the ActionSpace capability; None before reset or once done).

        * ``craft``: every listed recipe (the task's crafting commands) that the inventory can make
          now, a generic ingredient (``planks``) instantiated with each held member that has enough
          (at most ``CRAFT_VARIANTS`` instantiations per recipe);
        * ``get N item``: every raw item a listed recipe uses (a generic ingredient's raw members
          too), ``N`` one of the counts the listed recipes ask of it times 1..``GET_MULTIPLES`` plus
          1..``SMALL_GETS`` (getting part of an amount again later is allowed);
        * ``inventory``.

        Each candidate is checked by executing it on a copy of the state, so every listed action is
        one the environment accepts; choosing a useless one (a distractor's craft, a wrong item, a
        repeat) stays possible: the errors left are decisions, not syntax.
        """
        if self.task_id is None or self.goal is None or self.done:
            return None
        book = self.book
        listed = self.listed_recipes(self.task_id)
        crafts: list[str] = []
        amounts: dict[str, set[int]] = {}
        for recipe in listed:
            options: list[list[tuple[str, int]]] = []
            for ing in recipe.inputs:
                names = book.tag_members.get(ing.name, []) if ing.is_tag else [ing.name]
                for name in names:
                    if not book.is_craftable(name) and name not in book.tags and name in book.items:
                        amounts.setdefault(name, set()).add(ing.count)
                held = [(n, ing.count) for n in names if self.inventory.get(n, 0) >= ing.count]
                options.append(held)
            for combo in itertools.islice(itertools.product(*options), CRAFT_VARIANTS):
                using = ", ".join(f"{count} {display_name(name)}" for name, count in combo)
                crafts.append(f"craft {recipe.output_count} {display_name(recipe.output)} using {using}")
        gets = [
            f"get {n} {display_name(item)}"
            for item in sorted(amounts)
            for n in sorted(
                {
                    *range(1, SMALL_GETS + 1),
                    *(c * k for c in amounts[item] for k in range(1, GET_MULTIPLES + 1)),
                }
            )
        ]
        accepted: list[str] = []
        for action in dict.fromkeys([*crafts, *gets, "inventory"]):
            if self.clone_sync().step_sync(action).valid:
                accepted.append(action)
        return accepted

    async def valid_actions(self) -> list[str] | None:
        return self.valid_actions_sync()

    # ---- Env port ----------------------------------------------------------------------------------
    async def reset(self, task_id: str) -> str:
        return self.reset_sync(task_id)

    async def step(self, action: str) -> StepResult:
        return self.step_sync(action)

    def clone_sync(self) -> TextCraftEnv:
        twin = TextCraftEnv.__new__(TextCraftEnv)
        twin.__dict__.update(self.__dict__)
        twin.inventory = dict(self.inventory)
        return twin

    async def clone(self) -> TextCraftEnv:
        return self.clone_sync()

    async def close(self) -> None:
        return None
