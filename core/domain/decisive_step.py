"""Owns the replay critic's search for the decisive step: the step of a failed trajectory after
which success is lost, found from Monte Carlo estimates of the chance of success after each prefix.
Pure: no I/O. The adapter (``critic_service/strategies/replay.py``) answers the probes by replaying a
prefix in the environment and running continuations; this module only decides which prefix to probe
next and what the probes say.

The quantity. For a trajectory ``a_0 ... a_{T-1}`` of a task, ``V(k)`` is the share of ``m``
continuations (a continuation policy finishing the episode after the first ``k`` actions were
replayed from the task's reset) that succeed. The **decisive step** ``t*`` is the first ``k`` with
``V(k+1) < theta * V(start)`` (``theta`` 0.5 by default; ``start`` is 0 for a trace, the divergence
for a search pair): the action ``a_{t*}`` after which the continuations stop succeeding.

The search (OmegaPRM's binary search for the first error, under its assumption that ``V`` falls
monotonically along one path): probe ``V(start)``, then ``V(T)``, then bisect ``[start, T]`` keeping
``lo`` a prefix still above the threshold and ``hi`` one below it, until ``hi = lo + 1``: ``t* = lo``.
That is about ``ceil(log2(T - start)) + 2`` probes. With ``confirm`` (a sampled, noisy policy), the
two boundary prefixes are probed again once each while the budget allows; pooled counts decide, and
a boundary the second look overturns is searched again from the other probed prefixes.

The verdict names what it is, never a guess:

- ``decisive``: ``t*`` found; the probes on both sides of it are in the verdict;
- ``unverifiable``: ``V(start)`` is 0 (the continuation policy does not solve the task from there,
  so it can verify nothing) or the adapter says the environment cannot replay (``unverifiable_verdict``:
  no environment, no reset-to-task, a replay that does not reproduce the recorded observations);
- ``no_decisive_step``: ``V(T)`` is still above the threshold (the path was cut off while it could
  still succeed: success was not lost inside it);
- ``budget_exhausted``: the budget of continuations ran out before the bracket closed (the bracket
  ``[lo, hi]`` is reported, not a step).

Budgets are in continuations (``budget``: most continuations per trajectory); a probe's cost is what
the adapter reports it spent (0 for a prefix whose replay already ended the episode).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

VerdictStatus = Literal["decisive", "unverifiable", "no_decisive_step", "budget_exhausted"]
DEFAULT_THETA = 0.5


class ReplaySearchError(ValueError):
    """Bad search settings or a probe answer that does not fit (names the problem)."""


@dataclass(frozen=True)
class Probe:
    """One probe: ``m`` continuations after the first ``prefix`` actions, ``successes`` of them
    succeeded, ``spent`` continuations actually run (0 where the replayed prefix already ended the
    episode); ``detail`` is the adapter's evidence (policy, continuation actions), kept as given."""

    prefix: int
    successes: int
    m: int
    spent: int
    detail: Any = None

    def __post_init__(self) -> None:
        if self.m < 1 or not 0 <= self.successes <= self.m or self.spent < 0 or self.prefix < 0:
            raise ReplaySearchError(
                f"probe at prefix {self.prefix}: need m >= 1, 0 <= successes <= m and spent >= 0, "
                f"got successes={self.successes}, m={self.m}, spent={self.spent}"
            )


@dataclass(frozen=True)
class ReplayVerdict:
    status: VerdictStatus
    decisive_step: int | None
    reason: str
    probes: tuple[Probe, ...] = ()
    continuations: int = 0
    confirmed: bool = False
    bracket: tuple[int, int] | None = None

    def value(self, prefix: int) -> float | None:
        """``V(prefix)`` pooled over this verdict's probes of that prefix (None: not probed)."""
        return pooled_value(self.probes, prefix)

    def values(self) -> dict[int, float]:
        """Every probed prefix's pooled ``V``, by prefix length."""
        return {k: v for k in sorted({p.prefix for p in self.probes}) if (v := self.value(k)) is not None}


def pooled_value(probes: Sequence[Probe], prefix: int) -> float | None:
    hits = [p for p in probes if p.prefix == prefix]
    if not hits:
        return None
    return sum(p.successes for p in hits) / sum(p.m for p in hits)


def unverifiable_verdict(reason: str) -> ReplayVerdict:
    """The verdict for a trajectory the replay critic cannot check (the reason names why)."""
    return ReplayVerdict("unverifiable", None, f"unverifiable: {reason}")


