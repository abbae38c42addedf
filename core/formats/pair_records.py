"""Owns the training records beyond chat SFT that pairs, critiques and trees make: DPO and PRM lines.

* ``dpo`` — OpenAI's preference fine-tuning JSONL, one pair per line::

    {"input": {"messages": [...], "tools": [...]?},
     "preferred_output": [{"role": "assistant", ...}], "non_preferred_output": [{"role": "assistant", ...}]}

  ``input.messages`` is the shared history up to the divergence node (system, task, the shared
  steps and the observation both paths saw: ``core.domain.preferences.preference_pair``), ``tools``
  the function definitions. The published output fields hold assistant messages only, so they
  hold the assistant turn each path took at the divergence node (text, or ``tool_calls`` with
  JSON-string arguments); what followed needs the environment's answers and has no place there.

* ``prm`` — TRL's stepwise-supervision records ``{"prompt", "completions", "labels"}`` (standard,
  not conversational): ``prompt`` = the system instruction and the task; ``completions[i]`` = step
  i's assistant turn, preceded by the observation the previous step received (the context the
  step was taken in; a step's own observation is never in its completion, so the label is about
  the action, not the outcome it revealed). Labels from a first error t': steps before t' ``true``,
  t' ``false``, later steps cut. t' is the environment oracle's first error when the pair has one
  (``FirstErrorMarked.oracle_index``), else the critic's (``transition_index``); a critic that
  judged no step bad (``fallback``: t' defaulted to the last action) gives no record. A pair the
  replay critic judged (its ``ReplayProbed`` events) also has ``values``: per labelled step i, the
  Monte Carlo estimate ``V(i + 1)`` - the share of the continuations run after the first i + 1
  actions that succeeded, all probes of that prefix pooled (Math-Shepherd's soft label) - or null
  where no probe ran there (the binary search probes about log2(T) + 2 prefixes).

* ``prm-values`` — the same record shape from search trees: for every leaf, the path from the root;
  step i is labelled ``Q(node_i) >= threshold`` (Q = the node's mean rollout return in [0, 1],
  threshold 0.5 by default), the path stops before the first node without visits (Q unknown) and
  is cut after its first ``false``, like a first error. Paths with no labelled step are skipped; a
  path that is a prefix of an already written one (same steps, same labels) is written once.

Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from core.domain.events import FirstErrorMarked, PairFound
from core.domain.mcts import SearchTree
from core.domain.preferences import PreferenceError, PreferencePair, preference_pair
from core.domain.splice import conversation
from core.domain.trajectory import Message, Step, TrainingSample
from core.formats.records import openai_record

PAIR_FORMATS = ("dpo", "prm", "prm-values")
DEFAULT_Q_THRESHOLD = 0.5


@dataclass(frozen=True)
class PairSource:
    """A pair as stored: its PairFound, the critic's FirstErrorMarked (None: not judged yet) and
    the position of the PairFound event."""

    pair: PairFound
    marked: FirstErrorMarked | None
    position: int
    probes: tuple[tuple[int, int, int], ...] = ()
    """The replay critic's probes of the bad path, (prefix length, successes, continuations), in
    the order they ran (``ReplayProbed``); empty for a pair no replay judged."""


def _openai_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    rendered = openai_record(TrainingSample("dpo", "good", tuple(messages)))["messages"]
    for message in rendered:
        message.pop("weight", None)
    return rendered  # type: ignore[no-any-return]


def dpo_record(pair: PreferencePair) -> dict[str, Any]:
    """One OpenAI preference fine-tuning line (see the module docstring)."""
    chosen = next(m for m in pair.chosen if m.role == "assistant")
    rejected = next(m for m in pair.rejected if m.role == "assistant")
    preferred, non_preferred = _openai_messages([chosen]), _openai_messages([rejected])
    if preferred == non_preferred:
        raise PreferenceError(f"pair {pair.pair_id}: both paths took the same turn at the divergence node")
    inputs: dict[str, Any] = {"messages": _openai_messages(pair.prompt)}
    if pair.tools:
        inputs["tools"] = [dict(t) for t in pair.tools]
    return {"input": inputs, "preferred_output": preferred, "non_preferred_output": non_preferred}


def first_error_index(source: PairSource) -> int | None:
    """t' for a PRM record: the oracle's first error, else the critic's; None when neither judged."""
    marked = source.marked
    if marked is None:
        return None
    if marked.oracle_index is not None:
        return marked.oracle_index
    return None if marked.fallback else marked.transition_index


