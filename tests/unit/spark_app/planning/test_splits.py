"""Split planning: order, determinism, slicing (row groups and time), bundling, task packing
(pure Python)."""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from collections import Counter
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_app.contract.sources import SplitConfig
from spark_app.planning.splits import (
    DataFileInfo,
    FilePiece,
    Split,
    TimeRange,
    TimeSlice,
    is_wide,
    max_span,
    pack_tasks,
    plan_fingerprint,
    plan_splits,
    read_together,
)

S = 1_000_000  # microseconds per second
MB = 1024 * 1024


def cfg(
    target: int = 100, open_cost: int = 0, span_s: float = 3600, task_target: int = 1000, slice_s: float | None = 300
) -> SplitConfig:
    return SplitConfig(
        target_bytes=target,
        open_file_cost=open_cost,
        max_bundle_span=timedelta(seconds=span_s),
        task_target_bytes=task_target,
        slice_span=None if slice_s is None else timedelta(seconds=slice_s),
    )


def f(
    path: str, lower: int | None, upper: int | None, size: int = 10, rows: int = 5, rgs: tuple[int, ...] = ()
) -> DataFileInfo:
    return DataFileInfo(path, rows, size, lower, upper, rgs)


def sliced(
    path: str,
    slices: list[tuple[int, int, int]] | list[TimeSlice],
    size: int = 100,
    rows: int = 100,
    rgs: tuple[int, ...] = (),
) -> DataFileInfo:
    """A wide file as the I/O edge hands it over: its statistics plus its time slices."""
    ts = tuple(x if isinstance(x, TimeSlice) else TimeSlice(*x) for x in slices)
    lower = min((x.lower for x in ts), default=0)
    upper = max((x.upper for x in ts), default=0)
    return DataFileInfo(path, rows, size, lower, upper, rgs, slices=ts, slice_column="ts")


def sp(lower: int, upper: int, size: int, path: str = "p", rows: int = 1) -> Split:
    return Split(lower, upper, (FilePiece(path, None, rows, size),), rows, size)


def clamp(file: DataFileInfo, lo: int | None, hi: int | None) -> tuple[int, int]:
    """Reference: the spec of clamping, written independently of the planner."""
    lower = file.lower if file.lower is not None else (lo if lo is not None else 0)
    upper = file.upper if file.upper is not None else (hi - 1 if hi is not None else lower)
    if lo is not None:
        lower, upper = max(lower, lo), max(upper, lo)
    if hi is not None:
        lower, upper = min(lower, hi - 1), min(upper, hi - 1)
    return lower, upper


# --- examples ---------------------------------------------------------------------------


def test_order_by_lower_upper_path() -> None:
    files = [f("c", 5, 9), f("b", 5, 7), f("a", 5, 9), f("z", 1, 100)]
    plan = plan_splits(files, cfg(target=10))  # each file alone: 10 bytes fill a bundle
    assert [(s.lower, s.upper, s.pieces[0].path) for s in plan] == [
        (1, 100, "z"),
        (5, 7, "b"),
        (5, 9, "a"),
        (5, 9, "c"),
    ]
    assert all(s.files == 1 and s.pieces[0].row_groups is None for s in plan)


def test_bundles_with_equal_bounds_ordered_by_first_path() -> None:
    # bundles [z, b] and [m] both span (0, 10): the plan is ordered by the first file's path
    files = [f("z", 0, 5, size=40), f("b", 0, 10, size=40), f("m", 0, 10, size=40)]
    plan = plan_splits(files, cfg(target=80))
    assert [[p.path for p in s.pieces] for s in plan] == [["m"], ["z", "b"]]


def test_small_files_bundled_up_to_target() -> None:
    files = [f(f"f{i}", i, i + 1, size=30) for i in range(7)]
    plan = plan_splits(files, cfg(target=100))
    assert [[p.path for p in s.pieces] for s in plan] == [["f0", "f1", "f2"], ["f3", "f4", "f5"], ["f6"]]
    assert [(s.lower, s.upper) for s in plan] == [(0, 3), (3, 6), (6, 7)]
    assert [s.size_bytes for s in plan] == [90, 90, 30]
    assert [s.rows for s in plan] == [15, 15, 5]


