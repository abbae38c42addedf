"""The API's pure input rules (api/sanitize.py) and rate-limit buckets (api/ratelimit.py), no I/O."""

from __future__ import annotations

import json

import pytest

from api.ratelimit import TokenBuckets
from api.sanitize import MAX_DEPTH, JsonProblem, TooDeep, json_problem, loads_bounded, text_problem


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_depth_limit_is_exact_and_counts_json_inside_strings() -> None:
    assert json_problem(json.loads(_nested(MAX_DEPTH))) is None
    assert json_problem(json.loads(_nested(MAX_DEPTH + 1))) == JsonProblem(
        "" + "[0]" * MAX_DEPTH, f"nested deeper than {MAX_DEPTH} levels"
    )
    inner = {"a": {"arguments": _nested(MAX_DEPTH - 1)}}  # 2 levels outside + 63 inside
    assert json_problem(inner) is not None
    assert json_problem({"arguments": _nested(MAX_DEPTH - 1)}) is None
    found = json_problem({"calls": [{"arguments": '{"x": ' + _nested(5_000) + "}"}]})
    assert found is not None and found.path == "calls[0].arguments"
    assert "holds JSON nested deeper" in found.message
    # text that merely starts with a bracket is text
    assert json_problem({"content": "[not json"}) is None


def test_text_rules_name_the_location() -> None:
    assert text_problem("fine ü 🙂") is None
    assert "surrogate" in (text_problem("x\ud800") or "")
    assert "NUL" in (text_problem("a\x00") or "")
    problem = json_problem({"traces": [{"m": ["ok", "bad\udfff"]}]})
    assert problem is not None and problem.field() == "body.traces[0].m[1]"
    assert json_problem({"k\ud800": 1}) == JsonProblem("", "object key: " + (text_problem("k\ud800") or ""))
    assert json_problem({"v": float("nan")}) == JsonProblem("v", "NaN and Infinity are not JSON numbers")
    assert json_problem({"v": float("-inf")}) is not None
    assert json_problem({"v": 1.5, "n": None, "b": True}) is None


def test_loads_bounded_turns_recursion_into_too_deep() -> None:
    with pytest.raises(TooDeep):
        loads_bounded(_nested(100_000))
    assert loads_bounded(b'{"a": [1]}') == {"a": [1]}


def test_token_buckets_refill_and_say_when_to_retry() -> None:
    now = [0.0]
    buckets = TokenBuckets(rate=0.5, burst=2, clock=lambda: now[0])
    assert buckets.take("a") is None and buckets.take("a") is None
    assert buckets.take("a") == 2  # one token back after 2 s at 0.5/s
    assert buckets.take("b") is None  # buckets are per name
    now[0] = 1.0
    assert buckets.retry_after("a") == 1
    now[0] = 2.0
    assert buckets.take("a") is None
    off = TokenBuckets(rate=0, burst=1)
    assert all(off.take("x") is None for _ in range(100))
