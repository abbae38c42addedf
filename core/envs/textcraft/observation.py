"""Owns the first observation of a TextCraft task: which recipes it lists, in which order, under
our rules (the goal's recipe tree plus distractors seeded by the task id) and under AgentGym's (their
recipe-tree walk, sampled uses and shuffle with ``random.Random(42)``), and the text that lists them
(``core.envs.textcraft.env``'s docstring describes both procedures).
"""

from __future__ import annotations

import random

from core.envs.textcraft.recipes import Recipe, RecipeBook, display_name

AGENTGYM_MAX_DISTRACTORS = 10
AGENTGYM_USES_SAMPLED = 10
AGENTGYM_SEED = 42


def listed_recipes(book: RecipeBook, index: int, distractors: int, rules: str) -> list[Recipe]:
    """The recipes the first observation of goal ``index`` lists, in its order: the goal's recipe
    tree plus up to ``distractors`` recipes using the same ingredients (seeded by the index)."""
    goal = book.goals[index]
    if rules == "agentgym":
        return _agentgym_listed(book, goal, distractors)
    tree = book.tree(goal)
    in_tree = {recipe.text for recipe in tree}
    pool: dict[str, Recipe] = {}
    for recipe in tree:
        for ing in recipe.inputs:
            for use in book.uses.get(ing.name, []):
                if use.text not in in_tree:
                    pool.setdefault(use.text, use)
    rng = random.Random(f"textcraft:{index}")
    candidates = sorted(pool)
    chosen = rng.sample(candidates, min(len(candidates), distractors))
    listed = [*tree, *(pool[text] for text in chosen)]
    rng.shuffle(listed)
    return listed


def observation_text(goal: str, listed: list[Recipe]) -> str:
    """The first observation: the listed crafting commands, then the goal."""
    lines = [recipe.text for recipe in listed]
    return "Crafting commands:\n{}\n\nGoal: craft {}.".format("\n".join(lines), display_name(goal))


def _agentgym_listed(book: RecipeBook, goal: str, distractors: int) -> list[Recipe]:
    """The recipes of AgentGym's first observation of ``goal``, in its order (first-seen order
    where they iterate a set)."""
    rng = random.Random(AGENTGYM_SEED)
    walked = _walk(book, goal, frozenset())
    sampled: list[Recipe] = []
    for recipe in walked:
        for ing in recipe.inputs:
            uses = book.uses.get(ing.name)
            if uses:
                sampled.extend(rng.sample(uses, min(len(uses), AGENTGYM_USES_SAMPLED)))
    by_text: dict[str, Recipe] = {}
    for recipe in [*walked, *sampled]:
        by_text.setdefault(recipe.text, recipe)
    lines = list(dict.fromkeys(r.text for r in walked))
    shown = set(lines)
    pool = list(dict.fromkeys(r.text for r in sampled if r.text not in shown))
    lines += rng.sample(pool, min(len(pool), AGENTGYM_MAX_DISTRACTORS, distractors))
    rng.shuffle(lines)
    return [by_text[text] for text in lines]


def _walk(book: RecipeBook, name: str, path: frozenset[str]) -> list[Recipe]:
    """Their recipe-tree walk: an item's recipes, then each ingredient's walk (repeats kept)."""
    if name in path:
        return []
    recipes = book.recipes_for(name)
    out = list(recipes)
    for recipe in recipes:
        for ing in recipe.inputs:
            out.extend(_walk(book, ing.name, path | {name}))
    return out
