"""Owns the search worker's composition root: ``build_service(settings, store) -> Service``.

The service handles ``SearchRequested``: it opens the environment from its URI and the policy from
its model ref (one policy per ref, kept open by ``core.llm.policy_cache.PolicyCache``: at most
``settings.max_open_models`` refs, least recently used closed first; while trees search with it,
wrapped in one ``BatchingPolicy`` so that the trees searched at once -
``settings.search_concurrency`` - share batched policy calls), runs ``TreeSearch``, appends
progress events to the tree's stream as it goes (expected stream versions guard against two
workers on one tree), and returns ``TreeCompleted``, ``GoodTrajectoryFound`` and ``PairFound`` for
the worker to append with its tracking row.

A redelivered request resumes from the tree's stored events (nothing is redone or written twice);
one whose tree already completed or failed returns nothing. A search whose run is cancelled stops
at its next expansion (the run's stream is read for ``RunCancelled`` at most once a second) and
ends in ``SearchFailed`` with the reason ``run cancelled: ...``; the rollout in progress is dropped.
An unknown environment, task, bad search
config, a model ref that cannot be opened or a task too long for the model's context even with every
earlier step omitted ends in ``SearchFailed`` with the reason, and the worker carries on. Prompts are
fitted to the model's context by the engine (older steps dropped whole). Model refs: anything
``core.llm.registry.open_policy`` accepts, plus ``noisy-expert[?mistake=..]`` (the TextCraft expert
with mistakes, for tests and demos).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Sequence

from core.domain.egress import Egress
from core.domain.events import (
    Metadata,
    NewEvent,
    RecordedEvent,
    RunCancelled,
    SearchFailed,
    SearchRequested,
    TreeCompleted,
    caused_by,
)
from core.domain.ids import derived_id, run_stream, tree_stream
from core.domain.mcts import SearchConfigError
from core.envs.base import Env, EnvError, UnknownTask
from core.envs.registry import egress_checked as checked_env_opener
from core.llm.context import ContextOverflow
from core.llm.policy_cache import PolicyCache, service_cache
from core.llm.ports import Policy, PolicyError
from core.llm.registry import egress_checked as checked_policy_opener
from core.runtime.service import HandlerResult, Service
from core.runtime.settings import Settings
from core.store.ports import EventStore
from search_service.batching import BatchingPolicy
from search_service.engine import SearchStopped, TreeRequest, TreeSearch
from search_service.noisy_expert import from_ref as noisy_expert_from_ref

log = logging.getLogger(__name__)

SERVICE_NAME = "search"
PRODUCER = "search"


def open_search_policy(ref: str, egress: Egress | None = None) -> Policy:
    """A model ref -> Policy: ``noisy-expert...`` here, everything else via core.llm.registry
    (``egress``: the served models this worker may call and where its key goes)."""
    noisy = noisy_expert_from_ref(ref)
    if noisy is not None:
        return noisy
    from core.llm.registry import open_policy

    return open_policy(ref, egress=egress)


def open_search_env(uri: str, egress: Egress | None = None) -> Env:
    from core.envs.registry import open_env

    return open_env(uri, egress=egress)


class BatchedPolicies:
    """The search worker's models: a ``PolicyCache``'s policies, each wrapped in ONE
    ``BatchingPolicy`` while trees search with it, so the trees searched at once share batched
    calls. The cache owns (and closes) the models; the wrapper of a model ends with its last tree."""

    def __init__(self, cache: PolicyCache, *, max_batch: int) -> None:
        self.cache = cache
        self.max_batch = max_batch
        self._batched: dict[str, tuple[BatchingPolicy, list[int]]] = {}  # ref -> (wrapper, [users])

    @contextlib.asynccontextmanager
    async def lease(self, ref: str) -> AsyncIterator[BatchingPolicy]:
        async with self.cache.lease(ref) as inner:
            entry = self._batched.get(ref)
            if entry is None or entry[0].inner is not inner:  # first tree, or the model was reopened
                entry = (BatchingPolicy(inner, max_batch=self.max_batch, owns_inner=False), [0])
                self._batched[ref] = entry
            wrapper, users = entry
            users[0] += 1
            try:
                yield wrapper
            finally:
                users[0] -= 1
                if users[0] == 0:
                    if self._batched.get(ref) is entry:
                        del self._batched[ref]
                    await wrapper.close()


class SearchHandler:
    """Handles SearchRequested; see the module docstring."""

    def __init__(
        self,
        store: EventStore,
        policies: BatchedPolicies,
        env_opener: Callable[[str], Env] = open_search_env,
    ) -> None:
        self.store = store
        self.policies = policies
        self.env_opener = env_opener

    async def __call__(self, recorded: RecordedEvent) -> HandlerResult:
        event = recorded.event
        if not isinstance(event, SearchRequested):
            raise TypeError(f"search handler got {recorded.event_type}")
        metadata = caused_by(recorded, PRODUCER)
        stream = tree_stream(event.tree_id)
        prior_recorded = await self.store.read_stream(stream)
        prior = [r.event for r in prior_recorded]
        version = prior_recorded[-1].stream_version if prior_recorded else -1
        if any(isinstance(e, TreeCompleted | SearchFailed) for e in prior):
            log.info("tree %s: already finished; nothing to do", event.tree_id)
            return HandlerResult()

        def failed(reason: str) -> HandlerResult:
            log.warning("tree %s: search failed: %s", event.tree_id, reason)
            failure = SearchFailed(event.tree_id, event.run_id, event.iteration, reason)
            new = NewEvent(stream, failure, metadata, derived_id(event.tree_id, "SearchFailed"))
            return HandlerResult(events=[new], expected_versions={stream: version})

        try:
            request = TreeRequest.from_event(event)
        except (SearchConfigError, TypeError) as exc:
            return failed(f"bad search config: {exc}")
        try:
            env = self.env_opener(event.env_uri)
        except EnvError as exc:
            return failed(f"cannot open environment {event.env_uri!r}: {exc}")
        async with contextlib.AsyncExitStack() as models:  # the model stays open while this tree searches
            try:
                policy = await models.enter_async_context(self.policies.lease(event.model_ref))
            except (PolicyError, ValueError, OSError) as exc:
                await env.close()
                return failed(f"cannot open model {event.model_ref!r}: {exc}")

            state = {"version": version}
            stop = RunCancelCheck(self.store, event.run_id)
            reason = await stop.check(force=True)
            if reason is not None:
                await env.close()
                return failed(reason)

            async def sink(events: Sequence[NewEvent]) -> None:
                stored = await self.store.append(events, expected_versions={stream: state["version"]})
                versions = [r.stream_version for r in stored if r.stream_id == stream]
                if versions:
                    state["version"] = max(versions)

            search = TreeSearch(
                request, env, policy, sink, metadata=_with_producer(metadata), should_stop=stop.check
            )
            try:
                await search.run(prior)
            except SearchStopped as exc:
                log.info("tree %s: stopped: %s", event.tree_id, exc.reason)
                stopped = SearchFailed(event.tree_id, event.run_id, event.iteration, exc.reason)
                new = NewEvent(stream, stopped, metadata, derived_id(event.tree_id, "SearchFailed"))
                return HandlerResult(events=[new], expected_versions={stream: state["version"]})
            except UnknownTask as exc:
                return failed(f"unknown task {event.task_id!r} in {event.env_uri!r}: {exc}")
            except ContextOverflow as exc:
                return failed(f"model {event.model_ref!r}: {exc}")
            finally:
                await search.close()
                await env.close()
            return HandlerResult(events=search.final_events(), expected_versions={stream: state["version"]})


class RunCancelCheck:
    """Whether the tree's run was cancelled: reads the run's stream for ``RunCancelled``, at most
    once per ``interval`` seconds (the search asks before every expansion)."""

    def __init__(self, store: EventStore, run_id: str | None, interval: float = 1.0) -> None:
        self.store = store
        self.run_id = run_id
        self.interval = interval
        self._checked_at = -math.inf

    async def check(self, force: bool = False) -> str | None:
        if self.run_id is None:
            return None
        now = time.monotonic()
        if not force and now - self._checked_at < self.interval:
            return None
        self._checked_at = now
        for recorded in await self.store.read_stream(run_stream(self.run_id)):
            if isinstance(recorded.event, RunCancelled):
                return f"run cancelled: {recorded.event.reason}"
        return None


def _with_producer(metadata: Metadata) -> Metadata:
    return (
        metadata
        if metadata.producer
        else Metadata(metadata.correlation_id, metadata.causation_id, PRODUCER, metadata.project_id)
    )


def build_service(
    settings: Settings,
    store: EventStore,
    *,
    policy_opener: Callable[[str], Policy] = open_search_policy,
    env_opener: Callable[[str], Env] = open_search_env,
    policies: PolicyCache | None = None,
) -> Service:
    """The search worker's composition root. ``policies``: a model cache shared with other services
    of this process (an embedded run's; its owner closes it, and checks its URLs), else the worker's
    own. Every opener is put behind ``settings.egress`` (the operator's allow-lists): a served model
    or remote environment outside them fails the tree before anything is called."""
    egress = settings.egress
    if policy_opener is open_search_policy:
        policy_opener = functools.partial(open_search_policy, egress=egress)
    if env_opener is open_search_env:
        env_opener = functools.partial(open_search_env, egress=egress)
    opener = checked_policy_opener(policy_opener, egress)
    cache, close = service_cache(policies, opener, settings.max_open_models, "search")
    batched = BatchedPolicies(cache, max_batch=max(1, settings.search_concurrency))
    handler = SearchHandler(store, batched, checked_env_opener(env_opener, egress))
    return Service(
        name=SERVICE_NAME,
        handlers={SearchRequested.event_type: handler},
        concurrency=max(1, settings.search_concurrency),
        on_close=close,
    )
