"""``tokenized`` and ``hf`` downloads from the API (an iteration's dataset and a named dataset), for a
tiny model inside the server's model roots: the Parquet's labels are the trainer's
(``train_service.tokenize.tokenize_sample`` on the same samples, -100 exactly where it computes no
loss), the zip extracts to a folder ``datasets.load_from_disk`` reads with the rows the CLI's ``hf``
writes, the default model is the iteration's / the project's newest run's, and a model outside the
roots is the same 422 whether or not it exists."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

import datasets
import pyarrow.parquet as pq
import pytest

from api.model_refs import OUTSIDE_ROOTS
from core.domain.good_samples import trajectory_to_sample
from core.domain.trajectory import TrainingSample
from core.formats.export import read_samples_jsonl
from core.llm.tiny import build_tiny_model
from tests.api.conftest import ApiHarness, make_settings, running
from tests.api.seed import (
    SeededRun,
    mark_dataset_ready,
    revision_sample,
    seed_revisions,
    seed_search,
    trajectory,
)
from train_service.tokenize import IGNORE_INDEX, tokenize_sample
from train_service.tokenized_export import load_tokenizer, write_hf_dataset

TEXTS = [
    "Answer with Thought: ... Action: ...",
    "Goal: craft item 0. Goal: craft stick.",
    "Thought: go\nAction: get 1 oak logs",
    "Got 1 oak logs",
    "Thought: I made a mistake; back up.\nAction: craft 4 oak planks using 1 oak logs",
] * 20


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("model-roots")
    build_tiny_model(root / "tiny", TEXTS, hidden=32, layers=1, heads=2, vocab_size=300)
    return root


def _expected(tokenizer: Any, samples: list[TrainingSample]) -> dict[str, tuple[list[int], list[int]]]:
    out = {}
    for sample in samples:
        tok = tokenize_sample(tokenizer, sample, 1024)
        out[sample.sample_id] = (tok.input_ids, tok.labels)
    return out


def _check_tokenized(body: bytes, expected: dict[str, tuple[list[int], list[int]]]) -> list[dict[str, Any]]:
    table = pq.read_table(io.BytesIO(body))
    assert table.column_names == ["sample_id", "input_ids", "labels", "attention_mask"]
    rows = table.to_pylist()
    assert {r["sample_id"] for r in rows} == set(expected)
    for row in rows:
        ids, labels = expected[row["sample_id"]]
        assert row["input_ids"] == ids and row["labels"] == labels  # the trainer's loss mask
        assert row["attention_mask"] == [1] * len(ids)
        assert IGNORE_INDEX in labels and any(label != IGNORE_INDEX for label in labels)
    return rows


def _load_zip(body: bytes, folder: Path) -> datasets.Dataset:
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        archive.extractall(folder)
    return datasets.load_from_disk(str(folder))


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside the model roots that exists."""
    folder = tmp_path / "outside"
    folder.mkdir()
    return folder


async def _refusals(api: ApiHarness, key: dict[str, str], url: str, outside: Path) -> None:
    details = set()
    for ref in ("/etc", str(outside), str(outside / "missing"), "../outside", "tiny/../../x"):
        for fmt in ("tokenized", "hf"):
            response = await api.client.get(url, params={"format": fmt, "model": ref}, headers=key)
            assert response.status_code == 422, (ref, response.text)
            assert response.json()["fields"] == [{"field": "query.model", "message": OUTSIDE_ROOTS}]
            details.add(response.json()["detail"])
    assert len(details) == 1  # the same answer whether or not the folder exists
    missing = await api.client.get(url, params={"format": "tokenized", "model": "missing"}, headers=key)
    assert missing.status_code == 422 and "cannot load the tokenizer" in missing.text  # inside the roots
    served = await api.client.get(
        url, params={"format": "tokenized", "model": "http://127.0.0.1:1/v1"}, headers=key
    )
    assert served.status_code == 422 and "URL" in served.json()["detail"]


async def _run(
    api: ApiHarness, name: str, revisions: int
) -> tuple[str, dict[str, str], SeededRun, list[str]]:
    """A project with a run of the model "tiny" (rooted at submission) and a searched iteration 0
    (its model "tiny") with ``revisions`` revision samples: project, key, the run, revision ids."""
    project = await api.project(name)
    key = api.auth(await api.key(project, "read", "run"))
    submitted = await api.client.post("/v1/runs", json={"model": "tiny"}, headers=key)
    assert submitted.status_code == 202, submitted.text
    seeded = await seed_search(api.store, project, submitted.json()["run_id"])
    return (
        project,
        key,
        seeded,
        await seed_revisions(api.store, project, seeded.run_id, seeded.pair_id, revisions),
    )


