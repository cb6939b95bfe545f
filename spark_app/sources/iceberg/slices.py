"""The I/O edge of time slicing: cut wide data files into time slices by their rows.

Ingestion files hold a few late events (minutes to hours late) next to their on-time rows,
so a file's column statistics span far more event time than its rows' disorder. For each
file wider than ``SplitConfig.slice_span`` the planner reads only the ordering column (one
column chunk per row group, through the table's FileIO) and cuts the rows into slices
(``cut``, pure): rows are grouped into buckets of ``slice_span`` aligned to the epoch, and
consecutive non-empty buckets are merged while the merged rows still span at most
``slice_span``. Merging all consecutive non-empty buckets, regardless of span, would glue a
dense late tail (every bucket of the hour holding some late row) back into one wide slice;
capping the merge keeps every slice within ``slice_span`` and still joins an on-time body
that straddles a bucket edge. Each slice's range is the true min/max of its rows, and its
row groups are the ones that actually hold them (exact, read from the values, not the
footer statistics), so a reader opens only those.

Deterministic: the same file, window and span give the same slices, which the plan's
fingerprint (offsets are positions in the plan) depends on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io import FileIO

from spark_app.contract.sources import SplitConfig
from spark_app.planning.splits import DataFileInfo, TimeSlice, is_wide, slice_span_us

#: Concurrent column reads: latency-bound on object stores, and pyarrow releases the GIL.
WORKERS = 8


def cut(values: np.ndarray, groups: np.ndarray, n_groups: int, span_us: int) -> tuple[TimeSlice, ...]:
    """Time slices of one file's rows: ``values`` (µs) and the row group of each row."""
    if not len(values):
        return ()
    order = np.argsort(values, kind="stable")
    v, g = values[order], groups[order]
    bucket = v // span_us
    starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    ends = np.r_[starts[1:], len(v)]
    runs: list[list[int]] = []  # [first row, end row] in sorted order
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        if runs and int(v[e - 1]) - int(v[runs[-1][0]]) <= span_us:
            runs[-1][1] = e
        else:
            runs.append([s, e])
    out = []
    for s, e in runs:
        held = np.unique(g[s:e])
        row_groups = None if len(held) == n_groups else tuple(int(x) for x in held)
        out.append(TimeSlice(int(v[s]), int(v[e - 1]), e - s, row_groups))
    return tuple(out)


def ordering_values(io: FileIO, path: str, column: str) -> tuple[np.ndarray, np.ndarray, int]:
    """The non-null ordering values of a file (µs), each row's row group, and the group count."""
    with io.new_input(path).open(seekable=True) as f:
        pf = pq.ParquetFile(f)
        table = pf.read(columns=[column])  # a dotted path reads just that struct field
        counts = [pf.metadata.row_group(i).num_rows for i in range(pf.metadata.num_row_groups)]
    arr: pa.ChunkedArray = table.column(0)
    for name in column.split(".")[1:]:
        arr = pc.struct_field(arr, name)
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    values = pc.cast(arr, pa.int64()).fill_null(0).to_numpy()
    groups = np.repeat(np.arange(len(counts), dtype=np.int32), counts)
    return values[valid], groups[valid], len(counts)


def slice_file(
    io: FileIO, f: DataFileInfo, column: str, span_us: int, window: tuple[int | None, int | None]
) -> DataFileInfo:
    """``f`` with its time slices: only rows within the window count (the reader drops the
    others anyway), so a late tail outside the window costs no split."""
    values, groups, n_groups = ordering_values(io, f.path, column)
    lo, hi = window
    keep = np.ones(len(values), dtype=bool)
    if lo is not None:
        keep &= values >= lo
    if hi is not None:
        keep &= values < hi
    return dataclasses.replace(f, slices=cut(values[keep], groups[keep], n_groups, span_us), slice_column=column)


def slice_wide_files(
    io: FileIO,
    files: Sequence[DataFileInfo],
    column: str,
    cfg: SplitConfig,
    window: tuple[int | None, int | None],
    workers: int = WORKERS,
) -> list[DataFileInfo]:
    """``files`` with the wide ones cut into time slices (the rest unchanged, same order)."""
    span = slice_span_us(cfg)
    wide = [i for i, f in enumerate(files) if is_wide(f, cfg, window)]
    if not wide:
        return list(files)
    out = list(files)
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(wide)))) as pool:
        sliced = pool.map(lambda i: slice_file(io, files[i], column, span, window), wide)
        for i, f in zip(wide, sliced, strict=True):
            out[i] = f
    return out
