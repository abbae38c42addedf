"""``agentr env check`` on the built-in ScienceWorld (Java 17): every check passes, cloning is
reported as skipped (the search replays), not failed."""

from __future__ import annotations

import shutil

import pytest

from core.envs.contract import check_env
from core.envs.registry import open_env

pytestmark = [
    pytest.mark.java,
    pytest.mark.skipif(shutil.which("java") is None, reason="ScienceWorld needs Java 17 (CI installs it)"),
]


async def test_sciworld_passes_the_env_contract() -> None:
    checks = {c.name: c for c in await check_env(lambda: open_env("sciworld"))}
    failed = {name: c.detail for name, c in checks.items() if c.status == "fail"}
    assert not failed, failed
    assert checks["clone independence"].status == "skip"
    assert "clone() returns None" in checks["clone independence"].detail
    assert all(
        checks[name].status == "pass" for name in ("reset determinism", "step results", "unknown task")
    )
