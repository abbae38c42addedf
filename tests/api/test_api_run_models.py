"""Submission checks of the model and the launcher: a model folder without a chat template, or with
one that rewrites history, and bad ``train.launcher`` settings are 422s naming the field."""

from __future__ import annotations

import json
from pathlib import Path

from core.llm.tiny import build_tiny_model
from tests.api.conftest import ApiHarness, make_settings, running

TEXTS = ["Goal: craft stick.", "Thought: planks.\nAction: get 2 oak planks"] * 20


async def test_model_folder_template_is_checked_at_submission(pg_url: str, tmp_path: Path) -> None:
    async with running(make_settings(pg_url, model_roots=str(tmp_path))) as api:  # the folder's root
        await _template_checks(api, tmp_path)


async def _template_checks(api: ApiHarness, tmp_path: Path) -> None:
    key = api.auth(await api.key(await api.project(), "run"))
    folder = build_tiny_model(tmp_path / "m", TEXTS, hidden=32, layers=1, heads=2, vocab_size=300)
    ok = await api.client.post("/v1/runs", json={"model": str(folder)}, headers=key)
    assert ok.status_code == 202, ok.text

    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    template = config.pop("chat_template", None) or (folder / "chat_template.jinja").read_text()
    config_path.write_text(json.dumps(config))
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    for data_only in (False, True):  # prompts need a template even without training
        missing = await api.client.post(
            "/v1/runs", json={"model": str(folder), "data_only": data_only}, headers=key
        )
        assert missing.status_code == 422, missing.text
        assert missing.json()["fields"][0]["field"] == "body.model"
        assert "has no chat template" in missing.json()["detail"]

    stock = template.replace("{%- generation -%}", "").replace("{%- endgeneration -%}", "")
    rewriting = stock.replace("message['content']", "(message['content'] if loop.last else 'x')")
    assert rewriting != template
    (folder / "chat_template.jinja").write_text(rewriting)
    unstable = await api.client.post("/v1/runs", json={"model": str(folder)}, headers=key)
    assert unstable.status_code == 422, unstable.text
    assert "not prefix-stable" in unstable.json()["detail"]
    data_only = await api.client.post("/v1/runs", json={"model": str(folder), "data_only": True}, headers=key)
    assert data_only.status_code == 202, data_only.text  # no training: no loss masks needed


async def test_launcher_settings_are_checked_at_submission(api: ApiHarness) -> None:
    key = api.auth(await api.key(await api.project(), "run"))
    cases = [
        ("body.train.nproc_per_node", "nproc_per_node", {"launcher": "torchrun", "nproc_per_node": 0}),
        ("body.train.launcher", "launcher", {"launcher": "slurm"}),
        ("body.train", "needs train.launcher 'torchrun'", {"nproc_per_node": 2}),
        ("body.train", "needs train.launcher 'torchrun'", {"accelerate_config": "ds.yaml"}),
    ]
    for field, message, train in cases:
        response = await api.client.post("/v1/runs", json={"model": "m", "train": train}, headers=key)
        assert response.status_code == 422, response.text
        assert response.json()["fields"][0]["field"] == field, response.text
        assert message in response.json()["detail"]
    good = {"launcher": "torchrun", "nproc_per_node": 2, "epochs": 1}
    accepted = await api.client.post("/v1/runs", json={"model": "m", "train": good}, headers=key)
    assert accepted.status_code == 202, accepted.text
