"""Owns the data the UI browser tests and ``bench/ui.py`` seed: a project with a key, a run, a large
search tree and critiqued pairs, appended to the event store as the services write them.

``project_events`` builds ProjectCreated + ApiKeyIssued (the key's secret is returned) and a run
(RunRequested + IterationStarted, alpha 0.5), which ``seed_project`` appends. ``tree_events``
builds a tree of exactly ``size`` nodes the way MCTS grows one (the nodes the descents went through
are expanded, 2-4 candidates each, so it is deep along the visited paths and bushy with unvisited
candidates), its TreeStarted / NodesExpanded / RolloutFinished / TreeCompleted events, and one
bad/good pair of its leaves (PairFound + the critic's FirstErrorMarked). ``pair_events`` builds a
critiqued pair outside any tree with the verdicts a test asks for (disagreeing with the oracle,
fallen back, uncertain, low margin).
Nothing here runs a worker: the events are what the search and critic workers append, and
``splice_as_worker`` does the splice worker's part for one pair on demand (its real handlers: the
first splice of a critiqued pair, the re-splice of a reviewer's correction).
``serve_app`` serves the real API app on such a database (no workers) for a browser to open;
``watched_page`` opens a page in it that collects its uncaught errors.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from core.domain import events as ev
from core.domain.events import Metadata, NewEvent
from core.domain.ids import new_id, pair_stream, project_stream, run_stream, tree_stream
from core.domain.trajectory import Step, Trajectory
from core.store.ports import EventStore

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

CHROMIUM = "/usr/bin/chromium"
"""Debian's chromium, the browser the UI tests and bench/ui.py drive (through Playwright)."""
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
]
T = TypeVar("T")


def require_chromium() -> None:
    """Skip the calling test module, with the reason, where Debian's chromium is missing (.ci/test
    installs it where apt-get runs as root; .ci/run requires it, so CI never skips these tests)."""
    if not Path(CHROMIUM).is_file():
        pytest.skip(
            f"Debian's chromium is not installed at {CHROMIUM} (apt-get install chromium, as root; "
            ".ci/test does so where it can)",
            allow_module_level=True,
        )


WORDS = (
    "oak", "birch", "planks", "stick", "crafting", "table", "iron", "ingot", "furnace", "coal",
    "torch", "chest", "door", "ladder", "fence", "boat", "bowl", "wool", "bed", "sign",
)  # fmt: skip


@dataclass
class SeededProject:
    project_id: str
    key: str
    run_id: str


@dataclass
class SyntheticTree:
    tree_id: str
    root_id: str
    records: list[ev.NodeRecord]
    events: list[NewEvent]
    pair_id: str
    pair_nodes: list[str]  # the divergence node and both paths below it
    bad_leaf_id: str
    good_leaf_id: str
    divergence_node_id: str
    needle: str  # an observation text exactly one node carries (for search)
    needle_node_id: str
    parents: dict[str, str | None] = field(default_factory=dict)


def project_events(
    name: str, scopes: tuple[str, ...] = ("read", "review"), model: str = "tiny"
) -> tuple[SeededProject, list[NewEvent]]:
    """A project, a key of ``scopes`` (its secret in the SeededProject) and a run of ``model`` at its
    first iteration (alpha 0.5): the events the API and the run's workers append for them."""
    from api.keys import generate_key

    project_id, run_id = new_id(), new_id()
    issued = generate_key()
    meta = Metadata(producer="test", project_id=project_id)
    config = {"model": model, "env": "textcraft", "iterations": 1}
    events = [
        NewEvent(project_stream(project_id), ev.ProjectCreated(project_id, name), meta),
        NewEvent(
            project_stream(project_id),
            ev.ApiKeyIssued(project_id, new_id(), issued.prefix, issued.salt, issued.key_hash, scopes),
            meta,
        ),
        NewEvent(run_stream(run_id), ev.RunRequested(run_id, project_id, config), meta),
        NewEvent(run_stream(run_id), ev.IterationStarted(run_id, 0, model, 0.5, ()), meta),
    ]
    return SeededProject(project_id, issued.key, run_id), events


async def seed_project(
    store: EventStore, name: str, scopes: tuple[str, ...] = ("read", "review")
) -> SeededProject:
    project, events = project_events(name, scopes)
    await store.append(events)
    return project


def watched_page(browser: Browser, width: int = 1400, height: int = 900) -> tuple[Page, list[str]]:
    """A new page of ``width`` x ``height`` and the list its uncaught page errors are collected in."""
    page = browser.new_page(viewport={"width": width, "height": height})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    return page, errors