def first_error_labels(t: int) -> list[bool]:
    return [True] * t + [False]


def value_labels(values: Sequence[float | None], threshold: float = DEFAULT_Q_THRESHOLD) -> list[bool]:
    """Labels from per-step Q values: stop before the first unknown, cut after the first false."""
    labels: list[bool] = []
    for value in values:
        if value is None:
            break
        labels.append(value >= threshold)
        if not labels[-1]:
            break
    return labels


def _turn_text(message: Message) -> str:
    parts = [message.content] if message.content.strip() else []
    parts += [call.canonical() for call in message.tool_calls]
    return "\n".join(parts)


def stepwise_record(
    instruction: str, task: str, steps: Sequence[Step], labels: Sequence[bool]
) -> dict[str, Any]:
    """TRL stepwise supervision over the first ``len(labels)`` steps (see the module docstring)."""
    if not labels or len(labels) > len(steps):
        raise ValueError(f"{len(labels)} labels for {len(steps)} steps")
    planned = [(step, 1, "", "good_step") for step in steps[: len(labels)]]  # only the text is used
    messages = conversation("", "", planned)[1:]  # no empty task
    completions: list[str] = []
    context: list[str] = []
    for message in messages:
        if message.role == "assistant":
            completions.append("\n".join([*context, _turn_text(message)]))
            context = []
        elif message.content.strip():
            context.append(message.content)
    prompt = f"{instruction.strip()}\n\n{task.strip()}" if instruction.strip() else task.strip()
    return {"prompt": prompt, "completions": completions, "labels": list(labels)}


def dpo_records(sources: Iterable[PairSource]) -> Iterator[dict[str, Any]]:
    """DPO lines of the pairs that make preference pairs (others are skipped)."""
    for source in sources:
        pair = source.pair
        try:
            yield dpo_record(
                preference_pair(pair.pair_id, pair.bad, pair.good, pair.shared_steps, source.position)
            )
        except PreferenceError:
            continue


def replay_values(probes: Iterable[tuple[int, int, int]]) -> dict[int, float]:
    """``V(k)`` per probed prefix length k: successes over continuations, a prefix's probes pooled
    (a confirmed boundary is probed twice). A probe with no continuation counts nothing."""
    pooled: dict[int, list[int]] = {}
    for prefix, successes, m in probes:
        if m <= 0:
            continue
        if not 0 <= successes <= m:
            raise ValueError(f"probe of prefix {prefix}: {successes} successes of {m} continuations")
        counts = pooled.setdefault(prefix, [0, 0])
        counts[0] += successes
        counts[1] += m
    return {prefix: wins / total for prefix, (wins, total) in sorted(pooled.items())}


def prm_records(sources: Iterable[PairSource]) -> Iterator[dict[str, Any]]:
    """PRM lines of the judged pairs: the bad path labelled by its first error (and, for a replayed
    pair, each labelled step's Monte Carlo value: the module docstring)."""
    for source in sources:
        t = first_error_index(source)
        bad = source.pair.bad
        if t is None or t >= len(bad.steps):
            continue
        labels = first_error_labels(t)
        record = stepwise_record(bad.instruction, bad.task, bad.steps, labels)
        if source.probes:
            values = replay_values(source.probes)
            record["values"] = [values.get(i + 1) for i in range(len(labels))]
        yield record


def tree_value_records(
    tree: SearchTree, task: str, instruction: str, threshold: float = DEFAULT_Q_THRESHOLD
) -> Iterator[dict[str, Any]]:
    """PRM lines of one search tree (rule in the module docstring), leaves in node-id order."""
    seen: set[str] = set()
    leaves = sorted(node_id for node_id, node in tree.nodes.items() if not node.children and node.parent_id)
    for leaf_id in leaves:
        path = [node for node in tree.path(leaf_id) if node.parent_id is not None]  # the root is no step
        values = [node.mean_value if node.visits else None for node in path]
        labels = value_labels(values, threshold)
        if not labels:
            continue
        steps = [
            Step(node.thought, node.action, node.observation, node.reward, node.done, node.valid)
            for node in path
        ]
        record = stepwise_record(instruction, task, steps, labels)
        key = json.dumps(record, sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        yield record


def pair_lines(records: Iterable[dict[str, Any]]) -> Iterator[str]:
    for record in records:
        yield json.dumps(record, ensure_ascii=False) + "\n"
