"""Owns the critic worker (`agentr worker critic`): its composition root and handlers.

- ``PairFound`` -> ``FirstErrorMarked`` (transition index, every verdict with scores, strategy, model
  version, tokens processed, whether t' fell back to the last action, and the environment oracle's
  first error where there is one: ``critic_service.oracles``) on the pair's stream; a pair whose
  paths do not share the stated prefix -> ``RevisionRejected`` with the reason.
- ``TraceIngested`` -> for a failed trace, ``TraceCritiqued`` (strategy from settings: rules by
  default, model when ``AGENTR_CRITIC_MODEL`` is set); a failed and a successful trace of the same
  project and task key -> ``PairFound`` (source "trace", divergence = longest common prefix of actions;
  paired by task KEY, the task texts may differ: the sample keeps the failed trace's task text); a
  failed trace with no usable partner -> ``TraceUnpaired`` with the reason, unless it names a local
  environment and task (``TraceIngested.env_uri`` / ``env_task_id``): then the replay critic finds its
  decisive step and the expert's verified alternative there, and the trace becomes a pair by itself
  (``ReplayProbed`` events, ``PairFound`` with no good trace, ``FirstErrorMarked`` strategy replay:
  a preference pair for the DPO export, labels for the stepwise one; ``_replay_pair``).
  The partners are looked up in the ``traces`` projection (project, task key, outcome), and only
  their streams are read: the cost does not grow with the number of traces stored.
  The strategy is the upload's ``critic`` choice, else the project's (``ProjectCreated``), else
  the worker's settings. A trace pair whose bad path has
  no step judged bad after the divergence is rejected as ``no_error_found`` (no sample) unless the
  strategy is ``direct``: the fallback to the last action is never silent on traces.
- ``TraceOutcomeSet`` (an outcome set later for a trace ingested as unknown) -> the same as above.

The critic for a search pair is the run's ``RunConfig.critic`` strategy (default ``first``: the
first action after the divergence, docs/critic.md); where a model is judged (the ``model`` /
``reflect`` strategies, or their t' recorded beside another as ``FirstErrorMarked.baselines``) it is
the iteration's actor: the ``model_ref`` of its IterationStarted (the trained model of iteration i
judges iteration i's pairs). Event ids are derived from the input so a redelivered message adds nothing.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from typing import Any

from core.domain.critic import CriticInputError
from core.domain.events import (
    FirstErrorMarked,
    Metadata,
    NewEvent,
    PairFound,
    ProjectCreated,
    RecordedEvent,
    ReplayProbed,
    RevisionRejected,
    TraceCritiqued,
    TraceIngested,
    TraceOutcomeSet,
    TraceUnpaired,
    caused_by,
    current_trace,
)
from core.domain.ids import derived_id, pair_stream, project_stream, trace_stream
from core.domain.splice import SpliceError, check_pair, longest_common_prefix
from core.domain.trajectory import Trajectory
from core.envs.base import Env
from core.envs.registry import egress_checked as checked_env_opener
from core.llm.model_opener import egress_policy_opener, open_model
from core.llm.policy_cache import PolicyCache, service_cache
from core.llm.ports import Policy, PolicyError
from core.runtime.service import HandlerResult, Service
from core.runtime.settings import Settings
from core.store.pair_repository import PairRepository
from core.store.ports import EventStore
from core.store.queries.traces import task_trace_ids
from core.store.run_reads import run_context
from critic_service.critic import (
    CriticConfig,
    CriticConfigError,
    Critique,
    critique,
    model_baseline,
    reflect_baseline,
)
from critic_service.oracles import Oracles
from critic_service.oracles import _open_env as open_oracle_env
from critic_service.strategies import strategy_named
from critic_service.strategies.replay import Continuation

log = logging.getLogger(__name__)
SERVICE_NAME = "critic"


def strategy_needs_model(config: CriticConfig) -> bool:
    """Whether the configured strategy itself judges with the iteration's actor (not only its baselines)."""
    return strategy_named(config.strategy).actor_use(config) == "required"


def _trace_pair_id(failed_trace_id: str) -> str:
    return derived_id("trace-pair", failed_trace_id)


