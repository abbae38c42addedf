"""Owns the TextCraft expert: a gold action sequence (``get`` / ``craft`` commands) for any goal item.

The plan is built by simulating the inventory: to obtain N of an item, use what is already held,
``get`` raw materials, otherwise pick the shallowest recipe (ties: recipe text), obtain its
ingredients (a tag ingredient such as ``planks`` is satisfied by a held member or by its shallowest
member, ties by id) and issue one ``craft`` per recipe application, since the environment only accepts
a recipe's exact ingredient counts. The output is deterministic.

``plan_from`` plans from a given inventory with an optional recipe choice per item (the first-error
oracle, ``core.envs.textcraft.oracle``, compares such plans before and after a step).
"""

from __future__ import annotations

from collections.abc import Mapping
from math import ceil

from core.envs.textcraft.recipes import Ingredient, Recipe, RecipeBook, display_name, recipe_book


class _Planner:
    def __init__(
        self,
        book: RecipeBook,
        inventory: Mapping[str, int] | None = None,
        choice: Mapping[str, Recipe] | None = None,
    ) -> None:
        self.book = book
        self.inventory: dict[str, int] = {k: v for k, v in (inventory or {}).items() if v > 0}
        self.choice: Mapping[str, Recipe] = choice or {}
        self.actions: list[str] = []

    def recipe_depth(self, recipe: Recipe) -> int:
        return max(self.book.min_depth(ing.name) + 1 for ing in recipe.inputs)

    def concrete(self, ing: Ingredient, needed: int) -> str:
        if not ing.is_tag:
            return ing.name
        members = self.book.tag_members.get(ing.name, [])
        for member in members:
            if self.inventory.get(member, 0) >= needed:
                return member
        if not members:
            return ing.name
        return min(members, key=lambda m: (self.book.min_depth(m), m))

    def acquire(self, item: str, count: int, depth: int = 0) -> None:
        if depth > 32:
            raise RuntimeError(f"textcraft solver: recursion too deep while making {item}")
        have = self.inventory.get(item, 0)
        if have >= count:
            return
        recipes = self.book.item_recipes.get(item)
        if not recipes:
            self.actions.append(f"get {count - have} {display_name(item)}")
            self.inventory[item] = count
            return
        recipe = self.choice.get(item) or min(recipes, key=lambda r: (self.recipe_depth(r), r.text))
        times = ceil((count - have) / recipe.output_count)
        chosen = [(self.concrete(ing, ing.count * times), ing.count) for ing in recipe.inputs]
        for _ in range(8):  # obtaining one ingredient may consume another: repeat until all held
            for name, per in sorted(chosen, key=lambda c: -self.book.min_depth(c[0])):
                self.acquire(name, per * times, depth + 1)
            if all(self.inventory.get(name, 0) >= per * times for name, per in chosen):
                break
        else:
            raise RuntimeError(f"textcraft solver: could not gather the ingredients of {item}")
        using = ", ".join(f"{per} {display_name(name)}" for name, per in chosen)
        for _ in range(times):
            self.actions.append(f"craft {recipe.output_count} {display_name(item)} using {using}")
            for name, per in chosen:
                self.inventory[name] -= per
                if self.inventory[name] == 0:
                    del self.inventory[name]
            self.inventory[item] = self.inventory.get(item, 0) + recipe.output_count


def solve(goal: str, book: RecipeBook | None = None) -> list[str]:
    """Gold actions that craft ``goal`` (an item id like ``minecraft:stick`` or a name like ``stick``)."""
    book = book or recipe_book()
    item = goal if goal.startswith("minecraft:") else "minecraft:" + goal.strip().replace(" ", "_")
    if item not in book.item_recipes:
        raise ValueError(f"textcraft solver: {goal!r} is not a craftable goal item")
    planner = _Planner(book)
    planner.acquire(item, 1)
    return planner.actions


def plan_from(
    goal: str,
    inventory: Mapping[str, int],
    book: RecipeBook | None = None,
    choice: Mapping[str, Recipe] | None = None,
) -> list[str]:
    """Gold actions that craft ``goal`` (item id) starting from ``inventory`` (item id -> count; held
    items are used first). ``choice`` fixes the recipe of some items (default: the shallowest)."""
    book = book or recipe_book()
    if goal not in book.item_recipes:
        raise ValueError(f"textcraft solver: {goal!r} is not a craftable goal item")
    planner = _Planner(book, inventory, choice)
    planner.acquire(goal, 1)
    return planner.actions