def _action(rng: random.Random) -> str:
    verb = rng.choice(("get", "craft", "inventory", "look"))
    if verb in ("inventory", "look"):
        return verb
    return f"{verb} {rng.randint(1, 4)} {rng.choice(WORDS)} {rng.choice(WORDS)}"


def _trajectory(path: list[ev.NodeRecord], reward: float) -> Trajectory:
    steps = tuple(Step(n.thought, n.action, n.observation, n.reward, n.done, n.valid) for n in path[1:])
    return Trajectory(path[0].observation, "Answer with Thought: ... Action: ...", steps, reward)


def tree_events(project_id: str, run_id: str | None, size: int, seed: int = 0) -> SyntheticTree:
    """A tree of exactly ``size`` nodes (at least 30), its events and one pair of its leaves (the
    first seed from ``seed`` on whose tree has a good and a bad terminal leaf)."""
    for attempt in range(seed, seed + 200):
        built = _tree(project_id, run_id, size, attempt)
        if built is not None:
            return built
    raise ValueError(f"no seed in {seed}..{seed + 199} grows a {size}-node tree with a good and a bad leaf")


def _tree(project_id: str, run_id: str | None, size: int, seed: int) -> SyntheticTree | None:
    rng = random.Random(seed)
    tree_id, root_id = new_id(), new_id()
    root = ev.NodeRecord(root_id, None, 0, "", "", "Goal: craft a crafting table and a chest.")
    records = [root]
    by_id = {root_id: root}
    children: dict[str, list[str]] = {root_id: []}
    leaves_done: list[str] = []
    rollouts: list[tuple[str, float]] = []
    while len(records) < size:
        # one descent: follow a random expanded child while there is one, expand where it stops
        node = root
        while children[node.node_id] and rng.random() < 0.97:
            kids = children[node.node_id]  # UCT-like: mostly down the first (best) candidate
            node = by_id[kids[0] if rng.random() < 0.55 else rng.choice(kids)]
        if node.done or node.depth >= 14:
            continue
        for _ in range(min(rng.randint(2, 4), size - len(records))):
            depth = node.depth + 1
            done = depth >= 3 and rng.random() < 0.12
            reward = 1.0 if done and rng.random() < 0.4 else 0.0
            child = ev.NodeRecord(
                new_id(),
                node.node_id,
                depth,
                _action(rng),
                f"I think step {depth} moves me on.",
                f"Got {rng.randint(1, 9)} {rng.choice(WORDS)} (node {len(records)})",
                reward,
                done,
                rng.random() > 0.05,
            )
            records.append(child)
            by_id[child.node_id] = child
            children[child.node_id] = []
            children[node.node_id].append(child.node_id)
            if done:
                leaves_done.append(child.node_id)
        if children[node.node_id]:
            leaf = by_id[rng.choice(children[node.node_id])]
            rollouts.append((leaf.node_id, leaf.reward if leaf.done else rng.choice((0.0, 0.0, 1.0))))
    # one observation that no other node has (what a search for it must find)
    index = len(records) // 2
    needle_node = records[index]
    needle = f"a shimmering needle {seed}"
    records[index] = by_id[needle_node.node_id] = ev.NodeRecord(
        needle_node.node_id, needle_node.parent_id, needle_node.depth, needle_node.action,
        needle_node.thought, f"You find {needle} here.", needle_node.reward, needle_node.done,
        needle_node.valid,
    )  # fmt: skip

    def path_of(node_id: str) -> list[ev.NodeRecord]:
        out = []
        current: ev.NodeRecord | None = by_id[node_id]
        while current is not None:
            out.append(current)
            current = by_id[current.parent_id] if current.parent_id else None
        return out[::-1]

    # a pair: two done leaves of different reward under a common ancestor, as deep as possible
    good = [n for n in leaves_done if by_id[n].reward >= 1.0]
    bad = [n for n in leaves_done if by_id[n].reward < 1.0]
    if not good or not bad:
        return None
    best: tuple[int, str, str, str] | None = None
    for g in good[:40]:
        g_path = path_of(g)
        for b in bad[:80]:
            b_path = path_of(b)
            shared = 0
            while shared < min(len(g_path), len(b_path)) and g_path[shared] is b_path[shared]:
                shared += 1
            lca = g_path[shared - 1]
            if best is None or lca.depth > best[0]:
                best = (lca.depth, lca.node_id, b, g)
    assert best is not None
    depth, divergence, bad_leaf, good_leaf = best
    bad_path, good_path = path_of(bad_leaf), path_of(good_leaf)
    pair_id = new_id()
    pair = ev.PairFound(
        pair_id, "search", "craft-table", _trajectory(bad_path, 0.0), _trajectory(good_path, 1.0), depth,
        run_id=run_id, iteration=0, tree_id=tree_id, bad_leaf_id=bad_leaf, good_leaf_id=good_leaf,
        divergence_node_id=divergence, env_uri="textcraft", task_id="craft-table",
    )  # fmt: skip
    marked = ev.FirstErrorMarked(
        pair_id,
        "model",
        len(bad_path) - 2,
        _verdicts(depth, len(bad_path) - 2, "bad"),
        oracle_index=len(bad_path) - 2,
    )
    meta = Metadata(producer="search", project_id=project_id)
    stream = tree_stream(tree_id)
    started = ev.TreeStarted(
        tree_id, run_id, 0, "textcraft", "craft-table", "inst", "task", "tiny", {}, root_id
    )
    events = [NewEvent(stream, started, meta)]
    for start in range(0, len(records), 200):  # the search worker appends a batch per expansion round
        events.append(NewEvent(stream, ev.NodesExpanded(tree_id, tuple(records[start : start + 200])), meta))
    for i, (leaf, reward) in enumerate(rollouts):
        events.append(NewEvent(stream, ev.RolloutFinished(tree_id, i, leaf, reward, "done"), meta))
    good_leaves = sum(1 for _, reward in rollouts if reward >= 0.5)
    completed = ev.TreeCompleted(
        tree_id, run_id, 0, len(records), len(rollouts), max(r for _, r in rollouts), good_leaves,
        len(rollouts) - good_leaves, 1,
    )  # fmt: skip
    events.append(NewEvent(stream, completed, meta))
    critic_meta = Metadata(producer="critic", project_id=project_id)
    events += [
        NewEvent(pair_stream(pair_id), pair, meta),
        NewEvent(pair_stream(pair_id), marked, critic_meta),
    ]
    pair_nodes = [n.node_id for n in bad_path + good_path if n.depth >= depth]
    return SyntheticTree(
        tree_id, root_id, records, events, pair_id, sorted(set(pair_nodes)), bad_leaf, good_leaf,
        divergence, needle, needle_node.node_id, {n.node_id: n.parent_id for n in records},
    )  # fmt: skip


