"""Pure splice: segment boundaries, exact loss weights, reflection placement, bad pairs rejected."""

from __future__ import annotations

import pytest

from core.domain.reflections import (
    DEFAULT_TEMPLATES,
    ReflectionError,
    check_model_reflection,
    choose_reflection,
    model_or_template,
    pair_choice_key,
    reflection_prompt,
)
from core.domain.splice import (
    Partner,
    SpliceError,
    check_pair,
    longest_common_prefix,
    revision_sample,
    splice_partners,
    splice_path,
)
from core.domain.trajectory import Step, Trajectory


def _traj(actions: list[str], reward: float, tag: str) -> Trajectory:
    steps = tuple(
        Step(thought=f"{tag} thinks {i}", action=a, observation=f"{tag} obs {i}")
        for i, a in enumerate(actions)
    )
    return Trajectory(task="Goal: craft stick.", instruction="You craft things.", steps=steps, reward=reward)


BAD = _traj(
    ["get 1 oak logs", "craft 4 oak planks using 1 oak logs", "get 9 sand", "inventory", "get 1 dirt"],
    0.0,
    "bad",
)
GOOD = _traj(
    ["get 1 oak logs", "craft 4 oak planks using 1 oak logs", "craft 4 stick using 2 oak planks"], 1.0, "good"
)


def test_splice_boundaries_and_weights_exact() -> None:
    path = splice_path(BAD, GOOD, shared_steps=2, transition=3)
    assert path.actions == [
        "get 1 oak logs",
        "craft 4 oak planks using 1 oak logs",
        "get 9 sand",
        "inventory",
        "craft 4 stick using 2 oak planks",
    ]
    assert path.revision_length == 2
    sample = revision_sample("s1", BAD, GOOD, path, "I realize that was wrong.", {"pair_id": "p"})
    roles = [m.role for m in sample.messages]
    assert roles == ["system", "user"] + ["assistant", "user"] * 5
    weights = [m.weight for m in sample.messages]
    #            sys user | prefix (2 steps) | bad (2 steps) | good (1 step)
    assert weights == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]
    assert sample.messages[0].content == "You craft things."
    assert sample.messages[1].content == "Goal: craft stick."
    # prefix comes from the shared steps, bad part keeps the bad path's observations through t'
    assert sample.messages[6].content == "Thought: bad thinks 2\nAction: get 9 sand"
    assert sample.messages[9].content == "bad obs 3"
    # the reflection sits in the Thought of the first good action, before the good thought
    assert sample.messages[10].content == (
        "Thought: I realize that was wrong. good thinks 2\nAction: craft 4 stick using 2 oak planks"
    )
    assert sample.messages[11].content == "good obs 2"
    assert sample.kind == "revision" and sample.reward == 1.0 and sample.provenance == {"pair_id": "p"}


def test_every_good_continuation_step_is_trained_and_no_fake_action() -> None:
    good = _traj(
        ["get 1 oak logs", "get 2 oak logs", "craft 8 oak planks using 2 oak logs", "craft stick"], 1.0, "g"
    )
    path = splice_path(BAD, good, shared_steps=1, transition=1)
    sample = revision_sample("s2", BAD, good, path, "I went the wrong way.")
    trained = [m.content for m in sample.messages if m.weight == 1]
    assert [t.split("\nAction: ")[1] for t in trained] == [
        "get 2 oak logs",
        "craft 8 oak planks using 2 oak logs",
        "craft stick",
    ]
    # the number of assistant turns equals the number of replayable actions: nothing was inserted
    assert sum(m.role == "assistant" for m in sample.messages) == len(path.actions) == 1 + 1 + 3


def test_transition_at_divergence_keeps_one_bad_action() -> None:
    path = splice_path(BAD, GOOD, shared_steps=2, transition=2)
    assert [s.action for s in path.bad] == ["get 9 sand"]


