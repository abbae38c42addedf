"""Human review over the API on the real PostgreSQL store: a pair's detail, corrections checked before
anything is written, and the splice worker's re-splice (splice_service.corrections) from them.

The pair is spliced first by the real splicer (``SpliceHandlers.on_first_error``); a reviewer's
correction is appended through ``POST /v1/pairs/{id}/corrections`` and handed to the real correction
handler, whose events are appended as the worker would. The sample row, the pair view and the
correction history are then read back through the API.
"""

from __future__ import annotations

from typing import Any

from core.domain import events as ev
from core.domain.events import NewEvent
from core.domain.ids import new_id, pair_stream
from core.domain.trajectory import Step, Trajectory
from splice_service.corrections import CorrectionHandlers
from splice_service.service import SpliceHandlers
from tests.api.conftest import ApiHarness, make_settings
from tests.api.seed import meta


def path(actions: list[str], reward: float) -> Trajectory:
    return Trajectory(
        task="Goal: craft stick.",
        instruction="Answer with Thought: ... Action: ...",
        steps=tuple(Step(f"think {a}", a, f"obs {a}") for a in actions),
        reward=reward,
    )


async def spliced_pair(api: ApiHarness, project_id: str) -> tuple[str, SpliceHandlers]:
    """A pair (shared 1 step, bad steps 1..3) judged bad at t'=2 and spliced by the real splicer."""
    pair_id = new_id()
    bad = path(["get 1 oak logs", "get 2 sticks", "craft 1 stick", "inventory"], 0.0)
    good = path(["get 1 oak logs", "craft 4 oak planks", "craft 4 sticks"], 1.0)
    found = ev.PairFound(pair_id=pair_id, source="search", task_key="k", bad=bad, good=good, shared_steps=1)
    verdicts = tuple(
        ev.StepVerdict(i, "good" if i < 2 else "bad", {"good": -0.5, "bad": -1.0}) for i in (1, 2)
    )
    marked = ev.FirstErrorMarked(pair_id, "model", 2, verdicts, oracle_index=1)
    stream = pair_stream(pair_id)
    await api.store.append(
        [NewEvent(stream, found, meta(project_id)), NewEvent(stream, marked, meta(project_id))]
    )
    splicer = SpliceHandlers(make_settings("unused"), api.store, env_opener=lambda uri: None)  # type: ignore[arg-type,return-value]
    recorded = (await api.store.read_stream(stream))[-1]
    await api.store.append(list((await splicer.on_first_error(recorded)).events))
    return pair_id, splicer


async def resplice(api: ApiHarness, splicer: SpliceHandlers, pair_id: str) -> list[Any]:
    """What the splice worker does with the latest FirstErrorCorrected of the pair."""
    recorded = (await api.store.read_stream(pair_stream(pair_id)))[-1]
    assert recorded.event_type == "FirstErrorCorrected"
    result = await CorrectionHandlers(splicer).on_correction(recorded)
    await api.store.append(list(result.events))
    return [e.event for e in result.events]


async def build_dataset(api: ApiHarness, headers: dict[str, str], name: str) -> str:
    created = await api.client.post("/v1/datasets", json={"name": name}, headers=headers)
    assert created.status_code == 201, created.text
    return str(created.json()["dataset_id"])


async def download(api: ApiHarness, headers: dict[str, str], dataset_id: str) -> str:
    response = await api.client.get(
        f"/v1/datasets/{dataset_id}/download", params={"format": "openai"}, headers=headers
    )
    assert response.status_code == 200, response.text
    return response.text