SCORES = {
    "good": {"good": -0.1, "bad": -3.0, "uncertain": -4.0},
    "bad": {"good": -3.0, "bad": -0.1, "uncertain": -4.0},
    "uncertain": {"good": -3.0, "bad": -3.0, "uncertain": -0.2},
}
"""Label scores (mean log-probability per label token) with a wide margin, per chosen label."""


def _verdicts(
    first: int, last: int, label: str, scores: dict[str, float] | None = None
) -> tuple[ev.StepVerdict, ...]:
    """Verdicts for steps ``first..last``: "good" before the last, ``label`` on it (with ``scores``)."""
    out = []
    for i in range(first, last + 1):
        chosen = label if i == last else "good"
        given = scores if scores is not None and i == last else SCORES[chosen]
        out.append(ev.StepVerdict(i, chosen, dict(given)))  # type: ignore[arg-type]
    return tuple(out)


def pair_events(
    project_id: str,
    run_id: str | None,
    task_key: str,
    *,
    critic_index: int,
    oracle_index: int | None,
    fallback: bool = False,
    uncertain: bool = False,
    margin: float | None = None,
    iteration: int = 0,
) -> tuple[str, list[NewEvent]]:
    """A critiqued pair (5 bad steps after 1 shared step) with the critic verdicts asked for."""
    pair_id = new_id()
    bad_actions = ("look", "get 1 oak", "craft 2 stick", "craft 9 boat", "look", "craft 1 door")
    bad = Trajectory(f"Goal: {task_key}.", "inst", tuple(Step("t", a, f"obs {a}") for a in bad_actions), 0.0)
    good_actions = ("look", "get 2 oak", "craft 1 door")
    good = Trajectory(
        f"Goal: {task_key}.", "inst", tuple(Step("t", a, f"obs {a}") for a in good_actions), 1.0
    )
    pair = ev.PairFound(pair_id, "search", task_key, bad, good, 1, run_id=run_id, iteration=iteration)
    label = "uncertain" if uncertain else ("good" if fallback else "bad")
    scores = None
    if margin is not None:
        scores = {"good": -1.0, "bad": -1.0 + margin, "uncertain": -5.0}
    verdicts = _verdicts(1, critic_index, label, scores)
    marked = ev.FirstErrorMarked(
        pair_id, "model", critic_index if not fallback else len(bad.steps) - 1, verdicts,
        fallback=fallback, oracle_index=oracle_index,
    )  # fmt: skip
    meta = Metadata(producer="search", project_id=project_id)
    critic_meta = Metadata(producer="critic", project_id=project_id)
    return pair_id, [
        NewEvent(pair_stream(pair_id), pair, meta),
        NewEvent(pair_stream(pair_id), marked, critic_meta),
    ]


