"""Owns the first-error verdict logic: strict verdict parsing, label choice, rule signals, t'.

Pure (stdlib only). The critic worker asks a model (or rules) about each action of a bad path after
the divergence node; this module turns the answers into labels and picks the transition point t':

- ``label_from_scores``: the label with the highest log-probability (deterministic; an exact tie
  between the best labels is ``uncertain``).
- ``parse_verdict``: the STRICT text fallback. It accepts only a bare label word ("Bad") or a labelled
  form ("Judgement: Bad", "Verdict: good."). A negated label is read as such: "not good" is bad,
  never good by substring; anything else ("not bad", "good but risky", "bad or good") is rejected with
  ``VerdictParseError``.
- ``rule_verdicts``: signals any log carries: invalid-action observations ("Could not execute",
  "Nothing happens", "Invalid action"), tool errors (a result marked is_error, e.g. an execute_tool
  span with ERROR status; exceptions; HTTP-style codes; JSON error shapes ``{"error": ...}``,
  ``{"status": "error"}``, ``{"detail": "Not Found"}``) and repeated loops (identical tool calls from
  the first repeat).
- ``transition_index``: the first "bad" at or after the divergence; if there is none, the last action
  (the degenerate case, identical to the Direct-Revision baseline ``direct_verdicts``);
  ``fell_back`` says whether that happened (recorded on every FirstErrorMarked, never silent).
- ``normalise_label_scores``: summed label log-probabilities -> mean log-probability per label token,
  so a label that the tokenizer splits into more pieces ("Uncertain") is not penalised for its length.
- ``first_step_verdicts``: the first-after-divergence baseline (t' = the first action after the
  divergence), beside Direct-Revision's ``direct_verdicts``.
- ``reflect_transition``: the ``reflect`` strategy's t' from the likelihood of a reflection sentence
  after each judged step (the first step whose score is within ``margin`` of the best).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Literal

from core.domain.events import StepVerdict
from core.domain.trajectory import Step

Label = Literal["good", "bad", "uncertain"]
LABELS: tuple[Label, ...] = ("good", "bad", "uncertain")
# The words a model is asked to answer with (and that label scoring scores), in LABELS order.
LABEL_WORDS: dict[Label, str] = {"good": "Good", "bad": "Bad", "uncertain": "Uncertain"}


class VerdictParseError(ValueError):
    """A critic answer that is not one of the accepted exact forms."""


class CriticInputError(ValueError):
    """A path/divergence combination the critic cannot judge (names the problem)."""


# --------------------------------------------------------------------------------------------
# Label scores and strict text parsing
# --------------------------------------------------------------------------------------------


def label_from_scores(scores: Mapping[str, float]) -> Label:
    """The label with the highest score; keys are label words in any case ("Good", "bad", ...).

    Every one of good / bad / uncertain must be present and finite. An exact tie at the top gives
    ``uncertain`` (never a coin flip), so the result is a pure function of the scores.
    """
    normalised: dict[Label, float] = {}
    for key, value in scores.items():
        label = key.strip().lower()
        if label not in LABELS:
            raise CriticInputError(f"label scores: unknown label {key!r} (expected Good/Bad/Uncertain)")
        if not isinstance(value, int | float) or math.isnan(value):
            raise CriticInputError(f"label scores: score of {key!r} is not a number: {value!r}")
        normalised[label] = float(value)  # type: ignore[index]
    missing = [word for label, word in LABEL_WORDS.items() if label not in normalised]
    if missing:
        raise CriticInputError(f"label scores: missing {', '.join(missing)}")
    best = max(normalised.values())
    winners = [label for label in LABELS if normalised[label] == best]
    return winners[0] if len(winners) == 1 else "uncertain"


_PREFIXES = ("judgement", "judgment", "verdict", "answer", "label", "assessment")
_VERDICT_RE = re.compile(
    r"^(?:(?P<prefix>[a-z]+)\s*:\s*)?(?P<neg>not\s+)?(?P<word>good|bad|uncertain)\s*[.!]?$",
    re.IGNORECASE,
)


def parse_verdict(text: str) -> Label:
    """Parse a critic's text answer STRICTLY (see module docstring); raises ``VerdictParseError``.

    Only the first non-empty line is read, so "Judgement: Bad\\nReason: ..." is accepted.
    """
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        raise VerdictParseError("empty critic answer")
    first = lines[0].strip("*` \t")
    match = _VERDICT_RE.match(first)
    if match is None:
        raise VerdictParseError(f"critic answer is not an exact verdict form: {first[:80]!r}")
    prefix = match.group("prefix")
    if prefix is not None and prefix.lower() not in _PREFIXES:
        raise VerdictParseError(f"critic answer has an unknown label prefix {prefix!r}")
    word = match.group("word").lower()
    if match.group("neg"):
        if word == "good":
            return "bad"  # "not good" is a bad verdict, whatever a substring test would say
        raise VerdictParseError(f"ambiguous negated verdict {first[:80]!r}")
    return word  # type: ignore[return-value]


def verdict_from_text(step_index: int, text: str) -> StepVerdict:
    """A StepVerdict from a text answer; an unparseable answer becomes ``uncertain`` with the reason."""
    try:
        label = parse_verdict(text)
    except VerdictParseError as exc:
        return StepVerdict(step_index=step_index, label="uncertain", method="text", reason=str(exc))
    return StepVerdict(step_index=step_index, label=label, method="text", reason=text.strip()[:200])


_STEP_ANSWER = re.compile(
    r"^(?:(?:first\s+)?(?:wrong\s+)?(?:step|action)\s*(?:number|no\.?|#)?\s*[:=]?\s*)?#?(\d+)\b", re.I
)
_NO_ERROR = re.compile(r"^(none|no\s+(?:wrong\s+)?(?:error|step|action|mistake)s?)\b", re.I)


def parse_first_error_answer(text: str, first: int, last: int) -> tuple[int | None, str]:
    """A whole-trajectory judge's answer -> (the 1-based step number it names, or None, and why).

    Accepted (first non-empty line, markdown emphasis stripped): a number (``3``), ``Step 3`` /
    ``Action #3`` / ``first wrong step: 3``, a JSON object ``{"step": 3}`` (or ``first_error``,
    ``answer``), and ``None`` / ``no error`` (no step named). A number outside ``[first, last]`` or
    any other answer names no step, and the reason says so: it is never guessed."""
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            value = json.loads(stripped.splitlines()[0] if stripped.count("{") > 1 else stripped)
        except json.JSONDecodeError:
            value = None
        if isinstance(value, dict):
            for key in ("step", "first_error", "answer", "index"):
                got = value.get(key)
                if isinstance(got, int) and not isinstance(got, bool):
                    return _in_range(got, first, last, stripped)
                if got is None and key in value:
                    return None, "the judge named no wrong step"
                if isinstance(got, str):
                    return parse_first_error_answer(got, first, last)
        return None, f"unparsed judge answer: {stripped[:80]!r}"
    lines = [line.strip().strip("*`_ \t") for line in stripped.splitlines() if line.strip()]
    if not lines:
        return None, "empty judge answer"
    line = lines[0]
    if _NO_ERROR.match(line):
        return None, "the judge named no wrong step"
    match = _STEP_ANSWER.match(line)
    if match is None:
        return None, f"unparsed judge answer: {line[:80]!r}"
    return _in_range(int(match.group(1)), first, last, line)


def _in_range(number: int, first: int, last: int, text: str) -> tuple[int | None, str]:
    if not first <= number <= last:
        return None, f"the judge named step {number}, outside the judged steps {first}-{last}: {text[:80]!r}"
    return number, text[:200]


def verdict_from_scores(step_index: int, scores: Mapping[str, float]) -> StepVerdict:
    """A StepVerdict from label log-probabilities (keys normalised to lower-case labels)."""
    label = label_from_scores(scores)
    clean = {key.strip().lower(): float(value) for key, value in scores.items()}
    return StepVerdict(step_index=step_index, label=label, scores=clean, method="scores")


# --------------------------------------------------------------------------------------------
# Which steps to judge, and the transition point
# --------------------------------------------------------------------------------------------


def judged_range(n_steps: int, shared_steps: int) -> range:
    """Indices of the bad path's actions after the divergence node; refuses an empty range."""
    if shared_steps < 0:
        raise CriticInputError(f"shared_steps must be >= 0, got {shared_steps}")
    if n_steps <= shared_steps:
        raise CriticInputError(
            f"the bad path has {n_steps} step(s), none after the divergence at {shared_steps}"
        )
    return range(shared_steps, n_steps)


