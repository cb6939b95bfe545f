"""Executor side: read admitted splits into large Arrow RecordBatches, no per-row Python.

Spark does not push projection or filters into streaming Python readers, so both happen
here: only the needed columns (and row groups) are read from Parquet, the window and the
configured row filter are applied with Arrow compute, and the result is cast to exactly the
Arrow schema Spark expects.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io import load_file_io
from pyspark.sql.datasource import InputPartition

from spark_app.planning.splits import Split
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


def _read_piece(spec: ReadSpec, io: object, path: str, row_groups: tuple[int, ...] | None) -> pa.Table:
    trace(spec.trace_path, "open", source=spec.source, path=path, row_groups=row_groups)
    with io.new_input(path).open(seekable=True) as f:  # type: ignore[attr-defined]
        pf = pq.ParquetFile(f)
        if row_groups is None:
            table = pf.read(columns=spec.read_columns)
        else:
            table = pf.read_row_groups(list(row_groups), columns=spec.read_columns)
    if spec.predicate is not None:
        table = table.filter(spec.predicate)
    return table.select(spec.output_columns)


def read_splits(partition: SplitsPartition) -> Iterator[pa.RecordBatch]:
    spec = partition.spec
    io = load_file_io(spec.io_properties, spec.location)
    pending: list[pa.Table] = []
    rows = 0
    for split in partition.splits:
        for piece in split.pieces:
            t = _read_piece(spec, io, piece.path, piece.row_groups)
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
