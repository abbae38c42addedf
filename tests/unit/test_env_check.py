"""``agentr env check``: the Env contract passes on the built-in TextCraft and on a healthy
python: env, and names each fault planted in a deliberately broken environment; python: URIs and
the plugin adapter refuse what is not an environment with a named reason."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from agentr.cli import app
from core.envs.base import EnvError
from core.envs.contract import check_env
from core.envs.registry import open_env


def _status(checks: list) -> dict[str, tuple[str, str]]:
    return {c.name: (c.status, c.detail) for c in checks}


async def test_textcraft_passes_every_check() -> None:
    checks = await check_env(lambda: open_env("textcraft?distractors=2"))
    assert {c.name: c.status for c in checks} == {
        "open": "pass",
        "task_ids": "pass",
        "reset determinism": "pass",
        "step results": "pass",
        "reward range": "pass",
        "replay determinism": "pass",
        "clone independence": "pass",
        "unknown task": "pass",
        "close": "pass",
    }


async def test_healthy_python_env_passes() -> None:
    checks = _status(await check_env(lambda: open_env("python:tests.broken_env:make"), actions=("go", "go")))
    assert all(status == "pass" for status, _ in checks.values()), checks


@pytest.mark.parametrize(
    ("fault", "check", "reason"),
    [
        ("nondeterministic", "reset determinism", "twice gave different observations"),
        ("reward", "reward range", "reward 5.0, outside [0, 1]"),
        ("shared_clone", "clone independence", "stepping the clone changed the original"),
        ("unknown", "unknown task", "answered an observation ('Task no-such-task-7f3a') instead of raising"),
        ("close", "close", "close() raised RuntimeError: broken: cannot close"),
    ],
)
async def test_each_planted_fault_is_named(fault: str, check: str, reason: str) -> None:
    checks = _status(
        await check_env(
            lambda: open_env(f"python:tests.broken_env:make?faults={fault}"), actions=("go", "go")
        )
    )
    status, detail = checks[check]
    assert status == "fail" and reason in detail, checks
    others = {name: s for name, (s, _) in checks.items() if name != check and s == "fail"}
    assert not others or fault == "nondeterministic", others  # one fault, one failing check


def test_cli_prints_failures_and_exits_1() -> None:
    runner = CliRunner()
    broken = runner.invoke(
        app, ["env", "check", "python:tests.broken_env:make?faults=reward,close", "-a", "go"]
    )
    assert broken.exit_code == 1, broken.output
    assert "FAIL reward range" in broken.output and "FAIL close" in broken.output
    assert "2 check(s) failed: reward range, close" in broken.output
    healthy = runner.invoke(app, ["env", "check", "textcraft?distractors=0"])
    assert healthy.exit_code == 0, healthy.output
    assert "textcraft?distractors=0: the Env contract holds" in healthy.output


def test_python_uris_refuse_what_is_not_an_env() -> None:
    with pytest.raises(EnvError, match="os is a standard-library module"):
        open_env("python:os:getcwd")
    with pytest.raises(
        EnvError, match="torch is an installed package that registers no agentr.envs entry point"
    ):
        open_env("python:torch.hub:load?repo_or_dir=someone/repo")  # API input must not call into torch
    with pytest.raises(EnvError, match="core is agentr itself"):
        open_env("python:core.domain.ids:new_id")
    with pytest.raises(EnvError, match="agentr is agentr itself"):
        open_env("python:agentr.cli:main")
    with pytest.raises(EnvError, match="private names"):
        open_env("python:tests.broken_env:_COUNTER")
    with pytest.raises(EnvError, match="cannot import no_such_pkg"):
        open_env("python:no_such_pkg.mod:make")
    with pytest.raises(EnvError, match="has no attribute 'nope'"):
        open_env("python:tests.broken_env:nope")
    with pytest.raises(EnvError, match="rejected options"):
        open_env("python:tests.broken_env:make?colour=red")
    with pytest.raises(EnvError, match="has no reset"):
        open_env("python:tests.broken_env:not_an_env")
    with pytest.raises(EnvError, match=r"unknown environment 'nothing-here'.*python:package.module:factory"):
        open_env("nothing-here")