async def test_iteration_tokenized_and_hf_downloads(
    pg_url: str, roots: Path, tmp_path: Path, outside: Path
) -> None:
    async with running(make_settings(pg_url, model_roots=str(roots))) as api:
        project, key, seeded, revision_ids = await _run(api, "exports", 2)
        run_id = seeded.run_id
        await mark_dataset_ready(api.store, project, run_id, 0, 2)
        samples = [revision_sample(sample_id, i) for i, sample_id in enumerate(revision_ids)]
        good = trajectory(["get 1 oak logs", "craft 4 oak planks"], 1.0)
        samples.append(trajectory_to_sample(good, seeded.good_ids[0]))  # reward 0.5 < alpha: left out
        tokenizer = load_tokenizer(str(roots / "tiny"))
        expected = _expected(tokenizer, samples)
        url = f"/v1/runs/{run_id}/iterations/0/dataset"

        default = await api.client.get(url, params={"format": "tokenized"}, headers=key)
        assert default.status_code == 200, default.text
        assert default.headers["content-type"] == "application/vnd.apache.parquet"
        assert default.headers["content-disposition"].endswith('-tokenized.parquet"')
        rows = _check_tokenized(default.content, expected)
        named = await api.client.get(url, params={"format": "tokenized", "model": "tiny"}, headers=key)
        assert named.status_code == 200 and named.content == default.content
        short = await api.client.get(url, params={"format": "tokenized", "max_length": 8}, headers=key)
        assert short.status_code == 200 and pq.read_table(io.BytesIO(short.content)).num_rows == 0

        chat = await api.client.get(url, params={"format": "hf"}, headers=key)
        assert chat.status_code == 200, chat.text
        assert chat.headers["content-type"] == "application/zip"
        loaded = _load_zip(chat.content, tmp_path / "chat")
        assert loaded.column_names == ["sample_id", "kind", "reward", "messages", "tools"]
        write_hf_dataset(tmp_path / "cli-chat", samples)  # what `agentr export --format hf` writes
        by_id = {r["sample_id"]: r for r in datasets.load_from_disk(str(tmp_path / "cli-chat")).to_list()}
        assert sorted(loaded.to_list(), key=lambda r: r["sample_id"]) == [by_id[k] for k in sorted(by_id)]

        with_tokens = await api.client.get(url, params={"format": "hf", "model": "tiny"}, headers=key)
        assert with_tokens.status_code == 200, with_tokens.text
        tokenized = _load_zip(with_tokens.content, tmp_path / "tokens")
        assert {"input_ids", "labels", "attention_mask", "messages"} <= set(tokenized.column_names)
        assert [(r["sample_id"], r["labels"]) for r in tokenized] == [
            (r["sample_id"], r["labels"]) for r in rows
        ]

        await _refusals(api, key, url, outside)
        other = api.auth(await api.key(await api.project("other"), "read"))
        assert (await api.client.get(url, params={"format": "hf"}, headers=other)).status_code == 404


async def test_named_dataset_tokenized_and_hf_downloads(
    pg_url: str, roots: Path, tmp_path: Path, outside: Path
) -> None:
    async with running(make_settings(pg_url, model_roots=str(roots))) as api:
        _project, key, _seeded, _ids = await _run(api, "named", 3)
        created = await api.client.post(
            "/v1/datasets", json={"name": "tok", "query": {"sources": ["runs"]}}, headers=key
        )
        assert created.status_code == 201, created.text
        url = f"/v1/datasets/{created.json()['dataset_id']}/download"
        listed = await api.client.get(url, params={"format": "samples"}, headers=key)
        (tmp_path / "samples.jsonl").write_bytes(listed.content)
        samples = list(read_samples_jsonl(tmp_path / "samples.jsonl"))
        assert len(samples) >= 4

        # no model: the project's default model, its newest run's (rooted at submission: roots/tiny)
        default = await api.client.get(url, params={"format": "tokenized"}, headers=key)
        assert default.status_code == 200, default.text
        _check_tokenized(default.content, _expected(load_tokenizer(str(roots / "tiny")), samples))

        archive = await api.client.get(url, params={"format": "hf", "model": "tiny"}, headers=key)
        assert archive.status_code == 200, archive.text
        loaded = _load_zip(archive.content, tmp_path / "hf")
        write_hf_dataset(tmp_path / "cli", samples, load_tokenizer(str(roots / "tiny")), 1024)
        assert loaded.to_list() == datasets.load_from_disk(str(tmp_path / "cli")).to_list()
        await _refusals(api, key, url, outside)

        # a project without runs has no default model; an empty dataset is an empty folder
        lone = await api.project("lone")
        lone_key = api.auth(await api.key(lone, "read", "run"))
        empty = await api.client.post(
            "/v1/datasets", json={"name": "none", "query": {}, "allow_empty": True}, headers=lone_key
        )
        empty_url = f"/v1/datasets/{empty.json()['dataset_id']}/download"
        refused = await api.client.get(empty_url, params={"format": "tokenized"}, headers=lone_key)
        assert refused.status_code == 422 and "name a model" in refused.json()["detail"]
        nothing = await api.client.get(empty_url, params={"format": "hf"}, headers=lone_key)
        assert nothing.status_code == 200, nothing.text
        assert _load_zip(nothing.content, tmp_path / "empty").num_rows == 0
