"""`agentr run` against a SERVED model: `agentr model serve` (a subprocess on a free port) over the
warm-started tiny model of `agentr run --quick`, and `agentr run --quick --data-only --model
http://127.0.0.1:PORT/v1#NAME` (another subprocess, its own AGENTR_HOME) searching and critiquing
through the openai backend. The critic's label scores come over HTTP by the exact ``/tokenize``
path (finite for every label). A URL model that would train without local weights is refused at
the start (exit 2, the field named), never deep in the run."""

from __future__ import annotations

import json
import math
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.helpers import AGENTR, free_port, quick_tiny_model
from tests.support import start_http_process

NAME = "served-tiny"


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTR_")}
    env.update(AGENTR_HOME=str(home), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, str]]:
    models_home = tmp_path_factory.mktemp("models-home")
    # the session's warm-started tiny model (the e2e tests' run_config builds the same one, in the
    # same folder): built once per session, only read here (served, and --train-from's base)
    folder, _config = quick_tiny_model(tmp_path_factory.getbasetemp() / "agentr-quick-home")
    port = free_port()
    log_path = models_home / "serve.log"
    base = f"http://127.0.0.1:{port}/v1"
    with start_http_process(
        [AGENTR, "model", "serve", folder, "--port", str(port), "--device", "cpu", "--name", NAME],
        f"{base}/models",
        what="agentr model serve",
        env=_env(models_home),
        log_path=log_path,
        timeout_s=90,
    ):
        yield base, log_path, folder


def test_data_only_run_against_a_served_model(served: tuple[str, Path, str], tmp_path: Path) -> None:
    base, server_log, _folder = served
    home = tmp_path / "home"
    proc = subprocess.run(
        # the model critic (not the default first-after-divergence): its scoring over the server is tested
        [AGENTR, "run", "--quick", "--data-only", "--iterations", "1", "--model", f"{base}#{NAME}"]
        + ["--critic", "model"],
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not (home / "models").exists()  # nothing local was built: the URL was used as given
    runs = [p for p in (home / "runs").iterdir() if p.is_dir()]
    assert len(runs) == 1
    run_dir = runs[0]
    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] == "completed"
    first = report["datasets"]["0"]
    assert first["pairs"] > 0 and first["revision"] > 0
    # a data-only run's dataset is taken away with `agentr export` (to train elsewhere)
    out = tmp_path / "iter-0.jsonl"
    exported = subprocess.run(
        [AGENTR, "export", run_dir.name, "0", "--format", "openai", "-o", str(out)],
        env=_env(home), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) >= first["revision"]
    assert any(m["role"] == "assistant" and m.get("weight") == 1 for row in rows for m in row["messages"])
    assert not (run_dir / "checkpoints").exists()  # data only: nothing trained
    db = sqlite3.connect(home / "agentr.db")
    run_events = [
        (t, json.loads(d))
        for t, d in db.execute(
            "select event_type, data from events where stream_id = ? order by position",
            (f"run-{run_dir.name}",),
        )
    ]
    started = [d for t, d in run_events if t == "IterationStarted"]
    assert [d["model_ref"] for d in started] == [f"{base}#{NAME}"]
    assert run_events[-1][0] == "RunCompleted"
    marked = [
        json.loads(d) for (d,) in db.execute("select data from events where event_type = 'FirstErrorMarked'")
    ]
    assert marked, "the critic judged no pair"
    for event in marked:
        assert event["strategy"] == "model"
        assert event["model_version"] == f"{base}#{NAME}"
        assert event["verdicts"]
        for verdict in event["verdicts"]:
            assert verdict["method"] == "scores"
            assert set(verdict["scores"]) == {"good", "bad", "uncertain"}
            # exact /tokenize scoring: no label falls outside a top-k (-inf) even when multi-token
            assert all(math.isfinite(float(v)) for v in verdict["scores"].values()), verdict
    # the critic's scores came by the exact path: the served tokenizer, then token-id echo
    access = server_log.read_text()
    assert '"POST /tokenize HTTP/1.1" 200' in access
    assert '"POST /v1/completions HTTP/1.1" 200' in access


def test_url_model_without_local_weights_is_refused_before_the_run(
    served: tuple[str, Path, str], tmp_path: Path
) -> None:
    base, _log, _folder = served
    home = tmp_path / "home"
    proc = subprocess.run(
        [AGENTR, "run", "--quick", "--model", f"{base}#{NAME}"],
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    output = proc.stdout + proc.stderr
    assert "train.model_path is required" in " ".join(output.split())
    assert "--train-from" in output and "--data-only" in output
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())  # no run was started


def test_served_model_trains_from_its_local_weights(served: tuple[str, Path, str], tmp_path: Path) -> None:
    base, _log, folder = served
    home = tmp_path / "home"
    proc = subprocess.run(
        [AGENTR, "run", "--quick", "--iterations", "1", "--model", f"{base}#{NAME}", "--train-from", folder],
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = [p for p in (home / "runs").iterdir() if p.is_dir()]
    meta = json.loads((run_dir / "checkpoints" / "iter-0" / "meta.json").read_text())
    assert meta["base_model"] == folder  # the served weights, from the local folder
    assert "model_path" not in meta["config"]
    db = sqlite3.connect(home / "agentr.db")
    events = {
        t: json.loads(d)
        for t, d in db.execute(
            "select event_type, data from events where stream_id = ? order by position",
            (f"run-{run_dir.name}",),
        )
    }
    checkpoint = events["ModelTrained"]["checkpoint"]
    assert Path(checkpoint) == run_dir / "checkpoints" / "iter-0"
    assert events["IterationEvaluated"]["model_ref"] == checkpoint  # loaded locally from now on
    assert events["RunCompleted"]["final_model_ref"] == checkpoint


def test_submission_rules_for_served_models() -> None:
    """The same rule the API applies to POST /v1/runs (422 naming the field) and `agentr run` (exit 2)."""
    from pydantic import ValidationError

    from api.schemas import RunConfigIn
    from core.domain.config import RunConfig

    url = "http://127.0.0.1:8000/v1#m"
    with pytest.raises(ValidationError, match=r"train\.model_path is required"):
        RunConfigIn.model_validate({"model": url})
    with pytest.raises(ValidationError, match=r"train\.model_path only applies when model is an http"):
        RunConfigIn.model_validate({"model": "/models/base", "train": {"model_path": "/models/base"}})
    with pytest.raises(ValidationError, match=r"train\.model_path must be a non-empty path"):
        RunConfigIn.model_validate({"model": url, "train": {"model_path": " "}})
    data_only = RunConfigIn.model_validate({"model": url, "data_only": True}).to_domain()
    assert data_only.training_problem() is None
    config = RunConfigIn.model_validate(
        {"model": url, "train": {"model_path": "/models/base", "epochs": 2}}
    ).to_domain()
    # iteration 0 trains the served model's local weights; later iterations their own checkpoint
    assert config.train_weights(url) == "/models/base"
    assert config.train_weights("/runs/r/checkpoints/iter-0") == "/runs/r/checkpoints/iter-0"
    assert config.sft_overrides() == {"epochs": 2}  # model_path never reaches SFTConfig
    with pytest.raises(ValueError, match="names no local folder"):
        RunConfig(model=url, data_only=True).train_weights(url)
