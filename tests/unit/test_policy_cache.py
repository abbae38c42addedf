"""PolicyCache: a long-lived worker keeps at most ``max_open`` models open (least recently used
closed first), a model evicted while in use stays usable until its lease ends, a failed open is
retried, and concurrent first uses open a model once. The policies are the project's noisy expert
(a real Policy), recording when they are closed."""

from __future__ import annotations

import asyncio

import pytest

from core.llm.policy_cache import PolicyCache
from core.llm.ports import Message, PolicyError
from search_service.noisy_expert import NoisyExpertPolicy, from_ref


class Recorded(NoisyExpertPolicy):
    def __init__(self, ref: str, log: list[tuple[str, str]]) -> None:
        base = from_ref(ref)
        assert base is not None
        super().__init__(mistake_rate=base.mistake_rate, garbage_rate=base.garbage_rate, seed=0)
        self.ref, self.log, self.is_closed = ref, log, False

    async def close(self) -> None:
        self.is_closed = True
        self.log.append(("close", self.ref))


def cache(max_open: int) -> tuple[PolicyCache, list[tuple[str, str]]]:
    log: list[tuple[str, str]] = []

    def opener(ref: str) -> Recorded:
        log.append(("open", ref))
        if "fail" in ref:
            raise PolicyError(f"cannot open {ref}")
        return Recorded(ref, log)

    return PolicyCache(opener, max_open=max_open), log


A, B, C = (f"noisy-expert?mistake={m}" for m in ("0.1", "0.2", "0.3"))
TASK = [[Message("user", "Crafting commands:\ncraft 4 oak planks using 1 oak logs\nGoal: craft oak planks.")]]


async def test_keeps_at_most_max_open_and_closes_the_least_recently_used():
    policies, log = cache(max_open=2)
    for ref in (A, B, A, C):  # A used after B: B is the least recently used when C opens
        async with policies.lease(ref) as policy:
            assert (await policy.sample(TASK, n=1, seed=1))[0][0].text
    # B is closed before C loads: the two are never in memory together
    assert log == [("open", A), ("open", B), ("close", B), ("open", C)]
    assert policies.open_refs() == [A, C]
    assert (policies.opened, policies.closed) == (3, 1)
    async with policies.lease(B):  # reopened: the oldest (A) goes
        pass
    assert log[-2:] == [("close", A), ("open", B)] and policies.open_refs() == [C, B]
    await policies.close()
    assert sorted(log[-2:]) == [("close", B), ("close", C)] and policies.open_refs() == []


async def test_a_model_evicted_while_leased_stays_usable_until_the_lease_ends():
    policies, log = cache(max_open=1)
    async with policies.lease(A) as held:
        async with policies.lease(B):
            pass  # B opened: A is evicted but still leased
        assert policies.open_refs() == [B] and not held.is_closed  # type: ignore[attr-defined]
        assert (await held.sample(TASK, n=2, seed=3))[0][1].text  # still works
    assert held.is_closed  # type: ignore[attr-defined]
    assert log == [("open", A), ("open", B), ("close", A)]


async def test_close_idle_closes_what_no_lease_holds_and_keeps_the_rest():
    policies, log = cache(max_open=3)
    for ref in (A, B):
        async with policies.lease(ref):
            pass
    async with policies.lease(C) as held:
        assert await policies.close_idle() == 2  # A and B: nothing leases them
        assert policies.open_refs() == [C] and not held.is_closed  # type: ignore[attr-defined]
        assert (await held.sample(TASK, n=1, seed=1))[0][0].text  # the leased one still works
    assert log[:3] == [("open", A), ("open", B), ("open", C)]
    assert sorted(log[3:5]) == [("close", A), ("close", B)]
    assert policies.open_refs() == [C] and await policies.close_idle() == 1
    assert policies.open_refs() == [] and log[-1] == ("close", C)
    async with policies.lease(A):  # a closed model opens again on its next use
        pass
    assert log[-1] == ("open", A) and (policies.opened, policies.closed) == (4, 3)


