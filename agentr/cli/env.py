"""Owns the ``agentr env`` command group: serve an environment over the AgentGym protocol (or the
OpenEnv one), check an environment against the Env contract, list its tasks, and show a task (first
observation and, where known, the gold actions)."""

from __future__ import annotations

import logging

import typer

env_app = typer.Typer(
    help="Interactive text environments (TextCraft, ScienceWorld, AgentGym servers, your own: python:...)."
)


@env_app.command("serve")
def serve(
    env: str = typer.Argument(
        ...,
        help="Environment URI, e.g. textcraft, 'textcraft?distractors=2', sciworld, "
        "python:package.module:factory or an agentr.envs entry-point name.",
    ),
    port: int = typer.Option(8001, "--port", "-p", help="TCP port to listen on."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to bind."),
    protocol: str = typer.Option(
        "agentgym",
        "--protocol",
        help="agentgym (AgentGym's /create /reset /step ...) or openenv (openenv-core's /ws, /reset, "
        "/step, /state, /schema; docs/envs.md).",
    ),
    max_sessions: int = typer.Option(8, "--max-sessions", help="openenv: most WebSocket sessions at once."),
) -> None:
    """Serve ENV over the AgentGym HTTP protocol (/create, /reset, /step, /observation, /close), or
    with --protocol openenv to OpenEnv clients."""
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if protocol == "openenv":
        from core.envs.openenv_server import create_openenv_app, websocket_support

        problem = websocket_support()
        if problem:
            raise typer.BadParameter(problem, param_hint="--protocol")
        app = create_openenv_app(env, max_sessions=max_sessions)
    elif protocol == "agentgym":
        from core.envs.server import create_app

        app = create_app(env)
    else:
        raise typer.BadParameter(f"{protocol!r} is not agentgym or openenv", param_hint="--protocol")
    logging.getLogger(__name__).info("serving %s (%s) on http://%s:%d", env, protocol, host, port)
    uvicorn.run(app, host=host, port=port, log_level="warning")


@env_app.command("show")
def show(
    env: str = typer.Argument(..., help="Environment URI (textcraft, sciworld, agentgym+http://...)."),
    task_id: str = typer.Argument(..., help="Task id, e.g. 0."),
    gold: bool = typer.Option(True, help="Also print the gold action sequence when the env has one."),
) -> None:
    """Print the instruction, the first observation of TASK_ID and its gold actions."""
    import asyncio

    from rich.console import Console

    from core.envs.base import EnvError
    from core.envs.registry import open_env

    console = Console()

    async def go() -> None:
        opened = open_env(env)
        try:
            console.rule(f"{opened.name} task {task_id}")
            console.print(opened.instruction, markup=False)
            console.rule("observation")
            console.print(await opened.reset(task_id), markup=False)
            if gold:
                actions: list[str] | None = None
                if opened.name == "textcraft":
                    from core.envs.textcraft import solve

                    actions = solve(opened.goal_of(task_id))  # type: ignore[attr-defined]
                elif hasattr(opened, "gold_actions"):
                    actions = opened.gold_actions(task_id)
                if actions is not None:
                    console.rule("gold actions")
                    for action in actions:
                        console.print(action, markup=False)
        finally:
            await opened.close()

    try:
        asyncio.run(go())
    except EnvError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc


@env_app.command("check")
def check(
    env: str = typer.Argument(..., help="Environment URI (any form `agentr run --env` accepts)."),
    action: list[str] = typer.Option(
        [], "--action", "-a", help="Action to try (repeatable) when the env has no gold actions."
    ),
) -> None:
    """Run the Env contract on ENV (reset determinism, step results, reward range, replay, clone
    independence, unknown task ids, close) and print what passes and what fails; exit 1 on a failure."""
    import asyncio

    from rich.console import Console

    from core.envs.contract import DEFAULT_ACTIONS, check_env
    from core.envs.registry import open_env

    console = Console(soft_wrap=True)
    checks = asyncio.run(check_env(lambda: open_env(env), actions=tuple(action) or DEFAULT_ACTIONS))
    marks = {"pass": "[green]PASS[/green]", "fail": "[red]FAIL[/red]", "skip": "[yellow]SKIP[/yellow]"}
    for item in checks:
        detail = f" - {item.detail}" if item.detail else ""
        console.print(f"{marks[item.status]} {item.name}", end="")
        console.print(detail, markup=False)
    failed = [c.name for c in checks if c.status == "fail"]
    if failed:
        console.print(f"{env}: {len(failed)} check(s) failed: {', '.join(failed)}", markup=False)
        raise typer.Exit(1)
    console.print(f"{env}: the Env contract holds", markup=False)


@env_app.command("tasks")
def tasks(
    env: str = typer.Argument(..., help="Environment URI."),
    split: str = typer.Option("", "--split", help="Named split (default: the env's default tasks)."),
) -> None:
    """List the task ids of ENV (TextCraft: with each goal's name, the `goal:NAME` id)."""
    from rich.console import Console

    from core.envs.base import EnvError
    from core.envs.registry import open_env

    console = Console()
    try:
        opened = open_env(env)
        ids = opened.task_ids(split) if split else opened.task_ids()
    except EnvError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    goal_of = getattr(opened, "goal_of", None)
    for task_id in ids:
        goal = None
        if opened.name == "textcraft" and callable(goal_of):
            try:
                goal = goal_of(task_id)
            except EnvError:  # a served TextCraft knows a goal only once the task was reset
                goal = None
        if goal is not None:
            console.print(f"{task_id}\tgoal:{goal.removeprefix('minecraft:')}", markup=False)
        else:
            console.print(task_id, markup=False)


def register(app: typer.Typer) -> None:
    app.add_typer(env_app, name="env")
