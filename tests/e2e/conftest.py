"""The services e2e fixtures (``tests/e2e/services.py``).

``shared_deployment`` is ONE deployment for the whole tests/e2e package (every service as its own process on
a database and Redis prefix of its own, on the real PostgreSQL and Redis; stopped, and checked to
stop cleanly, once the package's last test is done): starting and stopping the eight processes is
paid once, not per test. ``deployment`` hands each test that deployment with a client of a project
of its own, after checking that every service still runs (a test that broke one says so here, not
in the next test's timeout). ``run_config`` is the ``agentr run --quick`` configuration with its
warm-started tiny model, 1 iteration with training through the Celery trainer and a small
evaluation.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from tests.conftest import pg_database, redis_namespace, redis_test_url
from tests.e2e.services import QUICK_HOME, Deployment, deploy, quick_run_config


@pytest.fixture(scope="session")
def run_config(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return quick_run_config(tmp_path_factory.getbasetemp() / QUICK_HOME)


@pytest.fixture(scope="package")
def shared_deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with (
        pg_database() as pg_url,
        redis_namespace() as prefix,
        deploy(
            pg_url,
            redis_test_url(),
            prefix,
            tmp_path_factory.mktemp("services"),
            model_roots=[tmp_path_factory.getbasetemp() / QUICK_HOME / "models"],  # run_config's model
        ) as deployed,
    ):
        yield deployed


@pytest.fixture
def deployment(shared_deployment: Deployment, request: pytest.FixtureRequest) -> Iterator[Deployment]:
    shared_deployment.group.check_alive()
    client = shared_deployment.new_client(re.sub(r"\W+", "-", request.node.name)[:60])
    try:
        yield replace(shared_deployment, client=client)
    finally:
        client.close()