def test_open_file_cost_limits_bundle() -> None:
    files = [f(f"f{i}", i, i, size=1) for i in range(10)]
    plan = plan_splits(files, cfg(target=100, open_cost=25))
    assert [s.files for s in plan] == [4, 4, 2]
    assert plan_splits(files, cfg(target=100, open_cost=0))[0].files == 10


def test_bundle_span_limit() -> None:
    files = [f(f"f{i}", i * 60 * S, i * 60 * S + 1, size=1) for i in range(6)]  # one a minute
    plan = plan_splits(files, cfg(target=10**9, span_s=120))
    # first and last lower of a bundle at most 120s apart
    assert [[p.path for p in s.pieces] for s in plan] == [["f0", "f1", "f2"], ["f3", "f4", "f5"]]


def test_big_file_sliced_by_row_groups() -> None:
    big = f("big", 10, 20, size=404, rows=400, rgs=(4, 104, 204, 304))  # 4 groups of 100 bytes
    plan = plan_splits([big, f("small", 0, 5, size=10)], cfg(target=250))
    assert [s.pieces[0].path for s in plan] == ["small", "big", "big"]
    sliced = [s for s in plan if s.pieces[0].path == "big"]
    assert [s.pieces[0].row_groups for s in sliced] == [(0, 1), (2, 3)]
    assert all((s.lower, s.upper) == (10, 20) for s in sliced)
    assert [s.size_bytes for s in sliced] == [200, 200]
    assert [s.rows for s in sliced] == [200, 200]


def test_big_file_with_one_row_group_is_not_sliced() -> None:
    plan = plan_splits([f("big", 0, 1, size=500, rgs=(4,)), f("after", 0, 2, size=1)], cfg(target=100))
    assert [[p.path for p in s.pieces] for s in plan] == [["big"], ["after"]]
    assert plan[0].pieces[0].row_groups is None


def test_oversized_row_group_is_its_own_slice() -> None:
    plan = plan_splits([f("big", 0, 1, size=1000, rgs=(0, 10, 900))], cfg(target=100))
    assert [(s.pieces[0].row_groups, s.size_bytes) for s in plan] == [((0,), 10), ((1,), 890), ((2,), 100)]


def test_big_file_breaks_bundle() -> None:
    files = [f("a", 0, 1, size=1), f("big", 1, 2, size=300, rgs=(0, 150)), f("b", 2, 3, size=1)]
    plan = plan_splits(files, cfg(target=100))
    assert [[p.path for p in s.pieces] for s in plan] == [["a"], ["big"], ["big"], ["b"]]


def test_clamping_to_window() -> None:
    files = [f("early", 0, 50), f("late", 90, 200), f("nostats", None, None), f("inside", 20, 30)]
    plan = plan_splits(files, cfg(target=10), window=(10, 100))
    got = {s.pieces[0].path: (s.lower, s.upper) for s in plan}
    assert got == {"early": (10, 50), "late": (90, 99), "nostats": (10, 99), "inside": (20, 30)}


def test_missing_stats_without_window() -> None:
    plan = plan_splits([f("n", None, None), f("u", 7, None)], cfg(target=10))
    assert {s.pieces[0].path: (s.lower, s.upper) for s in plan} == {"n": (0, 0), "u": (7, 7)}


def test_empty_plan() -> None:
    assert plan_splits([], cfg()) == []
    assert max_span([]) == 0
    assert pack_tasks([], 4, 100) == []
    assert plan_fingerprint([]) == plan_fingerprint([])


def test_max_span() -> None:
    assert max_span([sp(0, 5, 1), sp(3, 30, 1), sp(10, 11, 1)]) == 27
    assert max_span([sp(4, 4, 1)]) == 0


