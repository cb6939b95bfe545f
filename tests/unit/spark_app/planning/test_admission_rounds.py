"""Admission rounds merged into one micro-batch (spark_app/planning/rounds.py), pure.

The property that matters: merging rounds never makes a row late. Spark's watermark after a
batch is the newest event time seen minus the delay, so every row of a later batch must be at
or after (newest upper bound admitted so far) - (maxDrift + largest split span), per query;
and every split is read exactly once. Checked on random split layouts, read limits, several
sources per query and several queries per group, including stale lookaheads. And no source is
left short: a query whose sources are all held by another query of the job waits for it
(``held_outside``), so where one query runs relative to another (which merging shifts) cannot
end it before it read its window."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from spark_app.contract.alignment import HELD, GroupView, global_view, held_outside, waits_for_group
from spark_app.planning.admission import Admission, Limits
from spark_app.planning.forecast import Member, Simulation, simulate
from spark_app.planning.rounds import (
    Lookahead,
    RoundsState,
    honor_floor,
    leave_lookahead,
    lookahead,
    plan_rounds,
    take_turn,
)
from spark_app.planning.splits import FilePiece, Split

S = 1_000_000


def split(lower_s: float, span_s: float, rows: int = 10) -> Split:
    lo, hi = int(lower_s * S), int((lower_s + span_s) * S)
    return Split(lo, hi, (FilePiece(f"f-{lo}-{rows}", None, rows, 100),), rows, 100)


def la(*lowers_s: float, rows: int = 10, complete: bool = True, position: int = 0) -> Lookahead:
    return Lookahead(position, tuple(int(x * S) for x in lowers_s), (rows,) * len(lowers_s), complete)


# --- plan_rounds ---------------------------------------------------------------------------


def test_rounds_follow_the_global_watermark_until_the_budget() -> None:
    a = la(0, 10, 20, 30, 40)
    b = la(5, 15, 25, 35, 45)
    # round 1: G 0, bound 10: a 0, 10; b 5 (30 rows). Round 2: G 15 (b), bound 25: a 20; b 15, 25.
    plan = plan_rounds({"a": a, "b": b}, None, 10 * S, budget_rows=40)
    assert (plan.rounds, plan.rows, plan.floor, plan.bound) == (1, 30, 0, 10 * S)
    plan = plan_rounds({"a": a, "b": b}, None, 10 * S, budget_rows=60)
    assert (plan.rounds, plan.rows, plan.floor, plan.bound) == (2, 60, 15 * S, 25 * S)
    plan = plan_rounds({"a": a, "b": b}, None, 10 * S, budget_rows=1000)
    assert plan.rows == 100 and plan.bound is not None and plan.bound >= 45 * S
    one = plan_rounds({"a": a, "b": b}, None, 10 * S, budget_rows=1)
    assert (one.rounds, one.bound, one.floor) == (1, 10 * S, 0), "round 1 always goes in, budget or not"


def test_the_budget_counts_rows_of_every_source_of_the_query() -> None:
    a, b = la(0, 10, 20, 30, rows=100), la(0, 10, 20, 30, rows=100)
    plan = plan_rounds({"a": a, "b": b}, None, 5 * S, budget_rows=450)
    # each round admits one split of each (200 rows): two rounds fit 450, a third would not
    assert (plan.rounds, plan.rows, plan.bound) == (2, 400, 15 * S)


def test_a_member_outside_the_query_caps_the_rounds() -> None:
    a = la(0, 10, 20, 30, 40, 50)
    plan = plan_rounds({"a": a}, 12 * S, 10 * S, budget_rows=10**6)
    # G can rise to the outside member's 12 and no further: bound 22 (a admits 0..20)
    assert plan.bound == 22 * S and plan.floor == 12 * S
    held = plan_rounds({"a": a}, HELD, 10 * S, budget_rows=10**6)
    assert held.rounds == 1 and held.bound == HELD + 10 * S


def test_no_round_after_one_a_read_limit_or_the_horizon_cut() -> None:
    # b's lookahead ends at 10 but b has more (incomplete): round 1 leaves nothing of b unknown
    # (its 10 is past bound 5), round 2 would need b's split after 10
    a, b = la(0, 10, 20, 30), la(0, 10, complete=False)
    plan = plan_rounds({"a": a, "b": b}, None, 5 * S, budget_rows=10**6)
    assert plan.rounds == 2 and plan.bound == 15 * S
    # and once b's lookahead is used up inside a round, no further round is taken
    a, b = la(0, 1, 2, 3, 4, 5), la(0, 1, complete=False)
    plan = plan_rounds({"a": a, "b": b}, None, 5 * S, budget_rows=10**6)
    assert plan.rounds == 1


def test_every_member_finishing_ends_the_rounds() -> None:
    plan = plan_rounds({"a": la(0, 10), "b": la(5)}, None, 10 * S, budget_rows=10**6)
    assert plan.rows == 30


def test_lookahead_stops_one_split_past_the_budget_and_at_the_read_limit() -> None:
    splits = [split(i, 1, rows=10) for i in range(10)]
    assert lookahead(splits, 2, Limits.unlimited(), 25).lowers == tuple(i * S for i in (2, 3, 4))
    capped = lookahead(splits, 2, Limits(max_files=2), 1000)
    assert capped.lowers == (2 * S, 3 * S) and not capped.complete
    assert lookahead(splits, 8, Limits.unlimited(), 1000).complete


def test_honor_floor_goes_past_read_limits() -> None:
    splits = [split(i, 1) for i in range(6)]
    kept = honor_floor(splits, Admission(0, 2, None, True), 4 * S)
    assert kept.end == 4 and not kept.throttled
    assert honor_floor(splits, Admission(0, 5, None, False), 4 * S).end == 5
    assert honor_floor(splits, Admission(0, 2, None, False), None).end == 2


# --- whose turn -----------------------------------------------------------------------------


def test_the_planner_plans_only_once_every_mate_applied_and_left_a_lookahead() -> None:
    mates = ("q/a", "q/b")
    s = RoundsState()
    s, t = take_turn(s, "q/a", mates, la(0, 10, 20), None, 10 * S, 1000)
    assert t.planner and t.plan is None, "first batch of a run: no lookahead of b yet"
    s, t = take_turn(s, "q/b", mates, la(5), None, 10 * S, 1000)
    assert not t.planner and t.plan is None
    s = leave_lookahead(s, "q/b", la(15, 25, position=1))
    s, t = take_turn(s, "q/a", mates, la(20, 30), None, 10 * S, 1000)
    assert t.planner and t.plan is not None and t.plan.rounds >= 2
    s, tb = take_turn(s, "q/b", mates, la(15, 25, position=1), None, 10 * S, 1000)
    assert tb.plan == t.plan and tb.assumed == 1
    s, again = take_turn(s, "q/b", mates, la(15, 25, position=1), None, 10 * S, 1000)
    assert again.plan is None, "a plan is applied once"
    # a mate that did not take its turn since the last plan (asked out of order) blocks rounds
    s, t = take_turn(s, "q/a", mates, la(30), None, 10 * S, 1000)
    s, t = take_turn(s, "q/a", mates, la(30), None, 10 * S, 1000)
    assert t.plan is None


def test_a_zero_budget_never_plans() -> None:
    _, t = take_turn(RoundsState(), "q/a", ("q/a",), la(0, 10), None, 10 * S, 0)
    assert t.plan is None


# --- the property: no row late, every split once ------------------------------------------


def random_splits(rng: random.Random, n: int, density: float) -> tuple[Split, ...]:
    """Overlapping splits in lower order with spans up to 8 s and gaps that follow density."""
    out, t = [], rng.uniform(0, 5)
    for _ in range(n):
        out.append(split(round(t, 3), round(rng.uniform(0, 8), 3), rows=rng.randint(1, 50)))
        t += rng.expovariate(density)
    return tuple(sorted(out, key=lambda s: s.sort_key()))


def check_no_late_row(sim: Simulation, members: list[Member], drift_us: int) -> None:
    by_id = {m.id: m for m in members}
    span = max((s.span for m in members for s in m.splits), default=0)
    newest: dict[str, int] = {}
    for b in sim.batches:
        taken = [s for m, (lo, hi) in b.admitted.items() for s in by_id[m].splits[lo:hi]]
        if b.query in newest:
            oldest = min(s.lower for s in taken)
            assert oldest >= newest[b.query] - drift_us - span, (b, newest[b.query])
        newest[b.query] = max([newest.get(b.query, -(2**62))] + [s.upper for s in taken])
    for m in members:
        read = sorted(i for b in sim.batches if m.id in b.admitted for i in range(*b.admitted[m.id]))
        assert read == list(range(sim.positions[m.id])), f"{m.id} read each split once, in order"


@settings(max_examples=150, deadline=None)
# query 1's source ran ahead of query 0 (whose rounds the budget cut) by more than maxDrift: it
# used to end its query, since a source held by another query of its own job did not wait
@example(seed=1004, queries=2, sources=3, budget=100, drift_s=10, max_files=None)
@given(
    seed=st.integers(0, 10**6),
    queries=st.integers(1, 2),
    sources=st.integers(1, 3),
    budget=st.sampled_from([0, 25, 100, 400, 10**6]),
    drift_s=st.sampled_from([0, 3, 10]),
    max_files=st.sampled_from([None, 1, 3]),
)
def test_merged_rounds_never_make_a_row_late_and_read_every_split_once(
    seed: int, queries: int, sources: int, budget: int, drift_s: int, max_files: int | None
) -> None:
    rng = random.Random(seed)
    members = [
        Member(
            f"j/q{q}/s{i}",
            f"q{q}",
            f"s{i}",
            random_splits(rng, rng.randint(0, 25), density=rng.choice([0.05, 0.3, 2.0])),
            Limits(max_files=max_files if rng.random() < 0.5 else None),
        )
        for q in range(queries)
        for i in range(sources)
    ]
    mode = "strict" if drift_s == 0 else "aligned"
    merged = simulate(members, mode, timedelta(seconds=drift_s), budget)
    single = simulate(members, mode, timedelta(seconds=drift_s), 0)
    assert set(merged.stalled) <= set(single.stalled), "merging rounds never leaves a source short"
    assert not merged.stalled and not single.stalled, "a query held by another query of its job waits for it"
    check_no_late_row(merged, members, drift_s * S)
    limits = {m.id: m.limits.max_files for m in members}
    for b in merged.batches:  # the plan stays within every source's read limit (one file a split)
        assert all(limits[m] is None or hi - lo <= limits[m] for m, (lo, hi) in b.admitted.items())
    if queries == 1:  # several queries take turns: merging can shift which query goes when
        assert len(merged.batches) <= len(single.batches) + 1


def test_a_query_ahead_of_another_query_of_its_job_waits_for_it() -> None:
    """Two queries of one job (two sinks). Merged rounds take b to 40 in its first batch (rounds
    at G 5 and 10, the outside a's 10) while a's next batch is one round (10 and 11 are 60 rows,
    over the budget): a stops at 26, and b's 40 is past 26 + 10 with the group held by a. b
    waits for a's next batch instead of returning its start offset, which would end its query
    with 40 unread. One round per batch reaches no such state here, but only by where the
    queries happen to be when each asks: a run that gives q1 two batches in a row would."""
    a = Member("j/q0/a", "q0", "a", (split(10, 1, rows=50), split(11, 1), split(26, 1)))
    b = Member("j/q1/b", "q1", "b", (split(5, 1, rows=20), split(20, 1), split(40, 1)))
    merged = simulate([a, b], "aligned", timedelta(seconds=10), 50)
    assert [(x.query, x.admitted) for x in merged.batches] == [
        ("q1", {"j/q1/b": (0, 2)}),
        ("q0", {"j/q0/a": (0, 2)}),
        ("q0", {"j/q0/a": (2, 3)}),  # b waits in this turn: held by a
        ("q1", {"j/q1/b": (2, 3)}),
    ]
    assert not merged.stalled
    single = simulate([a, b], "aligned", timedelta(seconds=10), 0)
    assert not single.stalled and len(single.batches) == 5
    check_no_late_row(merged, [a, b], 10 * S)


def test_a_source_waits_only_when_no_holder_is_in_its_query() -> None:
    view = GroupView(26 * S, (), ("j/q0/a",))
    assert held_outside(view, "j/q1/b"), "held by another query of its job"
    assert held_outside(view, "k/q0/b"), "held by another job"
    assert not held_outside(view, "j/q0/c"), "a holder in its own query admits in the same batch"
    assert not held_outside(GroupView(26 * S, (), ("j/q0/a", "j/q1/c")), "j/q1/b")
    assert held_outside(GroupView(HELD, ("j/q0/a",), ("j/q0/a",)), "j/q1/b"), "a missing member holds too"
    assert not held_outside(GroupView(None), "j/q1/b"), "every member finished"


def test_a_stale_view_makes_a_source_wait_even_for_a_holder_of_its_own_query() -> None:
    """The coordinator unreachable: the kept view names a mate as the holder though the mate
    read on since; admitting nothing would end an AvailableNow query short of its window."""
    fresh = GroupView(26 * S, (), ("j/q0/a",))
    assert not waits_for_group(fresh, "j/q0/c"), "a holder in its own query admits in the same batch"
    assert waits_for_group(replace(fresh, stale=True), "j/q0/c")
    assert waits_for_group(fresh, "j/q1/b"), "held from outside: as before"
    assert replace(fresh, stale=True) == fresh, "staleness is not part of what the view says"


def test_sparse_history_takes_a_few_batches_instead_of_one_per_drift() -> None:
    a = Member("j/q/a", "q", "a", tuple(split(60 * i, 30, rows=20) for i in range(120)))
    b = Member("j/q/b", "q", "b", tuple(split(60 * i + 20, 30, rows=80) for i in range(120)))
    single = simulate([a, b], "aligned", timedelta(minutes=10), 0)
    merged = simulate([a, b], "aligned", timedelta(minutes=10), 5_000)
    assert len(single.batches) >= 12 and len(merged.batches) <= 4
    check_no_late_row(merged, [a, b], 600 * S)


def test_a_stale_lookahead_is_caught_by_the_floor() -> None:
    """A mate's lookahead from before a restart (its real position is behind it): the planner
    over-estimates G, and the mate then admits up to the floor past its limits: no late row."""
    b_splits = [split(i * 10 + 5, 2) for i in range(10)]
    a_splits = [split(i * 10, 2) for i in range(10)]
    state = RoundsState(planner="q/a", seq=1, applied={"q/a": 1, "q/b": 1})
    state = leave_lookahead(state, "q/b", lookahead(b_splits, 5, Limits.unlimited(), 10**6))  # stale: b is at 0
    state, turn = take_turn(
        state, "q/a", ("q/a", "q/b"), lookahead(a_splits, 0, Limits.unlimited(), 10**6), None, 0, 10**6
    )
    assert turn.plan is not None and turn.plan.floor is not None and turn.plan.rounds > 1
    state, tb = take_turn(
        state, "q/b", ("q/a", "q/b"), lookahead(b_splits, 0, Limits(max_files=1), 10**6), None, 0, 10**6
    )
    assert tb.assumed == 5
    kept = honor_floor(b_splits, Admission(0, 1, None, False), tb.plan.floor if tb.plan else None)
    assert all(s.lower >= turn.plan.floor for s in b_splits[kept.end :])


def test_the_local_view_gives_the_watermark_outside_the_query() -> None:
    members = ("j/q1/a", "j/q1/b", "j/q2/a")
    reported: dict[str, int | None] = {"j/q1/a": 5, "j/q1/b": 7, "j/q2/a": 9}
    assert global_view(members, reported, "j/q1").outside == 9
    assert global_view(members, reported, "j/q2").outside == 5
    assert global_view(members, {**reported, "j/q2/a": None}, "j/q1").outside is None
    assert global_view(members, {"j/q1/a": 5, "j/q1/b": 7}, "j/q1").global_watermark == HELD
    assert GroupView(3).outside == HELD, "unknown unless asked for a query: no further rounds"


@pytest.mark.parametrize("budget", [0, 10**6])
def test_strict_mode_rounds_keep_event_time_order_across_batches(budget: int) -> None:
    a = Member("j/q/a", "q", "a", tuple(split(i, 0.5) for i in range(1, 40, 2)))
    b = Member("j/q/b", "q", "b", tuple(split(i, 0.5) for i in range(0, 40, 2)))
    sim = simulate([a, b], "strict", timedelta(0), budget)
    assert not sim.stalled
    check_no_late_row(sim, [a, b], 0)
