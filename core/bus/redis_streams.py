"""Owns the Redis Streams adapter of the Bus port (redis-py asyncio).

Layout in Redis: one stream per topic (topic = event type) at ``{prefix}:ev:{topic}``, one consumer
group per consuming service, a dead-letter stream per topic at ``{prefix}:dlq:{topic}``.

- ``consume`` is one XREADGROUP over all the topics a worker listens to.
- ``reclaim`` is XAUTOCLAIM of entries idle longer than ``min_idle_ms``; the delivery counts of the
  claimed entries come from XPENDING (XAUTOCLAIM itself does not return them).
- ``trim`` runs a Lua script that, atomically, finds the oldest entry some group still needs (its
  oldest pending entry, or its last-delivered id when nothing is pending) and trims with XTRIM MINID
  below it, so an unacknowledged entry is never dropped (MAXLEN trimming would drop them).
- ``prune_consumers`` runs a Lua script that reads XINFO CONSUMERS and calls XGROUP DELCONSUMER on
  the idle consumers with no pending entry in one atomic step, so a consumer that reads a message
  between the check and the delete cannot exist (DELCONSUMER would drop its pending entries).
- The client's ``socket_timeout`` is set above the longest allowed block time, so a blocking
  XREADGROUP never times out on the socket first; a longer ``block_ms`` is refused with an error.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from core.bus.ports import BusError, BusMessage, ConsumerInfo, DeadLetter, Delivery

_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
_MAX_ERROR_CHARS = 4000

# KEYS[1] = stream. Returns the number of entries dropped. Stream ids are compared numerically
# (milliseconds, then sequence) because "10-0" < "9-0" as strings.
_TRIM_SCRIPT = """
local key = KEYS[1]
if redis.call('EXISTS', key) == 0 then return 0 end
local groups = redis.call('XINFO', 'GROUPS', key)
if #groups == 0 then return 0 end
local function parse(id)
  local dash = string.find(id, '-', 1, true)
  return tonumber(string.sub(id, 1, dash - 1)), tonumber(string.sub(id, dash + 1))
end
local best_ms, best_seq, best_id = nil, nil, nil
for _, group in ipairs(groups) do
  local name, last = nil, nil
  for i = 1, #group, 2 do
    if group[i] == 'name' then name = group[i + 1] end
    if group[i] == 'last-delivered-id' then last = group[i + 1] end
  end
  local summary = redis.call('XPENDING', key, name)
  local needed = last
  if tonumber(summary[1]) > 0 then needed = summary[2] end
  local ms, seq = parse(needed)
  if best_ms == nil or ms < best_ms or (ms == best_ms and seq < best_seq) then
    best_ms, best_seq, best_id = ms, seq, needed
  end
end
return redis.call('XTRIM', key, 'MINID', best_id)
"""


# KEYS[1] = stream; ARGV[1] = group, ARGV[2] = min idle ms, ARGV[3..] = consumers to keep.
# Returns the names deleted. A consumer is deleted only with zero pending entries.
_PRUNE_SCRIPT = """
local key, group, min_idle = KEYS[1], ARGV[1], tonumber(ARGV[2])
if redis.call('EXISTS', key) == 0 then
  return redis.error_reply('NOGROUP no such key ' .. key)
