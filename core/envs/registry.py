"""Owns environment URIs: ``open_env(uri)`` turns a URI into a ready Env.

Forms (options are URL query parameters):

- ``textcraft`` — options ``distractors`` (0-10+, default 10), ``split`` (default split of
  ``task_ids()``: train / test / demo / all), ``goal`` (comma-separated goal names, e.g.
  ``goal=stone_pickaxe,oak_planks``: the default tasks become ``goal:stone_pickaxe``, ...),
  ``max_steps`` (default 50), ``rules`` (``agentr``, default, or ``agentgym``: AgentGym's goal ids,
  splits, observations, messages and open-ended episodes, core.envs.textcraft.env), ``listing`` (with
  rules=agentgym: a file naming the recipe files in the order an AgentGym server listed them; default
  this machine's ``os.listdir`` order);
- ``sciworld`` — options ``max_steps`` (default 100), ``simplifications`` (e.g. ``easy``);
- ``agentgym+http://HOST:PORT/NAME`` (or ``agentgym+https://``) — NAME is textcraft, sciworld,
  webshop, alfworld, babyai (their protocol profiles: core.envs.agentgym_profiles) or any other
  name (the generic profile); options ``timeout`` (s), ``retries``, ``backoff`` (s),
  ``action_prefix`` (default empty: bare actions, as AgentGym's clients send), ``max_steps``,
  ``tasks`` (``START-END``, inclusive, the ids of split ``all``/``test`` when the client cannot know
  them; textcraft and sciworld know theirs: ``core.envs.sciworld_tasks`` holds ScienceWorld's), and
  for alfworld ``world_type`` (Text / Embody / Hybrid). The server's base URL is
  everything before ``/NAME``.
- ``openenv+http://HOST:PORT`` (or ``openenv+https``, ``openenv+ws``, ``openenv+wss``) — an
  environment served with openenv-core (its WebSocket ``/ws`` session; core.envs.openenv), options
  ``action_field``, ``observation_field``, ``task_field``, ``tasks``, ``train_tasks``, ``timeout``,
  ``max_steps``, ``reward_min``, ``reward_max``, ``name``;
- ``tau2:DOMAIN`` — a tau2-bench domain (retail, airline, mock) with native tool calls and an
  offline scripted user (core.envs.tau2; needs the ``tau2`` extra); option ``max_steps`` (default 30);
- ``gym:ID`` (or ``gym:package.module:ID``) — a text Gymnasium environment (core.envs.gymnasium_bridge,
  extra ``gym``); options ``tasks``, ``train_tasks`` (seeds, START-END), ``max_steps``, ``reward_min``,
  ``reward_max``;
- ``python:package.module:factory?key=value`` — a Python environment (core.envs.plugin); every
  option is passed to the factory as a string keyword argument;
- ``NAME?key=value`` where NAME is registered in the ``agentr.envs`` entry-point group by an
  installed package — opened like the python: form.

``SCHEMES`` (URI scheme -> opener) and ``BUILTINS`` (built-in name -> opener) are the registry
``open_env`` dispatches through; an entry-point name is looked up last.

A malformed URI, an unknown environment or an unknown / badly typed option raises EnvError naming it.
With ``egress`` (a worker's: ``Settings.egress``, core/domain/egress.py) a remote environment outside
the operator's ``AGENTR_ALLOWED_ENV_URLS`` raises EnvError before anything connects; without it (the
command line) every URI its user types is opened.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import SplitResult, urlsplit

from core.domain.egress import Egress
from core.envs.base import Env, EnvError
from core.envs.uri_options import UriOptions as _Options

if TYPE_CHECKING:
    from core.envs.textcraft.recipes import RecipeBook


def _open_openenv(uri: str, parts: SplitResult) -> Env:
    from core.envs.openenv import open_openenv

    return open_openenv(uri)


def _open_tau2(uri: str, parts: SplitResult) -> Env:
    from core.envs.tau2 import Tau2Env

    options = _Options(uri, parts.query)
    max_steps = int(options.take_number("max_steps", 30))
    options.finish(uri, "max_steps")
    return Tau2Env(parts.path, max_steps=max_steps)


def _open_gym(uri: str, parts: SplitResult) -> Env:
    from core.envs.gymnasium_bridge import open_gym

    return open_gym(uri)


def _open_python(uri: str, parts: SplitResult) -> Env:
    from core.envs.plugin import open_python

    return open_python(uri, parts.path, _Options(uri, parts.query).values)


def _open_textcraft(uri: str, options: _Options) -> Env:
    from core.envs.textcraft import TextCraftEnv

    distractors = int(options.take_number("distractors", 10))
    split = options.take("split", "") or None
    goals = tuple(g.strip() for g in options.take("goal", "").split(",") if g.strip())
    max_steps = int(options.take_number("max_steps", 50))
    rules = options.take("rules", "agentr")
    listing = options.take("listing", "")
    options.finish("textcraft", "distractors, split, goal, max_steps, rules, listing")
    if goals and split:
        raise EnvError(f"environment URI {uri!r}: give either split or goal, not both")
    book = None
    if listing:
        book = _listing_book(uri, listing, rules)
    return TextCraftEnv(
        distractors=distractors, max_steps=max_steps, split=split, goals=goals, rules=rules, book=book
    )


def _open_sciworld(uri: str, options: _Options) -> Env:
    from core.envs.sciworld import SciWorldEnv

    max_steps = int(options.take_number("max_steps", 100))
    simplifications = options.take("simplifications", "")
    options.finish("sciworld", "max_steps, simplifications")
    return SciWorldEnv(max_steps=max_steps, simplifications=simplifications)


SCHEMES: dict[str, Callable[[str, SplitResult], Env]] = {
    "agentgym+": lambda uri, _parts: _open_agentgym(uri),
    "openenv+": _open_openenv,
    "tau2": _open_tau2,
    "gym": _open_gym,
    "python": _open_python,
}
"""URI scheme -> opener: a key ending in ``+`` is a scheme prefix (``agentgym+https``, with a
server), any other an opaque scheme (``tau2:retail``: no ``//host``)."""

BUILTINS: dict[str, Callable[[str, _Options], Env]] = {
    "textcraft": _open_textcraft,
    "sciworld": _open_sciworld,
}
"""Built-in environment name -> opener (with the URI's options)."""
BUILTIN = tuple(BUILTINS)


def _scheme_opener(parts: SplitResult) -> Callable[[str, SplitResult], Env] | None:
    for key, opener in SCHEMES.items():
        if parts.scheme.startswith(key) if key.endswith("+") else parts.scheme == key and not parts.netloc:
            return opener
    return None


def open_env(uri: str, *, egress: Egress | None = None) -> Env:
    """Open the environment that ``uri`` names (see the module docstring)."""
    if not isinstance(uri, str) or not uri.strip():
        raise EnvError(f"malformed environment URI {uri!r}: empty")
    uri = uri.strip()
    refused = egress.env_problem(uri) if egress is not None else None
    if refused is not None:
        raise EnvError(refused)
    parts = urlsplit(uri)
    scheme_opener = _scheme_opener(parts)
    if scheme_opener is not None:
        return scheme_opener(uri, parts)
    if parts.scheme or parts.netloc or parts.fragment:
        raise EnvError(
            f"malformed environment URI {uri!r}: expected textcraft, sciworld, tau2:DOMAIN, "
            "agentgym+http://HOST:PORT/NAME, openenv+http://HOST:PORT, python:package.module:factory or an "
            "agentr.envs entry-point name"
        )
    name = parts.path
    options = _Options(uri, parts.query)
    builtin = BUILTINS.get(name)
    if builtin is not None:
        return builtin(uri, options)
    from core.envs.plugin import entry_point_names, open_entry_point

    plugged = open_entry_point(name, options.values)
    if plugged is not None:
        return plugged
    registered = entry_point_names()
    known = ", ".join(
        [*BUILTIN, *registered, "agentgym+http://...", "openenv+http://...", "python:package.module:factory"]
    )
    raise EnvError(f"unknown environment {name!r} in URI {uri!r} (known: {known})")


def egress_checked(opener: Callable[[str], Env], egress: Egress) -> Callable[[str], Env]:
    """``opener`` behind ``egress``: a remote environment outside it is refused (EnvError) before
    ``opener`` runs. A worker wraps whatever opener it was given, so no opener can skip the check."""

    def checked(uri: str) -> Env:
        refused = egress.env_problem(uri) if isinstance(uri, str) else None
        if refused is not None:
            raise EnvError(refused)
        return opener(uri)

    return checked


def _listing_book(uri: str, listing: str, rules: str) -> RecipeBook:
    """The recipe book in the order a listing file names (one recipe file name per line)."""
    from pathlib import Path

    from core.envs.textcraft.recipes import agentgym_book

    if rules != "agentgym":
        raise EnvError(f"environment URI {uri!r}: listing= orders goals as AgentGym does; add rules=agentgym")
    try:
        names = [
            line.strip() for line in Path(listing).read_text(encoding="utf-8").splitlines() if line.strip()
        ]
    except OSError as exc:
        raise EnvError(f"environment URI {uri!r}: cannot read the recipe listing {listing!r}: {exc}") from exc
    return agentgym_book(names)


def _open_agentgym(uri: str) -> Env:
    from core.envs.agentgym import GENERIC_INSTRUCTION, AgentGymEnv
    from core.envs.agentgym_profiles import WORLD_TYPES, profile_for

    parts = urlsplit(uri)
    transport = parts.scheme.removeprefix("agentgym+")
    if transport not in ("http", "https"):
        raise EnvError(
            f"malformed environment URI {uri!r}: transport must be agentgym+http or agentgym+https"
        )
    path = parts.path.rstrip("/")
    if not parts.netloc or "/" not in path or not path.rsplit("/", 1)[1]:
        raise EnvError(f"malformed environment URI {uri!r}: expected agentgym+http://HOST:PORT/NAME")
    try:
        parts.port  # noqa: B018 - validates the port
    except ValueError as exc:
        raise EnvError(f"malformed environment URI {uri!r}: {exc}") from exc
    prefix, name = path.rsplit("/", 1)
    options = _Options(uri, parts.query)
    timeout = float(options.take_number("timeout", 60.0, float))
    retries = int(options.take_number("retries", 3))
    backoff = float(options.take_number("backoff", 0.25, float))
    action_prefix = options.take("action_prefix", "")
    tasks = options.take("tasks", "")
    extra: dict[str, str] = {}
    allowed = "timeout, retries, backoff, action_prefix, max_steps, tasks"
    if name == "alfworld":
        world_type = options.take("world_type", "Text")
        if world_type not in WORLD_TYPES:
            raise EnvError(
                f"environment URI {uri!r}: world_type={world_type!r} must be one of {', '.join(WORLD_TYPES)}"
            )
        extra["world_type"] = world_type
        allowed += ", world_type"
    instruction = GENERIC_INSTRUCTION
    splits: dict[str, list[str]] = {}
    max_steps = 50
    if name == "textcraft":
        from core.envs.textcraft import INSTRUCTION, recipe_book, split_task_ids
        from core.envs.textcraft.recipes import agentgym_book

        rules = options.take("rules", "agentr")  # agentgym: a server in AgentGym's order, their splits
        if rules not in ("agentr", "agentgym"):
            raise EnvError(f"environment URI {uri!r}: rules={rules!r} must be agentr or agentgym")
        allowed += ", rules"
        instruction = INSTRUCTION
        book = agentgym_book() if rules == "agentgym" else recipe_book()
        splits = {s: split_task_ids(book, s) for s in ("train", "test", "demo", "all")}
    elif name == "sciworld":
        from core.envs.sciworld import INSTRUCTION as SCIWORLD_INSTRUCTION
        from core.envs.sciworld_tasks import sciworld_task_ids

        instruction = SCIWORLD_INSTRUCTION
        max_steps = 100
        splits = {s: sciworld_task_ids(s) for s in ("train", "dev", "test", "all")}
    max_steps = int(options.take_number("max_steps", max_steps))
    if tasks:
        try:
            start, end = (int(x) for x in tasks.split("-", 1))
        except ValueError as exc:
            raise EnvError(f"environment URI {uri!r}: option tasks={tasks!r} must be START-END") from exc
        ids = [str(i) for i in range(start, end + 1)]
        splits = {**splits, "all": ids, "test": ids}
    options.finish(name, allowed)
    base_url = f"{transport}://{parts.netloc}{prefix}"
    session: type[AgentGymEnv] = AgentGymEnv
    if name == "textcraft":  # the expert and the oracle, from the goal in the first observation
        from core.envs.textcraft.remote import RemoteTextCraftEnv

        session = RemoteTextCraftEnv
    return session(
        base_url,
        name,
        instruction=instruction,
        max_steps=max_steps,
        splits=splits,
        timeout=timeout,
        retries=retries,
        backoff=backoff,
        action_prefix=action_prefix,
        profile=profile_for(name),
        options=extra,
    )
