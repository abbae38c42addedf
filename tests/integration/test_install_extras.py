"""The documented install commands of the ``tau2`` and ``openenv`` extras work in a FRESH virtualenv
(``python -m venv``, no system site-packages, pip reading this machine's package index): agentr is
installed from this checkout with the extra, then the one package that comes without its
dependencies (pyproject.toml says why), and a real episode runs there. One test per extra; each takes
a few minutes (slow, runs in CI)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _fresh_venv(where: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=300)
    python = where / "bin" / "python"
    done = subprocess.run(
        [str(python), "-c", "import sys; print(sys.prefix != sys.base_prefix); import pandas"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0 and "No module named 'pandas'" in done.stderr  # nothing leaks in
    return python


def _pip(python: Path, *args: str) -> None:
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", *args],
        capture_output=True,
        text=True,
        timeout=1200,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def _run(python: Path, cwd: Path, script: str) -> str:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PYTHONPATH", None)  # the installed agentr, never this checkout
    done = subprocess.run(
        [str(python), "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def _documented(extra: str) -> tuple[str, str]:
    """The two halves of the install command pyproject.toml documents for ``extra``."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    line = next(
        line.strip("# \n")
        for line in text.splitlines()
        if line.startswith("#   pip install") and f'"agentr[{extra}]"' in line
    )
    first, second = line.split(" && ")
    assert first == f'pip install "agentr[{extra}]"'
    return first, second.removeprefix("pip install ")


def test_tau2_extra_in_a_fresh_venv(tmp_path: Path) -> None:
    from core.envs.tau2 import INSTALL

    _first, rest = _documented("tau2")
    assert f'pip install "agentr[tau2]" && pip install {rest}' == INSTALL
    python = _fresh_venv(tmp_path / "venv")
    _pip(python, f"{ROOT}[tau2]")
    # before the second half: opening a tau2 env names the install command, not a bare import error
    out = _run(
        python,
        tmp_path,
        """
        from core.envs.base import EnvError
        from core.envs.registry import open_env
        try:
            open_env("tau2:mock")
        except EnvError as exc:
            print(exc)
        """,
    )
    assert INSTALL in out
    _pip(python, *rest.replace('"', "").split())
    out = _run(
        python,
        tmp_path,
        """
        import asyncio
        from core.envs.registry import open_env

        async def main():
            for domain in ("mock", "retail"):
                env = open_env(domain.join(("tau2:", "")))
                task = env.task_ids("all")[0]
                await env.reset(task)
                for action in env.gold_actions(task):
                    result = await env.step(action)
                print(domain, result.done, result.reward)

        asyncio.run(main())
        """,
    )
    assert "mock True 1.0" in out and "retail True 1.0" in out


def test_openenv_extra_in_a_fresh_venv(tmp_path: Path) -> None:
    _first, rest = _documented("openenv")
    python = _fresh_venv(tmp_path / "venv")
    _pip(python, f"{ROOT}[openenv]")
    _pip(python, *rest.replace('"', "").split())
    # openenv-core's own client and our client, against `agentr env serve --protocol openenv` there
    out = _run(
        python,
        tmp_path,
        """
        import asyncio, socket, subprocess, sys, time
        import httpx
        from openenv.core.generic_client import GenericEnvClient
        from core.envs.registry import open_env
        from core.envs.textcraft import solve

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cli = [sys.executable, "-c", "from agentr.cli import main; main()"]
        served = subprocess.Popen([*cli, "env", "serve", "textcraft?distractors=0", "--protocol", "openenv",
                                   "--port", str(port)])
        try:
            for _ in range(600):
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.2)

            async def main():
                plan = solve("stick")
                async with GenericEnvClient(base_url=f"http://127.0.0.1:{port}") as client:
                    await client.reset(task_id="goal:stick")
                    for action in plan:
                        theirs = await client.step({"action": action})
                print("theirs", theirs.done, theirs.reward)
                env = open_env(f"openenv+http://127.0.0.1:{port}?task_field=task_id")
                await env.reset("goal:stick")
                for action in plan:
                    ours = await env.step(action)
                await env.close()
                print("ours", ours.done, ours.reward)

            asyncio.run(main())
        finally:
            served.terminate()
            served.wait(30)
        """,
    )
    assert "theirs True 1.0" in out and "ours True 1.0" in out