def transition_index(verdicts: Sequence[StepVerdict], n_steps: int, shared_steps: int) -> int:
    """t': the first ``bad`` verdict at or after ``shared_steps``; else the last action of the path."""
    judged = judged_range(n_steps, shared_steps)
    for verdict in sorted(verdicts, key=lambda v: v.step_index):
        if verdict.step_index not in judged:
            raise CriticInputError(
                f"verdict for step {verdict.step_index} is outside the judged steps "
                f"{judged.start}..{judged.stop - 1}"
            )
        if verdict.label == "bad":
            return verdict.step_index
    return judged.stop - 1


def fell_back(verdicts: Sequence[StepVerdict], strategy: str) -> bool:
    """True when t' is the last action because nothing was judged bad (Direct-Revision's rule;
    ``direct`` always is)."""
    return strategy == "direct" or not any(v.label == "bad" for v in verdicts)


def normalise_label_scores(scores: Mapping[str, float], token_counts: Mapping[str, int]) -> dict[str, float]:
    """Mean log-probability per label token: ``scores[label] / token_counts[label]``.

    ``scores`` are summed log-probabilities of each label's tokens; every label needs a count >= 1.
    """
    out: dict[str, float] = {}
    for label, value in scores.items():
        count = token_counts.get(label)
        if count is None or count < 1:
            raise CriticInputError(f"label scores: no token count >= 1 for label {label!r}")
        out[label] = float(value) / count
    return out


