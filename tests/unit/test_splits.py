"""Split planning: order, determinism, slicing, bundling, task packing (pure Python)."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_app.config import SplitConfig
from spark_app.planning.splits import (
    DataFileInfo,
    FilePiece,
    Split,
    max_span,
    pack_tasks,
    plan_fingerprint,
    plan_splits,
)

S = 1_000_000  # microseconds per second
MB = 1024 * 1024


def cfg(target: int = 100, open_cost: int = 0, span_s: float = 3600, task_target: int = 1000) -> SplitConfig:
    return SplitConfig(
        target_bytes=target,
        open_file_cost=open_cost,
        max_bundle_span=timedelta(seconds=span_s),
        task_target_bytes=task_target,
    )


def f(
    path: str, lower: int | None, upper: int | None, size: int = 10, rows: int = 5, rgs: tuple[int, ...] = ()
) -> DataFileInfo:
    return DataFileInfo(path, rows, size, lower, upper, rgs)


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


# --- properties ---------------------------------------------------------------------------


@st.composite
def data_files(draw: st.DrawFn) -> DataFileInfo:
    n = draw(st.integers(0, 10**6))  # unique suffix added by `file_sets`
    size = draw(st.integers(1, 500))
    rgs: tuple[int, ...] = ()
    if draw(st.booleans()):
        cuts = draw(st.lists(st.integers(1, max(size - 1, 1)), max_size=6, unique=True))
        rgs = tuple(sorted({0, *[c for c in cuts if c < size]}))
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


@settings(max_examples=200, deadline=None)
@given(file_sets, split_cfgs, windows, st.randoms(use_true_random=False))
def test_plan_invariants(
    files: list[DataFileInfo], c: SplitConfig, window: tuple[int | None, int | None], rnd: random.Random
) -> None:
    plan = plan_splits(files, c, window)
    lo, hi = window
    by_path = {x.path: x for x in files}
    span_us = int(c.max_bundle_span.total_seconds() * S)

    # ordering
    keys = [(s.lower, s.upper, s.pieces[0].path, s.pieces[0].row_groups or ()) for s in plan]
    assert keys == sorted(keys)
    assert len(set(keys)) == len(keys)

    # determinism: shuffled input, same plan and same fingerprint
    shuffled = list(files)
    rnd.shuffle(shuffled)
    again = plan_splits(shuffled, c, window)
    assert again == plan
    assert plan_fingerprint(again) == plan_fingerprint(plan)
    assert [(s.rows, s.size_bytes) for s in again] == [(s.rows, s.size_bytes) for s in plan]

    # coverage: every file exactly once; every row group of a sliced file exactly once
    whole = Counter(p.path for s in plan for p in s.pieces if p.row_groups is None)
    groups: dict[str, list[int]] = {}
    for s in plan:
        for p in s.pieces:
            if p.row_groups is not None:
                groups.setdefault(p.path, []).extend(p.row_groups)
    assert set(whole) | set(groups) == set(by_path)
    assert not set(whole) & set(groups)
    assert all(n == 1 for n in whole.values())
    for path, gs in groups.items():
        assert sorted(gs) == list(range(len(by_path[path].row_group_offsets)))

    # slicing: exactly the big multi-row-group files, slices <= target unless one group
    sliced = {p for p, x in by_path.items() if x.size_bytes > c.target_bytes and len(x.row_group_offsets) > 1}
    assert set(groups) == sliced

    for s in plan:
        assert s.rows == sum(p.rows for p in s.pieces)
        assert s.size_bytes == sum(p.size_bytes for p in s.pieces)
        bounds = [clamp(by_path[p.path], lo, hi) for p in s.pieces]
        assert s.lower == min(b[0] for b in bounds)
        assert s.upper == max(b[1] for b in bounds)
        assert s.lower <= s.upper
        if lo is not None:
            assert s.lower >= lo
        if hi is not None:
            assert s.upper <= hi - 1
        if s.pieces[0].row_groups is not None:
            (piece,) = s.pieces
            assert piece.size_bytes <= c.target_bytes or len(piece.row_groups) == 1
            assert piece.size_bytes >= len(piece.row_groups)
            gs = piece.row_groups
            assert gs == tuple(range(gs[0], gs[0] + len(gs)))  # consecutive run
        else:
            assert all(p.rows == by_path[p.path].record_count for p in s.pieces)
            assert all(p.size_bytes == by_path[p.path].size_bytes for p in s.pieces)
            cost = sum(max(by_path[p.path].size_bytes, c.open_file_cost) for p in s.pieces)
            assert cost <= c.target_bytes or s.files == 1
            lowers = [b[0] for b in bounds]
            assert max(lowers) - min(lowers) <= span_us
            widest = max(b[1] - b[0] for b in bounds)
            assert s.span <= span_us + widest

    # slice sizes of a file add up to its row-group bytes
    for path in sliced:
        x = by_path[path]
        total = sum(p.size_bytes for s in plan for p in s.pieces if p.path == path)
        sizes = [
            max(e - o, 1) for o, e in zip(x.row_group_offsets, [*x.row_group_offsets[1:], x.size_bytes], strict=True)
        ]
        assert total == sum(sizes)


@settings(max_examples=100, deadline=None)
@given(file_sets, split_cfgs)
def test_bundles_are_greedy(files: list[DataFileInfo], c: SplitConfig) -> None:
    """Consecutive whole-file bundles could not have been merged: the next file would break a
    limit (bytes or span) or a sliced file sits in between."""
    plan = plan_splits(files, c)
    by_path = {x.path: x for x in files}
    span_us = int(c.max_bundle_span.total_seconds() * S)
    ordered = sorted(files, key=lambda x: (*clamp(x, None, None), x.path))
    pos = {x.path: i for i, x in enumerate(ordered)}
    bundles = sorted(
        ([pos[p.path] for p in s.pieces] for s in plan if s.pieces[0].row_groups is None), key=lambda b: b[0]
    )
    for b in bundles:
        assert b == list(range(b[0], b[0] + len(b)))  # contiguous in (lower, upper, path) order
    for a, b in itertools.pairwise(bundles):
        if b[0] != a[-1] + 1:
            continue  # a sliced file in between
        nxt = ordered[b[0]]
        cost = sum(max(ordered[i].size_bytes, c.open_file_cost) for i in a)
        too_big = cost + max(nxt.size_bytes, c.open_file_cost) > c.target_bytes
        too_wide = clamp(nxt, None, None)[0] - clamp(ordered[a[0]], None, None)[0] > span_us
        assert too_big or too_wide, (a, b, [by_path[ordered[i].path] for i in a])


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
