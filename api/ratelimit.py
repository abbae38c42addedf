"""Owns the API's rate limits: token buckets for failed authentications and per key, and the
per-key bound on open follow streams.

Two rate limits, both answered with 429 and ``Retry-After`` (whole seconds until a token is back):

* failed authentications (``AGENTR_AUTH_FAILURES_PER_MIN``, burst ``AGENTR_AUTH_FAILURE_BURST``),
  checked BEFORE a presented key is verified, so a client guessing secrets cannot make the server
  run scrypt faster than this; successful requests cost nothing here. They are counted per client
  address AND key prefix: guessing the secret of one key is limited per address, while a valid key
  behind the same address (one NAT for many clients) is not locked out by others' wrong keys. A
  presented prefix that is no live key's (only such a key is hashed against a dummy) is refused
  once the ADDRESS as a whole used up the same budget, so spraying made-up prefixes cannot buy
  unbounded scrypt work either (api/deps.py ``authenticate``);
* requests per API key (``AGENTR_KEY_REQUESTS_PER_S``, burst ``AGENTR_KEY_REQUEST_BURST``), counted
  after the key verified.

Open ``GET /v1/events?follow=true`` streams per key (``AGENTR_MAX_FOLLOW_STREAMS_PER_KEY``): the next
one is a 429 naming the setting until one ends (``open_stream`` / ``StreamSlot.release``).

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
        self,
        auth_failures_per_min: float,
        auth_failure_burst: int,
        key_per_s: float,
        key_burst: int,
        *,
        follow_streams_per_key: int = 0,
    ) -> None:
        self.auth_failures = TokenBuckets(auth_failures_per_min / 60.0, auth_failure_burst)
        self.per_key = TokenBuckets(key_per_s, key_burst)
        self.follow_streams_per_key = follow_streams_per_key
        self._open_streams: dict[str, int] = {}

    @staticmethod
    def _pair(client: str, prefix: str | None) -> str:
        return f"{client} {prefix or '-'}"  # an address never holds a space

    def auth_wait(self, client: str, prefix: str | None = None) -> int | None:
        """Seconds until ``client`` may fail to authenticate again with key prefix ``prefix``
        (None: the whole address); None when it may now."""
        return self.auth_failures.retry_after(self._pair(client, prefix) if prefix else client)

    def check_client(self, client: str, prefix: str | None = None) -> None:
        """429 when ``client`` has used up its failed authentications with ``prefix`` (None: from the
        address as a whole), checked before verifying a key."""
        wait = self.auth_wait(client, prefix)
        if wait is not None:
            what = "with this key prefix from this address" if prefix else "from this address"
            raise too_many(f"failed authentications {what}", wait)

    def failed(self, client: str, prefix: str | None = None) -> None:
        """Count a failed authentication of ``client`` with ``prefix``: against the pair and the address."""
        self.auth_failures.take(client)
        if prefix:
            self.auth_failures.take(self._pair(client, prefix))

    def check_key(self, prefix: str) -> None:
        wait = self.per_key.take(prefix)
        if wait is not None:
            raise too_many("requests with this API key", wait)

    def open_stream(self, key: str) -> StreamSlot:
        """A follow-stream slot of ``key``; 429 when it holds ``follow_streams_per_key`` already."""
        held = self._open_streams.get(key, 0)
        if self.follow_streams_per_key and held >= self.follow_streams_per_key:
            raise ApiError(
                429,
                f"this key already holds {held} open follow streams of GET /v1/events, the most "
                "AGENTR_MAX_FOLLOW_STREAMS_PER_KEY allows: close one first",
                code="rate_limited",
                headers={"Retry-After": "5"},
            )
        self._open_streams[key] = held + 1
        return StreamSlot(self, key)

    def _close_stream(self, key: str) -> None:
        left = self._open_streams.get(key, 0) - 1
        if left > 0:
            self._open_streams[key] = left
        else:
            self._open_streams.pop(key, None)

    def open_streams(self, key: str) -> int:
        """How many follow streams ``key`` holds open now."""
        return self._open_streams.get(key, 0)


class StreamSlot:
    """One open follow stream of a key; ``release`` (idempotent) frees it."""

    def __init__(self, limits: RateLimits, key: str) -> None:
        self._limits: RateLimits | None = limits
        self.key = key

    def release(self) -> None:
        if self._limits is not None:
            self._limits._close_stream(self.key)
            self._limits = None
