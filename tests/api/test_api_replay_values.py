"""The replay critic's Monte Carlo estimates as step values in the stepwise (PRM) download (issue #47,
item 3): ONE failed TextCraft trace uploaded over the real API naming its environment, judged in the
real critic worker (Redis Streams) with a sampled continuation policy (the noisy expert, m = 8), a
recoverable decisive step, so the splice worker makes a verified revision sample; a named dataset of
it downloaded as ``prm`` carries, beside TRL's ``prompt`` / ``completions`` / ``labels``, each
labelled step's ``values``: the share of the continuations after it that succeeded, exactly as the
``ReplayProbed`` events on the pair's stream recorded them (probes of one prefix pooled), null
where no probe ran. The file is read back by Hugging Face ``datasets``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import datasets
import pytest

from core.bus.redis_streams import RedisStreamsBus
from core.domain.events import FirstErrorMarked, ReplayProbed, RevisionMaterialized
from core.domain.good_samples import trajectory_to_sample
from core.domain.ids import derived_id, pair_stream
from core.formats.records import openai_record
from core.llm.ports import Policy
from core.runtime.settings import Settings
from search_service.noisy_expert import NoisyExpertPolicy
from tests.api.conftest import ApiHarness
from tests.integration.test_replay_critic import _play, _textcraft_task
from tests.trace_pipeline import settle_workers

SLACK = 2


@pytest.fixture
async def settle(api: ApiHarness, redis_url: str, redis_prefix: str) -> AsyncIterator[Any]:
    bus = RedisStreamsBus(redis_url, redis_prefix)

    def opener(ref: str) -> Policy:
        assert ref == "noisy-expert", ref
        return NoisyExpertPolicy(mistake_rate=0.5)

    settings = Settings(  # type: ignore[call-arg]
        block_ms=50,
        critic_trace_strategy="rules",
        critic_model="noisy-expert",
        critic_trace_replay_policy="model",
        critic_trace_replay_m=8,
        critic_trace_replay_budget=128,
    )
    go = settle_workers(api.store, bus, settings, critic_opener=opener)

    try:
        yield go
    finally:
        await bus.close()


async def test_the_prm_download_carries_the_replays_monte_carlo_values(
    api: ApiHarness, settle: Any, tmp_path: Path
) -> None:
    task, gold = _textcraft_task()
    uri = f"textcraft?max_steps={len(gold) + SLACK}"
    bad = await _play(uri, task, [gold[0], *["inventory"] * (SLACK + 1), *gold[1:]])
    record = openai_record(trajectory_to_sample(bad, "t"))
    messages = [{k: v for k, v in m.items() if k != "weight"} for m in record["messages"]]
    trace = {
        "messages": messages,
        "outcome": "failure",
        "task_key": "daylight-detector",
        "environment": {"uri": uri, "task_id": task},
    }
    project = await api.project("crafting")
    key = api.auth(await api.key(project, "read", "ingest", "run"))
    accepted = await api.client.post("/v1/traces", json={"format": "openai", "traces": [trace]}, headers=key)
    assert accepted.status_code == 202, accepted.text
    (trace_id,) = accepted.json()["trace_ids"]
    await settle()

    events = [r.event for r in await api.store.read_stream(pair_stream(derived_id("trace-pair", trace_id)))]
    probes = [e for e in events if isinstance(e, ReplayProbed)]
    (marked,) = [e for e in events if isinstance(e, FirstErrorMarked)]
    (revision,) = [e for e in events if isinstance(e, RevisionMaterialized)]
    assert revision.verified is True and marked.strategy == "replay"
    t = marked.transition_index

    created = await api.client.post(
        "/v1/datasets",
        json={"name": "replayed", "query": {"sources": ["traces"], "kinds": ["revision"]}},
        headers=key,
    )
    assert created.status_code == 201, created.text
    dataset_id = created.json()["dataset_id"]
    prm = await api.client.get(f"/v1/datasets/{dataset_id}/download", params={"format": "prm"}, headers=key)
    assert prm.status_code == 200, prm.text
    (line,) = [json.loads(text) for text in prm.content.decode().splitlines()]
    assert set(line) == {"prompt", "completions", "labels", "values"}
    assert line["labels"] == [True] * t + [False]
    assert len(line["values"]) == len(line["labels"]) == len(line["completions"])
    # each step's value is V(after it), from the probes on the pair's stream
    expected: list[float | None] = []
    for step in range(t + 1):
        after = [p for p in probes if p.prefix_steps == step + 1]
        wins, runs = sum(p.successes for p in after), sum(p.m for p in after)
        expected.append(wins / runs if runs else None)
    assert line["values"] == expected
    assert line["values"][t] is not None and 0 < line["values"][t] < 1  # recoverable: some succeeded
    assert any(v is not None for v in line["values"][:t]) or t == 0
    path = tmp_path / "prm.jsonl"
    path.write_bytes(prm.content)
    loaded = datasets.load_dataset("json", data_files=str(path), split="train")
    assert loaded[0]["values"] == line["values"] and loaded[0]["labels"] == line["labels"]
