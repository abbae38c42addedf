"""Owns splicing a pair into a revision sample and the iteration's dataset signal (the handlers of
the splice worker; ``splice_service.service`` wires them into the worker).

- ``FirstErrorMarked`` -> ``RevisionMaterialized`` (or ``RevisionRejected`` with the reason): the
  pair is spliced (core.domain.splice) with a reflection chosen from the pair id (``reflection:
  template``, the default) or written by the iteration's model (``reflection: model``, see
  ``splice_service.reflector``; template fallback recorded as ``model|fallback:<id>``); where the pair names
  an environment and task, the spliced action sequence is replayed there: ``verified`` says whether it
  still reaches the good path's reward, and the sample keeps the observations the environment really
  returned. Unverified samples are kept or dropped by ``RunConfig.splice["keep_unverified"]``.
- On every event that can complete an iteration (``TreeCompleted``, ``SearchFailed``,
  ``RevisionMaterialized``, ``RevisionRejected``) the iteration is checked AFTER that event has been
  committed: when every tree of ``IterationStarted.tree_ids`` is completed or failed and every pair
  is revised or rejected, ``IterationDatasetReady`` (deterministic dataset id) or
  ``IterationDatasetEmpty`` is appended to the run's stream, once (derived event id; the store skips
  an id it already holds; the check and the event are ``splice_service.iteration_dataset``'s). The
  check never runs inside the handler that produces an outcome: that handler's events are not
  committed yet, so with two replicas (or concurrency > 1) both handlers of the last two events
  could see "not ready" and the wakeup would be lost. Checking after each commit means whichever
  relevant event commits last is followed by a check that sees all of them. The event is built from
  committed projections only (``built_from.last_position`` is the highest store position among the
  dataset's samples), so concurrent checks emit identical contents.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from core.domain.config import RunConfig
from core.domain.egress import Egress
from core.domain.events import (
    FirstErrorMarked,
    GoodTrajectoryFound,
    NewEvent,
    PairFound,
    RecordedEvent,
    RevisionMaterialized,
    RevisionRejected,
    SearchFailed,
    TreeCompleted,
    caused_by,
)
from core.domain.good_samples import revision_masks
from core.domain.ids import derived_id, pair_stream, tree_stream
from core.domain.reflections import (
    DEFAULT_TEMPLATES,
    Reflection,
    ReflectionError,
    choose_reflection,
    model_or_template,
    pair_choice_key,
)
from core.domain.splice import (
    SPLICE_PARTNERS,
    Partner,
    SplicedPath,
    SpliceError,
    check_partner_rule,
    revision_sample,
    splice_partners,
    splice_path,
)
from core.domain.trajectory import Step, Trajectory
from core.envs.base import Env, EnvError
from core.llm.model_opener import egress_policy_opener, open_model
from core.llm.policy_cache import PolicyCache
from core.llm.ports import Policy, PolicyError
from core.runtime.service import HandlerResult
from core.runtime.settings import Settings
from core.store.pair_repository import PairRepository
from core.store.ports import EventStore
from core.store.run_reads import run_context
from splice_service.iteration_dataset import iteration_dataset_events
from splice_service.reflector import ReflectionRequest, model_reflections

log = logging.getLogger(__name__)
SERVICE_NAME = "splice"
REWARD_TOLERANCE = 1e-6
# at most this many good paths are replayed for one pair (its own first among equals, then the
# tree's other good leaves nearest to t'): a bounded cost per pair
MAX_PARTNERS = 4
GOODS_CACHE_TREES = 64


def _open_env(uri: str, egress: Egress | None = None) -> Env:
    from core.envs.registry import open_env

    return open_env(uri, egress=egress)


@dataclass(frozen=True)
class LossMasking:
    """The run's weight-0 rule for the good continuation of a revision sample
    (``RunConfig.mask_invalid_steps`` / ``mask_loop_steps``; core.domain.good_samples.revision_masks)."""

    invalid_steps: bool = True
    loop_steps: bool = True


@dataclass(frozen=True)
class SpliceConfig:
    verify: bool = True
    """Replay the spliced actions in the environment when the pair names one."""
    keep_unverified: bool = False
    """Keep a sample whose replay does not reach the good reward (marked verified=False)."""
    reflections: dict[str, str] | None = None
    """Reflection templates (id -> sentence); None = core.domain.reflections.DEFAULT_TEMPLATES."""
    reflection: Literal["template", "model"] = "template"
    """Where the reflection sentence comes from: a template, or the iteration's model (with fallback)."""
    partner: str = "pair"
    """Which good path the bad one is spliced onto (core.domain.splice.splice_partners): ``pair``
    (the pair's own good path only, the default) or ``adjacent`` (the tree's good path that
    branches off nearest before t', the paper's rule; the next ones are tried when a replay misses
    the good reward). Measured, not the default: docs/critic.md, "Which good path"."""

    @classmethod
    def of_run(cls, run_config: RunConfig) -> tuple[SpliceConfig, LossMasking]:
        """The run's ``splice`` settings and its loss-masking rule (the one good samples follow)."""
        masking = LossMasking(run_config.mask_invalid_steps, run_config.mask_loop_steps)
        return cls.from_data(run_config.splice), masking

    @classmethod
    def from_data(cls, data: dict[str, Any] | None) -> SpliceConfig:
        data = dict(data or {})
        templates = data.get("reflections")
        source = data.get("reflection", "template")
        if source not in ("template", "model"):
            raise ReflectionError(f"splice.reflection: unknown source {source!r} (template, model)")
        partner = check_partner_rule(str(data.get("partner", SPLICE_PARTNERS[0])))
        return cls(
            verify=bool(data.get("verify", True)),
            keep_unverified=bool(data.get("keep_unverified", False)),
            reflections=dict(templates) if templates else None,
            reflection=source,
            partner=partner,
        )


