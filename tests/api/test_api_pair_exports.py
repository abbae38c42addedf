"""DPO and PRM downloads: from production-trace pairs judged by the real critic (a named dataset), and
from a run's iteration (search pairs, first errors, tree Q values). Each file is read back by the
consumers' own loaders: Hugging Face ``datasets`` (JSON loader) and TRL's dataset utilities, and
checked against the providers' published field lists (OpenAI preference fine-tuning: ``input``
{``messages``, ``tools``}, ``preferred_output`` / ``non_preferred_output`` lists of assistant
messages; TRL stepwise supervision: ``prompt``, ``completions``, ``labels``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import datasets
from trl.data_utils import is_conversational, maybe_apply_chat_template

from core.domain import events as ev
from core.domain.events import NewEvent
from core.domain.ids import pair_stream
from tests.api.conftest import ApiHarness
from tests.api.seed import mark_dataset_ready, meta, seed_search
from tests.api.test_api_tool_traces import _ingest, settle  # noqa: F401  (settle: the workers fixture)
from tests.tool_traces import SYSTEM, TASK, TASK_KEY, TOOLS

OPENAI_DPO_KEYS = {"input", "preferred_output", "non_preferred_output"}
OPENAI_INPUT_KEYS = {"messages", "tools", "parallel_tool_calls"}
ASSISTANT_KEYS = {"role", "content", "tool_calls", "name", "refusal"}
TRL_STEPWISE_KEYS = {"prompt", "completions", "labels"}


def _lines(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in body.decode().splitlines()]


def check_openai_dpo(record: dict[str, Any]) -> None:
    assert set(record) == OPENAI_DPO_KEYS
    assert set(record["input"]) <= OPENAI_INPUT_KEYS and record["input"]["messages"]
    for side in ("preferred_output", "non_preferred_output"):
        assert isinstance(record[side], list) and record[side]
        for message in record[side]:
            assert message["role"] == "assistant" and set(message) <= ASSISTANT_KEYS
            for call in message.get("tool_calls", []):
                assert call["type"] == "function" and isinstance(call["function"]["arguments"], str)
                json.loads(call["function"]["arguments"])


def check_trl_stepwise(path: Path, records: list[dict[str, Any]]) -> None:
    loaded = datasets.load_dataset("json", data_files=str(path), split="train")
    assert set(loaded.column_names) == TRL_STEPWISE_KEYS
    assert loaded.features["labels"].feature.dtype == "bool"
    assert loaded.features["completions"].feature.dtype == "string"
    for row, record in zip(loaded, records, strict=True):
        assert row == record
        assert not is_conversational(row)  # TRL's standard (string) stepwise-supervision type
        assert maybe_apply_chat_template(row, processing_class=None) == row  # type: ignore[arg-type]
        assert len(row["completions"]) == len(row["labels"])
        assert False not in row["labels"][:-1]  # cut after the first bad step


async def test_trace_pairs_give_dpo_and_prm_records(api: ApiHarness, settle: Any, tmp_path: Path) -> None:  # noqa: F811
    _project, key, _ids = await _ingest(api, settle)
    created = await api.client.post(
        "/v1/datasets",
        json={
            "name": "refunds",
            "query": {"sources": ["traces"], "kinds": ["revision"], "task_keys": [TASK_KEY]},
        },
        headers=key,
    )
    assert created.status_code == 201, created.text
    dataset_id = created.json()["dataset_id"]

    dpo = await api.client.get(f"/v1/datasets/{dataset_id}/download", params={"format": "dpo"}, headers=key)
    assert dpo.status_code == 200, dpo.text
    (record,) = _lines(dpo.content)
    check_openai_dpo(record)
    # the shared history: system, task, the lookup call both traces made, and its result
    messages = record["input"]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool"]
    assert messages[0]["content"] == SYSTEM and messages[1]["content"] == TASK
    assert messages[2]["tool_calls"][0]["function"]["name"] == "lookup_customer"
    assert record["input"]["tools"] == TOOLS
    # preferred = what the successful trace did at the divergence node, non-preferred = the failed one's
    (good,), (bad,) = record["preferred_output"], record["non_preferred_output"]
    assert (
        good["tool_calls"][0]["function"]["name"]
        == bad["tool_calls"][0]["function"]["name"]
        == "refund_order"
    )
    assert good["tool_calls"][0]["function"]["arguments"] != bad["tool_calls"][0]["function"]["arguments"]
    loaded = datasets.Dataset.from_list(_lines(dpo.content))  # HF datasets reads the nested records
    assert loaded[0]["input"]["messages"][1]["content"] == TASK

    prm = await api.client.get(f"/v1/datasets/{dataset_id}/download", params={"format": "prm"}, headers=key)
    assert prm.status_code == 200, prm.text
    records = _lines(prm.content)
    path = tmp_path / "prm.jsonl"
    path.write_bytes(prm.content)
    check_trl_stepwise(path, records)
    (step_record,) = records
    # the rules critic found t' = 1 (the refund that errored): step 0 good, step 1 bad, the answer cut
    assert step_record["labels"] == [True, False]
    assert step_record["prompt"] == f"{SYSTEM}\n\n{TASK}"
    assert "lookup_customer(" in step_record["completions"][0]
    assert step_record["completions"][1].splitlines()[-1].startswith("refund_order(")
    assert "refund_order(" not in step_record["completions"][0]

    # a named dataset has no trees: prm-values is refused with the formats it can give
    refused = await api.client.get(
        f"/v1/datasets/{dataset_id}/download", params={"format": "prm-values"}, headers=key
    )
    assert refused.status_code == 422 and "dpo" in refused.text


async def test_iteration_gives_dpo_prm_and_tree_value_records(api: ApiHarness, tmp_path: Path) -> None:
    project = await api.project("search")
    key = api.auth(await api.key(project, "read", "run"))
    run_id = (await api.client.post("/v1/runs", json={"model": "m"}, headers=key)).json()["run_id"]
    seeded = await seed_search(api.store, project, run_id)
    # the critic judged the bad path's step 0 wrong; the oracle agreed
    await api.store.append(
        [
            NewEvent(
                pair_stream(seeded.pair_id),
                ev.FirstErrorMarked(
                    pair_id=seeded.pair_id,
                    strategy="rules",
                    transition_index=0,
                    verdicts=(ev.StepVerdict(0, "bad", method="rule"),),
                    oracle_index=0,
                ),
                meta(project, "critic"),
            )
        ]
    )
    await mark_dataset_ready(api.store, project, run_id, 0, 0)
    url = f"/v1/runs/{run_id}/iterations/0/dataset"
    bodies = {}
    for fmt in ("dpo", "prm", "prm-values"):
        response = await api.client.get(url, params={"format": fmt}, headers=key)
        assert response.status_code == 200, response.text
        bodies[fmt] = response.content
    (dpo,) = _lines(bodies["dpo"])
    check_openai_dpo(dpo)
    assert [m["role"] for m in dpo["input"]["messages"]] == ["system", "user"]  # diverged at the root
    assert "get 1 oak logs" in dpo["preferred_output"][0]["content"]
    assert "inventory" in dpo["non_preferred_output"][0]["content"]

    (prm,) = _lines(bodies["prm"])
    assert prm["labels"] == [False] and "inventory" in prm["completions"][0]

    values = _lines(bodies["prm-values"])
    path = tmp_path / "values.jsonl"
    path.write_bytes(bodies["prm-values"])
    check_trl_stepwise(path, values)
    # tree: root -> a (get logs, Q 1.0) -> c (craft, Q 1.0); root -> b (inventory, Q 0.0)
    by_first = {r["completions"][0].splitlines()[-1]: r for r in values}
    assert by_first["Action: get 1 oak logs"]["labels"] == [True, True]
    assert "Got 1 oak logs" in by_first["Action: get 1 oak logs"]["completions"][1]  # the observation it saw
    assert by_first["Action: inventory"]["labels"] == [False]

    other = await api.project("other")
    other_key = api.auth(await api.key(other, "read"))
    assert (await api.client.get(url, params={"format": "dpo"}, headers=other_key)).status_code == 404