def test_fingerprint_changes_with_settings_and_files() -> None:
    files = [f(f"f{i}", i, i + 1, size=30, rgs=(0, 15)) for i in range(6)]
    a = plan_fingerprint(plan_splits(files, cfg(target=100)))
    assert a == plan_fingerprint(plan_splits(list(reversed(files)), cfg(target=100)))
    assert len(a) == 16
    int(a, 16)
    assert a != plan_fingerprint(plan_splits(files, cfg(target=60)))  # other bundles
    assert a != plan_fingerprint(plan_splits(files, cfg(target=20)))  # files sliced
    assert a != plan_fingerprint(plan_splits(files, cfg(target=100, span_s=0)))
    assert a != plan_fingerprint(plan_splits(files, cfg(target=100), window=(2, None)))
    assert a != plan_fingerprint(plan_splits([*files[:-1], f("other", 5, 6, size=30)], cfg(target=100)))


def test_pack_tasks_example() -> None:
    splits = [sp(i, i, size, path=f"s{i}") for i, size in enumerate([50, 40, 30, 20, 10])]
    tasks = pack_tasks(splits, parallelism=2, task_target_bytes=1000)
    assert [[s.pieces[0].path for s in t] for t in tasks] == [["s0", "s3", "s4"], ["s1", "s2"]]
    assert [sum(s.size_bytes for s in t) for t in tasks] == [80, 70]


def test_pack_tasks_more_tasks_than_cores_for_big_batches() -> None:
    splits = [sp(i, i, 100, path=f"s{i}") for i in range(10)]
    assert len(pack_tasks(splits, parallelism=2, task_target_bytes=250)) == 4  # ceil(1000 / 250)
    assert len(pack_tasks(splits, parallelism=2, task_target_bytes=10)) == 10  # one split a task at most


# --- time slices of wide files ---------------------------------------------------------------

M = 60 * S  # microseconds per minute


def test_time_slices_become_splits_with_their_own_ranges() -> None:
    # an on-time body at 60-62 min and two late tails, 40 and 1 minutes wide of the body
    wide = sliced("w", [(20 * M, 21 * M, 2), (50 * M, 52 * M, 3), (60 * M, 62 * M, 95)], size=1000, rows=100)
    plan = plan_splits([wide], cfg(target=10**6, span_s=0))
    assert [(s.lower, s.upper) for s in plan] == [(20 * M, 21 * M), (50 * M, 52 * M), (60 * M, 62 * M)]
    assert [s.pieces[0].time_range for s in plan] == [
        TimeRange("ts", 20 * M, 21 * M + 1),
        TimeRange("ts", 50 * M, 52 * M + 1),
        TimeRange("ts", 60 * M, 62 * M + 1),
    ]
    assert [s.rows for s in plan] == [2, 3, 95]  # exact, from the ordering column
    assert [s.size_bytes for s in plan] == [20, 30, 950]  # in proportion to rows
    assert all(s.pieces[0].path == "w" and s.pieces[0].row_groups is None for s in plan)
    assert max_span(plan) == 2 * M
    assert max_span(plan_splits([replace_slices(wide, None)], cfg(target=10**6))) == 42 * M


def replace_slices(file: DataFileInfo, slices: tuple[TimeSlice, ...] | None) -> DataFileInfo:
    return DataFileInfo(
        file.path, file.record_count, file.size_bytes, file.lower, file.upper, file.row_group_offsets, slices=slices
    )


def test_slices_interleave_with_other_files_by_lower_bound() -> None:
    wide = sliced("w", [(10 * M, 11 * M, 1), (40 * M, 41 * M, 9)], size=10)
    plan = plan_splits([wide, f("a", 5 * M, 6 * M), f("b", 20 * M, 30 * M)], cfg(target=10, span_s=0))
    assert [(s.pieces[0].path, s.lower) for s in plan] == [("a", 5 * M), ("w", 10 * M), ("b", 20 * M), ("w", 40 * M)]


def test_only_non_empty_slices_become_splits() -> None:
    nothing_in_window = sliced("w", [], size=10)
    plan = plan_splits([nothing_in_window, f("a", 1, 2)], cfg(target=10))
    assert [s.pieces[0].path for s in plan] == ["a"]
    assert [s.pieces[0].path for s in plan_splits([replace_slices(nothing_in_window, None)], cfg())] == ["w"]