async def test_the_same_model_leased_at_once_opens_once_and_shares_one_policy():
    policies, log = cache(max_open=1)

    async def use() -> object:
        async with policies.lease(A) as policy:
            await asyncio.sleep(0)
            return policy

    first, second, third = await asyncio.gather(use(), use(), use())
    assert first is second is third and log == [("open", A)]


async def test_a_failed_open_raises_and_the_next_lease_tries_again():
    policies, log = cache(max_open=2)
    bad = "noisy-expert?mistake=0.5&fail"
    for _ in range(2):
        with pytest.raises(PolicyError, match="cannot open"):
            async with policies.lease(bad):
                pass
    assert log == [("open", bad), ("open", bad)]
    assert policies.open_refs() == []  # a failed open takes no place among the open models
    async with policies.lease(A):  # a failed entry holds no model and is never closed
        pass
    assert ("close", bad) not in log


def test_max_open_must_be_at_least_one():
    with pytest.raises(ValueError, match="max_open must be >= 1"):
        PolicyCache(lambda ref: Recorded(ref, []), max_open=0)


async def test_the_search_worker_batches_the_trees_of_one_model_through_one_wrapper():
    """search_service's BatchedPolicies: trees searching with the same model at once get ONE
    BatchingPolicy (their calls batch together); when the last ends the wrapper goes, the model
    stays open in the cache (closed only by the cache)."""
    from search_service.service import BatchedPolicies

    policies, log = cache(max_open=2)
    batched = BatchedPolicies(policies, max_batch=8)
    seen: list[object] = []

    async def tree(seed: int) -> None:
        async with batched.lease(A) as policy:
            seen.append(policy)
            await policy.sample(TASK, n=2, seed=seed)

    await asyncio.gather(tree(1), tree(2))
    assert seen[0] is seen[1] and seen[0].stats.backend_calls == 1  # type: ignore[attr-defined]
    async with batched.lease(A) as later:
        assert later is not seen[0] and later.inner is seen[0].inner  # type: ignore[attr-defined]
    assert log == [("open", A)]  # one model, never closed by the wrappers
    await policies.close()
    assert log == [("open", A), ("close", A)]


async def test_open_models_are_counted_for_prometheus():
    from prometheus_client import REGISTRY

    log: list[tuple[str, str]] = []
    policies = PolicyCache(lambda ref: Recorded(ref, log), max_open=1, name="test-metrics")

    def value(metric: str) -> float | None:
        return REGISTRY.get_sample_value(metric, {"cache": "test-metrics"})

    for ref in (A, B, A):
        async with policies.lease(ref):
            assert value("agentr_worker_models_open") == 1.0
    assert value("agentr_worker_models_opened_total") == 3.0
    await policies.close()
    assert value("agentr_worker_models_open") == 0.0


async def test_a_model_still_opening_is_not_evicted_by_a_concurrent_first_use():
    """Three models asked for at once with room for one, while closing the idle one suspends: the
    model still opening for a lease is kept for it (evicted, closed when that lease ends), never
    cancelled under its user."""
    log: list[tuple[str, str]] = []

    class SlowClose(Recorded):
        async def close(self) -> None:
            await asyncio.sleep(0.01)
            await super().close()

    def opener(ref: str) -> Recorded:
        log.append(("open", ref))
        return SlowClose(ref, log)

    policies = PolicyCache(opener, max_open=1)
    async with policies.lease(A):
        pass

    async def use(ref: str) -> str:
        async with policies.lease(ref) as policy:
            return (await policy.sample(TASK, n=1, seed=1))[0][0].text

    texts = await asyncio.gather(use(B), use(C))
    assert all(texts)
    assert sorted(log) == sorted([("open", A), ("close", A), ("open", B), ("open", C), ("close", B)])
    assert policies.open_refs() == [C]
