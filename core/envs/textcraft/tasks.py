"""Owns TextCraft's named splits: which goal indices ``split_task_ids`` gives for ``train``,
``test``, ``demo`` and ``all`` (``core.envs.textcraft.env``'s docstring says how each is drawn, for
our goal order and for AgentGym's).
"""

from __future__ import annotations

from core.envs.base import EnvError
from core.envs.textcraft.recipes import RecipeBook

AGENTGYM_TEST = 100  # AgentGym's test ids are 0-99 (AgentEval's textcraft split), the rest train
TEST_PER_DEPTH = {1: 25, 2: 40, 3: 24, 4: 11}
DEMO_PER_DEPTH = {1: 12, 2: 4}
SPLITS = ("train", "test", "demo", "all")


def _spread(ids: list[int], n: int) -> list[int]:
    n = min(n, len(ids))
    return [ids[(i * len(ids)) // n] for i in range(n)]


def split_task_ids(book: RecipeBook, split: str) -> list[str]:
    """Task ids of a named split (see the module docstring for how each is drawn); a book in
    AgentGym's order (``book.listing``) has AgentGym's splits."""
    by_depth: dict[int, list[int]] = {}
    for index, goal in enumerate(book.goals):
        by_depth.setdefault(book.depth[goal], []).append(index)
    if book.listing is not None:
        test = list(range(min(AGENTGYM_TEST, len(book.goals))))
    else:
        test = sorted(i for d, n in TEST_PER_DEPTH.items() for i in _spread(by_depth.get(d, []), n))
    if split == "test":
        chosen = test
    elif split in ("train", "demo"):
        held_out = set(test)
        train = [i for i in range(len(book.goals)) if i not in held_out]
        if split == "train":
            chosen = train
        else:
            train_by_depth: dict[int, list[int]] = {}
            for i in train:
                train_by_depth.setdefault(book.depth[book.goals[i]], []).append(i)
            chosen = sorted(i for d, n in DEMO_PER_DEPTH.items() for i in _spread(train_by_depth[d], n))
    elif split == "all":
        chosen = list(range(len(book.goals)))
    else:
        raise EnvError(f"textcraft: unknown split {split!r} (known: {', '.join(SPLITS)})")
    return [str(i) for i in chosen]