def correction_event(project_id: str, pair_id: str, old: int, new: int) -> NewEvent:
    """A reviewer's correction as the review route appends it (no splice follows here)."""
    corrected = ev.FirstErrorCorrected(
        pair_id, new_id(), "agr_test (reviewer)", "2026-12-03T09:00:00+00:00", old, new, "", None
    )
    return NewEvent(pair_stream(pair_id), corrected, Metadata(producer="api", project_id=project_id))


@contextmanager
def serve_app(database_url: str) -> Iterator[str]:
    """The real API app (``api.app.create_app``) on ``database_url`` served by uvicorn on a free port
    in a thread of this process; yields its base URL. No workers: what it shows is what was seeded."""
    import uvicorn

    from api.app import create_app
    from core.runtime.settings import Settings
    from tests.support import free_port

    settings = Settings(
        database_url=database_url, redis_url=None, log_level="WARNING", auth_failures_per_min=0
    )
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings), host="127.0.0.1", port=port, log_level="warning", access_log=False
        )
    )
    thread = threading.Thread(target=server.run, name="ui-test-api", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the API server did not start within 60 s")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


def append_events(database_url: str, batches: list[list[NewEvent]]) -> None:
    """Append each batch in its own transaction (as the workers do), from a store of its own."""
    from core.store.factory import open_store

    async def go() -> None:
        store = await open_store(database_url, create_tables=True)
        try:
            for batch in batches:
                await store.append(batch)
        finally:
            await store.close()

    _in_thread(go)


def splice_as_worker(database_url: str, pair_id: str) -> list[Any]:
    """Do the splice worker's job for the last event of the pair's stream, through its real handlers,
    and append what they return (as the worker does): a FirstErrorMarked is spliced
    (``SpliceHandlers.on_first_error``), a FirstErrorCorrected re-spliced
    (``CorrectionHandlers.on_correction``), a ReviewUndone restores the earlier sample
    (``CorrectionHandlers.on_undo``). The pair must have no environment to replay in (no
    ``env_uri``): nothing here opens one. Returns the appended events."""
    from core.runtime.settings import Settings
    from core.store.factory import open_store
    from splice_service.corrections import CorrectionHandlers
    from splice_service.splicer import SpliceHandlers

    def no_env(uri: str) -> Any:
        raise AssertionError(f"the UI tests replay in no environment (asked for {uri})")

    async def go() -> list[Any]:
        store = await open_store(database_url, create_tables=True)
        try:
            settings = Settings(database_url=database_url, redis_url=None)
            splicer = SpliceHandlers(settings, store, env_opener=no_env)
            recorded = (await store.read_stream(pair_stream(pair_id)))[-1]
            if recorded.event_type == "FirstErrorMarked":
                result = await splicer.on_first_error(recorded)
            elif recorded.event_type == "FirstErrorCorrected":
                result = await CorrectionHandlers(splicer).on_correction(recorded)
            elif recorded.event_type == "ReviewUndone":
                result = await CorrectionHandlers(splicer).on_undo(recorded)
            else:
                raise AssertionError(f"pair {pair_id} ends with {recorded.event_type}: nothing to splice")
            await store.append(list(result.events))
            return [e.event for e in result.events]
        finally:
            await store.close()

    return _in_thread(go)


def _in_thread(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine in a thread of its own (Playwright's sync API holds this thread's loop)."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(make())).result()


def seed(database_url: str, name: str, scopes: tuple[str, ...] = ("read", "review")) -> SeededProject:
    """A project with a key and a run in a fresh store (tables created)."""
    from core.store.factory import open_store

    async def go() -> SeededProject:
        store = await open_store(database_url, create_tables=True)
        try:
            return await seed_project(store, name, scopes)
        finally:
            await store.close()

    return _in_thread(go)
