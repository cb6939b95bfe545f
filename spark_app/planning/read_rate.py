"""The read-rate cap as pure decisions: a token bucket per resource (bytes, files) and how many
of the splits the drift bound admits fit the tokens available now.

Why a bucket that may go into debt: a split is indivisible, and one larger than what the
bucket holds must still be read eventually without raising the long-run average. So a split
that does not fit is admitted alone once the bucket holds ``min(cost, capacity)``, the bucket
goes negative, and nothing more is admitted until the debt is repaid. Over any interval of
``W`` seconds the admitted cost is then at most ``rate * W + max(capacity, largest split)``:
with the capacity at ``BURST_S`` seconds of rate and splits below a few seconds of rate, the
average over a minute stays within a few percent of the cap (``tests/unit/spark_app/planning/test_read_rate.py``
checks the bound on random schedules).

The cap only ever cuts a *prefix* of what alignment admitted: it delays splits, never
reorders them, so alignment's bound and the outputs are unchanged. Times are seconds on one
monotonic clock (the caller's), costs are ``(bytes, files)`` per split, and a split costs
what its reads take from the store (``read_cost``), not the planner's weight of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from spark_app.planning.admission import Admission
from spark_app.planning.splits import Split

BURST_S = 2.0
"""Capacity of a bucket in seconds of its rate: enough that a micro-batch's fixed cost (~1 s)
does not waste refill, small enough that a minute's average stays within ~3% of the cap."""

PATIENCE_S = 2 * BURST_S
"""After waiting this long, a source's next split goes in as soon as the buckets are out of debt."""

Cost = tuple[int, int]
"""What admitting one split costs: (bytes, files)."""
FileLayout = tuple[int, tuple[int, ...]]
"""A data file's size and its row groups' start offsets (Iceberg's split offsets)."""


def row_group_bytes(layout: FileLayout, groups: Sequence[int] | None) -> int:
    """Bytes of these row groups of a file (None: the whole file)."""
    size, offsets = layout
    if groups is None or not offsets:
        return size
    ends = [*offsets[1:], size]
    return sum(max(ends[g] - offsets[g], 1) for g in groups if 0 <= g < len(offsets)) or size


def read_cost(split: Split, layouts: Mapping[str, FileLayout]) -> Cost:
    """What reading a split takes from the store: bytes of the row groups its reads open, and
    the files it opens.

    A whole file or a run of row groups costs its bytes. A time slice (a wide file's rows in a
    time range) is read by opening the row groups holding its rows (all, when unknown) and
    filtering, so it costs those row groups, not its share of the rows (the planner's weight
    for bundling): two slices of one file admitted apart read the file twice, and both count.
    Pieces of one file in one split are one read. Projection is not counted (an upper bound)."""
    nbytes = 0
    sliced: dict[str, set[int] | None] = {}
    for piece in split.pieces:
        if piece.time_range is None or piece.path not in layouts:
            nbytes += piece.size_bytes
        elif piece.row_groups is None or (piece.path in sliced and sliced[piece.path] is None):
            sliced[piece.path] = None
        else:
            sliced[piece.path] = {*(sliced.get(piece.path) or ()), *piece.row_groups}
    for path, groups in sliced.items():
        nbytes += row_group_bytes(layouts[path], None if groups is None else sorted(groups))
    return nbytes, len({piece.path for piece in split.pieces})


@dataclass(frozen=True, slots=True)
class TokenBucket:
    """``tokens`` at time ``at``, refilled at ``rate`` per second up to ``capacity``; negative
    tokens are debt (a split larger than what the bucket could hold was admitted)."""

    rate: float
    capacity: float
    tokens: float
    at: float

    @classmethod
    def full(cls, rate: float, now: float, burst_s: float = BURST_S) -> TokenBucket:
        if rate <= 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        capacity = rate * burst_s
        return cls(rate, capacity, capacity, now)

    def available(self, now: float) -> float:
        """Tokens at ``now`` (a clock that went back refills nothing)."""
        return min(self.capacity, self.tokens + self.rate * max(0.0, now - self.at))

    def take(self, amount: float, now: float) -> TokenBucket:
        return replace(self, tokens=self.available(now) - amount, at=max(now, self.at))

    def need(self, amount: float) -> float:
        """Tokens that must be available to admit one split of ``amount`` alone."""
        return min(amount, self.capacity)

    def seconds_until(self, tokens: float, now: float) -> float:
        """How long until ``tokens`` are available (0 if they are)."""
        return max(0.0, (tokens - self.available(now)) / self.rate)


