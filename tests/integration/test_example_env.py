"""The example environment package (examples/agentr-example-lock), installed as CI installs it
(``pip install --no-deps -e examples/agentr-example-lock``): opened through its ``agentr.envs``
entry point, checked with ``agentr env check``, served with ``agentr env serve`` and played by our
AgentGym client, and searched + spliced end to end in a data-only run (the run driver ``agentr run``
uses, in embedded mode on SQLite, with a seeded uniformly random actor over the game's actions)."""

from __future__ import annotations

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
        [sys.executable, "-c", "from core.cli import main; main()", "env", "check", "lock"],
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
    from core.runtime.embedded import run_embedded
    from core.runtime.process import build_service
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
