"""The auth matrix for EVERY route: no key, wrong key, wrong scope, and another project's key.

No key / wrong key -> 401; a key without the route's scope -> 403; a key of another project (with
every scope) -> 404 for the first project's ids, and never any of its rows in lists. A test also
checks that the matrix lists every /v1 route the app serves, so a new route cannot skip it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from api.app import create_app
from core.runtime.settings import Settings
from tests.api.conftest import ApiHarness
from tests.api.seed import mark_dataset_ready, seed_search

ALL_SCOPES = ("read", "ingest", "run", "review", "admin")


@dataclass(frozen=True)
class Route:
    method: str
    template: str
    scope: str
    # "404": another project's key gets 404; "list": it sees none of A's rows;
    # "own": it acts on its own project
    isolation: str
    body: Any = None
    params: dict[str, Any] | None = None
    # what the owner may get besides success (the seeded iteration's model "tiny" is no folder here,
    # so rendering its tokens is a 422 naming it; tests/e2e/test_ui_browser.py renders real ones)
    owner_also: tuple[int, ...] = ()


TRACE = {
    "messages": [{"role": "user", "content": "Goal: x"}, {"role": "assistant", "content": "Action: look"}]
}

OTLP_EXPORT = {
    "resourceSpans": [
        {
            "scopeSpans": [
                {
                    "spans": [
                        {
                            "traceId": "5b8efff798038103d269b633813fc60c",
                            "spanId": "eee19b7ec3c1b174",
                            "name": "chat",
                            "attributes": [
                                {
                                    "key": "gen_ai.input.messages",
                                    "value": {
                                        "stringValue": '[{"role": "user", "parts": [{"type": "text", '
                                        '"content": "Goal: x"}]}]'
                                    },
                                }
                            ],
                        }
                    ]
                }
            ]
        }
    ]
}

ROUTES = (
    Route("GET", "/v1/projects", "read", "list"),
    Route("POST", "/v1/projects", "admin", "own", {"name": "n"}),
    Route("GET", "/v1/projects/{project}", "read", "404"),
    Route("POST", "/v1/projects/{project}/keys", "admin", "404", {"scopes": ["read"]}),
    Route("GET", "/v1/projects/{project}/keys", "admin", "404"),
    Route("POST", "/v1/projects/{project}/keys/{key_id}/revoke", "admin", "404"),
    Route("POST", "/v1/runs", "run", "own", {"model": "m"}),
    Route("GET", "/v1/runs", "read", "list"),
    Route("GET", "/v1/runs/{run}", "read", "404"),
    Route("POST", "/v1/runs/{run}/cancel", "run", "404"),
    Route("GET", "/v1/trees/{tree}", "read", "404"),
    Route("GET", "/v1/runs/{run}/trees", "read", "404"),
    Route("GET", "/v1/runs/{run}/pairs", "read", "404"),
    Route("GET", "/v1/runs/{run}/samples", "read", "404"),
    Route("GET", "/v1/runs/{run}/iterations/{iteration}/dataset", "read", "404"),
    Route("GET", "/v1/runs/{run}/iterations/{iteration}/quality", "read", "404"),
    Route("POST", "/v1/traces", "ingest", "own", {"format": "openai", "traces": [TRACE]}),
    Route("GET", "/v1/traces/{trace}", "read", "404"),
    Route("PATCH", "/v1/traces/{trace}", "ingest", "404", {"outcome": "failure"}),
    Route("PATCH", "/v1/traces", "ingest", "404", {"outcomes": [{"trace_id": "{trace}", "outcome": 0.0}]}),
    Route("POST", "/v1/otlp/v1/traces", "ingest", "own", OTLP_EXPORT),
    Route("GET", "/v1/traces", "read", "list"),
    Route("GET", "/v1/pairs", "read", "list"),
    Route("GET", "/v1/review/queue", "read", "list"),
    Route("POST", "/v1/datasets", "run", "own", {"name": "matrix", "allow_empty": True}),
    Route("GET", "/v1/datasets", "read", "list"),
    Route("GET", "/v1/datasets/{dataset}", "read", "404"),
    Route("GET", "/v1/datasets/{dataset}/download", "read", "404"),
    Route("POST", "/v1/datasets/{dataset}/rebuild", "read", "404"),
    Route("GET", "/v1/events", "read", "list", params={"follow": "false"}),
    Route("GET", "/v1/events/position", "read", "own"),
    Route("GET", "/v1/keys/me", "read", "own"),
    Route("GET", "/v1/pairs/{pair}", "read", "404"),
    Route("POST", "/v1/pairs/{pair}/accept", "review", "404", {"note": "the critic was right"}),
    Route("POST", "/v1/traces/{trace}/accept", "review", "404", {}),
    Route(
        "POST", "/v1/pairs/{pair}/corrections", "review", "404", {"reflection": "I should get logs first."}
    ),
    Route(
        "POST", "/v1/traces/{trace}/corrections", "review", "404", {"reflection": "Check the order first."}
    ),
    Route("POST", "/v1/pairs/{pair}/claim", "review", "404", {}),
    # {key_id} is a read-only key: assigning a pair to it is a 422 naming key_id
    Route("POST", "/v1/pairs/{pair}/assign", "review", "404", {"key_id": "{key_id}"}, owner_also=(422,)),
    Route("POST", "/v1/pairs/{pair}/release", "review", "404", {}),
    # the owner's last verdict is the correction above, still re-splicing (no worker here): a 409
    Route("POST", "/v1/pairs/{pair}/undo", "review", "404", {}, owner_also=(409,)),
    Route("GET", "/v1/review/agreement", "read", "list"),
    Route("GET", "/v1/reviewers", "review", "list"),
    Route("GET", "/v1/runs/{run}/progress", "read", "404"),
    Route("GET", "/v1/samples/{sample}", "read", "404"),
    Route("GET", "/v1/samples/{sample}/tokens", "read", "404", owner_also=(422,)),
)


async def seed_critiqued(api: ApiHarness, project_id: str, pair_id: str, trace_id: str) -> None:
    """The critic's verdict on the seeded search pair, and a judged pair for the failed trace, so the
    correction routes have something to correct."""
    from core.domain import events as ev
    from core.domain.events import NewEvent
    from core.domain.ids import derived_id, pair_stream
    from tests.api.seed import meta, trajectory

    verdict = ev.StepVerdict(0, "bad")
    trace_pair = derived_id("trace-pair", trace_id)
    await api.store.append(
        [
            NewEvent(
                pair_stream(pair_id), ev.FirstErrorMarked(pair_id, "rules", 0, (verdict,)), meta(project_id)
            ),
            NewEvent(
                pair_stream(trace_pair),
                ev.PairFound(
                    pair_id=trace_pair,
                    source="trace",
                    task_key="k",
                    bad=trajectory(["look"], 0.0),
                    good=trajectory(["open"], 1.0),
                    shared_steps=0,
                    bad_leaf_id=trace_id,
                ),
                meta(project_id),
            ),
            NewEvent(
                pair_stream(trace_pair),
                ev.FirstErrorMarked(trace_pair, "rules", 0, (verdict,)),
                meta(project_id),
            ),
        ]
    )


def _fastapi_template(template: str) -> str:
    names = {
        "{project}": "{project_id}",
        "{key_id}": "{key_id}",
        "{run}": "{run_id}",
        "{tree}": "{tree_id}",
        "{trace}": "{trace_id}",
        "{iteration}": "{iteration}",
        "{dataset}": "{dataset_id}",
        "{pair}": "{pair_id}",
        "{sample}": "{sample_id}",
    }
    for ours, theirs in names.items():
        template = template.replace(ours, theirs)
    return template


def test_matrix_covers_every_v1_route() -> None:
    app = create_app(Settings(admin_key="unused"))
    served = {
        (method.upper(), path)
        for path, operations in app.openapi()["paths"].items()
        if path.startswith("/v1")
        for method in operations
    }
    assert {(r.method, _fastapi_template(r.template)) for r in ROUTES} == served


async def test_auth_matrix(api: ApiHarness) -> None:
    project_a = await api.project("a")
    project_b = await api.project("b")
    full_a = api.auth(await api.key(project_a, *ALL_SCOPES))
    full_b = api.auth(await api.key(project_b, *ALL_SCOPES))
    run = (await api.client.post("/v1/runs", json={"model": "m"}, headers=full_a)).json()["run_id"]
    seeded = await seed_search(api.store, project_a, run)
    await mark_dataset_ready(api.store, project_a, run, 0, revisions=0)
    trace = (
        await api.client.post("/v1/traces", json={"format": "openai", "traces": [TRACE]}, headers=full_a)
    ).json()["trace_ids"][0]
    dataset = (
        await api.client.post(
            "/v1/datasets", json={"name": "seeded", "query": {"sources": ["runs"]}}, headers=full_a
        )
    ).json()["dataset_id"]
    await seed_critiqued(api, project_a, seeded.pair_id, trace)
    victim_key = (
        await api.client.post(f"/v1/projects/{project_a}/keys", json={"scopes": ["read"]}, headers=full_a)
    ).json()["key_id"]
    ids = {
        "{project}": project_a,
        "{key_id}": victim_key,
        "{run}": run,
        "{tree}": seeded.tree_id,
        "{trace}": trace,
        "{iteration}": "0",
        "{dataset}": dataset,
        "{pair}": seeded.pair_id,
        "{sample}": seeded.good_ids[0],
    }
    a_ids = {project_a, run, seeded.tree_id, trace, victim_key, dataset, seeded.pair_id, seeded.good_ids[0]}

    async def call(route: Route, headers: dict[str, str]) -> Any:
        path, body = route.template, json.dumps(route.body)
        for placeholder, value in ids.items():
            path, body = path.replace(placeholder, value), body.replace(placeholder, value)
        return await api.client.request(
            route.method, path, json=json.loads(body), params=route.params, headers=headers
        )

    for route in ROUTES:
        where = f"{route.method} {route.template}"
        no_key = await call(route, {})
        assert no_key.status_code == 401, where
        assert no_key.json()["error"] == "unauthorized" and no_key.headers["www-authenticate"] == "Bearer"
        for wrong in ("agr_0123456789ab_" + "B" * 43, "garbage", "Bearer"):
            assert (await call(route, api.auth(wrong))).status_code == 401, (where, wrong)
        lacking = [s for s in ALL_SCOPES if s != route.scope and s != "admin"]
        if route.scope == "admin":
            lacking = ["read", "ingest", "run"]
        lacking_key = api.auth(await api.key(project_a, *lacking))
        forbidden = await call(route, lacking_key)
        assert forbidden.status_code == 403, (where, forbidden.text)
        assert forbidden.json()["error"] == "forbidden"

        other = await call(route, full_b)
        if route.isolation == "404":
            assert other.status_code == 404, (where, other.text)
            assert other.json()["error"] == "not_found"
        elif route.isolation == "list":
            assert other.status_code == 200, where
            assert not any(identifier in other.text for identifier in a_ids), where
        else:  # creates in the caller's own project, or is refused to project keys
            assert other.status_code in (200, 201, 202, 403), where
            assert not any(identifier in other.text for identifier in a_ids), where
        # and the owner gets through
        owner = await call(
            route, full_a if route.template != "/v1/projects" or route.method != "POST" else api.admin
        )
        assert owner.status_code < 300 or owner.status_code in route.owner_also, (where, owner.text)
