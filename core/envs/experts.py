"""Owns the environments' own experts as continuation policies: from an environment's CURRENT state
(after a replayed prefix), the actions that finish the task the expert's way. The replay critic
(``critic_service/strategies/replay.py``) continues prefixes with them; deterministic, so one
continuation per prefix (``m = 1``) measures ``V(k)`` exactly.

- TextCraft (``TextCraftEnv``): the solver's plan from the current inventory
  (``core.envs.textcraft.solver.plan_from``: held items are used first, then ``get`` / ``craft``).
- tau2 (``Tau2Env``): the task's own gold actions (``Tau2Env.gold_actions``) not yet taken, in gold
  order, then the closing message: a gold call that the replayed prefix already made (compared in
  canonical form, each prefix call used once) is not made again.

Other environments have no expert here: ``expert_name`` answers None and ``expert_rest`` raises.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.envs.base import Env, EnvError


def expert_name(env: Env) -> str | None:
    """``textcraft-solver`` / ``tau2-gold`` for an environment with an expert here, else None."""
    from core.envs.textcraft import TextCraftEnv

    if isinstance(env, TextCraftEnv) and not env.open_ended:
        return "textcraft-solver"
    try:
        from core.envs.tau2 import Tau2Env
    except ImportError:  # pragma: no cover - tau2 is an optional extra
        return None
    if isinstance(env, Tau2Env):
        return "tau2-gold"
    return None


def canonical_call(env: Env, action: str) -> str:
    """``action`` in the environment's canonical form where it has one (a tau2 tool call as
    ``name({...})`` with sorted JSON; text otherwise, whitespace collapsed)."""
    from core.envs.tau2 import Tau2Env, parse_call

    if isinstance(env, Tau2Env):
        parsed = parse_call(action, env.domain.tool_names)
        if isinstance(parsed, tuple):
            import json

            return f"{parsed[0]}({json.dumps(parsed[1], sort_keys=True, ensure_ascii=False)})"
    return " ".join(action.split())


def expert_rest(env: Env, task_id: str, taken: Sequence[str]) -> list[str]:
    """The expert's actions from ``env``'s current state (reached by ``taken`` from the reset of
    ``task_id``); EnvError for an environment without an expert (module docstring)."""
    from core.envs.textcraft import TextCraftEnv
    from core.envs.textcraft.solver import plan_from

    name = expert_name(env)
    if name is None:
        raise EnvError(f"{getattr(env, 'name', type(env).__name__)}: no expert to continue with")
    if isinstance(env, TextCraftEnv):
        if env.goal is None:
            raise EnvError("textcraft: the expert continues a reset episode, none was started")
        return plan_from(env.goal, env.inventory, env.book)
    from core.envs.tau2 import Tau2Env

    assert isinstance(env, Tau2Env)
    gold = env.gold_actions(task_id)
    calls, closing = gold[:-1], gold[-1]
    done = [canonical_call(env, action) for action in taken]
    rest = []
    for call in calls:
        key = canonical_call(env, call)
        if key in done:
            done.remove(key)
        else:
            rest.append(call)
    return [*rest, closing]