@pytest.mark.parametrize(
    ("shared", "transition", "match"),
    [
        (2, 1, "outside the bad path"),
        (2, 5, "outside the bad path"),
        (-1, 0, "shared_steps"),
        (3, 4, "good path has 3 step"),
    ],
)
def test_bad_pairs_are_rejected_with_a_reason(shared: int, transition: int, match: str) -> None:
    with pytest.raises(SpliceError, match=match):
        splice_path(BAD, GOOD, shared_steps=shared, transition=transition)


def test_prefix_mismatch_rejected() -> None:
    longer_good = _traj(
        ["get 1 oak logs", "craft 4 oak planks using 1 oak logs", "get 2 sand", "x"], 1.0, "g"
    )
    with pytest.raises(SpliceError, match="step 2 is 'get 9 sand' in the bad path but 'get 2 sand'"):
        splice_path(BAD, longer_good, shared_steps=3, transition=3)


def test_different_tasks_rejected() -> None:
    other = Trajectory(task="Goal: craft bed.", instruction="", steps=GOOD.steps, reward=1.0)
    with pytest.raises(SpliceError, match="different tasks"):
        check_pair(BAD, other, 1)


def test_longest_common_prefix() -> None:
    assert longest_common_prefix(BAD.steps, GOOD.steps) == 2
    assert longest_common_prefix(BAD.steps, ()) == 0


def test_splice_partners_adjacent_first_and_never_past_t_prime() -> None:
    """BAD = logs, planks, sand (t'=2 below), inventory, dirt. The tree's good paths branch off it
    after 0, 2 and 3 shared actions; the pair's own after 2. Adjacent: the deepest branch at or
    before t' first, the pair's own first among equals, then leaf id; a path that took t' too (3
    shared) is no partner; a path of another task neither. Pair: the own path only."""
    own = Partner("own", GOOD, 2, own=True)
    at_root = _traj(["get 2 oak logs", "craft 8 oak planks using 2 oak logs"], 1.0, "root")
    at_two = _traj([*[s.action for s in BAD.steps[:2]], "craft 4 stick using 2 oak planks"], 1.0, "two")
    took_t = _traj([*[s.action for s in BAD.steps[:3]], "get 1 oak logs", "craft 4 stick"], 1.0, "late")
    other_task = Trajectory("Goal: craft boat.", BAD.instruction, at_two.steps, reward=1.0)
    others = [
        ("z-root", at_root),
        ("b-two", at_two),
        ("a-late", took_t),
        ("c-task", other_task),
        ("own", GOOD),
    ]
    found = splice_partners(BAD, own, others, transition=2, rule="adjacent")
    assert [(p.leaf_id, p.shared, p.own) for p in found] == [
        ("own", 2, True),
        ("b-two", 2, False),
        ("z-root", 0, False),
    ]
    # t' deeper: the path that branches at 3 (right at t') comes first
    found = splice_partners(BAD, own, others, transition=3, rule="adjacent")
    assert [p.leaf_id for p in found] == ["a-late", "own", "b-two", "z-root"]
    # every partner splices into a path whose actions are the bad ones through t', then its own rest
    for partner in found:
        path = splice_path(BAD, partner.path, partner.shared, 3)
        assert path.actions[:4] == [s.action for s in BAD.steps[:4]]
        assert path.actions[4:] == [s.action for s in partner.path.steps[partner.shared :]]
        assert path.revision_length == 4 - partner.shared
    assert splice_partners(BAD, own, others, transition=3, rule="pair") == [own]
    assert splice_partners(BAD, own, others, transition=3) == [own]  # pair: the default
    with pytest.raises(SpliceError, match="splice.partner: unknown rule 'nearest'"):
        splice_partners(BAD, own, others, transition=3, rule="nearest")


