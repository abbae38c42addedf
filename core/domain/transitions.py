"""Owns utterance-level transitions: search trees (and trajectories) -> (s, a, r, s', done) + manifest.

Pure (stdlib only, no I/O). This is the data an off-policy, utterance-level critic (ArCHer,
``train_service/archer.py``) trains on. A STATE is a history: the system instruction, the task and
the steps taken so far (each step = one assistant turn + the environment's observation). An ACTION
is one assistant turn (``Thought: ...\\nAction: ...``, or a tool call / answer). Every edge of a
search tree, parent -> child, is one transition:

* ``history``: the steps from the root to the parent (state s);
* ``step``: the child's step (action a, with the observation it produced);
* ``next_history`` = ``history + (step,)`` (state s');
* ``done``: the child is a recorded leaf of the tree (the environment said done, the path reached
  ``max_depth``, or the policy had no valid action there): nothing follows it. An edge into a node
  that was created but never expanded and is not a leaf is kept with ``done = False`` (its value is
  bootstrapped from V(s')); ``TransitionConfig.include_open_edges = False`` drops those;
* ``reward``: the leaf's terminal reward (in [0, 1], as the tree backed it up) when ``done``, else
  0, minus ``invalid_action_penalty`` when the environment rejected the action (``Step.valid`` False
  or an invalid-action observation, as ``core.domain.critic.invalid_signal`` reads it).

Several sibling actions of one state appear as separate transitions with the same ``history``:
exactly what an off-policy critic wants. Trajectories (good traces, any ``Trajectory`` with a known
reward) give one transition per step, the last one ``done`` with the trajectory's reward; a
trajectory with an unknown reward (None) gives none and is counted in the manifest as skipped.
Revision samples are synthetic splices (their reflection turn was never executed), so they are not
a source of transitions.

Guarantees, as for SFT datasets (``core.domain.datasets``): transitions are sorted by
(source position, source id, transition id); each transition id is derived from its source and
node/step index; the manifest records the sources (kind, id, the event position they were read
up to), every transition id in order and the config; the dataset id is derived from that content;
``rebuild`` from the same sources yields the identical transitions or raises ``DatasetError``
naming what changed.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from core.domain.critic import invalid_signal
from core.domain.datasets import DatasetError, EmptyDatasetError
from core.domain.ids import derived_id
from core.domain.mcts import SearchTree
from core.domain.serde import to_dict
from core.domain.splice import conversation, format_assistant
from core.domain.trajectory import Message, Step, Trajectory

TRANSITIONS_FORMAT = 1


@dataclass(frozen=True)
class TransitionConfig:
    """How transitions are read from the log.

    invalid_action_penalty: subtracted from the reward of every action the environment rejected
        (>= 0; 0 = terminal reward only, the paper's sparse setting).
    include_open_edges: keep edges into nodes that were created but never expanded or closed
        (done = False, value bootstrapped); False keeps only edges with a known continuation.
    """

    invalid_action_penalty: float = 0.0
    include_open_edges: bool = True

    def __post_init__(self) -> None:
        p = self.invalid_action_penalty
        if isinstance(p, bool) or not isinstance(p, int | float) or not math.isfinite(p) or not 0 <= p <= 1:
            raise DatasetError(f"invalid_action_penalty must be a number in [0, 1], got {p!r}")
        if not isinstance(self.include_open_edges, bool):
            raise DatasetError(f"include_open_edges must be true or false, got {self.include_open_edges!r}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TransitionConfig:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise DatasetError(f"transition config: unknown field(s) {unknown}; known: {sorted(known)}")
        return cls(**dict(data))


@dataclass(frozen=True)
class Transition:
    """One utterance-level transition (see the module docstring)."""

    transition_id: str
    source: Literal["tree", "trajectory"]
    source_id: str  # tree id, or the trajectory's key (sample / trace id)
    instruction: str
    task: str
    history: tuple[Step, ...]  # state s: the steps before the action
    step: Step  # the action a (thought + action) and the observation it produced
    reward: float
    done: bool
    node_id: str | None = None  # the child node (tree transitions)
    parent_id: str | None = None
    invalid: bool = False  # the environment rejected the action (penalised when configured)

    @property
    def next_history(self) -> tuple[Step, ...]:
        """State s': the history after the action."""
        return (*self.history, self.step)

    def state_messages(self) -> tuple[Message, ...]:
        """The conversation of state s (system, task, turns + observations), all weight 0."""
        return history_messages(self.instruction, self.task, self.history)

    def next_state_messages(self) -> tuple[Message, ...]:
        return history_messages(self.instruction, self.task, self.next_history)

    def action_text(self) -> str:
        return action_text(self.step)


def history_messages(instruction: str, task: str, history: Sequence[Step]) -> tuple[Message, ...]:
    """A state as chat messages, ending with the last observation (weight 0 everywhere)."""
    return conversation(instruction, task, [(step, 0, "", "history") for step in history])


def action_text(step: Step) -> str:
    """The assistant turn of ``step`` as text: ReAct for text actions, thought + canonical calls for
    tool steps, the answer itself for answers."""
    if step.kind == "action":
        return format_assistant(step.thought, step.action)
    if step.kind == "tool":
        return (step.thought.strip() + "\n" + step.action).strip()
    return step.action


@dataclass(frozen=True)
class TreeSource:
    """A finished search tree as read from its stream (``position``: its last event's position)."""

    tree: SearchTree
    task: str
    instruction: str
    position: int


@dataclass(frozen=True)
class TrajectorySource:
    """A trajectory with an id and the event position it came from."""

    source_id: str
    trajectory: Trajectory
    position: int


@dataclass(frozen=True)
class SourceRef:
    kind: Literal["tree", "trajectory"]
    source_id: str
    position: int
    transitions: int


@dataclass(frozen=True)
class TransitionManifest:
    dataset_id: str
    run_id: str | None
    iteration: int
    config: dict[str, Any]
    sources: tuple[SourceRef, ...]
    transition_ids: tuple[str, ...]
    content_sha256: str
    done: int
    invalid: int
    skipped_trajectories: int  # trajectories without a known reward
    format_version: int = TRANSITIONS_FORMAT
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BuiltTransitions:
    transitions: tuple[Transition, ...]
    manifest: TransitionManifest


def _reward(step: Step, terminal: float, done: bool, cfg: TransitionConfig) -> tuple[float, bool]:
    invalid = invalid_signal(step) is not None
    reward = (terminal if done else 0.0) - (cfg.invalid_action_penalty if invalid else 0.0)
    return reward, invalid


def tree_transitions(source: TreeSource, cfg: TransitionConfig | None = None) -> list[Transition]:
    """Every parent -> child edge of the tree as a transition (module docstring), in a stable order:
    nodes visited depth-first from the root, each node's outgoing edges in expansion order."""
    cfg = cfg or TransitionConfig()
    tree = source.tree
    out: list[Transition] = []
    stack: list[tuple[str, tuple[Step, ...]]] = [(tree.root_id, ())]
    while stack:
        node_id, history = stack.pop()
        node = tree.node(node_id)
        pending: list[tuple[str, tuple[Step, ...]]] = []
        for child_id in node.children:
            child = tree.node(child_id)
            step = Step(
                thought=child.thought,
                action=child.action,
                observation=child.observation,
                reward=child.reward,
                done=child.done,
                valid=child.valid,
            )
            done = child_id in tree.leaf_rewards
            if not done and not child.children and not cfg.include_open_edges:
                continue
            reward, invalid = _reward(step, tree.leaf_rewards.get(child_id, 0.0), done, cfg)
            out.append(
                Transition(
                    transition_id=derived_id("transition", tree.tree_id, child_id),
                    source="tree",
                    source_id=tree.tree_id,
                    instruction=source.instruction,
                    task=source.task,
                    history=history,
                    step=step,
                    reward=reward,
                    done=done,
                    node_id=child_id,
                    parent_id=node_id,
                    invalid=invalid,
                )
            )
            if child.children and not done:
                pending.append((child_id, (*history, step)))
        stack.extend(reversed(pending))  # first child's subtree first
    return out


def trajectory_transitions(source: TrajectorySource, cfg: TransitionConfig | None = None) -> list[Transition]:
    """One transition per step; the last is ``done`` with the trajectory's reward. [] when the
    reward is unknown."""
    cfg = cfg or TransitionConfig()
    traj = source.trajectory
    if traj.reward is None:
        return []
    steps = traj.steps
    out = []
    for i, step in enumerate(steps):
        done = i == len(steps) - 1
        reward, invalid = _reward(step, float(traj.reward), done, cfg)
        out.append(
            Transition(
                transition_id=derived_id("transition", "trajectory", source.source_id, i),
                source="trajectory",
                source_id=source.source_id,
                instruction=traj.instruction,
                task=traj.task,
                history=tuple(steps[:i]),
                step=step,
                reward=reward,
                done=done,
                invalid=invalid,
            )
        )
    return out


def _content_sha(transitions: Sequence[Transition]) -> str:
    digest = hashlib.sha256()
    for t in transitions:
        digest.update(json.dumps(to_dict(t), sort_keys=True, ensure_ascii=False).encode())
        digest.update(b"\n")
    return digest.hexdigest()


def build_transitions(
    *,
    run_id: str | None,
    iteration: int,
    trees: Sequence[TreeSource] = (),
    trajectories: Sequence[TrajectorySource] = (),
    config: TransitionConfig | None = None,
) -> BuiltTransitions:
    """The transitions of the given sources and their manifest (module docstring).

    Raises ``EmptyDatasetError`` when no source yields a transition, ``DatasetError`` when a source
    id appears twice.
    """
    cfg = config or TransitionConfig()
    keyed: list[tuple[int, str, list[Transition], Literal["tree", "trajectory"]]] = []
    seen: set[tuple[str, str]] = set()
    skipped = 0
    for tree_source in trees:
        key = ("tree", tree_source.tree.tree_id)
        if key in seen:
            raise DatasetError(f"tree {key[1]} offered twice")
        seen.add(key)
        keyed.append((tree_source.position, key[1], tree_transitions(tree_source, cfg), "tree"))
    for traj_source in trajectories:
        key = ("trajectory", traj_source.source_id)
        if key in seen:
            raise DatasetError(f"trajectory {key[1]} offered twice")
        seen.add(key)
        found = trajectory_transitions(traj_source, cfg)
        if not found:
            skipped += 1
        keyed.append((traj_source.position, key[1], found, "trajectory"))
    keyed.sort(key=lambda k: (k[0], k[3], k[1]))
    transitions = tuple(t for _, _, ts, _ in keyed for t in ts)
    if not transitions:
        raise EmptyDatasetError(
            f"iteration {iteration}: no transitions: {len(trees)} tree(s) and {len(trajectories)} "
            f"trajectory(ies) ({skipped} without a known reward)"
        )
    sha = _content_sha(transitions)
    cfg_dict: dict[str, Any] = to_dict(cfg)
    ids = tuple(t.transition_id for t in transitions)
    manifest = TransitionManifest(
        dataset_id=derived_id("transitions", run_id, iteration, sha, json.dumps(cfg_dict, sort_keys=True)),
        run_id=run_id,
        iteration=iteration,
        config=cfg_dict,
        sources=tuple(SourceRef(kind, sid, pos, len(ts)) for pos, sid, ts, kind in keyed),
        transition_ids=ids,
        content_sha256=sha,
        done=sum(1 for t in transitions if t.done),
        invalid=sum(1 for t in transitions if t.invalid),
        skipped_trajectories=skipped,
        stats={
            "transitions": len(transitions),
            "states": len({(t.source_id, t.parent_id or len(t.history)) for t in transitions}),
            "mean_reward_done": (
                sum(t.reward for t in transitions if t.done) / max(1, sum(1 for t in transitions if t.done))
            ),
        },
    )
    return BuiltTransitions(transitions, manifest)


def rebuild_transitions(
    manifest: TransitionManifest,
    trees: Sequence[TreeSource] = (),
    trajectories: Sequence[TrajectorySource] = (),
) -> tuple[Transition, ...]:
    """The transitions ``manifest`` describes, rebuilt from the same sources; a missing, extra or
    changed source is a ``DatasetError`` naming it."""
    wanted = {(s.kind, s.source_id) for s in manifest.sources}
    offered = {("tree", t.tree.tree_id) for t in trees} | {("trajectory", t.source_id) for t in trajectories}
    if missing := sorted(wanted - offered):
        raise DatasetError(f"transitions {manifest.dataset_id}: source(s) not found: {missing[:3]}")
    if extra := sorted(offered - wanted):
        raise DatasetError(f"transitions {manifest.dataset_id}: source(s) not in the manifest: {extra[:3]}")
    built = build_transitions(
        run_id=manifest.run_id,
        iteration=manifest.iteration,
        trees=trees,
        trajectories=trajectories,
        config=TransitionConfig.from_dict(manifest.config),
    )
    if built.manifest.transition_ids != manifest.transition_ids:
        raise DatasetError(
            f"transitions {manifest.dataset_id}: the sources now give {len(built.transitions)} "
            f"transitions, the manifest lists {len(manifest.transition_ids)} (a source changed)"
        )
    if built.manifest.content_sha256 != manifest.content_sha256:
        raise DatasetError(f"transitions {manifest.dataset_id}: content changed (sha256 differs)")
    return built.transitions
