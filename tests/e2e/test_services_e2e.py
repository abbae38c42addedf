"""End to end: the compose topology as separate OS processes on the real PostgreSQL and Redis.

api (``agentr serve``), relay, search, critic, splice, train and the Celery trainer run as their
own processes (the commands docker-compose.yml runs), sharing a fresh database and an isolated Redis
prefix (one deployment for the e2e package, tests/e2e/conftest.py; this test has a project of its
own). A user bootstraps a project key over HTTP, submits a small TextCraft run with the tiny model,
follows it to completion and downloads its dataset. The same run (same seeds) is then submitted again
and the search worker is SIGKILLed in the middle of it and restarted: the run still completes, and its
dataset has the same samples as the undisturbed one - no duplicates, no losses.

The model is the tiny one ``agentr run --quick`` builds and warm-starts (built once per test session
through ``agentr.cli.warm_start``, cached in the session's tmp folder): it searches, judges the pairs
(critic strategy ``model``) and is fine-tuned by the Celery trainer, then evaluated. The comparison is
exact because sampling seeds are per conversation (a tree samples the same whatever else the search
worker batches with it, before or after a restart) and the CPU model is batch-invariant
(``core.llm.hf``). ``agentr up`` is exercised too: it starts everything, and stops everything when
one process dies.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

from core.domain.reflections import DEFAULT_TEMPLATES
from tests.e2e.helpers import AGENTR, ApiClient, free_port, wait_until
from tests.e2e.services import ADMIN_KEY, Deployment, follow, service_env


def dataset_records(client: ApiClient, run_id: str) -> list[dict[str, Any]]:
    response, text = client.dataset(run_id, 0, "sharegpt")
    assert response.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def content_key(record: dict[str, Any]) -> str:
    """A sample's content without what is run-specific by design: its id, and the wording of
    assistant thoughts (the reflection template is picked by a hash of the pair id, which derives
    from the run id). Observations, actions and loss flags are compared exactly."""
    turns = []
    for turn in record["conversations"]:
        value = turn["value"]
        if turn["from"] == "gpt":
            value = [line for line in value.splitlines() if line.startswith("Action:")]
        turns.append((turn["from"], turn["loss"], value))
    return json.dumps(turns)


def check_dataset(records: list[dict[str, Any]]) -> None:
    assert records, "the dataset is empty"
    ids = [r["id"] for r in records]
    assert len(set(ids)) == len(ids), f"duplicate sample ids: {[i for i, n in Counter(ids).items() if n > 1]}"
    for record in records:
        turns = record["conversations"]
        assert turns[0]["from"] in ("system", "human")
        assert any(t["from"] == "gpt" and t["loss"] for t in turns), "a sample with nothing to learn"
        assert all(t["loss"] is None for t in turns if t["from"] != "gpt")
        assert any(t["from"] == "gpt" and "Action:" in t["value"] for t in turns)


def test_run_over_http_and_survives_a_killed_worker(
    deployment: Deployment, run_config: dict[str, Any]
) -> None:
    group, client = deployment.group, deployment.client

    # 1. The undisturbed run: search, model critic, splice, dataset, SFT on the Celery trainer, eval.
    first = client.submit_run(run_config)
    run = follow(client, group, first)
    iteration = run["iterations"][0]
    assert iteration["trees_expected"] == run_config["max_tasks"] and iteration["trees_failed"] == 0
    assert iteration["dataset_id"], iteration
    reference = dataset_records(client, first)
    check_dataset(reference)
    assert len(reference) == iteration["revisions"] + iteration["goods"] > 0
    assert iteration["revisions"] > 0, "no revision trajectories: the run found no pairs"
    assert iteration["goods"] > 0, "no good trajectories: the tiny model never reached a goal"
    check_sample_kinds(client, first, iteration)
    # trained by the Celery trainer process: ModelTrained's checkpoint is a model folder with meta.json
    checkpoint = Path(iteration["checkpoint"])
    assert (checkpoint / "meta.json").is_file(), iteration
    meta = json.loads((checkpoint / "meta.json").read_text())
    assert meta["iteration"] == 0 and meta["dataset_id"] == iteration["dataset_id"]
    assert run["final_model_ref"] == str(checkpoint)

    # 2. The same run; the search worker is SIGKILLed mid-run and restarted.
    second = client.submit_run(run_config)

    def searching() -> bool:
        its = client.run(second)["iterations"]
        return bool(its) and 1 <= its[0]["trees_done"] < its[0]["trees_expected"]

    wait_until(
        searching,
        timeout=90,
        poll_s=0.05,
        what="the second run's search to be under way",
        check=group.check_alive,
    )
    group.kill("search", signal.SIGKILL)
    assert group.processes["search"].proc is not None
    assert group.processes["search"].proc.returncode == -signal.SIGKILL
    group.restart("search")
    run = follow(client, group, second)
    iteration2 = run["iterations"][0]
    assert iteration2["trees_failed"] == 0 and iteration2["trees_done"] == iteration["trees_done"]
    disturbed = dataset_records(client, second)
    check_dataset(disturbed)
    assert len(disturbed) == len(reference)
    assert Counter(map(content_key, disturbed)) == Counter(map(content_key, reference)), (
        "the killed-and-restarted run's dataset differs from the undisturbed run's"
    )
    assert (iteration2["revisions"], iteration2["goods"]) == (iteration["revisions"], iteration["goods"])
    assert (Path(iteration2["checkpoint"]) / "meta.json").is_file()


def check_sample_kinds(client: ApiClient, run_id: str, iteration: dict[str, Any]) -> None:
    """In the OpenAI export, revision samples' assistant weights are 0 (the bad steps) then 1 (the
    reflection, then the good continuation), the first weight-1 turn opening with a reflection
    sentence; good samples have every assistant turn at weight 1. Their counts are the run's."""
    _response, text = client.dataset(run_id, 0, "openai")
    records = [json.loads(line) for line in text.splitlines() if line.strip()]
    openings = tuple(t.split("{action}")[0].split("'")[0] for t in DEFAULT_TEMPLATES.values())
    revisions = goods = 0
    for record in records:
        assistant = [m for m in record["messages"] if m["role"] == "assistant"]
        weights = [m["weight"] for m in assistant]
        assert weights and weights[-1] == 1, record
        if all(w == 1 for w in weights):
            goods += 1
            continue
        revisions += 1
        first = weights.index(1)
        assert weights == [0] * first + [1] * (len(weights) - first), weights
        thought = assistant[first]["content"].removeprefix("Thought:").strip()
        assert thought.startswith(openings), f"no reflection opens the revision: {thought!r}"
        assert "Action:" in assistant[first]["content"]
    assert (revisions, goods) == (iteration["revisions"], iteration["goods"])