def test_replayed_observations_replace_logged_ones() -> None:
    path = splice_path(BAD, GOOD, 2, 3)
    observed = [
        Step("", a, f"real {i}", reward=1.0 if i == 4 else 0.0, done=i == 4)
        for i, a in enumerate(path.actions)
    ]
    real = path.with_observations(observed)
    assert [s.observation for s in real.steps] == [f"real {i}" for i in range(5)]
    assert real.good[-1].done and real.actions == path.actions
    with pytest.raises(SpliceError):
        path.with_observations(observed[:-1])


def test_reflections_are_many_first_person_and_deterministic() -> None:
    assert len(DEFAULT_TEMPLATES) >= 10
    assert all(
        t.startswith(("I ", "I'", "My ", "Looking back", "That", "This", "On reflection", "The outcome"))
        for t in DEFAULT_TEMPLATES.values()
    )
    a = choose_reflection("pair-1", "get 9 sand")
    assert a == choose_reflection("pair-1", "get 9 sand")
    assert a.template_id in DEFAULT_TEMPLATES
    chosen = {choose_reflection(f"pair-{i}").template_id for i in range(200)}
    assert len(chosen) == len(DEFAULT_TEMPLATES)  # every template gets used
    filled = choose_reflection("x", "get 9 sand", {"only": "I see '{action}' was wrong."})
    assert filled.text == "I see 'get 9 sand' was wrong." and filled.template_id == "only"
    with pytest.raises(ReflectionError, match="bad placeholder"):
        choose_reflection("x", "", {"t": "I {nope}"})
    with pytest.raises(ReflectionError, match="empty"):
        choose_reflection("x", "", {})


def test_the_reflection_key_depends_on_the_pair_content_only() -> None:
    bad, good = ["get 1 oak logs", "craft 9 oak planks"], ["get 1 oak logs", "craft 4 oak planks"]
    key = pair_choice_key("goal:oak_planks", 1, bad, good)
    # no ids in it: the same pair found by another run (another run id) picks the same sentence
    assert key == pair_choice_key("goal:oak_planks", 1, list(bad), list(good))
    assert key.startswith("content:")
    others = {
        pair_choice_key("goal:oak_planks", 0, bad, good),
        pair_choice_key("goal:birch_planks", 1, bad, good),
        pair_choice_key("goal:oak_planks", 1, good, bad),
        pair_choice_key("goal:oak_planks", 1, bad[:1], good),
        # no ambiguity from joining: ["a b"] is not ["a", "b"]
        pair_choice_key("goal:oak_planks", 1, ["get 1 oak logs craft 9 oak planks"], good),
    }
    assert key not in others and len(others) == 5


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("Thought: I was wrong.\nAction: get 1 oak logs", "more than one line"),
        ("I was wrong. Action: inventory.", "Action:/Thought:"),
        ("I crafted too early. Now I will get the logs first.", "more than one sentence"),
        ("I should have gathered the logs first", "not a finished sentence"),
        ("The craft failed because logs were missing.", "first person"),
        ("I erred.", "fewer than three words"),
        ("I " + "really " * 60 + "erred.", "longer than"),
    ],
)
def test_unusable_model_reflections_are_rejected_with_the_reason(answer: str, why: str) -> None:
    with pytest.raises(ReflectionError, match=why):
        check_model_reflection(answer)


def test_a_model_reflection_is_used_else_the_template_fallback_is_recorded() -> None:
    sentence = "  I crafted the stick before I had any planks, so I will get the planks first. "
    used, why = model_or_template(sentence, "pair-1", "craft 1 stick")
    assert (used.template_id, used.text, why) == ("model", sentence.strip(), None)
    assert (
        check_model_reflection('"I see that my craft was premature!"') == "I see that my craft was premature!"
    )
    template = choose_reflection("pair-1", "craft 1 stick")
    for answer in (None, "Action: craft 1 stick", "xq zz"):
        fallback, why = model_or_template(answer, "pair-1", "craft 1 stick")
        assert fallback.template_id == f"model|fallback:{template.template_id}"
        assert fallback.text == template.text and why
    prompt = reflection_prompt("Goal: craft stick.", "craft  1 stick", "Could not execute craft 1 stick")
    assert [m.role for m in prompt] == ["system", "user"]
    assert "Your action: craft 1 stick\n" in prompt[1].content and "Could not execute" in prompt[1].content


