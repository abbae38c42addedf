"""Builds the event histories the workers would write (iterations, trees, pairs, samples, traces),
appended to the real store exactly as a worker appends them, for the API to read back."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.domain import events as ev
from core.domain.events import Metadata, NewEvent
from core.domain.ids import new_id, pair_stream, run_stream, trace_stream, tree_stream
from core.domain.trajectory import Message, Step, TrainingSample, Trajectory
from core.store.sql import SqlEventStore


def meta(project_id: str, producer: str = "test-worker") -> Metadata:
    return Metadata(producer=producer, project_id=project_id)


def trajectory(actions: list[str], reward: float | None) -> Trajectory:
    return Trajectory(
        task="Goal: craft stick.",
        instruction="Answer with Thought: ... Action: ...",
        steps=tuple(Step(thought=f"think {a}", action=a, observation=f"obs {a}") for a in actions),
        reward=reward,
    )


def revision_sample(sample_id: str, index: int) -> TrainingSample:
    return TrainingSample(
        sample_id=sample_id,
        kind="revision",
        messages=(
            Message("system", "Answer with Thought: ... Action: ..."),
            Message("user", f"Goal: craft item {index}."),
            Message("assistant", "Thought: go\nAction: get 1 oak logs", 0),
            Message("user", "Got 1 oak logs"),
            Message(
                "assistant",
                "Thought: I made a mistake; back up.\nAction: craft 4 oak planks using 1 oak logs",
                1,
            ),
        ),
        reward=1.0,
        provenance={"index": index},
    )


def revision_event(
    project_id: str,
    pair_id: str,
    run_id: str | None,
    sample: TrainingSample,
    *,
    iteration: int = 0,
    template_id: str = "r01",
    revision_length: int = 1,
    verified: bool | None = True,
) -> NewEvent:
    """``sample`` spliced for the pair: its RevisionMaterialized on the pair's stream, as the splicer
    appends it."""
    materialized = ev.RevisionMaterialized(
        sample_id=sample.sample_id,
        pair_id=pair_id,
        run_id=run_id,
        iteration=iteration,
        sample=sample,
        template_id=template_id,
        revision_length=revision_length,
        verified=verified,
    )
    return NewEvent(pair_stream(pair_id), materialized, meta(project_id, "splice"))


@dataclass
class SeededRun:
    run_id: str
    tree_id: str
    node_ids: list[str]
    pair_id: str
    good_ids: list[str] = field(default_factory=list)
    revision_ids: list[str] = field(default_factory=list)


async def seed_search(store: SqlEventStore, project_id: str, run_id: str, iteration: int = 0) -> SeededRun:
    """An iteration with one tree of 4 nodes, 3 rollouts, one pair, two good trajectories."""
    m = meta(project_id)
    tree_id = new_id()
    root, a, b, c = (new_id() for _ in range(4))
    events = [
        NewEvent(
            run_stream(run_id),
            ev.IterationStarted(
                run_id=run_id, iteration=iteration, model_ref="tiny", alpha=0.7, tree_ids=(tree_id,)
            ),
            m,
        ),
        NewEvent(
            tree_stream(tree_id),
            ev.TreeStarted(
                tree_id=tree_id,
                run_id=run_id,
                iteration=iteration,
                env_uri="textcraft",
                task_id="3",
                instruction="inst",
                task="Goal: craft stick.",
                model_version="tiny",
                search_config={},
                root_id=root,
            ),
            m,
        ),
        NewEvent(
            tree_stream(tree_id),
            ev.NodesExpanded(
                tree_id=tree_id,
                nodes=(
                    ev.NodeRecord(root, None, 0, "", "", "Goal: craft stick."),
                    ev.NodeRecord(a, root, 1, "get 1 oak logs", "t", "Got 1 oak logs"),
                    ev.NodeRecord(b, root, 1, "inventory", "t", "Inventory: empty", reward=0.0, done=True),
                    ev.NodeRecord(c, a, 2, "craft 4 oak planks", "t", "Crafted", reward=1.0, done=True),
                ),
            ),
            m,
        ),
        NewEvent(tree_stream(tree_id), ev.RolloutFinished(tree_id, 0, c, 1.0, "done"), m),
        NewEvent(tree_stream(tree_id), ev.RolloutFinished(tree_id, 1, b, 0.0, "done"), m),
        NewEvent(tree_stream(tree_id), ev.RolloutFinished(tree_id, 2, c, 1.0, "done"), m),
        NewEvent(
            tree_stream(tree_id),
            ev.TreeCompleted(
                tree_id,
                run_id,
                iteration,
                nodes=4,
                rollouts=3,
                best_reward=1.0,
                good_leaves=1,
                bad_leaves=1,
                pairs=1,
            ),
            m,
        ),
    ]
    pair_id = new_id()
    events.append(
        NewEvent(
            pair_stream(pair_id),
            ev.PairFound(
                pair_id=pair_id,
                source="search",
                task_key="textcraft/3",
                bad=trajectory(["inventory"], 0.0),
                good=trajectory(["get 1 oak logs", "craft 4 oak planks"], 1.0),
                shared_steps=0,
                run_id=run_id,
                iteration=iteration,
                tree_id=tree_id,
            ),
            m,
        )
    )
    seeded = SeededRun(run_id=run_id, tree_id=tree_id, node_ids=[root, a, b, c], pair_id=pair_id)
    for reward in (1.0, 0.5):  # alpha is 0.7: only the first belongs to the dataset
        sample_id = new_id()
        seeded.good_ids.append(sample_id)
        events.append(
            NewEvent(
                tree_stream(tree_id),
                ev.GoodTrajectoryFound(
                    sample_id=sample_id,
                    tree_id=tree_id,
                    run_id=run_id,
                    iteration=iteration,
                    leaf_id=c,
                    trajectory=trajectory(["get 1 oak logs", "craft 4 oak planks"], reward),
                ),
                m,
            )
        )
    await store.append(events)
    return seeded


async def seed_revisions(
    store: SqlEventStore,
    project_id: str,
    run_id: str,
    pair_id: str,
    count: int,
    iteration: int = 0,
    batch: int = 250,
) -> list[str]:
    """``count`` RevisionMaterialized events (appended in batches), as the splicer writes them."""
    ids: list[str] = []
    for start in range(0, count, batch):
        events = []
        for index in range(start, min(count, start + batch)):
            sample_id = new_id()
            ids.append(sample_id)
            sample = revision_sample(sample_id, index)
            events.append(
                revision_event(
                    project_id, pair_id, run_id, sample, iteration=iteration, revision_length=1 + index % 3
                )
            )
        await store.append(events)
    return ids


async def mark_dataset_ready(
    store: SqlEventStore, project_id: str, run_id: str, iteration: int, revisions: int
) -> str:
    dataset_id = new_id()
    await store.append(
        [
            NewEvent(
                run_stream(run_id),
                ev.IterationDatasetReady(
                    run_id=run_id,
                    iteration=iteration,
                    dataset_id=dataset_id,
                    revision_samples=revisions,
                    good_samples=1,
                    general_samples=0,
                ),
                meta(project_id, "splice"),
            )
        ]
    )
    return dataset_id


async def critique_trace(store: SqlEventStore, project_id: str, trace_id: str) -> str:
    """A critique and a revision sample for an ingested trace, as the critic and splicer write them."""
    sample_id = new_id()
    sample = revision_sample(sample_id, 0)
    sample = TrainingSample(
        sample.sample_id, sample.kind, sample.messages, sample.reward, {"trace_id": trace_id}
    )
    await store.append(
        [
            NewEvent(
                trace_stream(trace_id),
                ev.TraceCritiqued(
                    trace_id=trace_id,
                    strategy="rules",
                    transition_index=1,
                    verdicts=(
                        ev.StepVerdict(0, "good", method="rule"),
                        ev.StepVerdict(1, "bad", method="rule"),
                    ),
                ),
                meta(project_id, "critic"),
            ),
            revision_event(project_id, trace_id, None, sample, template_id="r02", verified=None),
        ]
    )
    return sample_id