@dataclass
class DecisiveStepSearch:
    """The binary search as a state machine (module docstring): ask ``next_prefix()``, answer it
    with ``record(probe)``, repeat until it returns None; then ``verdict()``."""

    length: int
    start: int = 0
    m: int = 1
    budget: int = 16
    theta: float = DEFAULT_THETA
    confirm: bool = False
    probes: list[Probe] = field(default_factory=list)
    _lo: int | None = None
    _hi: int | None = None
    _asked: int | None = None
    _confirming: list[int] = field(default_factory=list)  # boundary prefixes still to re-probe
    _confirmed: set[tuple[int, int]] = field(default_factory=set)
    _final: ReplayVerdict | None = None

    def __post_init__(self) -> None:
        if self.length < 1:
            raise ReplaySearchError(f"a trajectory to search needs at least one step, got {self.length}")
        if not 0 <= self.start < self.length:
            raise ReplaySearchError(f"start must be in [0, {self.length}), got {self.start}")
        if self.m < 1:
            raise ReplaySearchError(f"m (continuations per probe) must be >= 1, got {self.m}")
        if self.budget < self.m:
            raise ReplaySearchError(
                f"a budget of {self.budget} continuations cannot pay one probe of m={self.m}"
            )
        if not 0.0 < self.theta <= 1.0:
            raise ReplaySearchError(f"theta must be in (0, 1], got {self.theta}")

    # ---- bookkeeping ---------------------------------------------------------------------------
    @property
    def spent(self) -> int:
        return sum(p.spent for p in self.probes)

    def value(self, prefix: int) -> float | None:
        return pooled_value(self.probes, prefix)

    def _threshold(self) -> float:
        return self.theta * (self.value(self.start) or 0.0)

    def _bad(self, prefix: int) -> bool:
        value = self.value(prefix)
        return value is not None and value < self._threshold()

    def _affordable(self, probes: int = 1) -> bool:
        return self.spent + probes * self.m <= self.budget

    def _finish(self, status: VerdictStatus, step: int | None, reason: str, confirmed: bool = False) -> None:
        bracket = (self._lo, self._hi) if self._lo is not None and self._hi is not None else None
        self._final = ReplayVerdict(status, step, reason, tuple(self.probes), self.spent, confirmed, bracket)

    def _ask(self, prefix: int) -> int:
        self._asked = prefix
        return prefix

    # ---- the protocol --------------------------------------------------------------------------
    def next_prefix(self) -> int | None:
        """The prefix length to probe next (None: the verdict is ready)."""
        if self._final is not None:
            return None
        if self.value(self.start) is None:
            return self._ask(self.start)
        if self.value(self.start) == 0.0:
            tried = sum(p.m for p in self.probes if p.prefix == self.start)
            self._finish(
                "unverifiable",
                None,
                f"unverifiable: the continuation policy succeeds after prefix {self.start} in 0 of "
                f"{tried} continuations, so it can verify nothing",
            )
            return None
        if self.value(self.length) is None:
            return self._ask(self.length) if self._affordable() else self._exhausted()
        if self._lo is None or self._hi is None:
            if not self._bad(self.length):
                self._finish(
                    "no_decisive_step",
                    None,
                    f"no decisive step: continuations after the whole path (prefix {self.length}) still "
                    f"succeed {self.value(self.length):.2f} of the time, not below {self._threshold():.2f}",
                )
                return None
            self._lo, self._hi = self.start, self.length
        if self._confirming:
            return self._ask(self._confirming[0])
        if self._hi - self._lo > 1:
            return self._ask((self._lo + self._hi) // 2) if self._affordable() else self._exhausted()
        boundary = (self._lo, self._hi)
        if self.confirm and boundary not in self._confirmed and self._affordable(2):
            self._confirmed.add(boundary)
            self._confirming = list(boundary)
            return self._ask(self._confirming[0])
        lo, hi = boundary
        self._finish(
            "decisive",
            lo,
            f"decisive step {lo}: continuations succeed {self.value(lo):.2f} after prefix {lo} and "
            f"{self.value(hi):.2f} after prefix {hi} (threshold {self._threshold():.2f})",
            confirmed=not self.confirm or boundary in self._confirmed,
        )
        return None

    def _exhausted(self) -> int | None:
        """Finish as ``budget_exhausted``; returns None (no prefix to probe)."""
        where = f" (bracket [{self._lo}, {self._hi}])" if self._lo is not None else ""
        self._finish(
            "budget_exhausted",
            None,
            f"budget exhausted: {self.spent} of {self.budget} continuations spent before the search "
            f"closed{where}",
        )
        return None

    def record(self, probe: Probe) -> None:
        """Answer the probe ``next_prefix()`` asked for."""
        if self._final is not None or self._asked is None:
            raise ReplaySearchError("no probe was asked for")
        if probe.prefix != self._asked:
            raise ReplaySearchError(f"asked for prefix {self._asked}, got a probe of prefix {probe.prefix}")
        self._asked = None
        self.probes.append(probe)
        if self._lo is None or self._hi is None:
            return  # the start / end probes: next_prefix reads them
        if self._confirming:
            self._confirming.pop(0)
            if not self._confirming:
                self._rebracket()
            return
        if self._bad(probe.prefix):
            self._hi = probe.prefix
        else:
            self._lo = probe.prefix

    def _rebracket(self) -> None:
        """After a confirmation: the nearest probed prefixes around the boundary on pooled counts
        (a boundary the second look overturns is searched again between them)."""
        probed = sorted({p.prefix for p in self.probes})
        bad = [k for k in probed if self._bad(k)]
        if not bad or self._bad(self.start):
            self._lo = self._hi = None  # the start or the end flipped: next_prefix re-reads them
            return
        hi = min(bad)
        below = [k for k in probed if k < hi and not self._bad(k)]
        self._lo, self._hi = (max(below) if below else self.start), hi

    def verdict(self) -> ReplayVerdict:
        if self._final is None:
            raise ReplaySearchError("the search is not over: answer next_prefix() first")
        return self._final


def find_decisive_step(
    probe: Callable[[int], Probe],
    length: int,
    *,
    start: int = 0,
    m: int = 1,
    budget: int = 16,
    theta: float = DEFAULT_THETA,
    confirm: bool = False,
) -> ReplayVerdict:
    """Run the search with a synchronous ``probe(prefix) -> Probe`` (tests, benches)."""
    search = DecisiveStepSearch(length, start, m, budget, theta, confirm)
    while (prefix := search.next_prefix()) is not None:
        search.record(probe(prefix))
    return search.verdict()
