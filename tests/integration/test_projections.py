"""Read models: live projection equals a full rebuild; node statistics equal a recount of rollouts."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import pytest
from sqlalchemy import select

from core.domain import events as ev
from core.domain.events import Metadata, NewEvent, NodeRecord
from core.domain.ids import new_id, pair_stream, project_stream, run_stream, trace_stream, tree_stream
from core.domain.trajectory import Message, Step, TrainingSample, Trajectory
from core.store.factory import open_store
from core.store.projections import rebuild
from core.store.sql import SqlEventStore
from core.store.tables import (
    PROJECTION_TABLES,
    api_keys,
    iterations,
    nodes,
    pairs,
    runs,
    samples,
    traces,
    trees,
)


def trajectory(n: int, reward: float) -> Trajectory:
    steps = tuple(Step(thought=f"t{i}", action=f"get {i} stick", observation=f"o{i}") for i in range(n))
    return Trajectory(task="craft a stick", instruction="act", steps=steps, reward=reward)


def sample(sample_id: str, provenance: dict[str, Any] | None = None) -> TrainingSample:
    return TrainingSample(
        sample_id=sample_id,
        kind="revision",
        messages=(Message("user", "task"), Message("assistant", "Thought: x\nAction: y", weight=1)),
        reward=1.0,
        provenance=provenance or {},
    )


class History:
    """Builds a varied, realistic event history and appends it in mixed batch sizes."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.project_id = new_id()
        self.meta = Metadata(correlation_id=new_id(), producer="test", project_id=self.project_id)
        self.pending: list[NewEvent] = []
        self.tree_nodes: dict[str, list[NodeRecord]] = defaultdict(list)

    def add(self, stream: str, event: ev.DomainEvent, meta: Metadata | None = None) -> None:
        if isinstance(event, ev.NodesExpanded) and len(self.tree_nodes) > 1:
            meta = Metadata(producer="search")  # the second tree's nodes: project from the tree row
        self.pending.append(NewEvent(stream, event, meta or self.meta))

    async def flush(self, store: SqlEventStore) -> None:
        while self.pending:
            size = self.rng.choice([1, 2, 5, 40])
            await store.append(self.pending[:size])
            del self.pending[:size]

    def grow_tree(self, tree_id: str, expansions: int) -> None:
        root = NodeRecord(new_id(), None, 0, "", "", "craft a stick")
        self.tree_nodes[tree_id].append(root)
        self.add(tree_stream(tree_id), ev.NodesExpanded(tree_id=tree_id, nodes=(root,)))
        for _ in range(expansions):
            parent = self.rng.choice(self.tree_nodes[tree_id])
            children = tuple(
                NodeRecord(
                    node_id=new_id(),
                    parent_id=parent.node_id,
                    depth=parent.depth + 1,
                    action=f"get {k} planks",
                    thought="think",
                    observation="ok",
                    reward=self.rng.random(),
                    done=self.rng.random() < 0.3,
                )
                for k in range(self.rng.randint(1, 4))
            )
            self.tree_nodes[tree_id].extend(children)
            self.add(tree_stream(tree_id), ev.NodesExpanded(tree_id=tree_id, nodes=children))

    def rollouts(self, tree_id: str, count: int) -> None:
        for r in range(count):
            leaf = self.rng.choice(self.tree_nodes[tree_id])
            reward = self.rng.choice([0.0, 0.25, 0.5, 1.0])
            self.add(
                tree_stream(tree_id),
                ev.RolloutFinished(
                    tree_id=tree_id, rollout=r, leaf_id=leaf.node_id, reward=reward, terminal_reason="done"
                ),
            )


