"""Pure first-error logic: strict verdict parsing, label choice, rule signals, transition point."""

from __future__ import annotations

import pytest

from core.domain.critic import (
    CriticInputError,
    VerdictParseError,
    direct_verdicts,
    first_error,
    label_from_scores,
    loop_starts,
    parse_verdict,
    rule_verdicts,
    transition_index,
    verdict_from_scores,
    verdict_from_text,
)
from core.domain.events import StepVerdict
from core.domain.trajectory import Step


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("Good", "good"),
        ("bad", "bad"),
        ("Uncertain.", "uncertain"),
        ("Judgement: Bad", "bad"),
        ("Judgment: good", "good"),
        ("Verdict: Uncertain\nReason: the observation is ambiguous", "uncertain"),
        ("**Bad**", "bad"),
        ("not good", "bad"),
        ("Judgement: Not good.", "bad"),
    ],
)
def test_strict_parse_accepts_exact_forms(text: str, label: str) -> None:
    assert parse_verdict(text) == label


@pytest.mark.parametrize(
    "text",
    [
        "",
        "The action is good",
        "good but risky",
        "bad or good",
        "not bad",
        "Goodness: Bad",
        "This is not good at all",
        "Thought: fine\nAction: good",
    ],
)
def test_strict_parse_rejects_everything_else(text: str) -> None:
    with pytest.raises(VerdictParseError):
        parse_verdict(text)


def test_not_good_substring_trap_is_bad_never_good() -> None:
    # the released code's substring test ("good" in answer) would call these good
    assert parse_verdict("not good") == "bad"
    assert verdict_from_text(3, "Not good").label == "bad"
    # a sentence that merely contains "good" is not accepted as a verdict at all
    v = verdict_from_text(4, "it is not a good move")
    assert v.label == "uncertain"
    assert v.method == "text"
    assert "not an exact verdict form" in v.reason


def test_label_from_scores_argmax_and_tie() -> None:
    assert label_from_scores({"Good": -0.1, "Bad": -2.0, "Uncertain": -3.0}) == "good"
    assert label_from_scores({"good": -4.0, "bad": -0.5, "uncertain": -3.0}) == "bad"
    assert label_from_scores({"Good": -1.0, "Bad": -1.0, "Uncertain": -9.0}) == "uncertain"
    v = verdict_from_scores(2, {"Good": -3.0, "Bad": -0.2, "Uncertain": -2.0})
    assert (v.step_index, v.label, v.method) == (2, "bad", "scores")
    assert v.scores == {"good": -3.0, "bad": -0.2, "uncertain": -2.0}


@pytest.mark.parametrize(
    "scores",
    [
        {"Good": -1.0, "Bad": -2.0},
        {"Good": -1.0, "Bad": -2.0, "Uncertain": float("nan")},
        {"Good": -1.0, "Bad": -2.0, "Uncertain": -3.0, "Maybe": 0.0},
    ],
)
def test_label_from_scores_rejects_bad_input(scores: dict[str, float]) -> None:
    with pytest.raises(CriticInputError):
        label_from_scores(scores)


def _v(i: int, label: str) -> StepVerdict:
    return StepVerdict(step_index=i, label=label)  # type: ignore[arg-type]


def test_transition_is_first_bad_after_divergence() -> None:
    verdicts = [_v(2, "good"), _v(3, "uncertain"), _v(4, "bad"), _v(5, "bad")]
    assert transition_index(verdicts, n_steps=6, shared_steps=2) == 4


def test_transition_without_bad_is_last_action_direct_revision() -> None:
    verdicts = [_v(2, "good"), _v(3, "uncertain")]
    assert transition_index(verdicts, n_steps=4, shared_steps=2) == 3
    (direct,) = direct_verdicts(n_steps=4, shared_steps=2)
    assert (direct.step_index, direct.label, direct.method) == (3, "bad", "direct")
    assert transition_index([direct], 4, 2) == 3


def test_transition_rejects_verdicts_in_the_shared_prefix_and_empty_range() -> None:
    with pytest.raises(CriticInputError, match="outside the judged steps"):
        transition_index([_v(1, "bad")], n_steps=4, shared_steps=2)
    with pytest.raises(CriticInputError, match="none after the divergence"):
        transition_index([], n_steps=2, shared_steps=2)


def _s(action: str, obs: str = "ok", valid: bool = True) -> Step:
    return Step(thought="", action=action, observation=obs, valid=valid)


def test_rules_flag_invalid_observations_and_tool_errors() -> None:
    steps = [
        _s("get 1 oak logs", "Got 1 oak logs"),
        _s("craft 4 oak planks using 1 oak logs", "Crafted 4 minecraft:oak_planks"),
        _s("craft 1 stick using 9 sand", "Could not execute craft 1 stick using 9 sand"),
        _s("search[x]", "Error: tool failed with status 500"),
        _s("go north", "Nothing happens."),
        _s("jump", "fine", valid=False),
    ]
    verdicts = rule_verdicts(steps, start=1)
    assert [v.step_index for v in verdicts] == [1, 2, 3, 4, 5]
    assert [v.label for v in verdicts] == ["uncertain", "bad", "bad", "bad", "bad"]
    assert all(v.method == "rule" for v in verdicts)
    assert "could not execute" in verdicts[1].reason.lower()
    assert first_error(verdicts) == 2


def test_rules_find_loops_but_not_a_single_repeat() -> None:
    once = [_s("get 1 sand", "Got 1 sand"), _s("get 1 sand", "Got 1 sand"), _s("inventory", "sand x2")]
    assert loop_starts(once) == {}
    triple = [_s("look"), _s("inventory", "empty"), _s("inventory", "empty"), _s("inventory", "empty")]
    assert list(loop_starts(triple)) == [2]
    cycle = [_s("a"), _s("go east"), _s("go west"), _s("go east"), _s("go west"), _s("go east")]
    assert list(loop_starts(cycle)) == [3]
    verdicts = rule_verdicts(cycle, start=1)
    assert transition_index(verdicts, n_steps=6, shared_steps=1) == 3


def test_a_whole_trajectory_answer_names_a_step_or_none_never_a_guess() -> None:
    from core.domain.critic import parse_first_error_answer

    for text in ("3", "Step 3", "**Step 3**", "step: 3.", "Action #3 was wrong", '{"step": 3}',
                 "first wrong step: 3", '{"first_error": "Step 3"}'):  # fmt: skip
        assert parse_first_error_answer(text, 2, 5)[0] == 3, text
    for text in ("None", "no error", "No wrong step.", '{"step": null}'):
        number, why = parse_first_error_answer(text, 2, 5)
        assert number is None and "no wrong step" in why, text
    number, why = parse_first_error_answer("7", 2, 5)
    assert number is None and "outside the judged steps 2-5" in why
    number, why = parse_first_error_answer("1", 2, 5)  # before the divergence
    assert number is None and "outside" in why
    for text in ("", "I think the craft was bad", "Good", "{not json"):
        number, why = parse_first_error_answer(text, 1, 5)
        assert number is None and ("unparsed" in why or "empty" in why), text