@dataclass(frozen=True)
class Replay:
    verified: bool
    path: SplicedPath  # with the environment's observations when the replay ran to the end
    reason: str = ""


async def replay(env: Env, task_id: str, path: SplicedPath, good_reward: float | None) -> Replay:
    """Re-execute ``path.actions`` from ``reset(task_id)``; verified = the final reward reaches the
    good path's reward (and the episode did not end before the last action)."""
    await env.reset(task_id)
    observed: list[Step] = []
    actions = path.actions
    for index, action in enumerate(actions):
        result = await env.step(action)
        observed.append(
            Step("", action, result.observation, reward=result.reward, done=result.done, valid=result.valid)
        )
        if result.done and index < len(actions) - 1:
            return Replay(False, path, f"the episode ended at step {index}, before the last action")
    replayed = path.with_observations(observed)
    target = 1.0 if good_reward is None else good_reward
    final = observed[-1].reward if observed else 0.0
    if final + REWARD_TOLERANCE < target:
        return Replay(False, replayed, f"replay reward {final:.3f} is below the good reward {target:.3f}")
    return Replay(True, replayed)


class SpliceHandlers:
    def __init__(
        self,
        settings: Settings,
        store: EventStore,
        env_opener: Callable[[str], Env],
        policies: PolicyCache | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.env_opener = env_opener
        self.policies = policies or PolicyCache(egress_policy_opener(open_model, settings), name="splice")
        self._goods: dict[str, list[tuple[str, Trajectory]]] = {}  # tree id -> its good leaves

    async def _pair(self, pair_id: str) -> PairFound | None:
        return (await PairRepository(self.store).load(pair_id)).pair

    async def on_first_error(self, recorded: RecordedEvent) -> HandlerResult:
        marked = recorded.event
        assert isinstance(marked, FirstErrorMarked)
        meta = caused_by(recorded, SERVICE_NAME)
        pair = await self._pair(marked.pair_id)
        if pair is None:
            raise LookupError(f"splice: no PairFound in stream {pair_stream(marked.pair_id)}")
        config, masking = SpliceConfig(), LossMasking()
        model_ref: str | None = None
        try:
            if pair.run_id is not None:
                run_config, model_ref = await run_context(self.store, pair.run_id, pair.iteration)
                config, masking = SpliceConfig.of_run(run_config)
            outcome = await self._splice(pair, marked, config, model_ref, masking=masking)
        except (SpliceError, ReflectionError) as exc:
            outcome = RevisionRejected(pair.pair_id, pair.run_id, pair.iteration, f"splice: {exc}")
            log.warning("splice: pair %s could not be spliced: %s", pair.pair_id, exc)
        if isinstance(outcome, RevisionRejected):
            # an unverified replay is the method's expected outcome on many pairs (the run report
            # counts them by reason), not a fault: logged at INFO, unlike a splice that broke above
            log.info("splice: pair %s rejected: %s", pair.pair_id, outcome.reason)
            event = NewEvent(
                pair_stream(pair.pair_id), outcome, meta, derived_id(SERVICE_NAME, "rej", pair.pair_id)
            )
        else:
            log.info(
                "splice: pair %s -> sample %s (revision length %d, verified %s)",
                pair.pair_id, outcome.sample_id, outcome.revision_length, outcome.verified,
            )  # fmt: skip
            event = NewEvent(
                pair_stream(pair.pair_id), outcome, meta, derived_id(SERVICE_NAME, "rev", pair.pair_id)
            )
        # No iteration check here: ``event`` is not committed yet (see the module docstring); the
        # post-commit check runs in ``on_progress`` when this outcome is delivered.
        return HandlerResult([event])

    async def splice(
        self, pair: PairFound, marked: FirstErrorMarked, config: SpliceConfig, masking: LossMasking
    ) -> RevisionMaterialized | RevisionRejected:
        """The worker's splice of one pair at ``marked``'s t', outside the worker (no store, no
        model: template reflections): what ``on_first_error`` appends, as a value. A pair that
        cannot be spliced is a ``RevisionRejected`` with the reason, as there (bench/ceiling.py)."""
        try:
            return await self._splice(pair, marked, config, None, masking=masking)
        except (SpliceError, ReflectionError) as exc:
            return RevisionRejected(pair.pair_id, pair.run_id, pair.iteration, f"splice: {exc}")

    async def _reflection(
        self, pair: PairFound, marked: FirstErrorMarked, config: SpliceConfig, model_ref: str | None
    ) -> Reflection:
        templates = config.reflections or DEFAULT_TEMPLATES
        wrong = pair.bad.steps[marked.transition_index]
        key = pair_choice_key(
            pair.task_key,
            pair.shared_steps,
            [s.action for s in pair.bad.steps],
            [s.action for s in pair.good.steps],
        )
        if config.reflection == "template":
            return choose_reflection(key, wrong.action, templates)
        if not model_ref:
            reflection, _ = model_or_template(None, key, wrong.action, templates)
            log.warning("splice: pair %s: no model to reflect with; %s", pair.pair_id, reflection.template_id)
            return reflection
        async with contextlib.AsyncExitStack() as models:
            try:
                policy: Policy = await models.enter_async_context(self.policies.lease(model_ref))
            except (PolicyError, OSError, ValueError) as exc:
                reflection, _ = model_or_template(None, key, wrong.action, templates)
                log.warning(
                    "splice: pair %s: cannot open %s (%s); %s",
                    pair.pair_id,
                    model_ref,
                    exc,
                    reflection.template_id,
                )
                return reflection
            request = ReflectionRequest(pair.pair_id, pair.bad.task, wrong.action, wrong.observation, key)
            (reflection,) = await model_reflections(policy, [request], templates)
            return reflection

    async def _partners(
        self, pair: PairFound, marked: FirstErrorMarked, config: SpliceConfig
    ) -> list[Partner]:
        """The good paths to try, in order (core.domain.splice.splice_partners): the pair's own, and
        under ``adjacent`` the tree's other good leaves (its ``GoodTrajectoryFound`` events; a
        trace pair has no tree), at most ``MAX_PARTNERS``."""
        own = Partner(pair.good_leaf_id, pair.good, pair.shared_steps, own=True)
        others: list[tuple[str, Trajectory]] = []
        if config.partner == "adjacent" and pair.source == "search" and pair.tree_id:
            others = await self._tree_goods(pair.tree_id)
        found = splice_partners(pair.bad, own, others, marked.transition_index, config.partner)
        return found[:MAX_PARTNERS]

    async def _tree_goods(self, tree_id: str) -> list[tuple[str, Trajectory]]:
        """The tree's good leaves (a completed tree's never change: cached, a bounded number of trees)."""
        cached = self._goods.get(tree_id)
        if cached is None:
            cached = [
                (recorded.event.leaf_id, recorded.event.trajectory)
                for recorded in await self.store.read_stream(tree_stream(tree_id))
                if isinstance(recorded.event, GoodTrajectoryFound)
            ]
            if len(self._goods) >= GOODS_CACHE_TREES:
                self._goods.pop(next(iter(self._goods)))
            self._goods[tree_id] = cached
        return cached

    async def _splice(
        self,
        pair: PairFound,
        marked: FirstErrorMarked,
        config: SpliceConfig,
        model_ref: str | None,
        reflection: Reflection | None = None,
        masking: LossMasking | None = None,
    ) -> RevisionMaterialized | RevisionRejected:
        """Splice ``pair`` at ``marked.transition_index``; ``reflection`` given (a reviewer's) is used
        as it is, otherwise one is chosen as ``config`` says. The good path is the first of
        ``_partners`` whose replay reaches its reward (``config.partner``); when none does, the
        first one's outcome stands (kept unverified, or rejected with its reason)."""
        same_task = pair.source != "trace"
        partners = await self._partners(pair, marked, config)
        # t' checked by splice_path before anything else (a bad t' is a SpliceError)
        attempts = [
            (
                partner,
                splice_path(
                    pair.bad, partner.path, partner.shared, marked.transition_index, same_task=same_task
                ),
            )
            for partner in partners
        ]
        if reflection is None:
            reflection = await self._reflection(pair, marked, config, model_ref)
        partner, path = attempts[0]
        verified: bool | None = None
        tried = 0
        if config.verify and pair.env_uri and pair.task_id is not None:
            env = self.env_opener(pair.env_uri)
            replays: list[tuple[Partner, Replay]] = []
            try:
                for candidate, candidate_path in attempts:
                    replays.append(
                        (candidate, await replay(env, pair.task_id, candidate_path, candidate.path.reward))
                    )
                    if replays[-1][1].verified:
                        break
            except EnvError as exc:
                return RevisionRejected(pair.pair_id, pair.run_id, pair.iteration, f"replay failed: {exc}")
            finally:
                await env.close()
            tried = len(replays)
            first = replays[0][1]
            partner, result = replays[-1] if replays[-1][1].verified else replays[0]
            verified = result.verified
            path = result.path
            if not verified and not config.keep_unverified:
                others = f" (nor did {tried - 1} other good path(s) of the tree)" if tried > 1 else ""
                return RevisionRejected(
                    pair.pair_id, pair.run_id, pair.iteration, f"unverified: {first.reason}{others}"
                )
        provenance: dict[str, Any] = {
            "pair_id": pair.pair_id,
            "source": pair.source,
            "run_id": pair.run_id,
            "iteration": pair.iteration,
            "tree_id": pair.tree_id,
            "bad_leaf_id": pair.bad_leaf_id,
            "good_leaf_id": partner.leaf_id,
            "divergence_node_id": pair.divergence_node_id,
            "shared_steps": partner.shared,
            # which good path the revision continues with (config.partner): the pair's own, or the
            # tree's good path that branches off the bad one nearer to t' (then pair_* name the pair's)
            "partner": "pair" if partner.own else "adjacent",
            "partners_tried": tried,
            "transition_index": marked.transition_index,
            "critic_strategy": marked.strategy,
            "model_version": marked.model_version,
            "template_id": reflection.template_id,
            "reflection": reflection.text,
            "verified": verified,
            "task_key": pair.task_key,
        }
        if pair.source == "trace":
            provenance["trace_id"] = pair.bad_leaf_id
            if pair.bad.task != pair.good.task:  # matched by task key; the sample keeps the failed task
                provenance["good_task"] = pair.good.task
        masking = masking or LossMasking()
        masked, provenance["loss_masked"] = revision_masks(
            path, mask_invalid_steps=masking.invalid_steps, mask_loop_steps=masking.loop_steps
        )
        if len(masked) == len(path.good):
            return RevisionRejected(
                pair.pair_id,
                pair.run_id,
                pair.iteration,
                "splice: nothing to train: every step of the good continuation was rejected by the "
                "environment or repeats a loop (weight 0)",
            )
        sample_id = derived_id("revision", pair.pair_id)
        if not partner.own:
            provenance["pair_good_leaf_id"] = pair.good_leaf_id
            provenance["pair_shared_steps"] = pair.shared_steps
        sample = revision_sample(
            sample_id, pair.bad, partner.path, path, reflection.text, provenance, masked=masked
        )
        return RevisionMaterialized(
            sample_id=sample_id,
            pair_id=pair.pair_id,
            run_id=pair.run_id,
            iteration=pair.iteration,
            sample=sample,
            template_id=reflection.template_id,
            revision_length=path.revision_length,
            verified=verified,
        )

    async def on_progress(self, recorded: RecordedEvent) -> HandlerResult:
        """TreeCompleted / SearchFailed / RevisionMaterialized / RevisionRejected, once committed:
        maybe the iteration is now complete."""
        event = recorded.event
        assert isinstance(event, TreeCompleted | SearchFailed | RevisionMaterialized | RevisionRejected)
        if event.run_id is None:
            return HandlerResult()
        meta = caused_by(recorded, SERVICE_NAME)
        return HandlerResult(
            await iteration_dataset_events(
                self.store, event.run_id, event.iteration, meta, service=SERVICE_NAME
            )
        )
