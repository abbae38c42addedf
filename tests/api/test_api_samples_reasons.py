"""Why each message and token is trained, through the real API over PostgreSQL (issue 30, item 6):
``GET /v1/samples/{id}`` gives every message's ``why`` (as the splice / good-sample code set it) and
the vocabulary; ``GET /v1/samples/{id}/tokens`` gives every token of an assistant turn its message and
reason, every trained token's reason being a trained one; a sample stored before reasons existed
still loads, its reasons empty. The model is a real tiny-model folder inside the server's roots."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.domain.ids import new_id
from core.domain.splice import revision_sample, splice_path
from core.domain.weight_reasons import REASONS, TRAINED
from core.llm.tiny import build_tiny_model
from tests.api.conftest import ApiHarness, make_settings, running
from tests.api.seed import revision_event, seed_revisions, seed_search, trajectory

TEXTS = ["Answer with Thought: ... Action: ... Goal: craft stick. obs get 1 oak logs craft 4 planks"] * 20


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("model-roots")
    build_tiny_model(root / "tiny", TEXTS, hidden=32, layers=1, heads=2, vocab_size=300)
    return root


async def _seed_spliced(api: ApiHarness, project: str, run_id: str, pair_id: str) -> str:
    """A revision sample built by the splice code itself (so its messages carry reasons)."""
    bad = trajectory(["get 1 oak logs", "get 9 sand", "inventory"], 0.0)
    good = trajectory(["get 1 oak logs", "craft 4 oak planks", "craft 4 stick"], 1.0)
    path = splice_path(bad, good, shared_steps=1, transition=2)
    sample_id = new_id()
    sample = revision_sample(sample_id, bad, good, path, "I should have made planks.")
    await api.store.append(
        [revision_event(project, pair_id, run_id, sample, revision_length=path.revision_length)]
    )
    return sample_id


async def test_messages_and_tokens_say_why_they_are_trained(pg_url: str, roots: Path) -> None:
    async with running(make_settings(pg_url, model_roots=str(roots))) as api:
        project = await api.project("reasons")
        key = api.auth(await api.key(project, "run", "read"))
        submitted = await api.client.post("/v1/runs", json={"model": "tiny"}, headers=key)
        assert submitted.status_code == 202, submitted.text
        run_id = submitted.json()["run_id"]
        seeded = await seed_search(api.store, project, run_id)
        spliced = await _seed_spliced(api, project, run_id, seeded.pair_id)
        [old] = await seed_revisions(api.store, project, run_id, seeded.pair_id, 1)

        body = (await api.client.get(f"/v1/samples/{spliced}", headers=key)).json()
        assert body["weight_reasons"] == REASONS and body["trained_reasons"] == list(TRAINED)
        messages = body["sample"]["messages"]
        assert [(m["role"], m["weight"], m["why"]) for m in messages] == [
            ("system", 0, "system"),
            ("user", 0, "task"),
            ("assistant", 0, "shared_prefix"),
            ("user", 0, "observation"),
            ("assistant", 0, "bad_step"),
            ("user", 0, "observation"),
            ("assistant", 0, "bad_step"),
            ("user", 0, "observation"),
            ("assistant", 1, "reflection"),
            ("user", 0, "observation"),
            ("assistant", 1, "continuation"),
            ("user", 0, "observation"),
        ]

        model = {"model": str(roots / "tiny")}  # the run's model, rooted at submission
        tokens = await api.client.get(f"/v1/samples/{spliced}/tokens", params=model, headers=key)
        assert tokens.status_code == 200, tokens.text
        rows = tokens.json()["tokens"]
        trained = [t for t in rows if t["trained"]]
        assert trained and all(t["why"] in TRAINED for t in trained)
        assert all(messages[t["message"]]["weight"] == 1 for t in trained)
        owned = {t["message"] for t in rows if t["message"] is not None}
        assert owned == {i for i, m in enumerate(messages) if m["role"] == "assistant"}
        for t in rows:  # a token's reason is its message's; context tokens have neither
            assert (t["why"] is None) == (t["message"] is None)
            if t["message"] is not None:
                assert t["why"] == messages[t["message"]]["why"]
        reflection = "".join(t["text"] for t in rows if t["message"] == 8)
        assert "I should have made planks." in reflection

        # a good sample (built when read, by trajectory_to_sample): trained turns are good steps
        good = (await api.client.get(f"/v1/samples/{seeded.good_ids[0]}", headers=key)).json()
        reasons = {(m["weight"], m["why"]) for m in good["sample"]["messages"]}
        assert reasons == {(0, "system"), (0, "task"), (0, "observation"), (1, "good_step")}

        # a sample stored before reasons existed loads; its reasons are not recorded ("")
        stored = (await api.client.get(f"/v1/samples/{old}", headers=key)).json()
        assert {m["why"] for m in stored["sample"]["messages"]} == {""}
        old_tokens = (await api.client.get(f"/v1/samples/{old}/tokens", params=model, headers=key)).json()[
            "tokens"
        ]
        assert {t["why"] for t in old_tokens if t["trained"]} == {""}


def test_the_openapi_document_describes_the_reasons() -> None:
    from api.app import create_app
    from core.runtime.settings import Settings

    document = create_app(Settings(admin_key="unused-admin-key-0123456789")).openapi()
    schemas = document["components"]["schemas"]
    detail = document["paths"]["/v1/samples/{sample_id}"]["get"]["responses"]["200"]
    assert detail["content"]["application/json"]["schema"]["$ref"].endswith("/SampleDetailOut")
    assert {"weight_reasons", "trained_reasons"} <= set(schemas["SampleDetailOut"]["required"])
    assert {"message", "why"} <= set(schemas["TokenOut"]["properties"])