end
local keep = {}
for i = 3, #ARGV do keep[ARGV[i]] = true end
local pruned = {}
for _, consumer in ipairs(redis.call('XINFO', 'CONSUMERS', key, group)) do
  local name, pending, idle = nil, nil, nil
  for i = 1, #consumer, 2 do
    if consumer[i] == 'name' then name = consumer[i + 1] end
    if consumer[i] == 'pending' then pending = tonumber(consumer[i + 1]) end
    if consumer[i] == 'idle' then idle = tonumber(consumer[i + 1]) end
  end
  if not keep[name] and pending == 0 and idle > min_idle then
    redis.call('XGROUP', 'DELCONSUMER', key, group, name)
    pruned[#pruned + 1] = name
  end
end
return pruned
"""


def check_name(kind: str, name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise BusError(f"invalid {kind} name {name!r}: use letters, digits, '_', '.', '-' only")
    return name


class RedisStreamsBus:
    """The Bus port on Redis Streams. Connects lazily: constructing it does no I/O."""

    def __init__(
        self,
        url: str,
        prefix: str = "agentr",
        *,
        max_block_ms: int = 5_000,
        socket_margin_s: float = 5.0,
    ) -> None:
        self.prefix = check_name("prefix", prefix)
        if max_block_ms <= 0:
            raise BusError(f"max_block_ms must be positive, got {max_block_ms}")
        self.max_block_ms = max_block_ms
        self.socket_timeout = max_block_ms / 1000 + socket_margin_s
        self.url = url
        self._client: aioredis.Redis = aioredis.from_url(
            url,
            decode_responses=True,
            socket_timeout=self.socket_timeout,
            socket_connect_timeout=min(self.socket_timeout, 5.0),
            health_check_interval=30,
        )
        self._trim = self._client.register_script(_TRIM_SCRIPT)
        self._prune = self._client.register_script(_PRUNE_SCRIPT)

    # -- keys ----------------------------------------------------------------------------------

    def topic_key(self, topic: str) -> str:
        return f"{self.prefix}:ev:{check_name('topic', topic)}"

    def dlq_key(self, topic: str) -> str:
        return f"{self.prefix}:dlq:{check_name('topic', topic)}"

    def _topic_of(self, key: str) -> str:
        return key.split(":ev:", 1)[1]

    # -- Bus port ------------------------------------------------------------------------------

    async def publish(self, topic: str, messages: Sequence[BusMessage]) -> None:
        if not messages:
            return
        key = self.topic_key(topic)
        async with self._client.pipeline(transaction=False) as pipe:
            for message in messages:
                pipe.xadd(key, _encode(message))
            await pipe.execute()

    async def ensure_group(self, topic: str, group: str) -> None:
        check_name("group", group)
        try:
            await self._client.xgroup_create(self.topic_key(topic), group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def consume(
        self, topics: Sequence[str], group: str, consumer: str, count: int = 16, block_ms: int = 1000
    ) -> list[Delivery]:
        if not topics:
            raise BusError("consume needs at least one topic")
        if block_ms > self.max_block_ms:
            raise BusError(
                f"block_ms={block_ms} exceeds max_block_ms={self.max_block_ms} (the socket timeout "
                f"is {self.socket_timeout:.1f}s); build the bus with a larger max_block_ms"
            )
        check_name("group", group)
        check_name("consumer", consumer)
        streams: dict[Any, Any] = {self.topic_key(t): ">" for t in topics}
        try:
            reply = await self._client.xreadgroup(
                group, consumer, streams, count=max(1, count), block=max(0, block_ms) or None
            )
        except ResponseError as exc:
            raise _group_error(exc, group, topics) from exc
        deliveries: list[Delivery] = []
        for key, entries in _stream_items(reply):
            topic = self._topic_of(key)
            for message_id, fields in entries:
                if fields:
                    deliveries.append(Delivery(message_id, topic, _decode(fields), 1))
        return deliveries

    async def reclaim(
        self, topic: str, group: str, consumer: str, min_idle_ms: int, count: int = 16
    ) -> list[Delivery]:
        key = self.topic_key(topic)
        check_name("consumer", consumer)
        try:
            reply = await self._client.xautoclaim(
                key, group, consumer, min_idle_time=max(0, min_idle_ms), start_id="0-0", count=max(1, count)
            )
        except ResponseError as exc:
            raise _group_error(exc, group, [topic]) from exc
        claimed = [(mid, fields) for mid, fields in reply[1] if fields]
        if not claimed:
            return []
        async with self._client.pipeline(transaction=False) as pipe:
            for message_id, _ in claimed:
                pipe.xpending_range(key, group, min=message_id, max=message_id, count=1)
            pending = await pipe.execute()
        deliveries = []
        for (message_id, fields), rows in zip(claimed, pending, strict=True):
            times = int(rows[0]["times_delivered"]) if rows else 1
            deliveries.append(Delivery(message_id, topic, _decode(fields), times))
        return deliveries

    async def ack(self, topic: str, group: str, message_ids: Sequence[str]) -> None:
        if message_ids:
            await self._client.xack(self.topic_key(topic), group, *message_ids)

    async def touch(self, topic: str, group: str, consumer: str, message_ids: Sequence[str]) -> None:
        if message_ids:
            # XCLAIM ... JUSTID resets the idle time and does not increment the delivery counter
            await self._client.xclaim(
                self.topic_key(topic),
                group,
                consumer,
                min_idle_time=0,
                message_ids=list(message_ids),
                justid=True,
            )

    async def dead_letter(self, delivery: Delivery, group: str, error: str) -> None:
        fields = _encode(delivery.message)
        fields.update(g=group, id=delivery.message_id, n=str(delivery.deliveries), e=error[:_MAX_ERROR_CHARS])
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.xadd(self.dlq_key(delivery.topic), fields)
            pipe.xack(self.topic_key(delivery.topic), group, delivery.message_id)
            await pipe.execute()

    async def trim(self, topic: str) -> int:
        return int(await self._trim(keys=[self.topic_key(topic)]))

    async def dead_letters(self, topic: str, limit: int = 100) -> list[DeadLetter]:
        rows: Any = await self._client.xrange(self.dlq_key(topic), count=limit)
        return [
            DeadLetter(
                message=_decode(fields),
                group=fields["g"],
                original_id=fields["id"],
                deliveries=int(fields["n"]),
                error=fields["e"],
            )
            for _, fields in rows
        ]

    async def consumers(self, topic: str, group: str) -> list[ConsumerInfo]:
        check_name("group", group)
        try:
            rows: Any = await self._client.xinfo_consumers(self.topic_key(topic), group)
        except ResponseError as exc:
            raise _group_error(exc, group, [topic]) from exc
        found = [ConsumerInfo(str(r["name"]), int(r["pending"]), int(r["idle"])) for r in rows]
        return sorted(found, key=lambda info: info.name)

    async def prune_consumers(
        self, topic: str, group: str, min_idle_ms: int, *, keep: Sequence[str] = ()
    ) -> list[str]:
        check_name("group", group)
        if min_idle_ms < 0:
            raise BusError(f"min_idle_ms must be >= 0, got {min_idle_ms}")
        keep_names = [check_name("consumer", name) for name in keep]
        try:
            pruned = await self._prune(keys=[self.topic_key(topic)], args=[group, min_idle_ms, *keep_names])
        except ResponseError as exc:
            raise _group_error(exc, group, [topic]) from exc
        return sorted(str(name) for name in pruned)

    async def pending_count(self, topic: str, group: str) -> int:
        try:
            summary = await self._client.xpending(self.topic_key(topic), group)
        except ResponseError as exc:
            if "NOGROUP" in str(exc):
                return 0
            raise
        return int(summary["pending"])

    async def topic_length(self, topic: str) -> int:
        return int(await self._client.xlen(self.topic_key(topic)))

    async def ping(self) -> bool:
        return bool(await self._client.ping())

    async def close(self) -> None:
        await self._client.aclose()


def _group_error(exc: ResponseError, group: str, topics: Sequence[str]) -> Exception:
    if "NOGROUP" in str(exc) or "no such key" in str(exc):  # no such key: the topic has no stream yet
        return BusError(f"group {group!r} does not exist on topic(s) {list(topics)}; call ensure_group first")
    return exc


def _encode(message: BusMessage) -> dict[Any, Any]:
    return {"p": str(message.position), "t": message.event_type, "s": message.stream_id}


def _decode(fields: dict[str, str]) -> BusMessage:
    return BusMessage(position=int(fields["p"]), event_type=fields["t"], stream_id=fields["s"])


def _stream_items(reply: Any) -> list[tuple[str, list[tuple[str, dict[str, str]]]]]:
    """XREADGROUP's RESP2 reply (the client's default protocol) as (key, entries) pairs."""
    return [(key, entries) for key, entries in reply or []]