# ------------------------------------------------------------------------------ native tool steps


def _tool_step(call_id: str, name: str, args: str, result: str, thought: str = "") -> Step:
    from core.domain.trajectory import ToolCall, ToolResult, tool_action

    calls = (ToolCall(call_id, name, args),)
    return Step(
        thought=thought,
        action=tool_action(calls),
        observation=result,
        tool_calls=calls,
        tool_results=(ToolResult(call_id, result, name=name),),
    )


def _tool_traj(refund_id: str, result: str, answer: str, reward: float, tag: str) -> Trajectory:
    tools = ({"type": "function", "function": {"name": "refund_order", "parameters": {"type": "object"}}},)
    steps = (
        _tool_step(f"{tag}1", "lookup", '{"email": "a@b.c"}', '{"orders": ["1234"]}', "look up"),
        _tool_step(f"{tag}2", "refund_order", f'{{"order_id": "{refund_id}"}}', result, f"{tag} refund"),
        Step(thought="", action=answer, observation="", kind="answer"),
    )
    return Trajectory(task="Refund 1234.", instruction="", steps=steps, reward=reward, tools=tools)


def test_tool_steps_stay_native_with_reflection_in_the_first_good_content() -> None:
    bad = _tool_traj("1243", "Error: not found", "Sorry.", 0.0, "b")
    good = _tool_traj("1234", '{"status": "refunded"}', "Refunded.", 1.0, "g")
    assert longest_common_prefix(bad.steps, good.steps) == 1  # same call, other call ids
    path = splice_path(bad, good, shared_steps=1, transition=1)
    sample = revision_sample("s", bad, good, path, "I used the wrong order id.")
    roles = [m.role for m in sample.messages]
    # no system message for an empty instruction; no empty trailing user turn after the answer
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant", "tool", "assistant"]
    assert [m.weight for m in sample.messages] == [0, 0, 0, 0, 0, 1, 0, 1]
    first_good = sample.messages[5]
    assert first_good.content == "I used the wrong order id. g refund"
    assert [c.call_id for c in first_good.tool_calls] == ["g2"]  # the real call, no fake one
    assert sample.messages[6].tool_call_id == "g2" and sample.messages[6].content == '{"status": "refunded"}'
    assert sample.messages[4].content == "Error: not found" and sample.messages[4].name == "refund_order"
    assert sample.messages[7].content == "Refunded." and not sample.messages[7].tool_calls
    assert sample.tools == good.tools


def test_a_reflection_before_a_final_answer_and_step_kind_checks() -> None:
    bad = _tool_traj("1234", '{"status": "refunded"}', "Sorry.", 0.0, "b")
    good = _tool_traj("1234", '{"status": "refunded"}', "Refunded.", 1.0, "g")
    path = splice_path(bad, good, shared_steps=2, transition=2)
    sample = revision_sample("s", bad, good, path, "I should confirm.")
    assert sample.messages[-1].content == "I should confirm. Refunded." and sample.messages[-1].weight == 1
    assert [m.weight for m in sample.messages].count(1) == 1
    with pytest.raises(ValueError, match="'tool' step needs at least one tool call"):
        Step("", "x", "", kind="tool")
    with pytest.raises(ValueError, match="'answer' step cannot carry tool calls"):
        Step("", "x", "", kind="answer", tool_calls=bad.steps[0].tool_calls)
    with pytest.raises(ValueError, match="did not make"):
        Step("", "x", "", tool_calls=bad.steps[0].tool_calls, tool_results=good.steps[0].tool_results)