def reflect_transition(step_scores: Sequence[tuple[int, float]], margin: float = 0.0) -> int:
    """t' of the ``reflect`` strategy: the FIRST judged step whose reflection score (mean
    log-probability per token of the reflection right after that step) is within ``margin`` of the
    best step's score; ``margin`` 0 means the argmax (earliest on ties)."""
    if not step_scores:
        raise CriticInputError("reflect: no judged steps")
    if margin < 0 or math.isnan(margin):
        raise CriticInputError(f"reflect: margin must be >= 0, got {margin!r}")
    for index, score in step_scores:
        if not isinstance(score, int | float) or math.isnan(score):
            raise CriticInputError(f"reflect: score of step {index} is not a number: {score!r}")
    best = max(score for _, score in step_scores)
    return min(index for index, score in step_scores if score >= best - margin)


def reflect_verdicts(
    step_scores: Sequence[tuple[int, float]], margin: float = 0.0
) -> tuple[StepVerdict, ...]:
    """One verdict per judged step: ``bad`` at the reflect t', ``good`` before it, ``uncertain`` after;
    each carries its reflection score (``scores["reflection"]``)."""
    chosen = reflect_transition(step_scores, margin)
    verdicts = []
    for index, score in sorted(step_scores):
        label: Label = "bad" if index == chosen else ("good" if index < chosen else "uncertain")
        verdicts.append(
            StepVerdict(
                step_index=index, label=label, scores={"reflection": float(score)}, method="reflection"
            )
        )
    return tuple(verdicts)


def first_error(verdicts: Sequence[StepVerdict]) -> int | None:
    """The first ``bad`` step index, or None (traces: no error found)."""
    bad = [v.step_index for v in verdicts if v.label == "bad"]
    return min(bad) if bad else None


def first_step_verdicts(n_steps: int, shared_steps: int) -> tuple[StepVerdict, ...]:
    """The first-after-divergence baseline: the first action after the divergence is t' (what a
    critic answering Bad to everything gives; on a pair with one action after the divergence every
    critic's t')."""
    first = judged_range(n_steps, shared_steps).start
    return (
        StepVerdict(
            step_index=first, label="bad", method="first", reason="first action after the divergence"
        ),
    )


def direct_verdicts(n_steps: int, shared_steps: int) -> tuple[StepVerdict, ...]:
    """The Direct-Revision baseline: the last action is the transition point."""
    last = judged_range(n_steps, shared_steps).stop - 1
    return (
        StepVerdict(step_index=last, label="bad", method="direct", reason="direct revision: last action"),
    )


# --------------------------------------------------------------------------------------------
# Rule signals
# --------------------------------------------------------------------------------------------

