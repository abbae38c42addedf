"""Owns the API's rate limits: token buckets per client address (failed authentications) and per key.

Two limits, both answered with 429 and ``Retry-After`` (whole seconds until a token is back):

* failed authentications per client address (``AGENTR_AUTH_FAILURES_PER_MIN``, burst
  ``AGENTR_AUTH_FAILURE_BURST``): checked BEFORE a presented key is verified, so a client guessing
  secrets cannot make the server run scrypt faster than this; successful requests cost nothing here;
* requests per API key (``AGENTR_KEY_REQUESTS_PER_S``, burst ``AGENTR_KEY_REQUEST_BURST``), counted
  after the key verified.

A rate of 0 turns a limit off. Buckets live in this process (one API replica); several replicas
each apply the limit. The client address is the connection's peer (``request.client``); behind a
reverse proxy, name it in ``AGENTR_TRUSTED_PROXIES`` (api/server.py) so its X-Forwarded-For is believed.
At most ``MAX_BUCKETS`` buckets are kept (least recently used dropped first), so memory stays bounded
under address spraying.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable

from api.errors import ApiError

MAX_BUCKETS = 100_000


class TokenBuckets:
    """Token buckets by name: ``rate`` tokens per second refill up to ``burst``."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = max(1, burst)
        self._clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # name -> (tokens, at)

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def _level(self, name: str) -> float:
        now = self._clock()
        tokens, at = self._buckets.get(name, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.rate)
        self._buckets[name] = (tokens, now)
        self._buckets.move_to_end(name)
        while len(self._buckets) > MAX_BUCKETS:
            self._buckets.popitem(last=False)
        return tokens

    def retry_after(self, name: str) -> int | None:
        """Whole seconds until ``name`` has a token again; None when it has one now."""
        if not self.enabled:
            return None
        tokens = self._level(name)
        if tokens >= 1.0:
            return None
        return max(1, math.ceil((1.0 - tokens) / self.rate))

    def take(self, name: str) -> int | None:
        """Spend one token of ``name``; the Retry-After seconds when there was none to spend."""
        wait = self.retry_after(name)
        if wait is None and self.enabled:
            tokens, at = self._buckets[name]
            self._buckets[name] = (tokens - 1.0, at)
        return wait


def too_many(what: str, retry_after: int) -> ApiError:
    return ApiError(
        429,
        f"too many {what}; retry in {retry_after} s",
        code="rate_limited",
        headers={"Retry-After": str(retry_after)},
    )


class RateLimits:
    """The API process's limits (built once in the lifespan from the settings)."""

    def __init__(
        self, auth_failures_per_min: float, auth_failure_burst: int, key_per_s: float, key_burst: int
    ) -> None:
        self.auth_failures = TokenBuckets(auth_failures_per_min / 60.0, auth_failure_burst)
        self.per_key = TokenBuckets(key_per_s, key_burst)

    def check_client(self, client: str) -> None:
        """429 when ``client`` has used up its failed authentications (before verifying a key)."""
        wait = self.auth_failures.retry_after(client)
        if wait is not None:
            raise too_many("failed authentications from this address", wait)

    def failed(self, client: str) -> None:
        self.auth_failures.take(client)

    def check_key(self, prefix: str) -> None:
        wait = self.per_key.take(prefix)
        if wait is not None:
            raise too_many("requests with this API key", wait)
