"""Why each message has its weight (``Message.why``): set by the code that builds the sample, a
closed vocabulary, always agreeing with the weight; samples stored without reasons still load."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from core.domain.datasets import content_digest
from core.domain.good_samples import revision_masks, trajectory_to_sample
from core.domain.preferences import preference_pair
from core.domain.serde import from_dict, to_dict
from core.domain.splice import revision_sample, splice_path
from core.domain.trajectory import Step, ToolCall, ToolResult, TrainingSample, Trajectory
from core.domain.weight_reasons import (
    CONTEXT,
    REASONS,
    TRAINED,
    MaskedSteps,
    check_reasons,
    describe,
)

ROOT = Path(__file__).resolve().parents[2]


def _traj(actions: list[str], tag: str, reward: float = 1.0) -> Trajectory:
    steps = tuple(Step(f"{tag} thinks {i}", a, f"{tag} obs {i}") for i, a in enumerate(actions))
    return Trajectory(task="Goal: craft stick.", instruction="You craft things.", steps=steps, reward=reward)


BAD = _traj(["get 1 oak logs", "craft 4 oak planks using 1 oak logs", "get 9 sand", "inventory"], "bad", 0.0)
GOOD = _traj(["get 1 oak logs", "craft 4 oak planks using 1 oak logs", "craft 4 stick", "done"], "good")


def _reasons(sample: TrainingSample) -> list[tuple[str, int, str]]:
    return [(m.role, m.weight, m.why) for m in sample.messages]


def test_every_message_of_a_revision_sample_has_its_reason() -> None:
    path = splice_path(BAD, GOOD, shared_steps=2, transition=3)
    sample = revision_sample("s", BAD, GOOD, path, "I should not have fetched sand.")
    assert _reasons(sample) == [
        ("system", 0, "system"),
        ("user", 0, "task"),
        ("assistant", 0, "shared_prefix"),
        ("user", 0, "observation"),
        ("assistant", 0, "shared_prefix"),
        ("user", 0, "observation"),
        ("assistant", 0, "bad_step"),  # the bad path after the divergence, through t' (step 3)
        ("user", 0, "observation"),
        ("assistant", 0, "bad_step"),
        ("user", 0, "observation"),
        ("assistant", 1, "reflection"),  # the first good turn starts with the reflection
        ("user", 0, "observation"),
        ("assistant", 1, "continuation"),
        ("user", 0, "observation"),
    ]
    assert sample.messages[10].content.startswith("Thought: I should not have fetched sand.")
    assert check_reasons(sample.messages) == []


def test_masked_continuation_steps_carry_the_masking_rule_that_masked_them() -> None:
    actions = ["get 1 oak logs", "craft 4 stick", "inventory", "inventory", "inventory", "craft 4 stick"]
    steps = []
    for i, action in enumerate(actions):
        observation = "Inventory: [oak logs] (1)" if action == "inventory" else f"obs {i}"
        if i == 1:
            observation = "Could not execute craft 4 stick"
        steps.append(Step(f"g {i}", action, observation, valid=i != 1))
    good = replace(GOOD, steps=tuple(steps))
    path = splice_path(BAD, good, shared_steps=1, transition=1)
    masked, record = revision_masks(path)
    assert isinstance(masked, MaskedSteps) and masked == {0, 2, 3}  # still compares as a set
    assert masked.reasons == {0: "masked_invalid", 2: "masked_loop", 3: "masked_loop"}
    assert (record["invalid"], record["loop"]) == (1, 2)
    sample = revision_sample("s", BAD, good, path, "I was wrong.", masked=masked)
    assistant = [(m.weight, m.why) for m in sample.messages if m.role == "assistant"]
    assert assistant == [
        (0, "shared_prefix"),
        (0, "bad_step"),
        (0, "masked_invalid"),  # the first good turn, masked: the reflection is in it, untrained
        (1, "continuation"),
        (0, "masked_loop"),
        (0, "masked_loop"),
        (1, "continuation"),
    ]
    assert check_reasons(sample.messages) == []
    # a plain set of indexes (a caller that names no reason) says only that it was masked
    plain = revision_sample("s", BAD, good, path, "I was wrong.", masked={0})
    assert [m.why for m in plain.messages if m.role == "assistant"][2] == "masked"
    with pytest.raises(ValueError, match="unknown mask reason"):
        MaskedSteps({0: "good_step"})


def test_tool_revision_results_are_observations() -> None:
    call = ToolCall("call_1", "get_order", '{"id": 1}')
    tool_step = Step(
        "look it up", call.canonical(), "{}", tool_calls=(call,), tool_results=(ToolResult("call_1", "{}"),)
    )
    answer = Step("", "Your order shipped.", "", kind="answer")
    bad = Trajectory(
        "Where is my order?", "Help.", (replace(tool_step), Step("", "No idea.", "", kind="answer"))
    )
    good = Trajectory("Where is my order?", "Help.", (tool_step, answer), reward=1.0)
    path = splice_path(bad, good, shared_steps=1, transition=1)
    sample = revision_sample("t", bad, good, path, "I should answer from the result.")
    assert _reasons(sample) == [
        ("system", 0, "system"),
        ("user", 0, "task"),
        ("assistant", 0, "shared_prefix"),
        ("tool", 0, "observation"),
        ("assistant", 0, "bad_step"),
        ("user", 0, "observation"),
        ("assistant", 1, "reflection"),
    ]


def test_every_message_of_a_good_sample_has_its_reason() -> None:
    steps = (
        Step("t", "get 1 ink sac", "Got 1 ink sac"),
        Step("t", "craft 1 bone", "Could not find a valid recipe for bone", valid=False),
        Step("t", "inventory", "Inventory: [ink sac]"),
        Step("t", "inventory", "Inventory: [ink sac]"),
        Step("t", "inventory", "Inventory: [ink sac]"),
        Step("t", "craft 1 black dye using 1 ink sac", "Crafted 1 black dye", 1.0, True),
    )
    sample = trajectory_to_sample(Trajectory("Goal: black dye.", "You craft.", steps, 1.0), "g")
    assert _reasons(sample) == [
        ("system", 0, "system"),
        ("user", 0, "task"),
        ("assistant", 1, "good_step"),
        ("user", 0, "observation"),
        ("assistant", 0, "masked_invalid"),
        ("user", 0, "observation"),
        ("assistant", 1, "good_step"),
        ("user", 0, "observation"),
        ("assistant", 0, "masked_loop"),
        ("user", 0, "observation"),
        ("assistant", 0, "masked_loop"),
        ("user", 0, "observation"),
        ("assistant", 1, "good_step"),  # the final observation is dropped
    ]
    unmasked = trajectory_to_sample(
        Trajectory("Goal: black dye.", "", steps, 1.0), "g", mask_invalid_steps=False, mask_loop_steps=False
    )
    assert [m.why for m in unmasked.messages] == ["task"] + ["good_step", "observation"] * 5 + ["good_step"]


def test_preference_sides_and_weights_agree_with_reasons() -> None:
    pair = preference_pair("p", BAD, GOOD, shared_steps=2)
    assert {m.why for m in pair.prompt} == {"system", "task", "shared_prefix", "observation"}
    assert [m.why for m in pair.chosen if m.role == "assistant"] == ["chosen", "chosen"]
    assert [m.why for m in pair.rejected if m.role == "assistant"] == ["rejected", "rejected"]
    for sample in (pair.chosen_sample(), pair.rejected_sample()):
        assert check_reasons(sample.messages) == []


def test_weights_and_reasons_agree_and_unknown_ones_are_named() -> None:
    path = splice_path(BAD, GOOD, shared_steps=2, transition=3)
    sample = revision_sample("s", BAD, GOOD, path, "I was wrong.")
    for message in sample.messages:
        assert message.why in REASONS
        assert (message.weight == 1) == (message.why in TRAINED)
    wrong = [replace(sample.messages[0], why="reflection"), replace(sample.messages[1], why="because")]
    assert check_reasons(wrong) == [
        "message 0: weight 0 but reason 'reflection'",
        "message 1: unknown reason 'because'",
    ]
    assert not set(CONTEXT) & set(TRAINED)
    assert describe("") == "not recorded" and describe("bad_step").startswith("the failed path")


def test_samples_stored_without_reasons_load_and_keep_their_digest() -> None:
    path = splice_path(BAD, GOOD, shared_steps=2, transition=3)
    sample = revision_sample("s", BAD, GOOD, path, "I was wrong.")
    stored = to_dict(sample)
    for message in stored["messages"]:
        del message["why"]  # what a sample stored before reasons existed looks like
    old = from_dict(TrainingSample, stored)
    assert all(m.why == "" for m in old.messages) and check_reasons(old.messages) == []
    assert [m.weight for m in old.messages] == [m.weight for m in sample.messages]
    assert content_digest(old) == content_digest(sample)  # a reason trains nothing: same dataset ids


def test_the_event_catalogue_lists_the_vocabulary() -> None:
    text = (ROOT / "docs" / "events.md").read_text(encoding="utf-8")
    line = next(line for line in text.splitlines() if line.startswith("- `why` (`str`"))
    documented = re.findall(r"`([a-z_]+)`", line.split(": why the message")[1].split("; the vocabulary")[0])
    assert sorted(documented) == sorted(REASONS)