async def build_history(store: SqlEventStore) -> dict[str, str]:
    h = History(seed=7)
    p, run, run2, run3 = h.project_id, new_id(), new_id(), new_id()
    t1, t2, key1, key2 = new_id(), new_id(), new_id(), new_id()
    no_meta = Metadata(producer="test")  # project id must come from the run
    h.add(project_stream(p), ev.ProjectCreated(project_id=p, name="demo"))
    for key in (key1, key2):
        h.add(
            project_stream(p),
            ev.ApiKeyIssued(
                project_id=p, key_id=key, prefix=key[:8], salt="s", key_hash="h", scopes=("runs:write",)
            ),
        )
    h.add(project_stream(p), ev.ApiKeyRevoked(project_id=p, key_id=key2))
    h.add(run_stream(run), ev.RunRequested(run_id=run, project_id=p, config={"iterations": 2}))
    h.add(
        run_stream(run),
        ev.IterationStarted(run_id=run, iteration=0, model_ref="m0", alpha=0.5, tree_ids=(t1, t2)),
    )
    for tree in (t1, t2):
        h.add(
            tree_stream(tree),
            ev.SearchRequested(
                tree_id=tree,
                run_id=run,
                iteration=0,
                env_uri="textcraft",
                task_id="3",
                model_ref="m0",
                search_config={"iterations": 8},
                seed=1,
            ),
            no_meta,
        )
    h.add(
        tree_stream(t1),
        ev.TreeStarted(
            tree_id=t1,
            run_id=run,
            iteration=0,
            env_uri="textcraft",
            task_id="3",
            instruction="act",
            task="craft a stick",
            model_version="m0",
            search_config={},
            root_id="r",
        ),
    )
    h.grow_tree(t1, expansions=25)
    h.rollouts(t1, 30)
    await h.flush(store)  # mixed: some rollouts must see nodes appended in an earlier transaction
    h.grow_tree(t2, expansions=10)
    h.rollouts(t2, 12)
    h.add(
        tree_stream(t1),
        ev.TreeCompleted(
            tree_id=t1,
            run_id=run,
            iteration=0,
            nodes=99,
            rollouts=30,
            best_reward=1.0,
            good_leaves=3,
            bad_leaves=4,
            pairs=2,
        ),
    )
    h.add(tree_stream(t2), ev.SearchFailed(tree_id=t2, run_id=run, iteration=0, reason="env died"))
    good_id, pair1, pair2, rev1 = new_id(), new_id(), new_id(), new_id()
    h.add(
        tree_stream(t1),
        ev.GoodTrajectoryFound(
            sample_id=good_id, tree_id=t1, run_id=run, iteration=0, leaf_id="l", trajectory=trajectory(3, 1.0)
        ),
        no_meta,
    )
    for pair in (pair1, pair2):
        h.add(
            pair_stream(pair),
            ev.PairFound(
                pair_id=pair,
                source="search",
                task_key="k",
                bad=trajectory(5, 0.0),
                good=trajectory(3, 1.0),
                shared_steps=1,
                run_id=run,
                iteration=0,
                tree_id=t1,
            ),
            no_meta,
        )
    h.add(
        pair_stream(pair1),
        ev.FirstErrorMarked(pair_id=pair1, strategy="model", transition_index=2, verdicts=()),
    )
    h.add(
        pair_stream(pair1),
        ev.RevisionMaterialized(
            sample_id=rev1,
            pair_id=pair1,
            run_id=run,
            iteration=0,
            sample=sample(rev1),
            template_id="tpl",
            revision_length=2,
            verified=True,
        ),
        no_meta,
    )
    # two reviewers: a claim, an acceptance and a correction of pair 1 (the pairs' claim and
    # agreement columns and the pair_verdicts rows are refolded from these on a rebuild)
    h.add(
        pair_stream(pair1),
        ev.PairClaimed(
            pair_id=pair1,
            reviewer_key=key1,
            reviewer="ak_1 (alice)",
            claimed_at="2026-01-01T00:00:00+00:00",
            by_key=key1,
            by="ak_1 (alice)",
        ),
    )
    h.add(
        pair_stream(pair1),
        ev.FirstErrorAccepted(
            pair_id=pair1,
            acceptance_id=new_id(),
            reviewer="ak_1 (alice)",
            accepted_at="2026-01-01T00:01:00+00:00",
            transition_index=2,
            reviewer_key=key1,
        ),
    )
    h.add(
        pair_stream(pair1),
        ev.FirstErrorCorrected(
            pair_id=pair1,
            correction_id=new_id(),
            reviewer="ak_2 (bob)",
            corrected_at="2026-01-01T00:02:00+00:00",
            old_transition_index=2,
            new_transition_index=1,
            old_reflection="",
            reviewer_key=key2,
        ),
    )
    h.add(pair_stream(pair2), ev.RevisionRejected(pair_id=pair2, run_id=run, iteration=0, reason="no good"))
    trace, rev2 = new_id(), new_id()
    h.add(
        trace_stream(trace),
        ev.TraceIngested(
            trace_id=trace,
            project_id=p,
            task_key="k2",
            trajectory=trajectory(4, 0.0),
            outcome="failure",
            source_format="openai",
        ),
    )
    h.add(
        trace_stream(trace),
        ev.TraceCritiqued(trace_id=trace, strategy="rules", transition_index=1, verdicts=()),
    )
    h.add(
        pair_stream(trace),
        ev.PairFound(
            pair_id=trace,
            source="trace",
            task_key="k2",
            bad=trajectory(4, 0.0),
            good=trajectory(2, 1.0),
            shared_steps=1,
        ),
    )
    h.add(
        pair_stream(trace),
        ev.RevisionMaterialized(
            sample_id=rev2,
            pair_id=trace,
            run_id=None,
            iteration=0,
            sample=sample(rev2, {"trace_id": trace}),
            template_id="tpl",
            revision_length=1,
        ),
    )
    good_trace = new_id()
    h.add(
        trace_stream(good_trace),
        ev.GoodTraceSampled(
            sample_id=new_id(),
            trace_id=good_trace,
            project_id=p,
            task_key="k2",
            trajectory=trajectory(2, 1.0),
        ),
    )
    from core.domain.trace_datasets import DatasetEntry, DatasetManifest, DatasetQuery

    manifest = DatasetManifest(
        dataset_id=new_id(),
        name="traces",
        version=1,
        query=DatasetQuery(sources=("traces",)),
        log_position=9,
        entries=(DatasetEntry(rev2, "revision", 9, "tpl"),),
        code_version="agentr test",
    )
    h.add(f"dataset-{manifest.dataset_id}", ev.DatasetCreated(manifest.dataset_id, p, manifest))
    h.add(
        run_stream(run),
        ev.IterationDatasetReady(
            run_id=run, iteration=0, dataset_id="ds0", revision_samples=1, good_samples=1, general_samples=0
        ),
    )
    h.add(
        run_stream(run),
        ev.ModelTrained(run_id=run, iteration=0, dataset_id="ds0", checkpoint="/ck/0", metrics={"loss": 1.5}),
    )
    h.add(
        run_stream(run),
        ev.IterationEvaluated(run_id=run, iteration=0, model_ref="/ck/0", metrics={"success": 0.4}),
    )
    h.add(
        run_stream(run),
        ev.IterationStarted(run_id=run, iteration=1, model_ref="/ck/0", alpha=0.7, tree_ids=()),
    )
    h.add(run_stream(run), ev.IterationDatasetEmpty(run_id=run, iteration=1, reason="no pairs"))
    h.add(run_stream(run), ev.RunCompleted(run_id=run, final_model_ref="/ck/0", summary={"iterations": 2}))
    h.add(run_stream(run2), ev.RunRequested(run_id=run2, project_id=p, config={}))
    h.add(
        run_stream(run2), ev.IterationStarted(run_id=run2, iteration=0, model_ref="m", alpha=0.5, tree_ids=())
    )
    h.add(run_stream(run2), ev.TrainingFailed(run_id=run2, iteration=0, reason="oom"))
    h.add(run_stream(run2), ev.RunFailed(run_id=run2, reason="training failed"))
    h.add(run_stream(run3), ev.RunRequested(run_id=run3, project_id=p, config={}))
    h.add(run_stream(run3), ev.RunCancelled(run_id=run3))
    h.add(
        "system-dlq",
        ev.MessageDeadLettered(consumer="critic", topic="events", position=3, deliveries=5, error="boom"),
    )
    await h.flush(store)
    return {
        "project": p,
        "run": run,
        "run2": run2,
        "run3": run3,
        "t1": t1,
        "t2": t2,
        "key2": key2,
        "pair1": pair1,
        "pair2": pair2,
        "trace": trace,
        "rev2": rev2,
    }


