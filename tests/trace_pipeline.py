"""The trace pipeline of the tests that ingest traces or pairs and wait for what follows: the relay,
the critic worker and the splice worker run in burst mode, in turn, for a fixed number of rounds, on
the real store and Redis bus (nothing faked but the critic's model opener, where a test passes one)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from core.bus.redis_streams import RedisStreamsBus
from core.llm.ports import Policy
from core.runtime.relay import Relay
from core.runtime.settings import Settings
from core.runtime.worker import Worker
from core.store.ports import EventStore
from critic_service.service import build_service as build_critic
from splice_service.service import build_service as build_splice


def settle_workers(
    store: EventStore,
    bus: RedisStreamsBus,
    settings: Settings,
    *,
    rounds: int = 4,
    critic_opener: Callable[[str], Policy] | None = None,
    **splice_options: Any,
) -> Callable[[], Awaitable[None]]:
    """``settle()``: ``rounds`` times relay -> critic -> relay -> splice, each worker until its
    stream is drained (burst mode). ``critic_opener`` opens the critic's models; ``splice_options``
    go to the splice worker's composition root (its own ``policy_opener`` for model reflections)."""
    opener = {} if critic_opener is None else {"policy_opener": critic_opener}
    critic = Worker(build_critic(settings, store, **opener), store, bus, settings)
    splice = Worker(build_splice(settings, store, **splice_options), store, bus, settings)
    relay = Relay(store, bus)

    async def settle() -> None:
        for _ in range(rounds):
            await relay.drain()
            await critic.run(burst=True)
            await relay.drain()
            await splice.run(burst=True)

    return settle
