"""Owns the TextCraft package surface: the environment, its recipe book and the expert solver."""

from core.envs.textcraft.env import INSTRUCTION, TextCraftEnv, split_task_ids
from core.envs.textcraft.recipes import RecipeBook, display_name, recipe_book
from core.envs.textcraft.solver import solve

__all__ = [
    "INSTRUCTION",
    "RecipeBook",
    "TextCraftEnv",
    "display_name",
    "recipe_book",
    "solve",
    "split_task_ids",
]
