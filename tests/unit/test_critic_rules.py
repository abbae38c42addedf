"""The rules critic on production signals: tool results marked is_error (an execute_tool span's ERROR
status), JSON error shapes, HTTP-style codes, tool exceptions, and identical tool calls from the first
repeat; ordinary results stay uncertain (no false alarm on {"error": null} or "404 results")."""

from __future__ import annotations

import pytest

from core.domain.critic import json_error_signal, loop_starts, rule_verdicts
from core.domain.trajectory import Step, ToolCall, ToolResult, tool_action


def tool_step(result: str, *, is_error: bool = False, args: str = '{"id": 1}') -> Step:
    call = ToolCall("c", "lookup", args)
    return Step(
        thought="",
        action=tool_action((call,)),
        observation=result,
        tool_calls=(call,),
        tool_results=(ToolResult("c", result, is_error=is_error, name="lookup"),),
    )


@pytest.mark.parametrize(
    "result",
    [
        '{"error": "customer not found"}',
        '{"error": {"code": 7, "message": "quota"}}',
        '{"status": "error", "message": "db down"}',
        '{"detail": "Not Found"}',
        '{"detail": [{"loc": ["body", "id"], "msg": "field required"}]}',
        '{"success": false, "data": null}',
        '{"status_code": 404, "body": ""}',
        '{"errors": [{"message": "Cannot query field"}]}',
        '{"isError": true, "content": [{"type": "text", "text": "boom"}]}',
        "404 Not Found",
        "HTTP/1.1 503 Service Unavailable",
        "request failed with status code 500",
        "Traceback (most recent call last):\n  File ...\nKeyError: 'id'",
        "PermissionError: refunds above $50 need approval",
    ],
)
def test_error_results_are_bad(result: str) -> None:
    (verdict,) = rule_verdicts([tool_step(result)])
    assert verdict.label == "bad", verdict
    assert verdict.reason


@pytest.mark.parametrize(
    "result",
    [
        '{"error": null, "customer": {"id": 1}}',
        '{"status": "ok", "items": []}',
        '{"detail": "Order 7", "items": [1, 2]}',
        "found 404 results for mug",
        '{"code": 200, "data": "x"}',
        "Order 7 shipped.",
    ],
)
def test_ordinary_results_stay_uncertain(result: str) -> None:
    (verdict,) = rule_verdicts([tool_step(result)])
    assert verdict.label == "uncertain", verdict


def test_a_tool_span_error_status_marks_the_step_bad_whatever_the_text() -> None:
    (verdict,) = rule_verdicts([tool_step("", is_error=True)])
    assert verdict.label == "bad" and "'lookup' reported an error" in verdict.reason


def test_identical_tool_calls_are_a_loop_from_the_first_repeat() -> None:
    same = tool_step('{"balance": 3}')
    steps = [tool_step('{"balance": 1}', args='{"id": 0}'), same, same]
    assert loop_starts(steps) == {2: "repeated tool call loop (period 1) from step 2"}
    assert [v.label for v in rule_verdicts(steps)] == ["uncertain", "uncertain", "bad"]
    # the same call with a different result (polling) is not a loop
    assert loop_starts([tool_step('{"state": "queued"}'), tool_step('{"state": "done"}')]) == {}


def test_text_actions_keep_the_three_step_rule() -> None:
    look = Step(thought="", action="look", observation="a room")
    assert loop_starts([look, look]) == {}
    assert loop_starts([look, look, look]) == {1: "repeated action loop (period 1) from step 1"}


def test_json_error_signal_ignores_non_objects() -> None:
    assert json_error_signal('["error"]') is None
    assert json_error_signal("{not json") is None


# --------------------------------------------------------------------------------------------
# Real terminal logs and agents' own reports (issue 48)
# --------------------------------------------------------------------------------------------


def answer_step(text: str, observation: str = "") -> Step:
    return Step("", text, observation, kind="answer")


@pytest.mark.parametrize(
    "output",
    [
        "exitcode: 1 (execution failed)\nCode output: Timeout",
        "exitcode: 1 (execution failed)\nCode output: unknown language sh",
        "exitcode: 127 (execution failed)\nCode output: /bin/sh: 1: pandoc: not found",
        "Process exited with code 2",
        "exit status: 3",
    ],
)
def test_a_nonzero_exit_code_without_a_traceback_is_an_error(output: str) -> None:
    (verdict,) = rule_verdicts([answer_step("```sh\nrun\n```", output)])
    assert verdict.label == "bad" and "exit code" in verdict.reason


def test_a_traceback_printed_by_a_command_that_exited_0_is_not_an_error() -> None:
    output = (
        "exitcode: 0 (execution succeeded)\nCode output: Traceback (most recent call last):\n"
        '  File "x.py", line 1\nValueError: handled and printed on purpose'
    )
    (verdict,) = rule_verdicts([answer_step("```python\nprint_it()\n```", output)])
    assert verdict.label == "uncertain"
    # the same traceback without an exit code still reads as an error
    (verdict,) = rule_verdicts([answer_step("run", output.split("\n", 1)[1])])
    assert verdict.label == "bad"


@pytest.mark.parametrize(
    "text",
    [
        "I was unable to find the order in the system.",
        "Sorry, I couldn't download the file.",
        "Error: the API key is missing.",
        "Plan done.\nError: could not open the spreadsheet",
        "I am unable to access that page.",
    ],
)
def test_an_agent_reporting_its_own_failure_is_judged_bad(text: str) -> None:
    verdicts = rule_verdicts([answer_step("Looking it up.", "ok"), answer_step(text)])
    assert [v.label for v in verdicts] == ["uncertain", "bad"]
    assert verdicts[1].reason.startswith("the agent reports a failure")
    # the thought beside a tool call counts too
    call = ToolCall("c1", "fetch", "{}")
    tool = Step(
        text, tool_action((call,)), "fine", tool_calls=(call,), tool_results=(ToolResult("c1", "fine"),)
    )
    assert rule_verdicts([tool])[0].label == "bad"


def test_ordinary_text_is_not_a_self_report() -> None:
    for text in (
        "I found 3 errors in the log and fixed them.",
        "The error rate is 2%.",
        "Done: order 7 is cancelled.",
    ):
        assert rule_verdicts([answer_step(text)])[0].label == "uncertain"
