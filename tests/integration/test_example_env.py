"""The example environment package (examples/agentr-example-lock), installed as CI installs it
(``pip install --no-deps -e examples/agentr-example-lock``): opened through its ``agentr.envs``
entry point, checked with ``agentr env check``, served with ``agentr env serve`` and played by our
AgentGym client, and searched + spliced end to end in a data-only run: by the run driver (embedded
mode on SQLite, a seeded uniformly random actor over the game's actions) and by the ``agentr run``
command itself (the tiny model warm-started on the lock's ``gold_actions``)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

from core.domain.config import RunConfig
from core.domain.events import NewEvent, RunRequested
from core.domain.ids import run_stream
from core.domain.runs import fold
from core.envs.plugin import entry_point_names
from core.envs.registry import open_env
from core.llm.ports import Completion, Conversation, PolicyError, Seeds, conversation_seeds
from tests.integration.test_envs_agentgym_http import start_server

ROOT = Path(__file__).resolve().parents[2]
INSTALL = "pip install --no-deps -e examples/agentr-example-lock"


@pytest.fixture(scope="module", autouse=True)
def installed() -> None:
    if "lock" not in entry_point_names():
        pytest.fail(f"the example env package is not installed (run `{INSTALL}`, as .ci/run does)")


def test_entry_point_opens_the_example_with_options() -> None:
    env = open_env("lock?length=2&buttons=3")
    assert env.name == "lock"
    assert env.task_ids("all") == [f"c{n}" for n in range(9)]
    assert type(env).__name__ == "PluginEnv"  # the adapter over the package's plain object
    same = open_env("python:agentr_example_lock:make_env?length=2&buttons=3")
    assert same.task_ids("train") == env.task_ids("train")


def test_env_check_passes_on_the_example_through_the_cli() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from agentr.cli import main; main()", "env", "check", "lock"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "lock: the Env contract holds" in done.stdout
    assert "PASS clone independence" in done.stdout


async def test_example_served_with_agentr_env_serve() -> None:
    server, port = start_server("lock")
    remote = open_env(f"agentgym+http://127.0.0.1:{port}/lock?tasks=0-63")
    local = open_env("lock")
    try:
        # data_idx 6 is the 7th id of split "all": c6, code 0 1 2
        assert await remote.reset("6") == await local.reset("c6")
        bad = await remote.step("Action: press 3")
        assert (bad.valid, bad.observation) == (False, "Button 3 is refused. 0 of 3 set.")
        for action in local.gold_actions("c6"):  # type: ignore[attr-defined]
            result = await remote.step(f"Thought: next button.\nAction: {action}")
        assert (result.observation, result.reward, result.done) == ("Click. The lock opens!", 1.0, True)
        with pytest.raises(Exception, match="data_idx 64 is out of range"):
            await remote.reset("64")
    finally:
        await remote.close()
        server.stop()


class RandomLockActor:
    """A seeded, uniformly random actor over the lock's four buttons (a real Policy)."""

    model_version = "random-lock-actor"

    async def sample(
        self,
        conversations: Sequence[Conversation],
        n: int = 1,
        temperature: float = 1.0,
        max_tokens: int = 64,
        seed: Seeds = None,
        stop: Sequence[str] | None = None,
        logprobs: bool = False,
    ) -> list[list[Completion]]:
        seeds = conversation_seeds(seed, len(conversations)) or [0] * len(conversations)
        out = []
        for conversation, s in zip(conversations, seeds, strict=True):
            rng = random.Random(f"{s}:{len(list(conversation))}")
            picks = rng.sample([f"press {b}" for b in range(4)], k=min(n, 4))
            out.append([Completion(f"Thought: try {a}.\nAction: {a}", 8) for a in picks])
        return out

    async def score_labels(self, conversations: Sequence[Conversation], labels: Sequence[str]) -> list:
        raise PolicyError("the random actor cannot judge: use the critic strategy 'direct'")

    async def close(self) -> None:
        return None