def test_agentr_up_stops_everything_when_one_process_dies(
    pg_url: str, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    port = free_port()
    env = service_env(pg_url, redis_url, redis_prefix, tmp_path / "home", port)
    log_path = tmp_path / "up.log"
    pids: dict[str, int] = {}
    with log_path.open("wb") as log:
        up = subprocess.Popen(
            [AGENTR, "up", "--grace", "20"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        client = ApiClient(f"http://127.0.0.1:{port}", ADMIN_KEY)

        def alive() -> None:
            assert up.poll() is None, f"agentr up exited {up.returncode}:\n{log_path.read_text()[-3000:]}"

        wait_until(client.ready, timeout=90, what="agentr up's API", check=alive)
        client.close()
        text = log_path.read_text()
        pids.update({name: int(pid) for name, pid in re.findall(r"\[up\] started (\S+) \(pid (\d+)\)", text)})
        assert set(pids) == {"migrate", "api", "relay", "search", "critic", "splice", "train", "trainer"}
        assert re.search(r"^\[migrate\] database ", text, re.MULTILINE) and "is at revision" in text
        assert re.search(r"^\[api\] ", text, re.MULTILINE)
        # One process dies: up reports it and stops the rest.
        os.kill(pids["relay"], signal.SIGKILL)
        assert up.wait(timeout=60) == 1
        text = log_path.read_text()
        assert "relay exited on its own" in text
        for name, pid in pids.items():
            assert not _running(pid), f"{name} (pid {pid}) still runs after agentr up stopped"
            if name not in ("migrate", "relay"):
                assert f"stopping {name} (SIGTERM)" in text
    finally:
        if up.poll() is None:  # the test failed early: let up stop its children, then make sure
            up.send_signal(signal.SIGTERM)
            try:
                up.wait(timeout=40)
            except subprocess.TimeoutExpired:
                up.kill()
                up.wait()
        for pid in pids.values():
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


def test_agentr_up_needs_database_and_redis(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTR_")}
    done = subprocess.run([AGENTR, "up"], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2
    assert "AGENTR_DATABASE_URL and AGENTR_REDIS_URL" in done.stderr


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    finally:
        time.sleep(0)
