"""Owns what the search engine is asked and how it reports: the ``TreeRequest`` (one task of one
environment with one model, and the search config), the ``EventSink`` its events go to, the
``StopCheck`` asked between expansions and the ``SearchStopped`` it raises, the ids of a tree's
events (derived from the tree id and the event's place, so a resumed search appends nothing twice),
and the ``SearchStats`` of a run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace

from core.domain.events import DomainEvent, Metadata, NewEvent, SearchRequested
from core.domain.ids import derived_id, tree_stream
from core.domain.mcts import SearchConfig

EventSink = Callable[[Sequence[NewEvent]], Awaitable[None]]
StopCheck = Callable[[], Awaitable[str | None]]
"""Asked between expansions: a reason to stop now (the run was cancelled), or None to go on."""


class SearchStopped(Exception):
    """The search stopped before its budget because ``StopCheck`` gave ``reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class TreeRequest:
    """What to search: one task of one environment with one model, and how."""

    tree_id: str
    env_uri: str
    task_id: str
    model_ref: str
    config: SearchConfig = field(default_factory=SearchConfig)
    run_id: str | None = None
    iteration: int = 0

    @classmethod
    def from_event(cls, event: SearchRequested) -> TreeRequest:
        """From a SearchRequested; its ``seed`` overrides the config's (SearchConfigError if bad)."""
        config = replace(SearchConfig.from_dict(dict(event.search_config)), seed=event.seed)
        return cls(
            tree_id=event.tree_id,
            env_uri=event.env_uri,
            task_id=event.task_id,
            model_ref=event.model_ref,
            config=config,
            run_id=event.run_id,
            iteration=event.iteration,
        )


@dataclass
class SearchStats:
    expansions: int = 0
    policy_calls: int = 0
    env_steps: int = 0
    replay_steps: int = 0
    search_seconds: float = 0.0  # wall time of the whole run
    policy_seconds: float = 0.0  # time waiting for the policy
    env_seconds: float = 0.0  # time in env resets/steps/clones
    leaves_recorded: int = 0  # terminal children recorded on the way (LeafRecorded)
    exhausted: bool = False  # the root was exhausted before the descent budget was spent
    constrained_expansions: int = 0  # expansions whose Action lines were limited to valid actions


def tree_event(
    tree_id: str, metadata: Metadata, event: DomainEvent, *key: object, stream: str | None = None
) -> NewEvent:
    """``event`` of tree ``tree_id`` for the store: on the tree's stream unless ``stream`` is given,
    its id derived from the tree id, the event's type and ``key`` (its place in the tree)."""
    return NewEvent(
        stream_id=stream or tree_stream(tree_id),
        event=event,
        metadata=metadata,
        event_id=derived_id(tree_id, type(event).__name__, *key),
    )
