"""Owns the search engine: one tree's MCTS driven with a real Env and Policy, written as events.

``TreeSearch.run`` resets the environment, writes ``TreeStarted`` + the root node, then performs
``iterations`` descents. A descent selects by UCT through expanded nodes; an unexpanded node is
expanded by ONE policy call for ``n_candidates`` completions, parsed and deduplicated on the
normalised action, each distinct action stepped from the node's restored state (see
``search_service.env_states``). Every child that is terminal when stepped (done, failure,
max_depth) is a leaf at once (``core.domain.mcts``, "keeping what the search sees"): a
``LeafRecorded`` backs it up and it is never selected again. The descent goes on into an open child;
it ends with ``RolloutFinished`` when the node it expanded has no open child left (at the first
terminal child: all were just stepped, none visited) or no completion parses ("no valid action").
When every path from the root has an outcome (the root is exhausted) the search stops before its
``iterations`` budget and ``TreeCompleted.exhausted`` says so. ``SearchConfig(record_terminal_children=
False)`` restores the old leaf-only rule (only the leaf a descent ends at is recorded; terminal
children are re-selected), for bench/search.py's comparison only. Each descent's events
(``NodesExpanded``, ``LeafRecorded``, ``RolloutFinished``) are handed to the sink together (one
append per descent), so a descent is stored whole or not at all. Prompts fit
the policy's context (``core.llm.context.fit_prompt``: oldest whole steps dropped, room left for
``max_tokens``) when the policy tells its context length. With ``constrain_actions`` an
expansion asks the node's state for its valid actions (``EnvStates.valid_actions``) and samples its
candidates' Action lines among them (``core.llm.ports.sample_turns``; free where the env lists none).
With ``constrain_tool_calls`` (the default) and a policy that can (``core.llm.ports.
constrains_tool_calls``: the hf backend) an expansion in a tool-calling environment (``env.tools``)
decodes each Action line as a call of one of its tools with schema-valid arguments, or a message
(``core.llm.tool_grammar.ToolCalls``); ``SearchStats.constrained_expansions`` counts them.

The in-memory tree is the domain ``SearchTree`` updated by applying exactly the events written, so
the tree in the store and the tree searched cannot drift apart. Event ids are derived from the tree
id and the event's place in the tree, and a run resumes from a stream's existing events
(``prior``): a crash mid-search loses nothing already appended and appends nothing twice.

At the end ``final_events`` builds ``GoodTrajectoryFound`` (one per good leaf), ``PairFound`` (the
chosen pairs, each in its own pair stream) and ``TreeCompleted`` (``search_service.tree_results``);
the caller appends those (the worker does it together with its tracking row). The request, sink,
stop check, event ids and stats are ``search_service.tree_request``'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from core.domain.events import (
    DomainEvent,
    LeafRecorded,
    Metadata,
    NewEvent,
    NodeRecord,
    NodesExpanded,
    RolloutFinished,
    TreeStarted,
)
from core.domain.ids import derived_id
from core.domain.mcts import (
    SearchTree,
    TerminalReason,
    clamp_reward,
    distinct_by,
    expansion_seed,
    select_child,
)
from core.domain.trajectory import Step
from core.envs.base import Env
from core.llm.context import fit_prompt
from core.llm.ports import ActionSpec, Policy, SamplingParams, constrains_tool_calls, sample_turns
from core.llm.prompts import ParsedAction, build_messages, parse_action
from core.llm.tool_grammar import tool_calls_of
from search_service.env_states import Candidate, EnvStates
from search_service.tree_request import (
    EventSink,
    SearchStats,
    SearchStopped,
    StopCheck,
    TreeRequest,
    tree_event,
)
from search_service.tree_results import tree_results

__all__ = ["EventSink", "SearchStats", "SearchStopped", "StopCheck", "TreeRequest", "TreeSearch"]

log = logging.getLogger(__name__)


class TreeSearch:
    """Searches one tree; see the module docstring."""

    def __init__(
        self,
        request: TreeRequest,
        env: Env,
        policy: Policy,
        sink: EventSink,
        *,
        metadata: Metadata | None = None,
        use_clone: bool = True,
        should_stop: StopCheck | None = None,
    ) -> None:
        self.should_stop = should_stop
        self.request = request
        self.config = request.config
        self.env = env
        self.policy = policy
        self.sink = sink
        self.metadata = metadata or Metadata(producer="search")
        self.states = EnvStates(env, request.task_id, use_clone=use_clone)
        self.stats = SearchStats()
        self.tree: SearchTree | None = None
        self.task = ""
        able = constrains_tool_calls(policy)  # a policy that cannot decodes tool envs freely
        self.tool_calls = tool_calls_of(env) if self.config.constrain_tool_calls and able else None

    # ---- event helpers -----------------------------------------------------------------------

    def _new(self, event: DomainEvent, *key: object) -> NewEvent:
        return tree_event(self.request.tree_id, self.metadata, event, *key)

    async def _check_stop(self) -> None:
        """Raise ``SearchStopped`` when ``should_stop`` gives a reason (before each expansion, so
        nothing of a cancelled search is expanded or recorded after the check sees the cancel)."""
        if self.should_stop is not None:
            reason = await self.should_stop()
            if reason is not None:
                raise SearchStopped(reason)

    def _max_depth(self) -> int:
        return min(self.config.max_depth, max(1, int(getattr(self.env, "max_steps", self.config.max_depth))))

    # ---- the search --------------------------------------------------------------------------

    async def run(self, prior: Sequence[DomainEvent] = ()) -> SearchTree:
        """Search until ``iterations`` rollouts exist (resuming from ``prior`` events if any)."""
        started_at = time.perf_counter()
        req = self.request
        root_id = derived_id(req.tree_id, "root")
        env_started = time.perf_counter()
        self.task = await self.states.start(root_id)
        self.stats.env_seconds += time.perf_counter() - env_started
        if any(isinstance(e, TreeStarted) for e in prior):
            tree = SearchTree.from_events(prior, max_depth=self._max_depth())
            log.info("tree %s: resuming at rollout %d/%d", req.tree_id, tree.rollouts, self.config.iterations)
        else:
            tree = SearchTree(req.tree_id, root_id, self._max_depth())
            started = TreeStarted(
                tree_id=req.tree_id,
                run_id=req.run_id,
                iteration=req.iteration,
                env_uri=req.env_uri,
                task_id=req.task_id,
                instruction=self.env.instruction,
                task=self.task,
                model_version=self.policy.model_version,
                search_config=self.config.to_dict(),
                root_id=root_id,
            )
            root = NodesExpanded(req.tree_id, (NodeRecord(root_id, None, 0, "", "", self.task),))
            tree.apply(root)
            await self.sink([self._new(started), self._new(root, "root")])
        self.tree = tree
        keep = self.config.record_terminal_children
        while tree.rollouts < self.config.iterations:
            if keep and tree.exhausted:
                self.stats.exhausted = True
                log.info(
                    "tree %s: exhausted after %d/%d rollouts (every path has a recorded outcome); stopping",
                    req.tree_id,
                    tree.rollouts,
                    self.config.iterations,
                )
                break
            await self._check_stop()
            await self._descend(tree)
        self.stats.env_steps = self.states.steps
        self.stats.replay_steps = self.states.replay_steps
        self.stats.search_seconds += time.perf_counter() - started_at
        log.info(
            "tree %s: done, %d nodes, %d rollouts, best reward %.2f (%s mode, %d env steps)",
            req.tree_id,
            len(tree.nodes),
            tree.rollouts,
            tree.best_reward,
            self.states.mode,
            self.states.steps,
        )
        return tree

    async def _descend(self, tree: SearchTree) -> None:
        rollout = tree.rollouts
        node_id = tree.root_id
        events: list[NewEvent] = []
        reason: TerminalReason | None = None
        keep = self.config.record_terminal_children
        while True:
            reason = tree.terminal_reason(node_id)
            if reason is not None:
                break  # old rule only: with ``keep`` a terminal node is closed and never selected
            if not tree.is_expanded(node_id):
                await self._check_stop()  # a rollout's events are written at its end: none are lost
                records = await self._expand(tree, node_id)
                if not records:
                    reason = "no valid action"
                    break
                expanded = NodesExpanded(tree.tree_id, tuple(records))
                tree.apply(expanded)
                events.append(self._new(expanded, node_id))
                if keep:
                    ended = self._record_terminal_children(
                        tree, rollout, [r.node_id for r in records], events
                    )
                    if ended is not None:
                        node_id, reason = ended
                        break
            node_id = select_child(tree, node_id, self.config.c_uct, skip_closed=keep)
        leaf = tree.node(node_id)
        finished = RolloutFinished(tree.tree_id, rollout, node_id, clamp_reward(leaf.reward), reason)
        events.append(self._new(finished, rollout))
        tree.apply(finished)
        await self.sink(events)
        log.info(
            "tree %s: rollout %d/%d ended at depth %d (%s, reward %.2f); %d nodes, best %.2f",
            tree.tree_id,
            rollout + 1,
            self.config.iterations,
            leaf.depth,
            reason,
            finished.reward,
            len(tree.nodes),
            tree.best_reward,
        )

    def _record_terminal_children(
        self, tree: SearchTree, rollout: int, children: list[str], events: list[NewEvent]
    ) -> tuple[str, TerminalReason] | None:
        """Record the just-created terminal ``children`` as leaves (applied and added to ``events``).

        When none of them is open, the descent ends: the first terminal child is left for the
        descent's ``RolloutFinished`` and returned with its reason; otherwise None (go on).
        """
        terminal = [(c, r) for c in children if (r := tree.terminal_reason(c)) is not None]
        if not terminal:
            return None
        ends_here = len(terminal) == len(children)
        for child_id, child_reason in terminal[1:] if ends_here else terminal:
            recorded = LeafRecorded(
                tree.tree_id, rollout, child_id, clamp_reward(tree.node(child_id).reward), child_reason
            )
            tree.apply(recorded)
            events.append(self._new(recorded, child_id))
            self.stats.leaves_recorded += 1
        return terminal[0] if ends_here else None

    async def _expand(self, tree: SearchTree, node_id: str) -> list[NodeRecord]:
        path = tree.path(node_id)
        steps = [Step(n.thought, n.action, n.observation, n.reward, n.done, n.valid) for n in path[1:]]
        messages = build_messages(self.env.instruction, self.task, steps)
        prompt = fit_prompt(self.policy, messages, reserve=self.config.max_tokens)
        listed: list[str] | None = None
        if self.config.constrain_actions:
            env_started = time.perf_counter()
            listed = await self.states.valid_actions(node_id, [(n.node_id, n.action) for n in path[1:]])
            self.stats.env_seconds += time.perf_counter() - env_started
        actions: ActionSpec = listed or self.tool_calls
        if actions:
            self.stats.constrained_expansions += 1
        policy_started = time.perf_counter()
        completions = await sample_turns(
            self.policy,
            [prompt],
            [actions] if actions else None,
            SamplingParams(
                n=self.config.n_candidates,
                temperature=self.config.temperature,
                max_tokens=self.config.max_tokens,
                seed=expansion_seed(self.config.seed, [n.action for n in path[1:]]),
            ),
        )
        self.stats.policy_seconds += time.perf_counter() - policy_started
        self.stats.policy_calls += 1
        self.stats.expansions += 1
        # a model may sample NUL, which PostgreSQL's JSON cannot hold: stored as U+FFFD (as replay does)
        texts = [c.text.replace("\x00", "\ufffd") for c in completions[0]]
        parsed: list[ParsedAction] = [p for p in (parse_action(t) for t in texts) if p]
        distinct = distinct_by(parsed, lambda p: p.normalized, self.config.n_candidates)
        if not distinct:
            return []
        candidates = [
            Candidate(derived_id(tree.tree_id, "node", node_id, p.normalized), p.action) for p in distinct
        ]
        env_started = time.perf_counter()
        results = await self.states.expand(node_id, [(n.node_id, n.action) for n in path[1:]], candidates)
        self.stats.env_seconds += time.perf_counter() - env_started
        depth = path[-1].depth + 1
        return [
            NodeRecord(
                node_id=candidate.node_id,
                parent_id=node_id,
                depth=depth,
                action=p.action,
                thought=p.thought,
                observation=result.observation,
                reward=clamp_reward(result.reward),
                done=result.done,
                valid=result.valid,
            )
            for candidate, p, result in zip(candidates, distinct, results, strict=True)
        ]

    # ---- results -----------------------------------------------------------------------------

    def final_events(self) -> list[NewEvent]:
        """GoodTrajectoryFound per good leaf, PairFound per chosen pair, then TreeCompleted."""
        tree = self.tree
        if tree is None:
            raise RuntimeError("final_events() before run()")
        return tree_results(
            tree,
            self.request,
            task=self.task,
            instruction=self.env.instruction,
            model_version=self.policy.model_version,
            metadata=self.metadata,
        )

    async def close(self) -> None:
        await self.states.close()