async def snapshot(store: SqlEventStore) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    async with store.engine.connect() as conn:
        for table in PROJECTION_TABLES:
            query = select(table).order_by(*table.primary_key.columns)
            out[table.name] = [dict(r) for r in (await conn.execute(query)).mappings()]
    return out


async def test_live_projections_equal_a_rebuild(store: SqlEventStore) -> None:
    ids = await build_history(store)
    live = await snapshot(store)
    assert all(live[t.name] for t in PROJECTION_TABLES), {k: len(v) for k, v in live.items()}

    replayed = await rebuild(store)
    assert replayed == len(await store.read_all(limit=100_000))
    rebuilt = await snapshot(store)
    for table in PROJECTION_TABLES:
        assert rebuilt[table.name] == live[table.name], f"{table.name} differs after rebuild"

    # and the read models say what happened
    async with store.engine.connect() as conn:
        run_rows = {r.run_id: r for r in await conn.execute(select(runs))}
        assert run_rows[ids["run"]].status == "completed" and run_rows[ids["run"]].current_iteration == 1
        assert run_rows[ids["run2"]].status == "failed" and run_rows[ids["run3"]].status == "cancelled"
        it0 = (
            await conn.execute(
                select(iterations).where(iterations.c.run_id == ids["run"], iterations.c.iteration == 0)
            )
        ).one()
        assert (it0.status, it0.trees_expected, it0.trees_done, it0.trees_failed) == ("evaluated", 2, 1, 1)
        assert (it0.pairs, it0.revisions, it0.goods, it0.revision_length_mean) == (2, 1, 1, 2.0)
        assert it0.metrics == {"train": {"loss": 1.5}, "eval": {"success": 0.4}, "eval_model_ref": "/ck/0"}
        assert it0.project_id == ids["project"] and it0.checkpoint == "/ck/0"
        tree_rows = {r.tree_id: r for r in await conn.execute(select(trees))}
        assert tree_rows[ids["t1"]].status == "completed" and tree_rows[ids["t2"]].status == "failed"
        assert tree_rows[ids["t2"]].rollouts == 12 and tree_rows[ids["t1"]].project_id == ids["project"]
        node_projects = set((await conn.execute(select(nodes.c.project_id))).scalars())
        assert node_projects == {ids["project"]}
        pair_rows = {r.pair_id: r for r in await conn.execute(select(pairs))}
        assert pair_rows[ids["pair1"]].status == "revised" and pair_rows[ids["pair1"]].transition_index == 2
        assert pair_rows[ids["pair2"]].status == "rejected"
        assert pair_rows[ids["pair1"]].project_id == ids["project"]  # from the run: no metadata
        trace_row = (await conn.execute(select(traces))).one()
        assert (trace_row.status, trace_row.transition_index, trace_row.sample_id) == (
            "revised",
            1,
            ids["rev2"],
        )
        kinds = sorted(r.kind for r in await conn.execute(select(samples)))
        assert kinds == ["good", "good", "revision", "revision"]  # the search leaf and the good trace
        revoked = {r.key_id: r.revoked for r in await conn.execute(select(api_keys))}
        assert revoked[ids["key2"]] is True and sum(revoked.values()) == 1