def test_small_slices_bundle_with_neighbours_as_pseudo_files() -> None:
    # a late row of w (at 10 min) travels with the files of 10 min, not with w's own body
    wide = sliced("w", [(10 * M + 5 * S, 10 * M + 5 * S, 1), (40 * M, 41 * M, 99)], size=1000, rows=100)
    files = [f("a", 10 * M, 11 * M, size=10), f("b", 11 * M, 12 * M, size=10), wide, f("c", 40 * M, 40 * M, size=10)]
    plan = plan_splits(files, cfg(target=100, span_s=120))
    assert [[(p.path, p.time_range is not None) for p in s.pieces] for s in plan] == [
        [("a", False), ("w", True), ("b", False)],
        [("c", False)],
        [("w", True)],
    ]
    assert (plan[0].lower, plan[0].upper, plan[0].rows) == (10 * M, 12 * M, 5 + 1 + 5)
    assert plan[2].size_bytes == 990  # the body is too big to share a bundle with c (10 + 990 > 100)


def test_open_file_cost_counts_for_every_slice() -> None:
    wide = sliced("w", [(i * M, i * M, 1) for i in range(10)], size=10, rows=10)
    assert [s.files for s in plan_splits([wide], cfg(target=100, open_cost=25))] == [4, 4, 2]


def test_big_time_slice_is_cut_by_its_row_groups() -> None:
    # 4 row groups of 100 bytes; the body (row groups 1-3, 300 rows) is bigger than the target
    body = TimeSlice(60 * M, 62 * M, 300, (1, 2, 3))
    late = TimeSlice(10 * M, 10 * M, 4, (0, 2))
    wide = sliced("w", [late, body], size=404, rows=304, rgs=(4, 104, 204, 304))
    plan = plan_splits([wide], cfg(target=250, span_s=0))
    assert [(s.lower, s.pieces[0].row_groups, s.rows) for s in plan] == [
        (10 * M, (0, 2), 4),
        (60 * M, (1, 2), 200),
        (60 * M, (3,), 100),
    ]
    assert all(s.pieces[0].time_range == TimeRange("ts", 60 * M, 62 * M + 1) for s in plan[1:])
    assert sum(s.size_bytes for s in plan[1:]) == 404 * 300 // 304  # the slice's bytes, split up


def test_time_slices_are_clamped_to_the_window() -> None:
    wide = sliced("w", [(5, 8, 1), (50, 60, 1)], size=10)
    plan = plan_splits([wide], cfg(target=10, span_s=0), window=(7, 55))
    assert [(s.lower, s.upper) for s in plan] == [(7, 8), (50, 54)]
    assert [s.pieces[0].time_range for s in plan] == [TimeRange("ts", 5, 9), TimeRange("ts", 50, 61)]


def test_is_wide_compares_the_clamped_span_with_the_slice_span() -> None:
    c = cfg(slice_s=300)
    assert not is_wide(f("a", 0, 300 * S), c)
    assert is_wide(f("a", 0, 300 * S + 1), c)
    assert not is_wide(f("a", 0, 3600 * S), c, window=(3500 * S, None))  # clamped to 100 s
    assert is_wide(f("nostats", None, None), c, window=(0, 3600 * S))  # could be anywhere in it
    assert not is_wide(f("a", 0, 3600 * S), cfg(slice_s=None))
    assert not is_wide(f("a", 0, 3600 * S), cfg(slice_s=0))


def test_slice_span_config() -> None:
    assert SplitConfig().slice_span == timedelta(minutes=5)
    assert SplitConfig.model_validate({"sliceSpan": None}).slice_span is None
    assert SplitConfig.model_validate({"sliceSpan": "90s"}).slice_span == timedelta(seconds=90)
    assert SplitConfig.model_validate({"sliceSpan": "0s"}).model_dump(by_alias=True)["sliceSpan"] == "0s"


