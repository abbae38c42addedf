"""Tool calls and the model's chat template, through the real API over PostgreSQL (issue 27, item 8):
a tau2 run on a template that drops ``tool_calls`` (a plain ChatML on the tiny tokenizer) is a 422 naming the
model, while the same run on a template that renders them (Qwen2.5's published format, saved on the
tiny tokenizer) is accepted; ``GET /v1/samples/{id}/tokens`` flags a tool-call sample whose template
drops the calls; a tokenised / hf download of a dataset holding such a sample is refused naming the
model. The models are real tiny-model folders inside the server's model roots."""

from __future__ import annotations

import io
import os
import shutil
import zipfile
from dataclasses import replace
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest

from core.domain.ids import new_id
from core.domain.trajectory import TrainingSample
from core.llm.tiny import build_tiny_model
from tests.api.conftest import ApiHarness, make_settings, running
from tests.api.seed import mark_dataset_ready, revision_event, seed_revisions, seed_search
from tests.ml.test_tool_call_template import tool_sample
from train_service.tokenize import IGNORE_INDEX
from train_service.tokenized_export import load_tokenizer

TEMPLATES = Path(__file__).parents[1] / "ml" / "templates"
TEXTS = [
    "Answer with Thought: ... Action: ... Goal: craft item 0. Got 1 oak logs",
    "You are a retail agent. Where is my order #W1000001? Your order was delivered.",
    '<tool_call>{"name": "get_order_details", "arguments": {"order_id": "#W1000001"}}</tool_call>',
] * 20


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tiny`` (the tiny model as built: its template renders tool calls as ReAct Action lines),
    ``plain`` (the same tokenizer with a plain ChatML that drops tool calls) and ``tools`` (Qwen2.5's
    template)."""
    root = tmp_path_factory.mktemp("model-roots")
    tiny = build_tiny_model(root / "tiny", TEXTS, hidden=32, layers=1, heads=2, vocab_size=300)
    for name, template in (("plain", "chatml_drops_tool_calls.jinja"), ("tools", "qwen2_5_tools.jinja")):
        shutil.copytree(tiny, root / name)
        tokenizer = load_tokenizer(str(tiny))
        tokenizer.chat_template = (TEMPLATES / template).read_text()
        tokenizer.save_pretrained(root / name)
    return root


def tool_revision(sample_id: str) -> TrainingSample:
    """The probe tests' revision whose corrective step is a tool call, under ``sample_id``."""
    return replace(tool_sample(), sample_id=sample_id)


async def seed_tool_revision(api: ApiHarness, project: str, run_id: str, pair_id: str) -> str:
    sample_id = new_id()
    await api.store.append([revision_event(project, pair_id, run_id, tool_revision(sample_id))])
    return sample_id


async def test_tau2_run_on_a_template_that_drops_tool_calls_is_refused(pg_url: str, roots: Path) -> None:
    async with running(make_settings(pg_url, model_roots=str(roots))) as api:
        key = api.auth(await api.key(await api.project("tau2"), "run", "read"))
        body = {"model": "plain", "env": "tau2:retail"}
        refused = await api.client.post("/v1/runs", json=body, headers=key)
        assert refused.status_code == 422, refused.text
        [field] = refused.json()["fields"]
        assert field["field"] == "body.model"
        assert "drops tool calls" in field["message"]
        # the model as sent, never the folder it resolved to (issue 44: no server paths in 422s)
        assert "'plain'" in field["message"] and str(roots) not in field["message"]
        assert (await api.client.get("/v1/runs", headers=key)).json()["items"] == []  # nothing was stored

        for body in (
            {"model": "tools", "env": "tau2:retail"},
            {"model": "tiny", "env": "tau2:retail"},  # the tiny model as built trains its calls
            {"model": "plain", "env": "textcraft"},
        ):
            accepted = await api.client.post("/v1/runs", json=body, headers=key)
            assert accepted.status_code == 202, (body, accepted.text)
        served = {
            "model": "http://127.0.0.1:1/v1#m",
            "env": "tau2:airline",
            "train": {"model_path": "plain"},
        }
        refused = await api.client.post("/v1/runs", json=served, headers=key)
        assert refused.status_code == 422, refused.text
        assert refused.json()["fields"][0]["field"] == "body.train.model_path"
        assert "drops tool calls" in refused.json()["fields"][0]["message"]


