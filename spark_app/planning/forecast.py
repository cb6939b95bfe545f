"""What a backfill will do, predicted from its splits (pure): the micro-batches its admission
makes, the disorder and state they imply, and what to warn about.

The simulation replays the sources' own decision rules on the planned splits: each micro-batch
Spark asks every source of a query for its latest offset in turn (the query plan's leaf order);
an aligned source reports its watermark (the lower bound of its next split), reads the group's
view (``global_view``: a member that has not reported holds everyone) and admits with
``admit`` under ``drift_bound`` and its read limits, then reports where it stopped. A source
throttled to nothing while every holder of the group is in another query (``held_outside``)
waits (``BackfillReader._decide``): its query's batch goes on at its next turn, from that
source, with the view of then. A batch in which no source of a query admits anything ends that
query (Trigger.AvailableNow), except the first: Spark runs batch 0 on the sources' first
offsets whatever they admit. So a plan (one job) never leaves a source short: an unfinished
query's batch completes only with a holder of the group in it, and a holder always admits.
Spark's watermark follows one batch behind the data (computed after a batch, used by the next),
from the newest event time each input has seen, the minimum over inputs; state keeps what lies
within the state horizon behind it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from spark_app.contract.alignment import global_view, held_outside
from spark_app.contract.durations import format_duration
from spark_app.planning.admission import Limits, admit, source_watermark
from spark_app.planning.rounds import (
    RoundsState,
    Turn,
    combined_bound,
    honor_floor,
    leave_lookahead,
    lookahead,
    take_turn,
)
from spark_app.planning.splits import Split

US = 1_000_000
HOUR_US = 3600 * US
"""A split wider than this is worth a warning: its rows are read as one unit."""
MAX_ROUNDS = 10_000_000
"""A bound on simulated rounds (each admits at least one split or ends a query)."""

_STATEFUL = re.compile(
    r"(?m)^[\s:+|-]*~?(Aggregate|Join|Deduplicate|DeduplicateWithinWatermark|FlatMapGroupsWithState|"
    r"FlatMapGroupsInPandasWithState|TransformWithState\w*)\b"
)


def stateful(plan: str) -> bool:
    """Whether an analyzed plan keeps state across micro-batches (aggregations, joins, dedup,
    arbitrary state). A join with a static side counts too: the estimate errs high."""
    return bool(_STATEFUL.search(plan))


@dataclass(frozen=True, slots=True)
class Member:
    """One (query, source) pair: a member of the alignment group with its planned splits."""

    id: str
    query: str
    source: str
    splits: tuple[Split, ...]
    limits: Limits = field(default_factory=Limits.unlimited)


@dataclass(frozen=True, slots=True)
class Batch:
    """One simulated micro-batch of one query: per member, the positions ``[start, end)`` admitted."""

    query: str
    admitted: dict[str, tuple[int, int]]


@dataclass(frozen=True)
class Simulation:
    batches: tuple[Batch, ...]
    positions: dict[str, int]
    """Where each member stopped (its split count when it read everything)."""
    stalled: tuple[str, ...] = field(default=())
    """Members left short of their last split (the run would fail as incomplete)."""

    def rows(self, members: dict[str, Member], batch: Batch) -> int:
        return sum(s.rows for m, (a, b) in batch.admitted.items() for s in members[m].splits[a:b])


def simulate(members: Sequence[Member], mode: str, drift: timedelta, budget_rows: int = 0) -> Simulation:
    """Replay admission over the members' splits (``members`` in each query's source order;
    queries take turns, one batch each, as concurrent queries roughly do). ``budget_rows``:
    ``alignment.batchRowBudget``, admission rounds merged as the sources do (rounds.py)."""
    drift_us = int(drift.total_seconds() * US)
    group = tuple(m.id for m in members)
    queries: dict[str, list[Member]] = {}
    for m in members:
        queries.setdefault(m.query, []).append(m)
    positions = {m.id: 0 for m in members}
    reported: dict[str, int | None] = {}
    records = {q: RoundsState() for q in queries}
    started: set[str] = set()
    # a query whose batch waits: the index of the source that waits, what the batch admitted
    # before it, and that source's turn (a turn is taken once per batch)
    waiting: dict[str, tuple[int, dict[str, tuple[int, int]], Turn]] = {}
    active = list(queries)
    batches: list[Batch] = []
    for _ in range(MAX_ROUNDS):
        if not active:
            break
        for q in list(active):
            first, admitted, kept = waiting.pop(q, (0, {}, None))
            mates = tuple(m.id for m in queries[q])
            others = tuple(m.id for m in members if m.query != q)
            for i, m in enumerate(queries[q][first:], first):
                pos = positions[m.id]
                if mode in ("unordered", "bounded"):  # bounded: one batch, as unordered's first
                    end = admit(m.splits, pos, None, m.limits).end
                else:
                    wm = source_watermark(m.splits, pos)
                    reported[m.id] = wm
                    view = global_view(group, reported)
                    turn = Turn(None, planner=False)
                    if i == first and kept is not None:
                        turn = kept
                    elif budget_rows > 0:
                        own = lookahead(m.splits, pos, m.limits, budget_rows)
                        outside = global_view(others, reported).global_watermark
                        records[q], turn = take_turn(records[q], m.id, mates, own, outside, drift_us, budget_rows)
                    decision = admit(m.splits, pos, combined_bound(view.bound(drift_us), turn.plan), m.limits)
                    if turn.plan is not None and turn.plan.rounds > 1:
                        decision = honor_floor(m.splits, decision, turn.plan.floor)
                    end = decision.end
                    if end == pos and wm is not None and held_outside(view, m.id):
                        waiting[q] = (i, admitted, turn)  # the batch goes on at the query's next turn
                        break
                    reported[m.id] = source_watermark(m.splits, end)
                    if budget_rows > 0:
                        records[q] = leave_lookahead(records[q], m.id, lookahead(m.splits, end, m.limits, budget_rows))
                if end > pos:
                    admitted[m.id] = (pos, end)
                    positions[m.id] = end
            if q in waiting:
                continue
            if admitted:
                batches.append(Batch(q, admitted))
            elif q in started:
                active.remove(q)
            started.add(q)  # batch 0 runs on its first offsets even if empty: no end yet
    stalled = tuple(m.id for m in members if positions[m.id] < len(m.splits))
    return Simulation(tuple(batches), positions, stalled)


def data_batches(sim: Simulation, members: Sequence[Member]) -> int:
    """Micro-batches that read rows (what ``apps.result.RunResult.batches`` counts)."""
    by_id = {m.id: m for m in members}
    return sum(1 for b in sim.batches if sim.rows(by_id, b) > 0)


def rows_from(split: Split, cutoff: int | None) -> float:
    """Rows of ``split`` at or after ``cutoff``, spread evenly over its time range."""
    if cutoff is None or cutoff <= split.lower:
        return float(split.rows)
    if cutoff > split.upper:
        return 0.0
    return split.rows * (split.upper - cutoff) / max(split.span, 1)


def rows_within(split: Split, lo: int, hi: int) -> float:
    """Rows of ``split`` whose time is in ``[lo, hi)``, spread evenly over its time range."""
    if split.span == 0:
        return float(split.rows) if lo <= split.lower < hi else 0.0
    overlap = min(split.upper, hi) - max(split.lower, lo)
    return split.rows * max(overlap, 0) / split.span


def peak_state(
    sim: Simulation,
    members: Sequence[Member],
    delay: timedelta | None,
    lookback: timedelta,
    is_stateful: bool,
) -> int:
    """The most rows one query holds in state after a batch: rows admitted so far whose time is
    at or after (watermark - look-back), the watermark being the one the batch ran with (the
    minimum over the query's inputs of the newest time read, minus the delay, as of the batch
    before; none before the first batch with data). No watermark: nothing is ever evicted."""
    if not is_stateful:
        return 0
    by_id = {m.id: m for m in members}
    delay_us = None if delay is None else int(delay.total_seconds() * US)
    back_us = int(lookback.total_seconds() * US)
    held: dict[str, list[Split]] = {}
    newest: dict[str, dict[str, int]] = {}
    watermark: dict[str, int | None] = {}
    peak = 0.0
    for b in sim.batches:
        kept = held.setdefault(b.query, [])
        seen = newest.setdefault(b.query, {})
        for m, (start, end) in b.admitted.items():
            taken = by_id[m].splits[start:end]
            kept.extend(taken)
            if taken:
                src = by_id[m].source
                seen[src] = max(seen.get(src, taken[0].upper), max(s.upper for s in taken))
        wm = watermark.get(b.query)
        cutoff = None if wm is None else wm - back_us
        if cutoff is not None:
            kept[:] = [s for s in kept if s.upper >= cutoff]
        peak = max(peak, sum(rows_from(s, cutoff) for s in kept))
        if delay_us is not None and seen:
            now = min(seen.values()) - delay_us
            watermark[b.query] = now if wm is None else max(wm, now)  # Spark's watermark never goes back
    return round(peak)


def out_of_order(sim: Simulation, members: Sequence[Member]) -> dict[str, int]:
    """Per source, how far before the newest time already read a row can come (µs): within a
    batch rows arrive in any order, so a split's lower bound counts against the newest upper
    bound read by the end of its batch."""
    by_id = {m.id: m for m in members}
    newest: dict[str, int] = {}
    worst: dict[str, int] = {}
    for b in sim.batches:
        for m, (start, end) in b.admitted.items():
            taken = by_id[m].splits[start:end]
            if not taken:
                continue
            newest[m] = max(newest.get(m, taken[0].upper), max(s.upper for s in taken))
            gap = newest[m] - min(s.lower for s in taken)
            src = by_id[m].source
            worst[src] = max(worst.get(src, 0), gap)
    return worst


def max_drift_fitting(delay: timedelta | None, max_split_span: timedelta, mode: str) -> timedelta | None:
    """The largest maxDrift for which the lateness guard passes without dropping rows: the
    delay minus the largest split span, in whole seconds down (a value to write into maxDrift;
    None: any, as without a watermark or unordered)."""
    if delay is None or mode in ("unordered", "bounded"):
        return None
    return timedelta(seconds=max(math.floor((delay - max_split_span).total_seconds()), 0))


def _d(us: float) -> str:
    return format_duration(timedelta(seconds=math.ceil(us / US)))


def split_warnings(splits: Sequence[Split], table: str, limit_us: int = HOUR_US) -> list[str]:
    """A split wider than ``limit_us`` (an hour): its rows are read as one unit, so it alone
    makes the lateness a backfill needs that long."""
    wide = [s for s in splits if s.span > limit_us]
    if not wide:
        return []
    worst = max(wide, key=lambda s: s.span)
    return [
        f"{len(wide)} split(s) of {table} span more than {_d(limit_us)} (the widest {_d(worst.span)}, "
        f"{worst.pieces[0].path.rsplit('/', 1)[-1]}): each is read as one unit, so the lateness this backfill "
        "needs grows with it; lower split.sliceSpan and split.maxBundleSpan (slicing is off in unordered mode), or "
        "compact the table so files hold one stretch of event time"
    ]


def statistics_warning(missing: int, files: int, table: str, column: str) -> str:
    return (
        f"{missing} of {files} data files of {table} have no lower/upper bounds on the ordering column {column}: "
        "they cannot be pruned by the window and each counts as spanning all of it, so the planner reads their "
        f"{column} column to order them (slow on a large table). Write column metrics for {column} (table property "
        f"write.metadata.metrics.column.{column}=full, or a default other than none) and rewrite those files"
    )


def lateness_warning(required: timedelta, delay: timedelta, drift: timedelta, fitting: timedelta | None) -> str:
    fit = "no maxDrift fits" if not fitting else f"lower alignment.maxDrift to at most {format_duration(fitting)}"
    return (
        f"alignment.maxDrift {format_duration(drift)} needs a watermark delay of at least "
        f"{_d(required.total_seconds() * US)} (maxDrift + the largest split span) but the pipeline's is "
        f"{format_duration(delay)}: {fit}, or raise the pipeline's lateness (withWatermark, alignment.lateness)"
    )