def test_fingerprint_covers_slice_ranges_and_keeps_file_plans_stable() -> None:
    files = [f("a", 0, 10, size=30), f("b", 5, 20, size=30, rgs=(0, 15))]
    plan = plan_splits(files, cfg(target=20))
    # the fingerprint of a file-level plan is what it was before time slices existed
    legacy = hashlib.sha256()
    for s in plan:
        legacy.update(json.dumps([s.lower, s.upper, [(p.path, p.row_groups) for p in s.pieces]]).encode())
    assert plan_fingerprint(plan) == legacy.hexdigest()[:16]

    one = sliced("w", [(0, 9, 1), (100, 109, 1)])
    a = plan_fingerprint(plan_splits([one], cfg(span_s=0)))
    assert a == plan_fingerprint(plan_splits([sliced("w", [(0, 9, 1), (100, 109, 1)])], cfg(span_s=0)))
    assert a != plan_fingerprint(plan_splits([sliced("w", [(0, 9, 1), (100, 108, 1)])], cfg(span_s=0)))
    assert a != plan_fingerprint(plan_splits([sliced("w", [(0, 9, 2)])], cfg(span_s=0)))
    assert a != plan_fingerprint(plan_splits([replace_slices(one, None)], cfg(span_s=0)))


# --- properties ---------------------------------------------------------------------------


@st.composite
def time_slices(draw: st.DrawFn, n_groups: int) -> tuple[TimeSlice, ...]:
    """Disjoint, ordered slices as the I/O edge cuts them (true min/max, rows, row groups)."""
    out = []
    cur = draw(st.integers(0, 10_000))
    for _ in range(draw(st.integers(0, 4))):
        lower = cur + draw(st.integers(0, 300))
        upper = lower + draw(st.integers(0, 40))
        groups = None
        if n_groups > 1 and draw(st.booleans()):
            groups = tuple(sorted(draw(st.sets(st.integers(0, n_groups - 1), min_size=1, max_size=n_groups))))
        out.append(TimeSlice(lower, upper, draw(st.integers(1, 300)), groups))
        cur = upper + 1
    return tuple(out)


@st.composite
def data_files(draw: st.DrawFn) -> DataFileInfo:
    n = draw(st.integers(0, 10**6))  # unique suffix added by `file_sets`
    size = draw(st.integers(1, 500))
    rgs: tuple[int, ...] = ()
    if draw(st.booleans()):
        cuts = draw(st.lists(st.integers(1, max(size - 1, 1)), max_size=6, unique=True))
        rgs = tuple(sorted({0, *[c for c in cuts if c < size]}))
    if draw(st.integers(0, 3)) == 0:  # a wide file, cut into time slices
        slices = draw(time_slices(len(rgs)))
        rows = sum(x.rows for x in slices) + draw(st.integers(0, 50))  # + rows outside the window
        lower = min((x.lower for x in slices), default=None)
        upper = max((x.upper for x in slices), default=None)
        return DataFileInfo(f"p{n}", rows, size, lower, upper, rgs, slices=slices, slice_column="ts")
    has_stats = draw(st.integers(0, 9)) > 0
    lower = draw(st.one_of(st.integers(0, 20), st.integers(0, 10_000))) if has_stats else None
    upper = None if lower is None else lower + draw(st.one_of(st.integers(0, 5), st.integers(0, 500)))
    return DataFileInfo(f"p{n}", draw(st.integers(0, 1000)), size, lower, upper, rgs)


file_sets = st.lists(data_files(), max_size=25, unique_by=lambda x: x.path)

split_cfgs = st.builds(
    lambda t, o, span: SplitConfig(target_bytes=t, open_file_cost=o, max_bundle_span=timedelta(microseconds=span)),
    st.integers(1, 600),
    st.integers(0, 200),
    st.integers(0, 2000),
)

windows = st.one_of(
    st.just((None, None)),
    st.tuples(st.integers(0, 5000), st.integers(1, 5000)).map(lambda t: (t[0], t[0] + t[1])),
    st.tuples(st.none(), st.integers(1, 12_000)),
    st.tuples(st.integers(0, 12_000), st.none()),
)


def unit_of(p: FilePiece) -> tuple[str, TimeRange | None]:
    """What a piece was cut from: a whole file, or one time slice of a file."""
    return (p.path, p.time_range)


