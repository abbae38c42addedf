"""Owns ScienceWorld's task list without the simulator: how many AgentGym game indices there are and
which of them ScienceWorld puts in its train / dev / test variation splits, so a client of a
ScienceWorld server (``agentgym+http://HOST:PORT/sciworld``) lists its tasks with no Java and no
``?tasks=START-END``.

The tables were recorded from ``scienceworld==1.2.3`` by ``SciWorldEnv().task_ids(split)`` (the
in-process adapter, ``core.envs.sciworld``: AgentGym's game order, their seven excluded tasks left
out); ``tests/integration/test_envs_sciworld.py`` checks it against the live simulator. Ranges are
inclusive.
"""

from __future__ import annotations

TASK_VARIATIONS: tuple[tuple[str, int], ...] = (
    ("boil", 30),
    ("melt", 30),
    ("freeze", 30),
    ("change-the-state-of-matter-of", 30),
    ("use-thermometer", 540),
    ("measure-melting-point-known-substance", 436),
    ("measure-melting-point-unknown-substance", 300),
    ("power-component", 20),
    ("power-component-renewable-vs-nonrenewable-energy", 20),
    ("test-conductivity", 900),
    ("test-conductivity-of-unknown-substances", 600),
    ("find-living-thing", 300),
    ("find-non-living-thing", 300),
    ("find-plant", 300),
    ("find-animal", 300),
    ("chemistry-mix", 32),
    ("chemistry-mix-paint-secondary-color", 36),
    ("chemistry-mix-paint-tertiary-color", 36),
    ("lifespan-longest-lived", 125),
    ("lifespan-shortest-lived", 125),
    ("lifespan-longest-lived-then-shortest-lived", 125),
    ("identify-life-stages-1", 14),
    ("identify-life-stages-2", 10),
)
"""AgentGym's games in order: each task (tasks.json order, their seven left out) and its variation
count. The adapter reads its game list from here, not from its simulator: asking a simulator for
variation counts loads every task in it, and that simulator's later episodes then differ from a fresh
one's (measured: a thermometer read 1 degree where AgentGym's server, whose per-client simulators are
fresh, read 0), so its answers would not match theirs."""

GAMES = 4639
"""AgentGym's ScienceWorld game indices are 0 .. GAMES - 1."""

SPLIT_RANGES: dict[str, tuple[tuple[int, int], ...]] = {
    "train": (
        (0, 13),
        (30, 43),
        (60, 73),
        (90, 103),
        (120, 389),
        (660, 877),
        (1096, 1245),
        (1396, 1405),
        (1416, 1425),
        (1436, 1885),
        (2336, 2635),
        (2936, 3085),
        (3236, 3385),
        (3536, 3685),
        (3836, 3985),
        (4136, 4151),
        (4168, 4185),
        (4204, 4221),
        (4240, 4301),
        (4365, 4426),
        (4490, 4551),
        (4615, 4620),
        (4629, 4632),
    ),
    "dev": (
        (14, 20),
        (44, 50),
        (74, 80),
        (104, 110),
        (390, 524),
        (878, 986),
        (1246, 1320),
        (1406, 1410),
        (1426, 1430),
        (1886, 2110),
        (2636, 2785),
        (3086, 3160),
        (3386, 3460),
        (3686, 3760),
        (3986, 4060),
        (4152, 4159),
        (4186, 4194),
        (4222, 4230),
        (4302, 4332),
        (4427, 4457),
        (4552, 4582),
        (4621, 4623),
        (4633, 4634),
    ),
    "test": (
        (21, 29),
        (51, 59),
        (81, 89),
        (111, 119),
        (525, 659),
        (987, 1095),
        (1321, 1395),
        (1411, 1415),
        (1431, 1435),
        (2111, 2335),
        (2786, 2935),
        (3161, 3235),
        (3461, 3535),
        (3761, 3835),
        (4061, 4135),
        (4160, 4167),
        (4195, 4203),
        (4231, 4239),
        (4333, 4364),
        (4458, 4489),
        (4583, 4614),
        (4624, 4628),
        (4635, 4638),
    ),
}


def sciworld_task_ids(split: str) -> list[str]:
    """Game indices of ``split`` (train, dev, test or all) as task ids, ascending."""
    if split == "all":
        return [str(i) for i in range(GAMES)]
    ranges = SPLIT_RANGES.get(split)
    if ranges is None:
        raise KeyError(split)
    return [str(i) for start, end in ranges for i in range(start, end + 1)]
