"""The rate limit on a job's external calls as pure decisions: leases of tokens paced on one
clock (the driver's), and the counts behind the observed rate.

Why leases on a schedule rather than a plain token bucket shared over HTTP: the limit holds
for the whole job, across every executor and Python worker, so the tokens live in one place
(the driver). One HTTP round per call would cost more than many calls, so a client leases a
few tokens at a time. A bucket handing out a lease lets its holder spend it whenever it likes,
and leases held a while then spent together make bursts no bucket capacity bounds. So each
lease is given a *slot* on a schedule instead (GCRA, the "virtual scheduling" of ATM cell
pacing): lease ``j`` of ``k`` tokens starts where lease ``j-1`` ended (or now, if that is
later) and lasts ``k / rate``; its tokens may be used from its start until ``grace`` after its
end, never before, never after. Consecutive slots do not overlap, so over any window of ``W``
seconds the tokens usable are at most ``rate * W + 2 * max_lease + rate * grace``: the slots
inside the window and its grace, plus one lease at each edge (one spent at the last moment of a
slot ending just before the window, one spent at once at the start of a slot beginning at its
end). With ``max_lease`` and ``grace`` at ``LEASE_S`` and ``GRACE_S`` seconds of the rate, that
is 9% over 1 s and under 2% over 5 s (the unit tests,
``tests/unit/spark_app/external_calls/test_external_calls.py``, check the bound on random
schedules). Idle time earns no credit: a service the job left alone for an hour does not get
an hour of calls at once.

A slot's tokens not used by its end plus ``grace`` are lost (the client says how many, and
leases fewer next time): waste, never excess. Times are seconds on the server's monotonic
clock; a client applies the offsets it is given from when it received them.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

LEASE_S = 0.025
"""The largest lease, in seconds of the rate: a few leases per second per client at any rate
(HTTP rounds stay ~40/s whatever the rate), and a burst of at most 2.5% of a second's calls
(twice that at a window's two edges: with the grace, 9% over 1 s, inside the 10% a limit
promises; 0.04 made it 12%, found by the random schedules of the unit test)."""
GRACE_S = 0.04
"""How long after its slot a lease's tokens may still be used: a client's scheduling jitter
(a GIL switch, a sleep's overshoot) does not lose them. Adds at most 4% of a second's calls."""
WINDOW_S = 30.0
"""The observed rate is averaged over this long (the operator looks every 30 s)."""


def max_lease(rate: float) -> int:
    """The most tokens one lease carries at ``rate`` (at least one)."""
    return max(1, math.floor(rate * LEASE_S))


def window_bound(rate: float, window_s: float) -> float:
    """The most calls any ``window_s`` seconds can see at ``rate``: the schedule's share, a
    lease's tokens at each edge, the grace, and one call at the window's closed edge."""
    return rate * window_s + 2 * max_lease(rate) + rate * GRACE_S + 1


@dataclass(frozen=True)
class Lease:
    """``tokens`` calls, usable from ``start`` to ``expires`` (server clock, seconds)."""

    tokens: int
    start: float
    expires: float


@dataclass
class Pacer:
    """The schedule of one job's leases: the end of the last slot given (``tat``, GCRA's
    theoretical arrival time)."""

    rate: float
    tat: float = -math.inf

    def __post_init__(self) -> None:
        if not self.rate > 0 or math.isinf(self.rate):
            raise ValueError(f"a rate limit must be a positive number of calls per second, got {self.rate!r}")

    @property
    def max_lease(self) -> int:
        return max_lease(self.rate)

    def lease(self, want: int, now: float) -> Lease:
        """The next slot, for ``want`` tokens (at most ``max_lease``, at least one): it starts
        when the previous one ends, or now (no credit for idle time)."""
        k = max(1, min(int(want), self.max_lease))
        start = max(self.tat, now)
        self.tat = start + k / self.rate
        return Lease(tokens=k, start=start, expires=self.tat + GRACE_S)


@dataclass
class CallCounts:
    """What the clients said they did, for the observed rate: calls made (tokens used),
    tokens lost to expiry, and seconds spent waiting for a slot. ``granted`` is what the
    pacer handed out (calls made + lost + not yet used)."""

    started: float
    calls: int = 0
    granted: int = 0
    expired: int = 0
    waited_s: float = 0.0
    recent: deque[tuple[float, int]] = field(default_factory=deque)
    """(when told, calls): the reports of the last ``WINDOW_S`` seconds."""

    def granted_lease(self, lease: Lease) -> None:
        self.granted += lease.tokens

    def told(self, now: float, calls: int, expired: int, waited_s: float) -> None:
        """A client's counts since it last told (negative numbers are a client's bug: ignored)."""
        calls, expired, waited_s = max(int(calls), 0), max(int(expired), 0), max(float(waited_s), 0.0)
        self.calls += calls
        self.expired += expired
        self.waited_s += waited_s
        if calls:
            self.recent.append((now, calls))
        self._forget(now)

    def _forget(self, now: float) -> None:
        while self.recent and self.recent[0][0] < now - WINDOW_S:
            self.recent.popleft()

    def observed_per_s(self, now: float) -> float:
        """Calls per second over the last ``WINDOW_S`` seconds (or since the start, if later)."""
        self._forget(now)
        span = min(WINDOW_S, now - self.started)
        if span <= 0:
            return 0.0
        return sum(n for _, n in self.recent) / span
