"""The services e2e fixtures (``tests/e2e/services.py``): ``deployment`` (every service as its own
process on the real PostgreSQL and Redis, a project key bootstrapped) and ``run_config`` (the
``agentr run --quick`` configuration with its warm-started tiny model, 1 iteration with training
through the Celery trainer and a small evaluation). A test module may define its own ``deployment``
(test_ui_browser.py does: no trainer)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import ApiClient, ServiceGroup
from tests.e2e.services import deploy, quick_run_config


@pytest.fixture(scope="session")
def run_config(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return quick_run_config(tmp_path_factory.getbasetemp() / "agentr-quick-home")


@pytest.fixture
def deployment(
    pg_url: str, redis_url: str, redis_prefix: str, tmp_path: Path
) -> Iterator[tuple[ServiceGroup, ApiClient]]:
    with deploy(pg_url, redis_url, redis_prefix, tmp_path) as deployed:
        yield deployed