def located(pair: PairFound) -> Trajectory:
    """The pair's bad path with the pair's environment and task in its provenance, where the path
    does not carry them itself (a search pair's trajectories do): what a strategy that replays the
    path in its environment reads (``oracle``)."""
    if pair.env_uri is None or pair.task_id is None or "env_uri" in pair.bad.provenance:
        return pair.bad
    return replace(
        pair.bad, provenance={**pair.bad.provenance, "env_uri": pair.env_uri, "task_id": pair.task_id}
    )


class CriticHandlers:
    def __init__(
        self,
        settings: Settings,
        store: EventStore,
        policies: PolicyCache,
        oracles: Oracles | None = None,
        env_opener: Callable[[str], Env] | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.policies = policies
        self.oracles = oracles or Oracles()
        self.env_opener = env_opener  # the replay critic's (the worker's, behind its egress allow-list)

    # ------------------------------------------------------------------------------ pairs
    async def on_pair_found(self, recorded: RecordedEvent) -> HandlerResult:
        pair = recorded.event
        assert isinstance(pair, PairFound)
        meta = caused_by(recorded, SERVICE_NAME)
        if pair.source == "trace" and pair.good_leaf_id is None and await self._judged(pair.pair_id):
            return HandlerResult([])  # a lone trace's replay pair: judged when it was made
        if pair.run_id is not None:
            run_config, model_ref = await run_context(self.store, pair.run_id, pair.iteration)
            critic_data = run_config.critic
        else:
            critic_data = {"strategy": self.settings.critic_trace_strategy}
            model_ref = self.settings.critic_model
        try:
            check_pair(pair.bad, pair.good, pair.shared_steps, same_task=pair.source != "trace")
            failed = None
            if pair.source == "trace" and pair.bad_leaf_id:
                failed = await self._trace_state(pair.bad_leaf_id)
            if failed is not None:
                config, ref = await self._trace_critic(failed)
            else:
                config = CriticConfig.from_data(critic_data)
                # the strategy's model, or the model / reflect baselines recorded beside it
                ref = model_ref if config.needs_actor and model_ref else None
            # a model only the baselines read (under ``first``) that cannot be opened records none
            opened = self._model(ref) if strategy_needs_model(config) else self._optional_model(ref)
            async with opened as policy:
                result = await critique(
                    config,
                    located(pair),
                    pair.shared_steps,
                    policy,
                    env_uri=pair.env_uri,
                    task_id=pair.task_id,
                    env_opener=self.env_opener,
                )
                baselines: dict[str, int] = {}
                if pair.source == "search":  # the run report's critic baselines, on the same pair
                    baselines = await self._baselines(config, pair, policy)
            if result.unverified is not None:  # replay: no step it could check; the probes stay as evidence
                log.warning("critic: pair %s rejected: %s", pair.pair_id, result.unverified)
                rejected = RevisionRejected(
                    pair.pair_id, pair.run_id, pair.iteration, f"critic: {result.unverified}"
                )
                return HandlerResult(
                    [
                        *self._probe_events(pair.pair_id, result, meta),
                        self._new(pair_stream(pair.pair_id), rejected, meta, "rejected", pair.pair_id),
                    ]
                )
            if pair.source == "trace" and result.fallback and config.strategy != "direct":
                raise CriticInputError(
                    f"no_error_found: the {config.strategy} critic judged no step after the divergence "
                    f"(step {pair.shared_steps}) bad, so no revision sample is made; choose critic strategy "
                    "direct to revise at the last action"
                )
        except (SpliceError, CriticInputError, CriticConfigError) as exc:
            log.warning("critic: pair %s rejected: %s", pair.pair_id, exc)
            rejected = RevisionRejected(pair.pair_id, pair.run_id, pair.iteration, f"critic: {exc}")
            return HandlerResult(
                [self._new(pair_stream(pair.pair_id), rejected, meta, "rejected", pair.pair_id)]
            )
        marked = FirstErrorMarked(
            pair_id=pair.pair_id,
            strategy=result.strategy,
            transition_index=result.transition_index,
            verdicts=result.verdicts,
            model_version=result.model_version,
            tokens_processed=result.tokens_processed,
            fallback=result.fallback,
            oracle_index=self.oracles.oracle_index(pair.env_uri, pair.task_id, pair.bad, pair.shared_steps),
            baselines=baselines,
        )
        log.info(
            "critic: pair %s strategy=%s t'=%d%s oracle=%s (divergence %d, %d verdicts, %d tokens)",
            pair.pair_id, result.strategy, result.transition_index,
            " (fallback: nothing judged bad)" if result.fallback else "", marked.oracle_index,
            pair.shared_steps, len(result.verdicts), result.tokens_processed,
        )  # fmt: skip
        return HandlerResult(
            [
                *self._probe_events(pair.pair_id, result, meta),
                self._new(pair_stream(pair.pair_id), marked, meta, "marked", pair.pair_id),
            ]
        )

    def _probe_events(self, pair_id: str, result: Critique, meta: Metadata) -> list[NewEvent]:
        """One ``ReplayProbed`` per probe of a replay critique, in the order the search asked."""
        out = []
        for index, probe in enumerate(result.probes):
            evidence = probe.detail
            continuations = getattr(evidence, "continuations", ())
            event = ReplayProbed(
                pair_id=pair_id,
                prefix_steps=probe.prefix,
                policy=getattr(evidence, "policy", ""),
                m=probe.m,
                successes=probe.successes,
                spent=probe.spent,
                continuations=tuple(tuple(c.actions) for c in continuations),
                rewards=tuple(float(c.reward) for c in continuations),
            )
            out.append(self._new(pair_stream(pair_id), event, meta, "probe", f"{pair_id}:{index}"))
        return out

    async def _baselines(
        self, config: CriticConfig, pair: PairFound, policy: Policy | None
    ) -> dict[str, int]:
        """The reflect and model critics' t' on the pair, beside the run's critic: measurements, never
        a reason to reject the pair (a policy that cannot score labels, such as the noisy expert,
        records none, logged)."""
        baselines: dict[str, int] = {}
        for baseline in (reflect_baseline, model_baseline):
            try:
                baselines |= await baseline(config, pair.bad, pair.shared_steps, policy)
            except PolicyError as exc:
                log.warning("critic: pair %s: %s not recorded: %s", pair.pair_id, baseline.__name__, exc)
        return baselines

    # ------------------------------------------------------------------------------ traces
    async def on_trace_ingested(self, recorded: RecordedEvent) -> HandlerResult:
        trace = recorded.event
        assert isinstance(trace, TraceIngested)
        meta = caused_by(recorded, SERVICE_NAME)
        if meta.project_id is None:
            meta = Metadata(meta.correlation_id, meta.causation_id, meta.producer, trace.project_id)
        return HandlerResult(await self._critique_trace(trace, meta))

    async def on_trace_outcome_set(self, recorded: RecordedEvent) -> HandlerResult:
        """An outcome arrived for a trace that was waiting for one: critique and pair it now."""
        event = recorded.event
        assert isinstance(event, TraceOutcomeSet)
        trace = await self._trace_state(event.trace_id)
        if trace is None:
            log.warning("critic: outcome for unknown trace %s ignored", event.trace_id)
            return HandlerResult([])
        meta = caused_by(recorded, SERVICE_NAME)
        if meta.project_id is None:
            meta = Metadata(meta.correlation_id, meta.causation_id, meta.producer, trace.project_id)
        return HandlerResult(await self._critique_trace(trace, meta))

    async def _critique_trace(self, trace: TraceIngested, meta: Metadata) -> list[NewEvent]:
        out: list[NewEvent] = []
        if trace.outcome == "failure" and trace.trajectory.steps:
            config, ref = await self._trace_critic(trace)
            async with self._model(ref) as policy:
                result = await critique(config, trace.trajectory, 0, policy)
            bad = [v.step_index for v in result.verdicts if v.label == "bad"]
            critiqued = TraceCritiqued(
                trace_id=trace.trace_id,
                strategy=result.strategy,
                transition_index=bad[0] if bad else None,
                verdicts=result.verdicts,
                model_version=result.model_version,
                tokens_processed=result.tokens_processed,
            )
            out.append(self._new(trace_stream(trace.trace_id), critiqued, meta, "critiqued", trace.trace_id))
        if trace.outcome in ("failure", "success"):
            out.extend(await self._pairs_for(trace, meta))
        return out

    async def _partners(self, trace: TraceIngested) -> list[TraceIngested]:
        """The other traces of ``trace``'s project and task key with the opposite outcome, found in
        the ``traces`` projection; only their own streams are read."""
        wanted = "success" if trace.outcome == "failure" else "failure"
        trace_ids = await task_trace_ids(
            self.store, trace.project_id, trace.task_key, wanted, exclude=trace.trace_id
        )
        partners = []
        for trace_id in trace_ids:
            if wanted == "failure" and await self._paired(trace_id):
                continue  # that failure already has its pair: its stream is not needed
            state = await self._trace_state(trace_id)
            if state is not None:
                partners.append(state)
        return partners

    async def _trace_state(self, trace_id: str) -> TraceIngested | None:
        """The trace as ingested (with the latest conversation the capture proxy recorded), with the
        outcome (and reward) a later TraceOutcomeSet gave it."""
        return current_trace(
            [recorded.event for recorded in await self.store.read_stream(trace_stream(trace_id))]
        )

    def _model(self, ref: str | None) -> AbstractAsyncContextManager[Policy | None]:
        """A lease on the model ``ref`` names (``PolicyCache``), or None where no model is needed."""
        return self.policies.lease(ref) if ref else contextlib.nullcontext(None)

    @contextlib.asynccontextmanager
    async def _optional_model(self, ref: str | None) -> AsyncIterator[Policy | None]:
        """A lease on ``ref`` for measurements only: None (logged) where it cannot be opened."""
        async with contextlib.AsyncExitStack() as stack:
            policy = None
            if ref:
                try:
                    policy = await stack.enter_async_context(self.policies.lease(ref))
                except (PolicyError, OSError, ValueError) as exc:
                    log.warning("critic: model %s for the critic baselines not opened: %s", ref, exc)
            yield policy

    async def _trace_critic(self, trace: TraceIngested) -> tuple[CriticConfig, str | None]:
        """The critic for a failed trace and the model reference it judges with (None: no model):
        the upload's choice, else the project's (ProjectCreated), else the worker's settings.
        Strategy ``model`` without a model to run is judged by rules, and the critique says
        ``rules``."""
        strategy, model_ref = trace.critic_strategy, trace.critic_model
        if strategy is None:
            for recorded in await self.store.read_stream(project_stream(trace.project_id)):
                if isinstance(recorded.event, ProjectCreated) and recorded.event.critic_strategy:
                    strategy, model_ref = recorded.event.critic_strategy, recorded.event.critic_model
        strategy = strategy or self.settings.critic_trace_strategy
        model_ref = model_ref or self.settings.critic_model
        config = CriticConfig.from_data({"strategy": strategy, "plan": self.settings.critic_trace_plan})
        on_traces = strategy_named(config.strategy).on_traces
        if on_traces == "model":
            if not model_ref:
                log.warning("critic: trace %s: %s without a critic model: rules", trace.trace_id, strategy)
                return CriticConfig(strategy="rules"), None
            return config, model_ref
        if on_traces == "runs-only":  # value: needs an archer checkpoint (critic.value_model)
            log.warning("critic: trace %s: the %s strategy is for runs: rules", trace.trace_id, strategy)
            return CriticConfig(strategy="rules"), None
        return config, None

    async def _paired(self, failed_trace_id: str) -> bool:
        return await self.store.stream_version(pair_stream(_trace_pair_id(failed_trace_id))) >= 0

    async def _pairs_for(self, trace: TraceIngested, meta: Metadata) -> list[NewEvent]:
        """Pair failed and successful traces of the same project and task key (one pair per failure).

        Traces pair by task KEY, not by task text: two traces of one task rarely share their first
        user message byte for byte. The sample keeps the failed trace's own task text and instruction
        (``core.domain.splice.revision_sample``). Among the candidates the one sharing the longest
        action prefix wins (ties: the earliest ingested). A failure with steps that finds no usable
        partner (or with no step at all) gets ``TraceUnpaired`` saying why."""
        partners = await self._partners(trace)
        if trace.outcome == "failure":
            wanted = [(trace, partners)]
        else:
            wanted = [(failed, [trace]) for failed in partners]
        out = []
        for failed, candidates in wanted:
            if await self._paired(failed.trace_id):
                continue  # this failure already has its pair
            pair_id = _trace_pair_id(failed.trace_id)
            best = None
            for good in candidates:
                shared = longest_common_prefix(failed.trajectory.steps, good.trajectory.steps)
                if shared >= len(failed.trajectory.steps) or shared >= len(good.trajectory.steps):
                    continue  # no action after the divergence on one side: nothing to revise
                if best is None or shared > best[0]:
                    best = (shared, good)
            if best is None:
                replayed, why = await self._replay_pair(failed, meta) if failed.trajectory.steps else ([], "")
                if replayed:
                    out.extend(replayed)
                else:
                    out.append(self._unpaired(failed, candidates, trace, meta, why))
                continue
            shared, good = best
            pair = PairFound(
                pair_id=pair_id,
                source="trace",
                task_key=failed.task_key,
                bad=failed.trajectory,
                good=good.trajectory,
                shared_steps=shared,
                tree_id=None,
                bad_leaf_id=failed.trace_id,
                good_leaf_id=good.trace_id,
            )
            log.info(
                "critic: traces %s (failed) + %s (success) -> pair %s",
                failed.trace_id,
                good.trace_id,
                pair_id,
            )
            out.append(self._new(pair_stream(pair_id), pair, meta, "pair", failed.trace_id))
        return out

    async def _judged(self, pair_id: str) -> bool:
        return (await PairRepository(self.store).load(pair_id)).marked is not None

    async def _replay_pair(self, failed: TraceIngested, meta: Metadata) -> tuple[list[NewEvent], str]:
        """A failed trace with no successful partner that names its environment becomes a pair by
        itself (docs/critic.md, "The replay critic"): the replay critic finds its decisive step t*,
        continuing with the environment's expert or, with ``critic_trace_replay_policy: model``, with
        ``critic_model``'s sampled continuations. The good path is a continuation the search already
        ran (so verified): where one from AFTER a_{t*} succeeded (a recoverable error) it is
        a_0..a_{t*} + that continuation, and the splice makes the revision sample (prefix through
        t*, reflection, the recovery); else the one from the state before a_{t*}, diverging at t*: a
        preference pair for the DPO export (chosen: its action, rejected: a_{t*}). Events: the probes
        (``ReplayProbed``), that ``PairFound`` (source trace, ``good_leaf_id`` None) and its
        ``FirstErrorMarked`` (strategy replay). ([], reason) where the trace names no environment
        or the replay cannot verify."""
        if not failed.env_uri or failed.env_task_id is None:
            return [], ""
        pair_id = _trace_pair_id(failed.trace_id)
        settings = self.settings
        model = settings.critic_trace_replay_policy == "model"
        try:
            config = CriticConfig.from_data(
                {
                    "strategy": "replay",
                    "replay_policy": settings.critic_trace_replay_policy,
                    "replay_m": settings.critic_trace_replay_m,
                    "replay_budget": settings.critic_trace_replay_budget,
                }
            )
        except CriticConfigError as exc:
            return [], f"the replay critic's settings: {exc}"
        ref = settings.critic_model if model else None
        if model and not ref:
            return [], "the replay critic: critic_trace_replay_policy model needs critic_model"
        async with self._model(ref) as policy:
            result = await critique(
                config,
                failed.trajectory,
                0,
                policy,
                env_uri=failed.env_uri,
                task_id=failed.env_task_id,
                env_opener=self.env_opener,
            )
        if result.unverified is not None:
            log.info("critic: trace %s: replay: %s", failed.trace_id, result.unverified)
            return [], f"the replay critic in {failed.env_uri}: {result.unverified}"
        t = result.transition_index
        bad = failed.trajectory

        def succeeded(prefix: int) -> Continuation | None:
            return next(
                (
                    c
                    for p in result.probes
                    if p.prefix == prefix
                    for c in getattr(p.detail, "continuations", ())
                    if c.reward >= 1.0 and c.steps
                ),
                None,
            )

        recovery = succeeded(t + 1)
        continuation = recovery or succeeded(t)
        if continuation is None:  # the search probed t* and it succeeded
            return [], f"the replay critic in {failed.env_uri}: no verified continuation at step {t}"
        kept = bad.steps[: t + 1] if recovery is not None else bad.steps[:t]
        good = Trajectory(
            task=bad.task,
            instruction=bad.instruction,
            steps=(*kept, *continuation.steps),
            reward=continuation.reward,
            provenance={
                "source": "replay",
                "trace_id": failed.trace_id,
                "decisive_step": t,
                # recovery: a continuation after a_{t*} succeeded (a revision sample); else an
                # alternative from the state before it (a preference pair)
                "continues": "after" if recovery is not None else "before",
            },
            tools=bad.tools,
        )
        pair = PairFound(
            pair_id=pair_id,
            source="trace",
            task_key=failed.task_key,
            bad=bad,
            good=good,
            shared_steps=t,
            bad_leaf_id=failed.trace_id,
            good_leaf_id=None,
            env_uri=failed.env_uri,
            task_id=failed.env_task_id,
        )
        marked = FirstErrorMarked(
            pair_id=pair_id,
            strategy="replay",
            transition_index=t,
            verdicts=result.verdicts,
            oracle_index=self.oracles.oracle_index(failed.env_uri, failed.env_task_id, bad, t),
        )
        log.info("critic: trace %s: replay found decisive step %d -> pair %s", failed.trace_id, t, pair_id)
        return [
            *self._probe_events(pair_id, result, meta),
            self._new(pair_stream(pair_id), pair, meta, "pair", failed.trace_id),
            self._new(pair_stream(pair_id), marked, meta, "marked", pair_id),
        ], ""

    def _unpaired(
        self,
        failed: TraceIngested,
        candidates: list[TraceIngested],
        cause: TraceIngested,
        meta: Metadata,
        replay: str = "",
    ) -> NewEvent:
        key = failed.task_key
        if not failed.trajectory.steps:
            reason = "no assistant step in this trace: nothing to revise, so it cannot pair"
        elif not candidates:
            reason = (
                f"no successful trace with task key {key!r} in this project yet; it pairs when one is "
                "ingested (or a waiting trace of that key gets outcome success)"
            )
        else:
            reason = (
                f"{len(candidates)} successful trace(s) with task key {key!r}, but each takes the "
                "same actions as this one up to the end of the shorter path: no step after the divergence "
                "to revise"
            )
        if replay:
            reason += f"; {replay}"
        event = TraceUnpaired(
            trace_id=failed.trace_id, task_key=key, reason=reason, candidates=len(candidates)
        )
        log.info("critic: trace %s unpaired: %s", failed.trace_id, reason)
        return self._new(
            trace_stream(failed.trace_id), event, meta, "unpaired", f"{failed.trace_id}:{cause.trace_id}"
        )

    @staticmethod
    def _new(stream: str, event: Any, meta: Metadata, kind: str, key: str) -> NewEvent:
        return NewEvent(stream, event, meta, event_id=derived_id(SERVICE_NAME, kind, key))


def build_service(
    settings: Settings,
    store: EventStore,
    *,
    policy_opener: Callable[[str], Policy] = open_model,
    policies: PolicyCache | None = None,
) -> Service:
    """The critic worker's composition root. ``policies``: a model cache shared with other services
    of this process (an embedded run's; its owner closes it, and checks its URLs), else the worker's
    own, behind ``settings.egress`` (a served model outside the allow-list is refused before any call)."""
    opener = egress_policy_opener(policy_opener, settings)
    cache, close = service_cache(policies, opener, settings.max_open_models, "critic")
    egress = settings.egress
    env_opener = checked_env_opener(functools.partial(open_oracle_env, egress=egress), egress)
    handlers = CriticHandlers(settings, store, cache, Oracles(env_opener), env_opener)
    return Service(
        name=SERVICE_NAME,
        handlers={
            PairFound.event_type: handlers.on_pair_found,
            TraceIngested.event_type: handlers.on_trace_ingested,
            TraceOutcomeSet.event_type: handlers.on_trace_outcome_set,
        },
        concurrency=1,
        on_close=close,
    )
