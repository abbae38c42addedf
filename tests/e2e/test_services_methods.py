"""End to end over the real services: a `dpo` run and an `archer` run complete on the tiny model.

The deployment ``test_services_e2e.py`` uses (``tests/e2e/services.py``, one for the e2e package:
api, relay, search, critic, splice and train workers and the Celery trainer as separate OS processes
on the real PostgreSQL and Redis), with a project of this test's own. Both runs are submitted over
HTTP at once, with the ``agentr run --quick`` configuration of that test (1 iteration, its
warm-started tiny model), the ``direct`` critic (neither learner trains on revisions) and a few
optimizer steps. Each is followed to completion: the train worker built the method's dataset from
the event log (preference pairs / transitions JSONL + manifest), the Celery trainer process trained
it (its log names the task, and the trainer reports the method's own metrics), the checkpoint
carries meta.json with the method (and ArCHer's critic beside the actor), and the iteration was
evaluated.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.services import Deployment, follow
from tests.ml.learner_data import ARCHER_RUN_TRAIN, DPO_RUN_TRAIN

pytestmark = pytest.mark.slow


def test_dpo_and_archer_runs_complete_over_the_services(
    deployment: Deployment, run_config: dict[str, Any]
) -> None:
    group, client = deployment.group, deployment.client
    # the trainer serves the whole e2e deployment: count only the tasks this test's runs give it
    trainer_log = group.processes["trainer"].log_path
    succeeded_before = trainer_log.read_text(errors="replace").count("succeeded in")
    base = dict(run_config, critic={"strategy": "direct"})
    runs = {
        method: client.submit_run(dict(base, train=train))
        for method, train in (("dpo", DPO_RUN_TRAIN), ("archer", ARCHER_RUN_TRAIN))
    }
    done = {method: follow(client, group, run_id, timeout=300) for method, run_id in runs.items()}
    home = deployment.home
    for method, run in done.items():
        assert run["config"]["train"] == (DPO_RUN_TRAIN if method == "dpo" else ARCHER_RUN_TRAIN)
        (iteration,) = run["iterations"]
        assert iteration["status"] == "evaluated", iteration
        checkpoint = Path(iteration["checkpoint"])
        meta = json.loads((checkpoint / "meta.json").read_text())
        assert meta["config"]["method"] == method and meta["dataset_id"] == iteration["dataset_id"]
        assert meta["metrics"]["method"] == method and meta["run_id"] == run["run_id"]
        assert run["final_model_ref"] == str(checkpoint)
        data = home / "runs" / run["run_id"] / "datasets"
        kind = "dpo" if method == "dpo" else "transitions"
        manifest = json.loads((data / f"iter-0.{kind}.manifest.json").read_text())
        records = (data / f"iter-0.{kind}.jsonl").read_text().splitlines()
        ids = manifest["pair_ids"] if method == "dpo" else manifest["transition_ids"]
        assert len(records) == len(ids) > 0
    dpo_meta = json.loads((Path(done["dpo"]["iterations"][0]["checkpoint"]) / "meta.json").read_text())
    assert dpo_meta["metrics"]["steps"] == 2 and dpo_meta["config"]["beta"] == 0.1
    archer_ckpt = Path(done["archer"]["iterations"][0]["checkpoint"])
    archer_meta = json.loads((archer_ckpt / "meta.json").read_text())
    assert archer_meta["metrics"]["critic_updates"] == 2 and archer_meta["metrics"]["actor_updates"] == 1
    assert (archer_ckpt / "critic" / "critic.safetensors").is_file()
    # trained by the Celery trainer process (not inline in the train worker): its log has both tasks
    succeeded = trainer_log.read_text(errors="replace").count("succeeded in") - succeeded_before
    assert succeeded >= 2, group.logs()
