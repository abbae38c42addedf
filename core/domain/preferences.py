"""Owns preference pairs at the divergence node: (prompt, chosen, rejected) from a bad/good pair.

Pure (stdlib only). A pair (``PairFound``: a bad and a good trajectory that share their first
``shared_steps`` steps) is exactly a preference pair for DPO (as in Agent Q):

* prompt = system instruction + task + the shared steps with their observations: the history at
  the divergence node, ending with the observation the two paths both saw (weight 0);
* chosen = the good path's turns after the divergence; rejected = the bad path's turns after it.
  In both, assistant turns have weight 1 and observations / tool results weight 0 (context: the
  policy is scored on its own turns only, never on what the environment said); the observation
  after the final turn is dropped (nothing of the policy follows it); a final tool call keeps its
  tool results (weight 0), as good samples do (``core.domain.good_samples.trajectory_to_sample``).

Each side is also offered as a ``TrainingSample`` (prompt + continuation) so the tokeniser's
chat-template masking (``train_service.tokenize``) gives exact token labels for it. Pairs whose
two continuations are identical, or where either continuation is empty, are rejected
(``PreferenceError``). Reasons (``Message.why``, core.domain.weight_reasons): the prompt's
shared turns are ``shared_prefix``, the continuations' turns ``chosen`` / ``rejected``. The
manifest (``preference_manifest``) lists the pair ids in order with the event positions they came
from; its id is derived from that content (reasons left out: they train nothing).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core.domain.datasets import DatasetError, EmptyDatasetError
from core.domain.ids import derived_id
from core.domain.serde import to_dict
from core.domain.splice import conversation
from core.domain.trajectory import Message, Step, TrainingSample, Trajectory
from core.domain.weight_reasons import trained_dict


class PreferenceError(DatasetError):
    """A pair cannot be a preference pair; the message says why."""


@dataclass(frozen=True)
class PreferencePair:
    pair_id: str
    prompt: tuple[Message, ...]
    chosen: tuple[Message, ...]  # continuation only
    rejected: tuple[Message, ...]
    chosen_reward: float | None = None
    rejected_reward: float | None = None
    position: int = 0  # the PairFound event's position
    tools: tuple[dict[str, Any], ...] = ()

    def chosen_sample(self) -> TrainingSample:
        return TrainingSample(
            f"{self.pair_id}:chosen", "good", self.prompt + self.chosen, self.chosen_reward, tools=self.tools
        )

    def rejected_sample(self) -> TrainingSample:
        return TrainingSample(
            f"{self.pair_id}:rejected",
            "good",
            self.prompt + self.rejected,
            self.rejected_reward,
            tools=self.tools,
        )


def _continuation(trajectory: Trajectory, shared_steps: int, why: str) -> tuple[Message, ...]:
    steps: Sequence[Step] = trajectory.steps[shared_steps:]
    planned = [(step, 1, "", why) for step in steps]
    full = conversation("", "", planned)  # user("") first: dropped below
    msgs = list(full[1:])
    if steps and steps[-1].kind != "tool" and msgs and msgs[-1].role == "user":
        msgs = msgs[:-1]
    return tuple(msgs)


def preference_pair(
    pair_id: str, bad: Trajectory, good: Trajectory, shared_steps: int, position: int = 0
) -> PreferencePair:
    """The preference pair of a bad / good pair diverging after ``shared_steps`` steps."""
    if shared_steps < 0 or shared_steps > min(len(bad.steps), len(good.steps)):
        raise PreferenceError(
            f"pair {pair_id}: shared_steps={shared_steps} does not fit paths of {len(bad.steps)} / "
            f"{len(good.steps)} steps"
        )
    prompt = conversation(
        good.instruction or bad.instruction,
        good.task,
        [(s, 0, "", "shared_prefix") for s in good.steps[:shared_steps]],
    )
    if shared_steps and prompt[-1].role == "assistant":
        raise PreferenceError(f"pair {pair_id}: the divergence node has no observation to prompt with")
    chosen = _continuation(good, shared_steps, "chosen")
    rejected = _continuation(bad, shared_steps, "rejected")
    if not any(m.role == "assistant" for m in chosen) or not any(m.role == "assistant" for m in rejected):
        raise PreferenceError(f"pair {pair_id}: a continuation after the divergence node is empty")
    if [m.content for m in chosen if m.role == "assistant"] == [
        m.content for m in rejected if m.role == "assistant"
    ]:
        raise PreferenceError(f"pair {pair_id}: chosen and rejected continuations are identical")
    return PreferencePair(
        pair_id, prompt, chosen, rejected, good.reward, bad.reward, position, good.tools or bad.tools
    )


@dataclass(frozen=True)
class PreferenceManifest:
    dataset_id: str
    run_id: str | None
    iteration: int
    pair_ids: tuple[str, ...]
    positions: tuple[int, ...]
    content_sha256: str
    rejected_pairs: dict[str, str]  # pair id -> why it is not a preference pair


def preference_manifest(
    run_id: str | None,
    iteration: int,
    pairs: Sequence[PreferencePair],
    rejected: dict[str, str] | None = None,
) -> tuple[tuple[PreferencePair, ...], PreferenceManifest]:
    """Pairs sorted by (position, pair id) and their manifest; ``EmptyDatasetError`` when none."""
    ordered = tuple(sorted(pairs, key=lambda p: (p.position, p.pair_id)))
    if not ordered:
        why = (
            f" ({len(rejected)} pair(s) rejected: {sorted(set((rejected or {}).values()))[:2]})"
            if rejected
            else ""
        )
        raise EmptyDatasetError(f"iteration {iteration}: no preference pairs to train on{why}")
    ids = [p.pair_id for p in ordered]
    if len(set(ids)) != len(ids):
        raise DatasetError("a pair id appears twice")
    digest = hashlib.sha256()
    for p in ordered:
        body = to_dict(p)
        for side in ("prompt", "chosen", "rejected"):  # reasons train nothing: not in the digest
            body[side] = [trained_dict(m) for m in getattr(p, side)]
        digest.update(json.dumps(body, sort_keys=True, ensure_ascii=False).encode() + b"\n")
    sha = digest.hexdigest()
    return ordered, PreferenceManifest(
        dataset_id=derived_id("preferences", run_id, iteration, sha),
        run_id=run_id,
        iteration=iteration,
        pair_ids=tuple(ids),
        positions=tuple(p.position for p in ordered),
        content_sha256=sha,
        rejected_pairs=dict(rejected or {}),
    )