async def test_node_statistics_equal_a_recount_of_rollouts(store: SqlEventStore) -> None:
    await build_history(store)
    history = await store.read_all(limit=100_000)
    parent: dict[tuple[str, str], str | None] = {}
    visits: dict[tuple[str, str], int] = defaultdict(int)
    values: dict[tuple[str, str], float] = defaultdict(float)
    for recorded in history:
        event = recorded.event
        if isinstance(event, ev.NodesExpanded):
            for n in event.nodes:
                parent[(event.tree_id, n.node_id)] = n.parent_id
        elif isinstance(event, ev.RolloutFinished):
            node: str | None = event.leaf_id
            while node is not None:
                visits[(event.tree_id, node)] += 1
                values[(event.tree_id, node)] += event.reward
                node = parent[(event.tree_id, node)]
    async with store.engine.connect() as conn:
        rows = (
            await conn.execute(select(nodes.c.tree_id, nodes.c.node_id, nodes.c.visits, nodes.c.value_sum))
        ).all()
    assert len(rows) == len(parent)
    assert sum(visits.values()) > 42  # every rollout visits at least its leaf and the root
    for tree_id, node_id, n_visits, value_sum in rows:
        assert n_visits == visits[(tree_id, node_id)]
        assert value_sum == pytest.approx(values[(tree_id, node_id)])
    roots = [r for r in rows if parent[(r.tree_id, r.node_id)] is None]
    assert sorted(r.visits for r in roots) == [12, 30]  # the root sees every rollout of its tree


def test_cli_rebuild_restores_lost_read_models(store_url: str) -> None:
    import asyncio

    from sqlalchemy import delete
    from typer.testing import CliRunner

    from agentr.cli.db import db_app

    url = store_url

    async def prepare() -> dict[str, list[dict[str, Any]]]:
        store = await open_store(url, create_tables=True)
        try:
            await build_history(store)
            live = await snapshot(store)
            async with store.engine.begin() as conn:  # the read models are lost (or corrupted)
                await conn.execute(delete(nodes))
                await conn.execute(delete(runs))
            return live
        finally:
            await store.close()

    async def read() -> dict[str, list[dict[str, Any]]]:
        store = await open_store(url)
        try:
            return await snapshot(store)
        finally:
            await store.close()

    live = asyncio.run(prepare())
    result = CliRunner().invoke(db_app, ["rebuild", "--url", url])
    assert result.exit_code == 0, result.output
    assert "rebuilt the projections" in result.output
    assert asyncio.run(read()) == live
