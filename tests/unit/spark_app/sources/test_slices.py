"""Time slicing of wide files: the cut (pure) and the column read behind it (a real Parquet
file through pyiceberg's FileIO, nested ordering column, several row groups, nulls)."""

from __future__ import annotations

import itertools
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.io.pyarrow import PyArrowFileIO

from spark_app.contract.sources import SplitConfig
from spark_app.planning.splits import DataFileInfo, TimeSlice
from spark_app.sources.iceberg.slices import cut, ordering_values, slice_file, slice_wide_files

M = 60_000_000  # microseconds per minute
SPAN = 5 * M


def cut_of(values: list[int], groups: list[int] | None = None, n_groups: int = 1) -> tuple[TimeSlice, ...]:
    g = groups if groups is not None else [0] * len(values)
    return cut(np.array(values, dtype=np.int64), np.array(g, dtype=np.int32), n_groups, SPAN)


def test_on_time_body_straddling_a_bucket_edge_is_one_slice() -> None:
    # the body (59.7..60.8 min) crosses the 60-minute edge; two rows ~40 minutes late
    body = [int(m * M) for m in (59.67, 59.9, 60.1, 60.5, 60.83)]
    assert cut_of([*body, 20 * M, 21 * M]) == (TimeSlice(20 * M, 21 * M, 2), TimeSlice(body[0], body[-1], 5))


def test_a_dense_late_tail_is_not_glued_into_one_wide_slice() -> None:
    # a late row every minute for 30 minutes: every bucket is non-empty, yet no slice is wider
    # than the span (merging all consecutive non-empty buckets would give one 29-minute slice)
    got = cut_of([m * M for m in range(30)])
    assert [(s.lower // M, s.upper // M, s.rows) for s in got] == [(5 * i, 5 * i + 4, 5) for i in range(6)]


def test_buckets_merge_whole_and_only_within_the_span() -> None:
    assert cut_of([4 * M, 5 * M, 9 * M]) == (TimeSlice(4 * M, 9 * M, 3),)  # 5 minutes: one slice
    got = cut_of([4 * M, 5 * M, 9 * M, 9 * M + 1])  # the second bucket would widen it past 5 minutes
    assert got == (TimeSlice(4 * M, 4 * M, 1), TimeSlice(5 * M, 9 * M + 1, 3))


def test_row_groups_are_the_ones_holding_the_rows() -> None:
    got = cut_of([0, 40 * M, 1, 41 * M, 2], groups=[0, 1, 1, 2, 2], n_groups=3)
    assert got == (TimeSlice(0, 2, 3, None), TimeSlice(40 * M, 41 * M, 2, (1, 2)))  # None: all of them
    two = cut_of([0, 40 * M], groups=[0, 1], n_groups=3)
    assert two == (TimeSlice(0, 0, 1, (0,)), TimeSlice(40 * M, 40 * M, 1, (1,)))


def test_empty_input() -> None:
    assert cut_of([]) == ()


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(-3 * SPAN, 40 * SPAN), max_size=200),
    st.integers(1, 4),
    st.randoms(use_true_random=False),
)
def test_cut_invariants(values: list[int], n_groups: int, rnd: object) -> None:
    groups = [i % n_groups for i in range(len(values))]
    got = cut_of(values, groups, n_groups)
    # deterministic whatever the row order
    pairs = list(zip(values, groups, strict=True))
    rnd.shuffle(pairs)  # type: ignore[attr-defined]
    assert cut_of([v for v, _ in pairs], [g for _, g in pairs], n_groups) == got
    # every row in exactly one slice, whose bounds are true values and within the span
    assert sum(s.rows for s in got) == len(values)
    for s in got:
        inside = [(v, g) for v, g in zip(values, groups, strict=True) if s.lower <= v <= s.upper]
        assert len(inside) == s.rows
        assert min(v for v, _ in inside) == s.lower and max(v for v, _ in inside) == s.upper
        assert s.upper - s.lower <= SPAN
        held = sorted({g for _, g in inside})
        assert s.row_groups == (None if len(held) == n_groups else tuple(held))
    # ordered, disjoint, and greedy: a slice could not take the next one's rows
    for a, b in itertools.pairwise(got):
        assert a.upper < b.lower
        assert b.upper - a.lower > SPAN


# --- the column read -----------------------------------------------------------------------


def write_file(path: Path, ts: list[int | None]) -> None:
    """Rows with the time in a struct, two rows per row group."""
    arrow_ts = pa.array(ts, pa.int64()).cast(pa.timestamp("us"))
    meta = pa.StructArray.from_arrays([arrow_ts, pa.array(range(len(ts)), pa.int64())], ["ingestion_ts", "commit_id"])
    table = pa.table({"id": [str(i) for i in range(len(ts))], "__metadata__": meta})
    pq.write_table(table, path, row_group_size=2)


def test_ordering_values_reads_a_nested_column_through_the_file_io(tmp_path: Path) -> None:
    path = tmp_path / "f.parquet"
    write_file(path, [50 * M, None, 10 * M, 11 * M, 51 * M])
    values, groups, n = ordering_values(PyArrowFileIO(), f"file://{path}", "__metadata__.ingestion_ts")
    assert values.tolist() == [50 * M, 10 * M, 11 * M, 51 * M]  # the null row belongs to no slice
    assert groups.tolist() == [0, 1, 1, 2]
    assert n == 3


def test_slice_file_keeps_only_rows_in_the_window(tmp_path: Path) -> None:
    path = tmp_path / "f.parquet"
    write_file(path, [50 * M, 1 * M, 10 * M, 11 * M, 51 * M, 200 * M])
    info = DataFileInfo(f"file://{path}", 6, path.stat().st_size, 1 * M, 200 * M)
    got = slice_file(PyArrowFileIO(), info, "__metadata__.ingestion_ts", SPAN, (5 * M, 100 * M))
    assert got.slice_column == "__metadata__.ingestion_ts"
    assert got.slices == (TimeSlice(10 * M, 11 * M, 2, (1,)), TimeSlice(50 * M, 51 * M, 2, (0, 2)))
    nothing = slice_file(PyArrowFileIO(), info, "__metadata__.ingestion_ts", SPAN, (300 * M, 400 * M))
    assert nothing.slices == ()


def test_only_wide_files_are_read(tmp_path: Path) -> None:
    path = tmp_path / "f.parquet"
    write_file(path, [10 * M, 50 * M])
    wide = DataFileInfo(f"file://{path}", 2, 1, 10 * M, 50 * M)
    narrow = DataFileInfo("file:///does/not/exist.parquet", 2, 1, 10 * M, 12 * M)
    cfg = SplitConfig(slice_span=timedelta(minutes=5))
    got = slice_wide_files(PyArrowFileIO(), [narrow, wide], "__metadata__.ingestion_ts", cfg, (None, None))
    assert got[0] is narrow
    assert got[1].slices == (TimeSlice(10 * M, 10 * M, 1), TimeSlice(50 * M, 50 * M, 1))
    off = slice_wide_files(PyArrowFileIO(), [wide], "x", SplitConfig(slice_span=None), (None, None))
    assert off == [wide]