async def test_example_env_searched_and_spliced_in_a_data_only_run(tmp_path: Path) -> None:
    from agentr.process import build_service
    from core.runtime.embedded import run_embedded
    from core.runtime.settings import load_settings
    from core.store.factory import open_store
    from search_service.service import build_service as build_search
    from train_service.service import build_service as build_train

    url = f"sqlite+aiosqlite:///{tmp_path / 'agentr.db'}"
    settings = load_settings(home=tmp_path, database_url=url, redis_url=None, reclaim_idle_ms=2000)
    config = RunConfig(
        env="lock",
        model="random-lock-actor",
        tasks=("c9", "c27", "c45"),
        iterations=1,
        alpha_schedule=(1.0,),
        search={"n_candidates": 3, "iterations": 8, "max_depth": 6},
        critic={"strategy": "direct"},
        data_only=True,
        seed=4,
    )
    store = await open_store(url, create_tables=True)
    try:
        await store.append(
            [NewEvent(run_stream("run-lock"), RunRequested("run-lock", "p", config.to_data()))]
        )
        services = [
            build_search(settings, store, policy_opener=lambda ref: RandomLockActor()),
            await build_service("critic", settings, store),
            await build_service("splice", settings, store),
            build_train(settings, store),
        ]

        async def until() -> bool:
            history = await store.read_stream(run_stream("run-lock"))
            return fold("run-lock", [r.event for r in history]).terminal

        await run_embedded(store, services, until, settings=settings)
        events = await store.read_all(0, limit=100_000)
    finally:
        await store.close()
    types = Counter(r.event_type for r in events)
    final = fold("run-lock", [r.event for r in events if r.stream_id == run_stream("run-lock")])
    assert final.status == "completed", final.reason
    assert types["TreeCompleted"] == 3 and types["SearchFailed"] == 0
    assert types["PairFound"] >= 1 and types["FirstErrorMarked"] >= 1
    assert types["RevisionMaterialized"] >= 1 and types["IterationDatasetReady"] == 1
    assert types["ModelTrained"] == 0  # data-only
    revision = next(r.event for r in events if r.event_type == "RevisionMaterialized")
    text = repr(revision)
    assert "is refused" in text and "The lock opens!" in text  # the example env's own observations


@pytest.mark.slow
def test_agentr_run_warm_starts_searches_and_splices_the_example_env(tmp_path: Path) -> None:
    """The command itself on a bring-your-own environment: ``agentr run --env lock --data-only``
    builds the tiny model, warm-starts it on the lock's ``gold_actions``, searches and splices."""
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTR_")}
    env.update(AGENTR_HOME=str(home), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    agentr = str(Path(sys.executable).parent / "agentr")
    argv = [
        agentr,
        "run",
        "--quick",
        "--env",
        "lock",
        "--tasks",
        "c9,c27",
        "--iterations",
        "1",
        "--data-only",
    ]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "warm start: 2 expert episodes" in proc.stderr, proc.stderr[-2000:]
    (run_dir,) = [p for p in (home / "runs").iterdir() if p.is_dir()]
    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] == "completed" and report["config"]["env"] == "lock"
    counts = report["datasets"]["0"]
    assert counts["trees"] == 2 and counts["pairs"] > 0 and counts["revision"] > 0
    out = tmp_path / "lock.jsonl"
    exported = subprocess.run(
        [agentr, "export", run_dir.name, "0", "-o", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert exported.returncode == 0, exported.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    from core.domain.reflections import DEFAULT_TEMPLATES

    openings = [text.split("{")[0] for text in DEFAULT_TEMPLATES.values()]

    def is_revision(row: dict) -> bool:  # a trained turn that opens with a reflection
        trained = [m["content"] for m in row["messages"] if m["role"] == "assistant" and m.get("weight") == 1]
        return any(opening in text for text in trained for opening in openings)

    assert any("is refused" in json.dumps(r) for r in rows if is_revision(r))  # the lock's own words
    assert sum(is_revision(r) for r in rows) == counts["revision"], rows[:2]


def test_an_env_without_an_expert_is_refused_for_the_warm_start_with_the_ways_out() -> None:
    from train_service.warm_start import NoExpertError, expert_trajectories

    class NoExpert:
        name = "blind"

    with pytest.raises(NoExpertError, match=r"'blind' has no expert.*gold_actions.*--warm-start-steps 0"):
        list(expert_trajectories(NoExpert(), ["t1"]))


def test_gold_actions_of_the_example_env_make_expert_episodes() -> None:
    from train_service.warm_start import expert_trajectories

    (episode,) = list(expert_trajectories(open_env("lock"), ["c27"]))  # c27 -> 1, 2, 3 in base 4
    assert [s.action for s in episode.steps] == ["press 1", "press 2", "press 3"]
    assert episode.reward == 1.0 and episode.steps[-1].done and episode.provenance["env"] == "lock"
