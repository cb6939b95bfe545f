"""Executor side: read admitted splits into large Arrow RecordBatches, no per-row Python.

Spark does not push projection or filters into streaming Python readers, so both happen
here: only the needed columns (and row groups) are read from Parquet, the window and the
configured row filter are applied with Arrow compute, and the result is cast to exactly the
Arrow schema Spark expects. A time slice of a wide file keeps only its rows (ordering value in
its range); slices of one file that land in the same task share one open.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io import load_file_io
from pyspark.sql.datasource import InputPartition

from spark_app.planning.splits import FilePiece, Split, TimeRange
from spark_app.telemetry import trace


@dataclass(frozen=True)
class ReadSpec:
    """Everything an executor needs, picklable (no Table or Catalog objects)."""

    io_properties: dict[str, str]
    location: str
    read_columns: list[str]
    output_columns: list[str]
    predicate: pc.Expression | None
    target_schema: pa.Schema
    batch_rows: int
    trace_path: str | None
    source: str


class SplitsPartition(InputPartition):
    def __init__(self, splits: Sequence[Split], spec: ReadSpec) -> None:
        super().__init__(None)
        self.splits = tuple(splits)
        self.spec = spec


@dataclass(frozen=True)
class _Read:
    """One open of one file: these row groups (None: all), only rows in one of ``ranges``
    (none: all rows)."""

    path: str
    row_groups: tuple[int, ...] | None
    ranges: tuple[TimeRange, ...]


def _reads(splits: Sequence[Split]) -> list[_Read]:
    """The task's pieces, one read per file (first-seen order). Pieces of one file in one task
    are time slices or row-group runs of it: their ranges and row groups are disjoint and each
    piece's rows lie in its row groups, so one read of the union, filtered by any of the
    ranges, returns each of their rows exactly once."""
    by_file: dict[tuple[str, bool], list[FilePiece]] = {}
    for split in splits:
        for p in split.pieces:
            by_file.setdefault((p.path, p.time_range is not None), []).append(p)
    reads = []
    for (path, _), pieces in by_file.items():
        groups = None if any(p.row_groups is None for p in pieces) else {g for p in pieces for g in p.row_groups or ()}
        ranges = tuple(dict.fromkeys(p.time_range for p in pieces if p.time_range is not None))
        reads.append(_Read(path, None if groups is None else tuple(sorted(groups)), ranges))
    return reads


def _column(table: pa.Table, dotted: str) -> pa.ChunkedArray:
    root, *rest = dotted.split(".")
    arr = table.column(root)
    for name in rest:
        arr = pc.struct_field(arr, name)
    return arr


def _in_ranges(table: pa.Table, ranges: Sequence[TimeRange]) -> pa.Table:
    """Rows whose ordering value is in one of the half-open ranges (null values in none)."""
    mask = None
    values: dict[str, pa.ChunkedArray] = {}
    for r in ranges:
        if r.column not in values:
            values[r.column] = pc.cast(_column(table, r.column), pa.int64())
        us = values[r.column]
        m = pc.and_(pc.greater_equal(us, r.lo), pc.less(us, r.hi))
        mask = m if mask is None else pc.or_(mask, m)
    return table.filter(mask)


def _read_piece(spec: ReadSpec, io: object, read: _Read) -> pa.Table:
    trace(
        spec.trace_path,
        "open",
        source=spec.source,
        path=read.path,
        row_groups=read.row_groups,
        slices=[[r.lo, r.hi] for r in read.ranges],
    )
    with io.new_input(read.path).open(seekable=True) as f:  # type: ignore[attr-defined]
        pf = pq.ParquetFile(f)
        if read.row_groups is None:
            table = pf.read(columns=spec.read_columns)
        else:
            table = pf.read_row_groups(list(read.row_groups), columns=spec.read_columns)
    if read.ranges:
        table = _in_ranges(table, read.ranges)
    if spec.predicate is not None:
        table = table.filter(spec.predicate)
    return table.select(spec.output_columns)


def read_splits(partition: SplitsPartition) -> Iterator[pa.RecordBatch]:
    spec = partition.spec
    io = load_file_io(spec.io_properties, spec.location)
    pending: list[pa.Table] = []
    rows = 0
    for read in _reads(partition.splits):
        t = _read_piece(spec, io, read)
        if t.num_rows:
            pending.append(t)
            rows += t.num_rows
        if rows >= spec.batch_rows:
            yield from _emit(pending, spec)
            pending, rows = [], 0
    if pending:
        yield from _emit(pending, spec)


def _emit(tables: list[pa.Table], spec: ReadSpec) -> Iterator[pa.RecordBatch]:
    table = pa.concat_tables(tables).cast(spec.target_schema).combine_chunks()
    yield from table.to_batches(max_chunksize=spec.batch_rows)