_REASONS = (
    "bad request|unauthorized|payment required|forbidden|not found|method not allowed|not acceptable|"
    "request timeout|conflict|gone|unprocessable|too many requests|internal server error|"
    "not implemented|bad gateway|service unavailable|gateway timeout"
)
INVALID_OBSERVATION_PATTERNS: tuple[str, ...] = (
    r"\bcould not (?:execute|find|craft)\b",
    r"\bnothing happens\b",
    r"\binvalid action\b",
    r"\bnot a valid (?:action|command)\b",
    r"\bunknown (?:action|command|tool)\b",
    r"\bno known action matches\b",
    r"^\s*error\b",
    r"\btool (?:call )?(?:error|failed)\b",
    r"\btraceback \(most recent call last\)",
    r"\bexception\b:",
    r"(?:^|\n)\s*[A-Z]\w*(?:Error|Exception)\s*:",  # a tool's exception: "ValueError: ..."
    r"^\s*(?:HTTP/\d(?:\.\d)?\s+)?[45]\d\d\s+(?:" + _REASONS + r")\b",  # "404 Not Found"
    r"\b(?:status(?:[ _]code)?|http(?: status)?)\s*[:=]?\s*[45]\d\d\b",  # "status code: 500"
)
_INVALID_RE = re.compile("|".join(f"(?:{p})" for p in INVALID_OBSERVATION_PATTERNS), re.IGNORECASE)
_ERROR_STATUSES = frozenset({"error", "failed", "failure", "fail", "fatal", "exception"})
_CODE_KEYS = ("status_code", "statusCode", "http_status", "httpStatus", "code", "status")
_PROBLEM_KEYS = frozenset({"detail", "status", "title", "type", "instance", "code"})


def json_error_signal(text: str) -> str | None:
    """Why a JSON result is an error, or None: ``{"error": ...}`` (non-empty), ``{"errors": [...]}``,
    ``{"status": "error"}``, ``{"success": false}`` / ``{"ok": false}``, ``{"isError": true}`` (MCP),
    an HTTP-style error code (``{"status_code": 404}``), or a bare ``{"detail": ...}`` / RFC 7807
    problem object (``{"detail": "Not Found"}``, FastAPI's error shape)."""
    stripped = text.strip()
    if not stripped.startswith("{"):
        return None
    try:
        data = json.loads(stripped)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    error = data.get("error")
    if error not in (None, False, "", [], {}, 0):
        return f"tool result reports an error: {json.dumps(error, sort_keys=True)[:80]}"
    if isinstance(data.get("errors"), list) and data["errors"]:
        return f"tool result reports errors: {json.dumps(data['errors'], sort_keys=True)[:80]}"
    status = data.get("status")
    if isinstance(status, str) and status.strip().lower() in _ERROR_STATUSES:
        return f"tool result has status {status!r}"
    for key in ("success", "ok"):
        if data.get(key) is False:
            return f"tool result has {key}: false"
    if data.get("isError") is True or data.get("is_error") is True:
        return "tool result is marked isError"
    for key in _CODE_KEYS:
        code = data.get(key)
        if isinstance(code, int) and not isinstance(code, bool) and 400 <= code <= 599:
            return f"tool result has HTTP-style error code {key}={code}"
        if isinstance(code, str) and code.strip().isdigit() and 400 <= int(code) <= 599:
            return f"tool result has HTTP-style error code {key}={code.strip()}"
    if "detail" in data and set(data) <= _PROBLEM_KEYS:
        return f"tool result is an error detail: {json.dumps(data['detail'], sort_keys=True)[:80]}"
    return None


_EXIT_CODE_RE = re.compile(
    r"\bexit\s*(?:code|status)\s*[:=]?\s*(-?\d+)|\bexited with (?:code|status)\s*(-?\d+)",
    re.IGNORECASE,
)
SELF_REPORT_PATTERNS: tuple[str, ...] = (
    r"\bI (?:was|am|'m|have been) (?:unable|not able) to\b",
    r"\bI (?:could not|couldn't|wasn't able to|did not manage to|didn't manage to)\b",
    r"\bI (?:failed|have failed) to\b",
    r"(?:^|\n)\s*Error:",
)
_SELF_REPORT_RE = re.compile("|".join(f"(?:{p})" for p in SELF_REPORT_PATTERNS), re.IGNORECASE)


def exit_code_signal(text: str) -> tuple[bool, str | None]:
    """A terminal output's exit code, read first: (found, why it is an error or None). AutoGen's
    ``exitcode: 1 (execution failed)`` (a time-out, an unknown language, a command not found, often
    with no traceback), ``exit code 2``, ``exited with code 127``. Exit code 0 is a success whatever
    the output prints (a traceback a program printed and handled is not the command failing)."""
    match = _EXIT_CODE_RE.search(text)
    if match is None:
        return False, None
    code = int(match.group(1) or match.group(2))
    if code == 0:
        return True, None
    line = text[match.start() :].splitlines()[0].strip()[:80]
    return True, f"command failed with exit code {code}: {line!r}"