async def test_correction_resplices_the_sample(api: ApiHarness) -> None:
    project = await api.project("review")
    reader = api.auth(await api.key(project, "read"))
    reviewer = api.auth(await api.key(project, "read", "review", "run"))
    pair_id, splicer = await spliced_pair(api, project)
    old_dataset = await build_dataset(api, reviewer, "before")

    detail = (await api.client.get(f"/v1/pairs/{pair_id}", headers=reader)).json()
    assert (detail["shared_steps"], detail["transition_index"], detail["sample_origin"]) == (1, 2, "splice")
    assert detail["critic"]["oracle_index"] == 1 and len(detail["critic"]["verdicts"]) == 2
    assert detail["reflection"] and detail["sample_id"]
    before = (await api.client.get(f"/v1/samples/{detail['sample_id']}", headers=reader)).json()["sample"]
    url = f"/v1/pairs/{pair_id}/corrections"

    # refused before anything is written: wrong scope, t' outside 1..3, empty reflection, no change
    assert (await api.client.post(url, json={"transition_index": 1}, headers=reader)).status_code == 403
    for body, field in (
        ({"transition_index": 0}, "body.transition_index"),
        ({"transition_index": 4}, "body.transition_index"),
        ({"reflection": "   "}, "body.reflection"),
        ({"transition_index": 2}, "body.transition_index"),
    ):
        refused = await api.client.post(url, json=body, headers=reviewer)
        assert refused.status_code == 422, (body, refused.text)
        assert refused.json()["fields"][0]["field"] == field, refused.text
    assert len(await api.store.read_stream(pair_stream(pair_id))) == 3  # found, marked, materialized

    # the reviewer moves t' to the oracle's first error and writes the reflection
    reflection = "I should have made planks from the logs instead of fetching sticks."
    accepted = await api.client.post(
        url, json={"transition_index": 1, "reflection": reflection}, headers=reviewer
    )
    assert accepted.status_code == 202, accepted.text
    assert accepted.json()["old_transition_index"] == 2 and accepted.json()["new_transition_index"] == 1
    pending = (await api.client.get(f"/v1/pairs/{pair_id}", headers=reader)).json()["corrections"]
    assert [c["status"] for c in pending] == ["pending"]
    again = await api.client.post(url, json={"transition_index": 3}, headers=reviewer)
    assert again.status_code == 422 and "still being re-spliced" in again.text

    (respliced,) = await resplice(api, splicer, pair_id)
    assert isinstance(respliced, ev.SampleRespliced) and respliced.template_id == "human"
    detail = (await api.client.get(f"/v1/pairs/{pair_id}", headers=reader)).json()
    (correction,) = detail["corrections"]
    assert correction["status"] == "respliced" and correction["reviewer"].startswith("agr_")
    assert correction["old_reflection"] == before["provenance"]["reflection"]
    assert (detail["transition_index"], detail["sample_origin"], detail["reflection"]) == (
        1,
        "human-corrected",
        reflection,
    )
    after = (await api.client.get(f"/v1/samples/{detail['sample_id']}", headers=reader)).json()
    assert after["revision_length"] == 1 and after["template_id"] == "human"
    provenance = after["sample"]["provenance"]
    assert provenance["origin"] == "human-corrected" and provenance["critic_transition_index"] == 2
    assert provenance["correction_id"] == correction["correction_id"]
    trained = [m["content"] for m in after["sample"]["messages"] if m["weight"] == 1]
    assert reflection in trained[0] and "craft 4 oak planks" in trained[0]
    contexts = [
        m["content"] for m in after["sample"]["messages"] if m["role"] == "assistant" and not m["weight"]
    ]
    assert len(contexts) == 2 and "get 2 sticks" in contexts[1]  # shared step + bad step 1 (t')
    # a trace dataset built now takes the corrected sample; one built before still downloads the old one
    new_dataset = await build_dataset(api, reviewer, "after")
    assert reflection in await download(api, reader, new_dataset)
    old_text = await download(api, reader, old_dataset)
    assert reflection not in old_text and before["provenance"]["reflection"] in old_text
    pairs = (await api.client.get("/v1/pairs", headers=reader)).json()["items"]
    assert [(p["pair_id"], p["transition_index"], p["status"]) for p in pairs] == [(pair_id, 1, "revised")]

    # another project sees none of it
    other = await api.project("other")
    outsider = api.auth(await api.key(other, "read", "review"))
    assert (await api.client.get(f"/v1/pairs/{pair_id}", headers=outsider)).status_code == 404
    assert (await api.client.post(url, json={"transition_index": 3}, headers=outsider)).status_code == 404
    assert (await api.client.get(f"/v1/samples/{detail['sample_id']}", headers=outsider)).status_code == 404


async def test_tokens_route_refuses_models_outside_the_project(api: ApiHarness) -> None:
    project = await api.project("tokens")
    reader = api.auth(await api.key(project, "read"))
    pair_id, _ = await spliced_pair(api, project)
    sample_id = (await api.client.get(f"/v1/pairs/{pair_id}", headers=reader)).json()["sample_id"]
    no_run = await api.client.get(f"/v1/samples/{sample_id}/tokens", headers=reader)
    assert no_run.status_code == 422 and "belongs to no run" in no_run.text
    foreign = await api.client.get(
        f"/v1/samples/{sample_id}/tokens", params={"model": "/etc"}, headers=reader
    )
    assert foreign.status_code == 422 and "not a model of this project's runs" in foreign.text


async def test_ui_shell_is_served_without_a_key_but_shows_no_data(api: ApiHarness) -> None:
    page = await api.client.get("/ui/")
    assert page.status_code == 200 and "app.js" in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    script = await api.client.get("/ui/static/pages/tree.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert (await api.client.get("/ui/static/../../keys.py")).status_code == 404
    assert (await api.client.get("/ui/static/nothing.js")).status_code == 404
    assert (await api.client.get("/v1/pairs")).status_code == 401  # the data needs a key