def _fits(available: float, amount: float) -> bool:
    """``amount <= available`` up to rounding, so a wait of exactly the computed time suffices."""
    return amount <= available + 1e-9 * max(1.0, abs(amount))


@dataclass(frozen=True, slots=True)
class ReadBudget:
    """The buckets of one query's cap; a resource without a bucket is not capped."""

    bytes: TokenBucket | None = None
    files: TokenBucket | None = None

    @classmethod
    def of(cls, bytes_per_s: float | None, files_per_s: float | None, now: float) -> ReadBudget:
        return cls(
            None if bytes_per_s is None else TokenBucket.full(float(bytes_per_s), now),
            None if files_per_s is None else TokenBucket.full(float(files_per_s), now),
        )

    @property
    def capped(self) -> bool:
        return self.bytes is not None or self.files is not None

    def _pairs(self, cost: Cost) -> list[tuple[TokenBucket, int]]:
        return [(b, c) for b, c in ((self.bytes, cost[0]), (self.files, cost[1])) if b is not None]

    def take(self, cost: Cost, now: float) -> ReadBudget:
        return ReadBudget(
            None if self.bytes is None else self.bytes.take(cost[0], now),
            None if self.files is None else self.files.take(cost[1], now),
        )


class RateCut(NamedTuple):
    """What a capped source admits in one micro-batch: alignment's admission cut to a prefix
    the tokens pay for."""

    admission: Admission
    waited_s: float
    """Seconds slept for tokens before anything fitted."""
    taken_at: float | None
    """When the tokens were taken, on the bucket's (monotonic) clock; None when uncapped. The
    bucket's bound holds between these times, not between trace lines written after I/O."""


@dataclass(frozen=True, slots=True)
class Fit:
    count: int
    """How many of the candidate splits (a prefix) to admit now."""
    wait_s: float
    """When ``count`` is 0 with candidates left: how long until the first one fits."""
    budget: ReadBudget
    """The budget after taking what was admitted."""
    cost: Cost
    """What the admitted splits cost together."""


def fit(costs: Sequence[Cost], budget: ReadBudget, now: float, patient: bool = False) -> Fit:
    """The longest prefix of ``costs`` the tokens available at ``now`` pay for; when not even
    the first fits, that one alone once every bucket holds what it needs (the bucket goes into
    debt), else nothing and how long to wait for it. Without any bucket, everything fits.

    ``patient``: the caller has waited ``PATIENCE_S`` already. Its first split then goes in as
    soon as no bucket is in debt, not when one holds the split's need: other sources with
    small splits, sharing the bucket, would otherwise keep it below that need forever. The
    bound is unchanged (the debt it makes is one split, as for any split that does not fit)."""
    if not budget.capped:
        total = (sum(c[0] for c in costs), sum(c[1] for c in costs))
        return Fit(len(costs), 0.0, budget, total)
    if not costs:
        return Fit(0, 0.0, budget, (0, 0))
    avail = [(b, b.available(now)) for b in (budget.bytes, budget.files) if b is not None]
    count, spent_bytes, spent_files = 0, 0, 0
    for nbytes, nfiles in costs:
        after = budget._pairs((spent_bytes + nbytes, spent_files + nfiles))
        if not all(_fits(a, amount) for (_, a), (_, amount) in zip(avail, after, strict=True)):
            break
        count, spent_bytes, spent_files = count + 1, spent_bytes + nbytes, spent_files + nfiles
    if count == 0:
        first = budget._pairs(costs[0])
        needs = [0.0 if patient else b.need(amount) for b, amount in first]
        if all(_fits(a, need) for (_, a), need in zip(avail, needs, strict=True)):
            count, spent_bytes, spent_files = 1, costs[0][0], costs[0][1]
        else:
            wait = max(b.seconds_until(need, now) for (b, _), need in zip(first, needs, strict=True))
            return Fit(0, wait, budget, (0, 0))
    spent = (spent_bytes, spent_files)
    return Fit(count, 0.0, budget.take(spent, now), spent)


def window_peak(events: Sequence[tuple[float, float]], window_s: float) -> float:
    """The largest total of ``(time, amount)`` events within any ``window_s`` interval
    (both ends included): what "reads at most X per minute" is measured against."""
    ordered = sorted(events)
    best, total, lo = 0.0, 0.0, 0
    for t, amount in ordered:
        total += amount
        while ordered[lo][0] < t - window_s:
            total -= ordered[lo][1]
            lo += 1
        best = max(best, total)
    return best