async def test_tokens_flag_and_tokenised_downloads_of_tool_call_samples(
    pg_url: str, roots: Path, tmp_path: Path
) -> None:
    plain_model, tools = (os.path.join(str(roots), name) for name in ("plain", "tools"))
    async with running(make_settings(pg_url, model_roots=str(roots))) as api:
        project = await api.project("tool-samples")
        key = api.auth(await api.key(project, "run", "read"))
        submitted = await api.client.post("/v1/runs", json={"model": "plain"}, headers=key)
        assert submitted.status_code == 202, submitted.text
        run_id = submitted.json()["run_id"]
        other = await api.client.post("/v1/runs", json={"model": "tools", "env": "tau2:retail"}, headers=key)
        assert other.status_code == 202, other.text
        seeded = await seed_search(api.store, project, run_id)
        [plain_id] = await seed_revisions(api.store, project, run_id, seeded.pair_id, 1)
        tool_id = await seed_tool_revision(api, project, run_id, seeded.pair_id)
        await mark_dataset_ready(api.store, project, run_id, 0, 2)

        flagged = await api.client.get(
            f"/v1/samples/{tool_id}/tokens", params={"model": plain_model}, headers=key
        )
        assert flagged.status_code == 200, flagged.text
        body = flagged.json()
        assert body["template_drops_tool_calls"] is True
        assert "drops tool calls" in body["tool_call_problem"] and plain_model in body["tool_call_problem"]
        trained = "".join(t["text"] for t in body["tokens"] if t["trained"])
        assert "get_order_details" not in trained  # the defect the flag reports
        plain = await api.client.get(
            f"/v1/samples/{plain_id}/tokens", params={"model": plain_model}, headers=key
        )
        assert plain.status_code == 200, plain.text
        assert (
            plain.json()["template_drops_tool_calls"] is False and plain.json()["tool_call_problem"] is None
        )
        rendered = await api.client.get(f"/v1/samples/{tool_id}/tokens", params={"model": tools}, headers=key)
        assert rendered.status_code == 200, rendered.text
        assert rendered.json()["template_drops_tool_calls"] is False
        assert "get_order_details" in "".join(t["text"] for t in rendered.json()["tokens"] if t["trained"])

        url = f"/v1/runs/{run_id}/iterations/0/dataset"
        # the iteration's own model (the seeded iteration trains from "tiny", whose template renders
        # calls) is the default and trains the call; a dropping template named is refused
        default = await api.client.get(url, params={"format": "tokenized"}, headers=key)
        assert default.status_code == 200, default.text
        by_id = {r["sample_id"]: r for r in pq.read_table(io.BytesIO(default.content)).to_pylist()}
        assert tool_id in by_id
        for params in ({"format": "tokenized", "model": "plain"}, {"format": "hf", "model": "plain"}):
            refused = await api.client.get(url, params=params, headers=key)
            assert refused.status_code == 422, (params, refused.text)
            [field] = refused.json()["fields"]
            assert field["field"] == "query.model"
            assert "drops tool calls" in field["message"] and "'plain'" in field["message"]
            assert str(roots) not in field["message"]  # the model as named, never the server's path
            assert tool_id in field["message"]  # the first sample that calls tools
        accepted = await api.client.get(url, params={"format": "tokenized", "model": "tools"}, headers=key)
        assert accepted.status_code == 200, accepted.text
        rows = {r["sample_id"]: r for r in pq.read_table(io.BytesIO(accepted.content)).to_pylist()}
        assert set(rows) == {plain_id, tool_id, *seeded.good_ids[:1]}
        tokenizer = load_tokenizer(tools)
        row = rows[tool_id]
        trained_ids = [
            i for i, label in zip(row["input_ids"], row["labels"], strict=True) if label != IGNORE_INDEX
        ]
        assert "get_order_details" in tokenizer.decode(trained_ids)
        archive = await api.client.get(url, params={"format": "hf", "model": "tools"}, headers=key)
        assert archive.status_code == 200, archive.text
        with zipfile.ZipFile(io.BytesIO(archive.content)) as zipped:
            zipped.extractall(tmp_path / "hf")
        assert {r["sample_id"] for r in datasets.load_from_disk(str(tmp_path / "hf"))} == set(rows)
