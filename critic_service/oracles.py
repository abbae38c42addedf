"""Owns the critic's environment oracles: the reference first error every critic's t' is scored
against, where the environment has one.

TextCraft has one (``core.envs.textcraft.oracle``: the first step after the divergence that the
environment rejects or that takes no step toward any plan the expert solver accepts), in process
(``textcraft?...``) and over HTTP (``agentgym+http://HOST:PORT/textcraft``): a served task is judged
in process under the goal its first observation names (``goal:NAME``; the path's ``task`` is that
observation), so its index on the server never has to mean the same goal as ours, and replayed under
the server's rules: AgentGym's (their messages, e.g. ``Could not find a valid recipe for
ItemTagWithCount(...)``; ``?rules=agentgym``, AgentGym's own servers, ``agentr env serve
textcraft?rules=agentgym``) or ours (``agentr env serve textcraft``), the URI's ``rules`` first and
the other when the recorded observations contradict it. Other
environments have none: ``oracle_index`` returns None. A path the oracle cannot judge (a task it
does not know, a replay that contradicts the recorded observations) also gives None, logged with the
reason — the oracle scores the critic, it never blocks the pair.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

from core.domain.egress import Egress
from core.domain.trajectory import Trajectory
from core.envs.base import Env, EnvError

log = logging.getLogger(__name__)


def _open_env(uri: str, egress: Egress | None = None) -> Env:
    from core.envs.registry import open_env

    return open_env(uri, egress=egress)


def served_textcraft(env_uri: str) -> bool:
    """Whether ``env_uri`` names a TextCraft server (``agentgym+http(s)://HOST:PORT/.../textcraft``)."""
    if not env_uri.startswith(("agentgym+http://", "agentgym+https://")):
        return False
    return urlsplit(env_uri).path.rstrip("/").rsplit("/", 1)[-1] == "textcraft"


class Oracles:
    """One oracle per environment URI, opened on first use (None cached for environments without)."""

    def __init__(self, env_opener: Callable[[str], Env] = _open_env) -> None:
        self._opener = env_opener
        self._oracles: dict[str, object | None] = {}

    def _oracle(self, env_uri: str) -> object | None:
        if env_uri not in self._oracles:
            oracle: object | None = None
            if env_uri.split("?", 1)[0] == "textcraft":
                from core.envs.textcraft import TextCraftEnv
                from core.envs.textcraft.oracle import TextCraftOracle

                try:
                    env = self._opener(env_uri)
                except EnvError as exc:
                    log.warning("oracle: cannot open %s: %s", env_uri, exc)
                    env = None
                if isinstance(env, TextCraftEnv):
                    oracle = TextCraftOracle(env)
            elif served_textcraft(env_uri):
                from core.envs.textcraft import TextCraftEnv
                from core.envs.textcraft.oracle import TextCraftOracle

                # judged in process by goal, under the server's rules (module docstring)
                named = parse_qs(urlsplit(env_uri).query).get("rules", ["agentgym"])[0]
                order = ("agentgym", "agentr") if named != "agentr" else ("agentr", "agentgym")
                oracle = tuple(TextCraftOracle(TextCraftEnv(rules=rules)) for rules in order)
            self._oracles[env_uri] = oracle
        return self._oracles[env_uri]

    def oracle_index(
        self, env_uri: str | None, task_id: str | None, path: Trajectory, shared_steps: int
    ) -> int | None:
        """The oracle's first error of ``path`` at or after ``shared_steps`` (None: no oracle for
        this environment, no task id, no error found, or a path the oracle cannot judge)."""
        if not env_uri or task_id is None:
            return None
        oracle = self._oracle(env_uri)
        if oracle is None:
            return None
        from core.envs.textcraft.oracle import OracleError, TextCraftOracle

        judges = oracle if isinstance(oracle, tuple) else (oracle,)
        if served_textcraft(env_uri):
            from core.envs.textcraft.remote import oracle_task_id

            by_goal = oracle_task_id(path.task)
            if by_goal is None:
                log.warning("oracle: task %s not judged: its first observation names no goal", task_id)
                return None
            task_id = by_goal
        failures = []
        for judge in judges:
            assert isinstance(judge, TextCraftOracle)
            try:
                return judge.first_error(
                    task_id,
                    [step.action for step in path.steps],
                    start=shared_steps,
                    observations=[step.observation for step in path.steps],
                )
            except OracleError as exc:
                failures.append(f"{judge.env.rules} rules: {exc}")
        log.warning("oracle: task %s not judged: %s", task_id, "; ".join(failures))
        return None
