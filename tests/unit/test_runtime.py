"""Unit tests of the worker runtime's pure parts: logging format, service loading, set-up errors."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from core.runtime.logging import configure_logging
from core.runtime.process import WorkerSetupError, load_service_factory, run_process
from core.runtime.service import HandlerResult, Service
from core.runtime.settings import load_settings
from core.runtime.worker import Worker, consumer_name


@pytest.fixture(autouse=True)
def keep_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_logs_carry_extras_and_exceptions() -> None:
    stream = io.StringIO()
    configure_logging("INFO", json_lines=True, stream=stream)
    logger = logging.getLogger("agentr.test")
    try:
        logger.info("handled %s", "PairFound", extra={"service": "critic", "position": 42})
        try:
            raise ValueError("broken")
        except ValueError:
            logger.exception("failed", extra={"position": 43})
        logger.debug("hidden below INFO")
    finally:
        logging.getLogger().handlers.clear()
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["message"] == "handled PairFound"
    assert (first["service"], first["position"], first["level"]) == ("critic", 42, "INFO")
    assert second["position"] == 43 and "ValueError: broken" in second["exception"]


def test_text_logs_append_extras() -> None:
    stream = io.StringIO()
    configure_logging("DEBUG", json_lines=False, stream=stream)
    try:
        logging.getLogger("agentr.test").warning("retrying", extra={"position": 7})
    finally:
        logging.getLogger().handlers.clear()
    assert "retrying position=7" in stream.getvalue()


def test_unknown_log_level_is_named() -> None:
    with pytest.raises(ValueError, match="unknown log level 'LOUD'"):
        configure_logging("LOUD")


def test_service_factory_errors_name_the_problem() -> None:
    with pytest.raises(WorkerSetupError, match="unknown worker 'bogus'.*relay"):
        load_service_factory("bogus")
    with pytest.raises(WorkerSetupError, match="needs module 'tests.no_such_module'"):
        load_service_factory("tests.no_such_module:build_service")
    with pytest.raises(WorkerSetupError, match="has no callable 'nope'"):
        load_service_factory("core.runtime.settings:nope")
    assert callable(load_service_factory("core.runtime.settings:load_settings"))


async def test_worker_without_redis_url_refuses_before_connecting() -> None:
    settings = load_settings(redis_url=None, database_url="postgresql+asyncpg://nobody@127.0.0.1:1/none")
    with pytest.raises(WorkerSetupError, match="AGENTR_REDIS_URL"):
        await run_process("relay", settings)


async def noop(_event: object) -> HandlerResult:
    return HandlerResult()


def test_worker_rejects_unusable_services() -> None:
    with pytest.raises(ValueError, match="has no handlers"):
        Worker(Service(name="empty", handlers={}), store=None, bus=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="concurrency must be >= 1"):
        Worker(Service(name="zero", handlers={"X": noop}, concurrency=0), store=None, bus=None)  # type: ignore[arg-type]


def test_consumer_names_are_unique_and_valid() -> None:
    first, second = consumer_name("critic"), consumer_name("critic")
    assert first != second and first.startswith("critic-")
    assert all(c.isalnum() or c in "-_." for c in first)
