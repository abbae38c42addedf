"""Property-based run over /openapi.json (schemathesis): no 5xx, and every response conforms.

Schemathesis generates requests for every operation from the app's own OpenAPI document, valid and
invalid, sends them with a key that holds every scope (so requests reach the handlers, not just
the auth guard), and checks that no response is a server error and that status code, content type
and body all match what the document declares. /v1/events is left out: it is an endless stream by
design (its behaviour is covered in test_api_data.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.python.asgi import shutdown_lifespans
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from api.app import create_app
from api.keys import generate_key
from core.domain.events import ApiKeyIssued, Metadata, NewEvent, ProjectCreated, RunRequested
from core.domain.ids import new_id, project_stream, run_stream
from core.store.factory import open_store
from tests.api.conftest import make_settings
from tests.conftest import drop_pg_database, make_pg_database

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


async def _seed(url: str) -> str:
    """Tables, one project with a full-scope key and a run; returns the key."""
    store = await open_store(url, create_tables=True)
    try:
        project_id = new_id()
        issued = generate_key()
        meta = Metadata(producer="test", project_id=project_id)
        await store.append(
            [
                NewEvent(project_stream(project_id), ProjectCreated(project_id, "fuzz"), meta),
                NewEvent(
                    project_stream(project_id),
                    ApiKeyIssued(
                        project_id=project_id,
                        key_id=new_id(),
                        prefix=issued.prefix,
                        salt=issued.salt,
                        key_hash=issued.key_hash,
                        scopes=("read", "ingest", "run", "admin"),
                    ),
                    meta,
                ),
                NewEvent(run_stream("r1"), RunRequested("r1", project_id, {"model": "m"}), meta),
            ]
        )
    finally:
        await store.close()
    return issued.key


@pytest.fixture(scope="module")
def fuzz_target() -> Iterator[tuple[object, str]]:
    name, url = make_pg_database()
    try:
        key = asyncio.run(_seed(url))
        app = create_app(make_settings(url), create_tables=True)
        yield app, key
    finally:
        shutdown_lifespans()
        drop_pg_database(name)


def _operations(schema: object) -> list[object]:
    operations = []
    for result in schema.get_all_operations():  # type: ignore[attr-defined]
        operation = result.ok()
        if operation.path != "/v1/events":
            operations.append(operation)
    return operations


def test_no_server_errors_and_responses_match_the_schema(fuzz_target: tuple[object, str]) -> None:
    app, key = fuzz_target
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = _operations(schema)
    assert len(operations) >= 17
    headers = {"Authorization": f"Bearer {key}"}
    failures: dict[str, str] = {}
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def exercise(case: schemathesis.Case) -> None:
            case.call_and_validate(headers=headers, checks=CHECKS)

        try:
            exercise()
        except Exception as exc:  # collect every operation's failure, then report them all
            failures[f"{operation.method.upper()} {operation.path}"] = str(exc)[:2000]
    requests = app.state.services.metrics.requests  # type: ignore[attr-defined]
    sent = sum(
        sample.value
        for metric in requests.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    )
    statuses = {sample.labels["status"] for metric in requests.collect() for sample in metric.samples}
    print(f"fuzz: {sent:.0f} requests, statuses {sorted(statuses)}")
    assert sent >= 10 * len(operations)
    assert not failures, "\n\n".join(f"{where}:\n{text}" for where, text in failures.items())