def self_report_signal(step: Step) -> str | None:
    """Why the agent's own words in this step report a failure ("I was unable to...", "I could not
    ...", a line starting ``Error:``), or None: the text of an answer / action, the thought beside tool
    calls. Used by ``rule_verdicts`` (a step where the agent says it failed is judged bad), not by
    ``invalid_signal``: a successful trace may say it could not find something on the way."""
    text = step.thought if step.is_tool else f"{step.thought}\n{step.action}"
    match = _SELF_REPORT_RE.search(text)
    if match is None:
        return None
    return f"the agent reports a failure: {match.group(0).strip()!r}"


def text_error_signal(text: str) -> str | None:
    """Why an observation / tool result text reads as an error (an exit code first, then the patterns
    above and JSON shapes), or None. Output with exit code 0 is never an error."""
    found, reason = exit_code_signal(text)
    if found:
        return reason
    match = _INVALID_RE.search(text)
    if match:
        return f"invalid-action observation: {match.group(0).strip()!r}"
    return json_error_signal(text)


def invalid_signal(step: Step) -> str | None:
    """Why this step looks like an invalid action / tool error, or None.

    Tool steps: a call whose arguments are not a JSON object (malformed, kept verbatim), a result the
    tool (or its span's ERROR status) marked ``is_error``, or a result whose text is an error
    (exception, HTTP-style code, JSON error shape). Text steps: the observation.
    """
    for call in step.tool_calls:
        if call.malformed:
            shown = call.arguments.strip()[:80]
            return f"tool call {call.name!r} has arguments that are not a JSON object: {shown!r}"
    for result in step.tool_results:
        if result.is_error:
            who = result.name or result.call_id
            return f"tool {who!r} reported an error: {result.content.strip()[:80]!r}"
        reason = text_error_signal(result.content)
        if reason:
            return reason
    if not step.tool_results:
        reason = text_error_signal(step.observation)
        if reason:
            return reason
    if not step.valid:
        return f"the environment marked the action invalid: {step.observation.strip()[:80]!r}"
    return None


def loop_starts(steps: Sequence[Step], max_period: int = 3, min_span: int = 3) -> dict[int, str]:
    """Steps where a repeated action loop begins: index of the first repeated step -> reason.

    A loop of period p is the same (action, observation) window of p steps occurring twice in a row.
    For text actions at least ``min_span`` steps must take part (one legitimate double "get" is not a
    loop, three identical actions in a row are). Identical tool calls with identical results are a
    loop from the FIRST repeat (two in a row suffice: the second call could not learn anything new).
    """
    keys = [(s.action.strip().lower(), s.observation.strip()) for s in steps]
    found: dict[int, str] = {}
    in_loop_until = -1  # last step of the loop run being extended (a continuation is not a new loop)
    for end in range(len(keys)):
        for period in range(1, max_period + 1):
            tools_only = all(s.is_tool for s in steps[max(0, end - 2 * period + 1) : end + 1])
            span = 2 * period if tools_only else max(2 * period, min_span)
            start = end - span + 1
            if start < 0:
                continue
            window = keys[start : end + 1]
            if all(window[i] == window[i - period] for i in range(period, span)):
                first_repeat = start + period
                if first_repeat > in_loop_until:
                    kind = "tool call" if tools_only else "action"
                    found[first_repeat] = f"repeated {kind} loop (period {period}) from step {first_repeat}"
                in_loop_until = end
                break
    return found


def rule_verdicts(steps: Sequence[Step], start: int = 0) -> tuple[StepVerdict, ...]:
    """One verdict per step from ``start``: ``bad`` where a rule fires (an invalid action or tool error,
    a loop, the agent's own failure report), otherwise ``uncertain``."""
    loops = loop_starts(steps)
    verdicts = []
    for index in range(start, len(steps)):
        reason = invalid_signal(steps[index]) or loops.get(index) or self_report_signal(steps[index])
        if reason:
            verdicts.append(StepVerdict(step_index=index, label="bad", method="rule", reason=reason))
        else:
            verdicts.append(StepVerdict(step_index=index, label="uncertain", method="rule"))
    return tuple(verdicts)
