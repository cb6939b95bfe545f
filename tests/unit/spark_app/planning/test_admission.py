"""Admission under the drift bound, and a simulation of an alignment group (pure Python)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_app.contract.alignment import HELD, drift_bound, global_view
from spark_app.planning.admission import Admission, Limits, admit, source_watermark
from spark_app.planning.splits import FilePiece, Split, max_span


def sp(lower: int, upper: int | None = None, rows: int = 10, size: int = 100, files: int = 1) -> Split:
    upper = lower if upper is None else upper
    pieces = tuple(FilePiece(f"f{lower}-{upper}-{i}", None, rows // files, size // files) for i in range(files))
    return Split(lower, upper, pieces, rows, size)


SPLITS = [sp(0), sp(10), sp(20), sp(30), sp(40)]


# --- admit ----------------------------------------------------------------------------


def test_admit_within_bound() -> None:
    a = admit(SPLITS, 0, 25, Limits.unlimited())
    assert a == Admission(start=0, end=3, bound=25, throttled=True)


def test_bound_is_inclusive() -> None:
    assert admit(SPLITS, 0, 20, Limits()).end == 3
    assert admit(SPLITS, 0, 19, Limits()).end == 2


def test_no_bound_admits_everything() -> None:
    a = admit(SPLITS, 1, None, Limits())
    assert (a.start, a.end, a.throttled) == (1, 5, False)


def test_nothing_admissible() -> None:
    a = admit(SPLITS, 2, 15, Limits())
    assert (a.start, a.end, a.throttled) == (2, 2, True)
    assert admit(SPLITS, 0, HELD + 10, Limits()).end == 0


def test_at_end() -> None:
    a = admit(SPLITS, 5, 100, Limits(max_files=1))
    assert (a.start, a.end, a.throttled) == (5, 5, False)


def test_admit_from_middle() -> None:
    assert admit(SPLITS, 3, 35, Limits()) == Admission(3, 4, 35, True)


@pytest.mark.parametrize(
    ("limits", "end"),
    [
        (Limits(max_files=2), 2),
        (Limits(max_rows=35), 3),
        (Limits(max_bytes=100), 1),
        (Limits(max_bytes=450), 4),
        (Limits(max_files=4, max_rows=25, max_bytes=1000), 2),
    ],
)
def test_limits(limits: Limits, end: int) -> None:
    a = admit(SPLITS, 0, None, limits)
    assert a.end == end
    assert not a.throttled


@pytest.mark.parametrize("limits", [Limits(max_files=1), Limits(max_rows=1), Limits(max_bytes=1)])
def test_limits_always_admit_one(limits: Limits) -> None:
    big = [sp(0, rows=1000, size=10**6, files=5), sp(1)]
    a = admit(big, 0, 10, limits)
    assert (a.end, a.throttled) == (1, False)


@pytest.mark.parametrize("limits", [Limits(max_files=1), Limits(max_rows=1), Limits(max_bytes=1)])
def test_at_least_one_false_lets_a_limit_stop_the_first_split(limits: Limits) -> None:
    big = [sp(0, rows=1000, size=10**6, files=5), sp(1)]
    a = admit(big, 0, 10, limits, at_least_one=False)
    assert (a.start, a.end, a.throttled) == (0, 0, False)
    assert admit(SPLITS, 0, None, Limits(max_files=2), at_least_one=False).end == 2


def test_limit_counts_files_of_bundles() -> None:
    splits = [sp(0, files=3), sp(1, files=3), sp(2, files=1)]
    assert admit(splits, 0, None, Limits(max_files=5)).end == 1
    assert admit(splits, 0, None, Limits(max_files=6)).end == 2
    assert admit(splits, 0, None, Limits(max_files=7)).end == 3


def test_bound_beats_limits_for_first_split() -> None:
    a = admit(SPLITS, 1, 5, Limits(max_files=1))
    assert (a.end, a.throttled) == (1, True)


def test_throttled_only_when_bound_stopped() -> None:
    assert not admit(SPLITS, 0, 100, Limits(max_files=2)).throttled
    assert admit(SPLITS, 0, 35, Limits(max_files=10)).throttled


def test_upper_bound_does_not_matter_for_admission() -> None:
    wide = [sp(0, 10**9), sp(5, 6)]
    assert admit(wide, 0, 5, Limits()).end == 2


def test_source_watermark() -> None:
    assert source_watermark(SPLITS, 0) == 0
    assert source_watermark(SPLITS, 3) == 30
    assert source_watermark(SPLITS, 5) is None
    assert source_watermark([], 0) is None


def test_drift_bound() -> None:
    assert drift_bound(100, 25) == 125
    assert drift_bound(100, 0) == 100
    assert drift_bound(None, 25) is None
    assert drift_bound(HELD, 10**12) < 0


def test_held_is_below_any_realistic_time_and_bound() -> None:
    # a year 1 timestamp in microseconds, plus ten years of drift, is still above HELD + drift
    assert HELD + 10 * 365 * 86400 * 10**6 < -62_135_596_800 * 10**6


# --- simulation -------------------------------------------------------------------------


@st.composite
def source_plans(draw: st.DrawFn) -> list[list[Split]]:
    n = draw(st.integers(1, 4))
    plans = []
    for k in range(n):
        items = draw(st.lists(st.tuples(st.integers(0, 500), st.integers(0, 60), st.integers(1, 5)), max_size=15))
        splits = [
            Split(lo, lo + span, (FilePiece(f"s{k}-{i}", None, rows, rows),), rows, rows)
            for i, (lo, span, rows) in enumerate(items)
        ]
        plans.append(sorted(splits, key=Split.sort_key))
    return plans


def run_group(
    plans: list[list[Split]], drift: int, limits: Limits, rnd: random.Random, extra: float
) -> tuple[int, list[tuple[int, Split]]]:
    """Run every source to completion; returns (rounds, [(source, split) in admission order]).

    Each round schedules every source once (random order) plus, with probability ``extra``,
    additional random decisions: arbitrary interleavings, but fair."""
    members = tuple(f"src{i}" for i in range(len(plans)))
    reported: dict[str, int | None] = {}
    positions = [0] * len(plans)
    admitted: list[tuple[int, Split]] = []
    total = sum(len(p) for p in plans)
    rounds = 0
    while any(positions[i] < len(p) for i, p in enumerate(plans)) or len(reported) < len(members):
        rounds += 1
        assert rounds <= total + 2, f"no progress: positions {positions} of {[len(p) for p in plans]}"
        order = list(range(len(plans)))
        rnd.shuffle(order)
        while rnd.random() < extra:
            order.insert(rnd.randrange(len(order) + 1), rnd.randrange(len(plans)))
        for i in order:
            splits, pos = plans[i], positions[i]
            wm = source_watermark(splits, pos)
            reported[members[i]] = wm
            view = global_view(members, reported)
            bound = view.bound(drift)
            assert bound == drift_bound(view.global_watermark, drift)
            a = admit(splits, pos, bound, limits)
            assert a.start == pos
            assert a.end >= pos
            new = splits[pos : a.end]
            # (1) nothing beyond global + drift
            for s in new:
                assert view.global_watermark is not None or bound is None
                if bound is not None:
                    assert s.lower <= view.global_watermark + drift  # type: ignore[operator]
            # (3) the slowest source always progresses
            if wm is not None and wm == view.global_watermark:
                assert a.end > pos, (wm, view, limits)
            # the global watermark never exceeds any unfinished member's own watermark
            if view.global_watermark is not None and wm is not None:
                assert view.global_watermark <= wm
            positions[i] = a.end
            admitted.extend((i, s) for s in new)
            reported[members[i]] = source_watermark(splits, a.end)
    return rounds, admitted


limit_sets = st.builds(
    Limits,
    st.one_of(st.none(), st.integers(1, 4)),
    st.one_of(st.none(), st.integers(1, 12)),
    st.one_of(st.none(), st.integers(1, 12)),
)


@settings(max_examples=250, deadline=None)
@given(source_plans(), st.integers(0, 120), limit_sets, st.randoms(use_true_random=False), st.floats(0, 0.8))
def test_group_simulation(
    plans: list[list[Split]], drift: int, limits: Limits, rnd: random.Random, extra: float
) -> None:
    rounds, admitted = run_group(plans, drift, limits, rnd, extra)

    # (2) finished: every split admitted exactly once, per source in plan order
    for i, plan in enumerate(plans):
        assert [s for k, s in admitted if k == i] == plan
    assert rounds <= sum(len(p) for p in plans) + 2

    # DESIGN bound: out-of-orderliness <= maxDrift + largest split span
    bound = drift + max_span([s for p in plans for s in p])
    seen_upper: int | None = None
    for _, s in admitted:
        if seen_upper is not None:
            assert seen_upper - s.lower <= bound
        seen_upper = s.upper if seen_upper is None else max(seen_upper, s.upper)


def test_missing_member_holds_everyone() -> None:
    members = ("a", "b")
    reported: dict[str, int | None] = {"a": 0}
    view = global_view(members, reported)
    assert view.global_watermark == HELD
    assert view.missing == ("b",)
    assert admit([sp(0)], 0, view.bound(10**9), Limits()).end == 0


def test_strict_mode_round_robin_is_in_order() -> None:
    """Zero drift: sources admit exactly in order of lower bound (ties admitted together)."""
    plans = [[sp(0), sp(3), sp(6)], [sp(1), sp(4), sp(7)], [sp(2), sp(5), sp(8)]]
    _, admitted = run_group(plans, 0, Limits(), random.Random(0), 0.0)
    assert [s.lower for _, s in admitted] == list(range(9))


def test_fast_source_waits_for_slow_one() -> None:
    plans = [[sp(0), sp(100), sp(200)], [sp(0), sp(1), sp(2), sp(300)]]
    members = ("fast", "slow")
    reported: dict[str, int | None] = {"fast": 0, "slow": 0}
    a = admit(plans[0], 0, global_view(members, reported).bound(50), Limits())
    assert (a.end, a.throttled) == (1, True)  # 100 > 0 + 50
    reported["slow"] = None  # slow finished: fast runs free
    assert global_view(members, reported).bound(50) == 0 + 50  # fast's own report still 0
    reported["fast"] = 100
    a = admit(plans[0], 1, global_view(members, reported).bound(50), Limits())
    assert (a.end, a.throttled) == (2, True)  # alone, a source still moves by its own wm + drift
    reported["fast"] = 200
    assert admit(plans[0], 2, global_view(members, reported).bound(50), Limits()).end == 3
    reported["fast"] = None
    assert global_view(members, reported).global_watermark is None
