"""The replay critic's Monte Carlo step values in the PRM records (core.formats.pair_records): a
prefix's probes pooled, a probe with no continuation ignored, impossible counts refused by name, and
the values attached only to a replayed pair's record (one value per labelled step: V after it)."""

from __future__ import annotations

import pytest

from core.domain.events import FirstErrorMarked, PairFound
from core.domain.trajectory import Step, Trajectory
from core.formats.pair_records import PairSource, prm_records, replay_values


def test_probes_of_one_prefix_are_pooled() -> None:
    assert replay_values([(0, 4, 4), (3, 1, 4), (3, 2, 4), (5, 0, 0)]) == {0: 1.0, 3: 3 / 8}
    with pytest.raises(ValueError, match="5 successes of 4"):
        replay_values([(2, 5, 4)])


def test_only_a_replayed_pair_gets_values() -> None:
    steps = tuple(Step(f"t{i}", f"a{i}", f"o{i}", 0.0, i == 3, True) for i in range(4))
    bad = Trajectory("task", "", steps, reward=0.0)
    good = Trajectory("task", "", (*steps[:2], Step("t", "b", "o", 1.0, True, True)), reward=1.0)
    pair = PairFound("p", "trace", "k", bad, good, 2)
    marked = FirstErrorMarked("p", "replay", 2, ())
    (plain,) = prm_records([PairSource(pair, marked, 0)])
    assert "values" not in plain and plain["labels"] == [True, True, False]
    probes = ((0, 1, 1), (4, 0, 1), (2, 1, 1), (3, 0, 1))
    (replayed,) = prm_records([PairSource(pair, marked, 0, probes)])
    assert replayed["labels"] == [True, True, False] and replayed["values"] == [None, 1.0, 0.0]