def test_old_payloads_without_tool_fields_upcast_to_text_steps() -> None:
    from core.domain.serde import from_dict, to_dict

    old = {"task": "t", "instruction": "i", "steps": [{"thought": "a", "action": "b", "observation": "c"}]}
    traj = from_dict(Trajectory, old)
    assert traj.steps[0].kind == "action" and traj.tools == () and traj.steps[0].tool_calls == ()
    tool = _tool_traj("1", "r", "done", 1.0, "x")
    assert from_dict(Trajectory, to_dict(tool)) == tool


def test_revision_masks_rejected_and_loop_steps_of_the_good_continuation() -> None:
    """The good continuation's rejected steps and loop repeats get weight 0 (kept as context), like
    good samples'; the record counts them; steps before the divergence are weight 0 anyway."""
    from dataclasses import replace

    from core.domain.good_samples import revision_masks

    good_actions = [
        "get 1 oak logs",
        "craft 4 stick using 2 oak planks",  # rejected: the planks are not there yet
        "inventory",
        "inventory",
        "inventory",  # a loop: the 2nd and 3rd inventory repeat the first
        "craft 4 oak planks using 1 oak logs",
        "craft 4 stick using 2 oak planks",
    ]
    steps = []
    for i, action in enumerate(good_actions):
        observation = f"good obs {i}"
        if i == 1:
            observation = "Could not execute craft 4 stick using 2 oak planks"
        elif action == "inventory":
            observation = "Inventory: [oak logs] (1)"
        steps.append(Step(f"g thinks {i}", action, observation, valid=i != 1))
    good = replace(GOOD, steps=tuple(steps))
    path = splice_path(BAD, good, shared_steps=1, transition=2)
    masked, record = revision_masks(path)
    assert masked == {0, 2, 3}  # good-continuation indexes: the rejected craft, two inventory repeats
    assert record == {"invalid_steps": True, "loop_steps": True, "invalid": 1, "loop": 2}
    sample = revision_sample("s", BAD, good, path, "I was wrong.", masked=masked)
    assistant = [
        (m.content.split("\nAction: ")[1], m.weight) for m in sample.messages if m.role == "assistant"
    ]
    assert assistant == [
        ("get 1 oak logs", 0),  # shared prefix
        ("craft 4 oak planks using 1 oak logs", 0),  # bad, through t'
        ("get 9 sand", 0),
        ("craft 4 stick using 2 oak planks", 0),  # good continuation: rejected, kept as context
        ("inventory", 1),
        ("inventory", 0),
        ("inventory", 0),
        ("craft 4 oak planks using 1 oak logs", 1),
        ("craft 4 stick using 2 oak planks", 1),
    ]
    # the reflection stays where it always is (the first good turn), even when that turn is masked
    assert sample.messages[[m.role for m in sample.messages].index("assistant", 7)].content.startswith(
        "Thought: I was wrong."
    )
    # the rule switched off: every continuation step trained, the record says so
    none, off = revision_masks(path, mask_invalid_steps=False, mask_loop_steps=False)
    assert none == frozenset() and off == {
        "invalid_steps": False,
        "loop_steps": False,
        "invalid": 0,
        "loop": 0,
    }


def test_rejection_kinds_count_reasons_without_their_numbers() -> None:
    from core.domain.splice import rejection_kind

    assert rejection_kind("unverified: the episode ended at step 3, before the last action") == (
        "unverified: ended early"
    )
    assert rejection_kind("unverified: replay reward 0.000 is below the good reward 1.000") == (
        "unverified: reward below the good path's"
    )
    assert rejection_kind("unverified: something else") == "unverified: other"
    assert rejection_kind("replay failed: connection refused") == "replay failed"
    assert rejection_kind("critic: no_error_found: ...") == "critic"
    assert rejection_kind("splice: nothing to train: every step ...") == "splice"
    assert rejection_kind("") == "unknown"
