"""The whole loop with data in EVERY iteration, on any CPU: the search service's policy is the noisy
TextCraft expert (seeded mistakes; ``search_service/noisy_expert.py``), so what the trees hold - and
hence the pairs, the revision samples and the datasets - cannot depend on float kernels, threads or
the luck of a tiny model. Everything else is the real thing, as ``agentr run`` drives it: the
embedded SQLite store, the critic (``direct``: no model judgement either), the splicer with replay
verification, SFT of a real tiny transformers model (fp32, on ``$AGENTR_TEST_THREADS`` torch threads,
default 1: the run's recorded conditions), its evaluation, the report and ``agentr export`` in
every format. ISA caps in the environment (README "Testing on other CPUs") apply as they are.

The quick e2e test (tests/e2e/test_agentr_run.py) runs the tiny model's own search, whose outcome
does depend on the CPU; this test is where "an iteration produced data, was trained on, and the next
iteration followed" is asserted exactly.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from core.domain.config import RunConfig
from core.domain.events import NewEvent, RunRequested
from core.domain.ids import run_stream
from core.domain.runs import fold
from core.runtime import torch_threads
from core.runtime.cpu_features import cpu_model
from tests.e2e.quick_runs import quick_threads

pytestmark = pytest.mark.slow

RUN_ID = "expert-run"
EXPERT = "noisy-expert?mistake=0.4&seed=3"


def _config(model: str, threads: int) -> RunConfig:
    return RunConfig(
        env="textcraft?distractors=0&split=demo",  # 12 actions: room for bad prefix + revision
        model=model,
        split="demo",
        max_tasks=2,
        eval_split="test",
        max_eval_tasks=1,
        iterations=2,
        alpha_schedule=(1.0,),
        search={"n_candidates": 3, "iterations": 4, "max_depth": 6, "max_pairs_per_tree": 2},
        critic={"strategy": "direct"},
        splice={"verify": True, "keep_unverified": False},
        train={"epochs": 1.0, "learning_rate": 3e-4, "batch_size": 4, "max_length": 512, "time_budget_s": 99},
        evaluation={"max_steps": 2, "max_tokens": 16, "episodes_per_task": 1, "recovery_episodes": 1},
        seed=1,
        runtime=torch_threads.run_conditions(training=threads, precision="fp32"),
    )


async def _run(home: Path, config: RunConfig) -> dict[str, str]:
    """The embedded loop of ``agentr run`` with the noisy expert behind the search service."""
    from agentr.cli.run_report import write_run_report
    from agentr.process import build_service
    from core.runtime.embedded import run_embedded
    from core.runtime.settings import load_settings
    from core.store.factory import open_store
    from search_service.noisy_expert import from_ref
    from search_service.service import build_service as build_search
    from train_service.service import build_service as build_train

    def expert(_ref: str) -> Any:  # every iteration's model ref (the tiny model, then its checkpoints)
        return from_ref(EXPERT)

    settings = load_settings(home=home, redis_url=None, reclaim_idle_ms=2000)
    store = await open_store(settings.effective_database_url, create_tables=True)
    try:
        await store.append([NewEvent(run_stream(RUN_ID), RunRequested(RUN_ID, "local", config.to_data()))])
        services = [
            build_search(settings, store, policy_opener=expert),
            await build_service("critic", settings, store),
            await build_service("splice", settings, store),
            build_train(settings, store, inline_training=True),
        ]

        async def until() -> bool:
            history = await store.read_stream(run_stream(RUN_ID))
            return fold(RUN_ID, [r.event for r in history]).terminal

        await run_embedded(store, services, until, settings=settings)
        (home / "runs" / RUN_ID).mkdir(parents=True, exist_ok=True)
        return await write_run_report(store, home, RUN_ID)
    finally:
        await store.close()


def test_expert_searched_run_trains_on_data_in_every_iteration(tmp_path: Path) -> None:
    from agentr.cli.eval_export import export_command
    from core.llm.tiny import build_tiny_model, default_corpus

    model = build_tiny_model(
        tmp_path / "tiny", default_corpus(), hidden=64, layers=2, heads=2, vocab_size=768, seed=0
    )
    home = tmp_path / "home"
    threads = quick_threads()
    torch_threads.configure(inference=1, training=threads)  # the conditions the config records
    config = _config(str(model), threads)
    paths = asyncio.run(_run(home, config))

    db = sqlite3.connect(home / "agentr.db")
    rows = db.execute("select stream_id, event_type, data from events order by position")
    events = [(s, t, json.loads(d)) for s, t, d in rows]
    run_types = Counter(t for s, t, _ in events if s == run_stream(RUN_ID))
    assert run_types == Counter(
        RunRequested=1, IterationStarted=2, IterationDatasetReady=2, ModelTrained=2, IterationEvaluated=2,
        RunCompleted=1,
    ), run_types  # fmt: skip
    types = Counter(t for _, t, _ in events)
    assert types["TreeCompleted"] == 4 and types["SearchFailed"] == 0
    marked = [d for _, t, d in events if t == "FirstErrorMarked"]
    assert marked and all(d["strategy"] == "direct" for d in marked)
    assert {d["model_version"] for _, t, d in events if t == "TreeStarted"} == {
        "noisy-expert(mistake=0.4,garbage=0.0)"
    }

    report = json.loads(Path(paths["json"]).read_text())
    assert report["status"] == "completed" and not report.get("reason")
    assert [row["model"] for row in report["rows"]] == ["start", "iter 0", "iter 1"]
    ready = {d["iteration"]: d for _, t, d in events if t == "IterationDatasetReady"}
    projection = {
        row[0]: row[1:]
        for row in db.execute(
            "select iteration, pairs, revisions, goods, status from iterations where run_id = ?", (RUN_ID,)
        )
    }
    run_dir = home / "runs" / RUN_ID
    for iteration in (0, 1):
        counts = report["datasets"][str(iteration)]
        # the expert's trees hold successes and failures: pairs, verified revisions and good paths
        assert counts["trees"] == 2 and counts["pairs"] > 0 and counts["revision"] > 0 and counts["good"] > 0
        assert counts["verified"] == counts["revision"]
        # events, projection and report agree
        event = ready[iteration]
        assert (event["revision_samples"], event["good_samples"]) == (counts["revision"], counts["good"])
        assert projection[iteration] == (counts["pairs"], counts["revision"], counts["good"], "evaluated")
        # the checkpoint names the conditions it was trained under
        meta = json.loads((run_dir / "checkpoints" / f"iter-{iteration}" / "meta.json").read_text())
        assert meta["iteration"] == iteration and meta["dataset_id"] == event["dataset_id"]
        assert meta["runtime"]["threads"]["training"] == threads and meta["runtime"]["precision"] == "fp32"
        assert meta["runtime"]["cpu"]["model"] == cpu_model()
        # the dataset leaves in every format, every sample in each
        samples = counts["revision"] + counts["good"]
        for fmt, name in (("openai", "d.jsonl"), ("sharegpt", "s.jsonl"), ("parquet", "d.parquet")):
            out = tmp_path / f"{iteration}-{name}"
            assert export_command(RUN_ID, iteration, fmt, str(out), str(home)) == 0
            assert out.stat().st_size > 0
            if fmt != "parquet":
                assert len(out.read_text().splitlines()) == samples, (iteration, fmt)
        exported = [json.loads(line) for line in (tmp_path / f"{iteration}-d.jsonl").read_text().splitlines()]
        for sample in exported:  # every sample trains at least one assistant turn
            assert any(m["role"] == "assistant" and m.get("weight") == 1 for m in sample["messages"])
    # the report says under which conditions its numbers were computed
    markdown = Path(paths["markdown"]).read_text()
    conditions = f"computed with: {threads} torch thread(s) for training, 1 for inference; precision fp32"
    assert conditions in markdown
    assert f"CPU {cpu_model()} (" in markdown
    assert report["config"]["runtime"] == config.runtime