def expected_units(
    files: list[DataFileInfo], lo: int | None, hi: int | None
) -> dict[tuple[str, TimeRange | None], tuple[int, int, int, int, tuple[int, ...] | None]]:
    """Reference: every unit's clamped (lower, upper), rows, bytes and row groups."""
    units = {}
    for x in files:
        if x.slices is None:
            units[(x.path, None)] = (*clamp(x, lo, hi), x.record_count, x.size_bytes, None)
            continue
        for t in x.slices:
            low, up = clamp(DataFileInfo("", 0, 0, t.lower, t.upper), lo, hi)
            size = max(1, x.size_bytes * t.rows // max(x.record_count, t.rows, 1))
            units[(x.path, TimeRange("ts", t.lower, t.upper + 1))] = (low, up, t.rows, size, t.row_groups)
    return units


@settings(max_examples=300, deadline=None)
@given(file_sets, split_cfgs, windows, st.randoms(use_true_random=False))
def test_plan_invariants(
    files: list[DataFileInfo], c: SplitConfig, window: tuple[int | None, int | None], rnd: random.Random
) -> None:
    plan = plan_splits(files, c, window)
    lo, hi = window
    by_path = {x.path: x for x in files}
    units = expected_units(files, lo, hi)
    span_us = int(c.max_bundle_span.total_seconds() * S)

    # ordering
    keys = [s.sort_key() for s in plan]
    assert keys == sorted(keys)
    assert len(set(keys)) == len(keys)

    # determinism: shuffled input, same plan and same fingerprint
    shuffled = list(files)
    rnd.shuffle(shuffled)
    again = plan_splits(shuffled, c, window)
    assert again == plan
    assert plan_fingerprint(again) == plan_fingerprint(plan)
    assert [(s.rows, s.size_bytes) for s in again] == [(s.rows, s.size_bytes) for s in plan]

    # coverage: every unit (file, or time slice of one) exactly once: whole, or each of its row
    # groups exactly once; a sliced unit's pieces add up to it in rows and bytes
    pieces: dict[tuple[str, TimeRange | None], list[FilePiece]] = {}
    for s in plan:
        for p in s.pieces:
            pieces.setdefault(unit_of(p), []).append(p)
    assert set(pieces) == set(units)
    cut = set()
    for key, ps in pieces.items():
        x, (_, _, rows, size, groups) = by_path[key[0]], units[key]
        if len(ps) == 1 and ps[0].row_groups == groups:
            assert (ps[0].rows, ps[0].size_bytes) == (rows, size)
            continue
        cut.add(key)
        got = sorted(g for p in ps for g in p.row_groups or ())
        assert got == list(groups if groups is not None else range(len(x.row_group_offsets)))
        if key[1] is not None:  # a big time slice: pieces split its rows and bytes exactly
            assert sum(p.rows for p in ps) == rows
            # exact, except that every piece weighs >= 1 byte (a piece rounded to 0 counts 1)
            assert size <= sum(p.size_bytes for p in ps) < size + len(ps)

    # row-group slicing: exactly the big multi-row-group units
    def n_groups(key: tuple[str, TimeRange | None]) -> int:
        groups = units[key][4]
        return len(groups) if groups is not None else len(by_path[key[0]].row_group_offsets)

    big = {k for k, u in units.items() if u[3] > c.target_bytes and n_groups(k) > 1}
    assert {k for k in cut if k[1] is None} == {k for k in big if k[1] is None}
    assert {k for k in cut if k[1] is not None} <= big

    for s in plan:
        assert s.rows == sum(p.rows for p in s.pieces)
        assert s.size_bytes == sum(p.size_bytes for p in s.pieces)
        bounds = [units[unit_of(p)][:2] for p in s.pieces]
        assert s.lower == min(b[0] for b in bounds)
        assert s.upper == max(b[1] for b in bounds)
        assert s.lower <= s.upper
        if lo is not None:
            assert s.lower >= lo
        if hi is not None:
            assert s.upper <= hi - 1
        for p in s.pieces:
            if p.time_range is not None:  # the reader's range is the slice's true rows, unclamped
                assert by_path[p.path].slice_column == p.time_range.column
        if any(unit_of(p) in cut for p in s.pieces):
            (piece,) = s.pieces
            assert piece.row_groups
            gs = piece.row_groups
            if piece.time_range is None:
                assert piece.size_bytes <= c.target_bytes or len(gs) == 1
                assert piece.size_bytes >= len(gs)
                assert gs == tuple(range(gs[0], gs[0] + len(gs)))  # consecutive run
        else:
            cost = sum(max(p.size_bytes, c.open_file_cost) for p in s.pieces)
            assert cost <= c.target_bytes or s.files == 1
            lowers = [b[0] for b in bounds]
            assert max(lowers) - min(lowers) <= span_us
            widest = max(b[1] - b[0] for b in bounds)
            assert s.span <= span_us + widest

    # row-group slice sizes of a whole file add up to its row-group bytes
    for path, _ in (k for k in cut if k[1] is None):
        x = by_path[path]
        total = sum(p.size_bytes for s in plan for p in s.pieces if p.path == path)
        sizes = [
            max(e - o, 1) for o, e in zip(x.row_group_offsets, [*x.row_group_offsets[1:], x.size_bytes], strict=True)
        ]
        assert total == sum(sizes)


@settings(max_examples=150, deadline=None)
@given(file_sets, split_cfgs)
def test_bundles_are_greedy(files: list[DataFileInfo], c: SplitConfig) -> None:
    """Consecutive bundles could not have been merged: the next unit (file or time slice) would
    break a limit (bytes or span) or a unit cut by row groups sits in between."""
    plan = plan_splits(files, c)
    units = expected_units(files, None, None)
    span_us = int(c.max_bundle_span.total_seconds() * S)
    ordered = sorted(units, key=lambda k: (*units[k][:2], k[0], k[1] or ()))
    pos = {k: i for i, k in enumerate(ordered)}
    seen = Counter(pos[unit_of(p)] for s in plan for p in s.pieces)
    bundles = sorted(
        ([pos[unit_of(p)] for p in s.pieces] for s in plan if all(seen[pos[unit_of(p)]] == 1 for p in s.pieces)),
        key=lambda b: b[0],
    )
    for b in bundles:
        assert b == list(range(b[0], b[0] + len(b)))  # contiguous in (lower, upper, path) order
    for a, b in itertools.pairwise(bundles):
        if b[0] != a[-1] + 1:
            continue  # a unit cut by row groups in between
        nxt = units[ordered[b[0]]]
        cost = sum(max(units[ordered[i]][3], c.open_file_cost) for i in a)
        too_big = cost + max(nxt[3], c.open_file_cost) > c.target_bytes
        too_wide = nxt[0] - units[ordered[a[0]]][0] > span_us
        assert too_big or too_wide, (a, b, [ordered[i] for i in a])


@st.composite
def split_lists(draw: st.DrawFn) -> list[Split]:
    sizes = draw(st.lists(st.integers(1, 1000), max_size=40))
    return [sp(draw(st.integers(0, 100)), 200, size, path=f"s{i}") for i, size in enumerate(sizes)]


@settings(max_examples=200, deadline=None)
@given(split_lists(), st.integers(1, 16), st.integers(1, 5000), st.randoms(use_true_random=False))
def test_pack_tasks_invariants(splits: list[Split], parallelism: int, target: int, rnd: random.Random) -> None:
    tasks = pack_tasks(splits, parallelism, target)
    flat = [s for t in tasks for s in t]
    assert sorted(flat, key=Split.sort_key) == sorted(splits, key=Split.sort_key)
    assert len(flat) == len(splits)
    assert all(tasks)
    if splits:
        total = sum(s.size_bytes for s in splits)
        assert len(tasks) >= min(len(splits), parallelism)
        assert len(tasks) == min(len(splits), max(parallelism, -(-total // target)))
        loads = [sum(s.size_bytes for s in t) for t in tasks]
        assert max(loads) - min(loads) <= max(s.size_bytes for s in splits)
        # greedy by bytes: the last (smallest) split put on a task went to a least-loaded task
        for t, load in zip(tasks, loads, strict=True):
            if len(t) > 1:
                assert load - min(s.size_bytes for s in t) <= min(loads)
    for t in tasks:
        assert t == sorted(t, key=Split.sort_key)
    shuffled = list(splits)
    rnd.shuffle(shuffled)
    assert pack_tasks(shuffled, parallelism, target) == tasks


@pytest.mark.parametrize("parallelism", [1, 3, 8])
def test_pack_tasks_uses_every_core(parallelism: int) -> None:
    plan = plan_splits([f(f"f{i}", i, i, size=MB) for i in range(8)], cfg(target=MB))
    tasks = pack_tasks(plan, parallelism, 128 * MB)
    assert len(tasks) == parallelism
    assert sorted(len(t) for t in tasks) == sorted(
        [8 // parallelism + (i < 8 % parallelism) for i in range(parallelism)]
    )


@st.composite
def sliced_split_lists(draw: st.DrawFn) -> list[Split]:
    """Splits of whole files and of time slices of a few wide files (``w0``..``w3``), each slice
    in some of its file's four row groups (None: all of them)."""
    out = []
    for i in range(draw(st.integers(0, 30))):
        size = draw(st.integers(1, 1000))
        lower = draw(st.integers(0, 100))
        wide = draw(st.sampled_from([None, "w0", "w1", "w2", "w3"]))
        groups = draw(st.one_of(st.none(), st.sets(st.integers(0, 3), min_size=1).map(lambda g: tuple(sorted(g)))))
        piece = (
            FilePiece(f"s{i}", None, 1, size)
            if wide is None
            else FilePiece(wide, groups, 1, size, TimeRange("ts", lower * 10 + i, lower * 10 + i + 1))
        )
        out.append(Split(lower, lower + 5, (piece,), 1, size))
    return out


@settings(max_examples=200, deadline=None)
@given(sliced_split_lists(), st.integers(1, 8), st.integers(1, 5000))
def test_pack_tasks_keeps_a_files_slices_in_one_task_within_a_fair_share(
    splits: list[Split], parallelism: int, target: int
) -> None:
    """Slices of one file in one task (read once, the rest served from that read) unless
    together they pass a task's fair share; every split once; balanced by units."""
    tasks = pack_tasks(splits, parallelism, target)
    assert sorted((s for t in tasks for s in t), key=Split.sort_key) == sorted(splits, key=Split.sort_key)
    if not splits:
        return
    total = sum(s.size_bytes for s in splits)
    n_tasks = min(len(splits), max(parallelism, -(-total // target)))
    units = read_together(splits, total // n_tasks)
    assert len(tasks) == min(n_tasks, len(units))
    for path in ("w0", "w1", "w2", "w3"):
        held = [s for s in splits if s.pieces[0].path == path]
        if held and sum(s.size_bytes for s in held) <= total // n_tasks:
            assert len({i for i, t in enumerate(tasks) for s in t if s.pieces[0].path == path}) == 1
    loads = [sum(s.size_bytes for s in t) for t in tasks]
    assert max(loads) - min(loads) <= max(sum(s.size_bytes for s in u) for u in units)


@settings(max_examples=200, deadline=None)
@given(sliced_split_lists(), st.integers(1, 8), st.integers(1, 5000))
def test_slices_that_share_a_row_group_are_in_one_task_past_the_fair_share_too(
    splits: list[Split], parallelism: int, target: int
) -> None:
    """Two tasks of a batch run at once: had they both a slice of one row group, both would
    decode it, or one would be served from the other's rows by timing alone. So they never do,
    whatever the fair share; slices in other row groups of the file may go apart."""
    tasks = pack_tasks(splits, parallelism, target)
    where = {(i, p.path, p.row_groups, p.time_range) for i, t in enumerate(tasks) for s in t for p in s.pieces}
    for i, path, groups, slice_a in where:
        for j, other, other_groups, slice_b in where:
            if path == other and i != j:
                assert groups is not None and other_groups is not None, (slice_a, slice_b)
                assert set(groups).isdisjoint(other_groups), (path, groups, other_groups)


def test_past_the_fair_share_a_files_slices_part_only_where_their_row_groups_do() -> None:
    groups = [(0,), (0, 1), (2,), (3,)]
    pieces = [FilePiece("w", g, 1, 100, TimeRange("ts", i, i + 1)) for i, g in enumerate(groups)]
    splits = [Split(i, i + 1, (p,), 1, 100) for i, p in enumerate(pieces)]
    units = read_together(splits, cap=150)
    assert [[s.pieces[0].row_groups for s in u] for u in units] == [[(0,), (0, 1)], [(2,)], [(3,)]]
    assert read_together(splits, cap=400) == [splits]
