"""Branch vs main over a window, computed by Spark: the executors read the window's files
(Arrow, pruned by partition and column stats on the driver), the comparison is a Spark join.
Only counts and a few differing keys come back to the driver, so the size of the window
bounds nothing but the cluster's work.

The matching rule (``Comparison``): with a key, a row matches when its key is unique on both
sides and every other column is equal; without one, the multiset intersection of whole rows.
Nulls compare equal to nulls (a null-keyed row matches a null-keyed row)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from spark_app.sinks.iceberg.window import TimeWindow

BATCH_ROWS = 8192
"""Rows per Arrow batch handed to the JVM: a file's rows in one batch would need its whole
size on the JVM heap at once (a 400k-row file ran a 1g local driver out of memory)."""
SAMPLE = 10
"""Differing keys a report carries: enough to start looking, small enough for a status."""


@dataclass(frozen=True)
class Comparison:
    """Branch vs main over a window. ``matched`` rows are equal in both (on ``key`` when given,
    else as whole rows); ``match_ratio`` = matched / the larger side (1.0 when both are empty)."""

    main_rows: int
    branch_rows: int
    matched: int
    key: tuple[str, ...]
    differing: tuple[dict[str, Any], ...] = field(default=(), compare=False)
    """Up to ``SAMPLE`` keys (whole rows without a key) not matched on one side or the other."""

    @property
    def match_ratio(self) -> float:
        larger = max(self.main_rows, self.branch_rows)
        return 1.0 if larger == 0 else self.matched / larger

    @property
    def only_main(self) -> int:
        return self.main_rows - self.matched

    @property
    def only_branch(self) -> int:
        return self.branch_rows - self.matched


def _plain(t: pa.DataType) -> pa.DataType:
    """Spark's Arrow exchange takes the 32-bit-offset types pyiceberg widens."""
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_large_list(t) or pa.types.is_list(t):
        return pa.list_(pa.field(t.value_field.name, _plain(t.value_type), t.value_field.nullable))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _plain(f.type), f.nullable) for f in t])
    if pa.types.is_map(t):
        return pa.map_(_plain(t.key_type), _plain(t.item_type))
    return t


def arrow_schema(table: Table) -> pa.Schema:
    schema = schema_to_pyarrow(table.schema(), include_field_ids=False)
    return pa.schema([pa.field(f.name, _plain(f.type), f.nullable) for f in schema])


@dataclass(frozen=True)
class FileRead:
    """What a task needs (pickled to executors): the table's metadata, and one file to read."""

    catalog_properties: dict[str, str]
    metadata_json: str
    window: TimeWindow
    schema: pa.Schema
    files: tuple[DataFile, ...]


def _read_window(spec: FileRead) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def read(ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyiceberg.expressions import AlwaysTrue
        from pyiceberg.io import load_file_io
        from pyiceberg.io.pyarrow import ArrowScan
        from pyiceberg.table import FileScanTask
        from pyiceberg.table.metadata import TableMetadataUtil

        metadata = TableMetadataUtil.parse_raw(spec.metadata_json)
        io = load_file_io(spec.catalog_properties, metadata.location)
        for batch in ids:
            for i in batch.column(0).to_pylist():
                rows = ArrowScan(metadata, io, metadata.schema(), AlwaysTrue()).to_table([FileScanTask(spec.files[i])])
                rows = rows.filter(spec.window.mask(rows)).select(spec.schema.names).cast(spec.schema)
                yield from rows.to_batches(max_chunksize=BATCH_ROWS)

    return read


def window_frame(
    spark: SparkSession, table: Table, snapshot_id: int | None, window: TimeWindow, catalog_properties: dict[str, str]
) -> DataFrame:
    """The window's rows of one snapshot, as a DataFrame read by the executors (a file a task)."""
    schema = arrow_schema(table)
    spark_schema: StructType = from_arrow_schema(schema)
    files = tuple(t.file for t in window.tasks(table, snapshot_id))
    if not files:
        return spark.createDataFrame([], spark_schema)
    spec = FileRead(catalog_properties, table.metadata.model_dump_json(), window, schema, files)
    ids = spark.range(len(files), numPartitions=min(len(files), spark.sparkContext.defaultParallelism * 4))
    return ids.mapInArrow(_read_window(spec), spark_schema)


def _shuffled(df: DataFrame) -> DataFrame:
    """Never broadcast a side: Spark cannot size a frame read by ``mapInArrow`` (it guesses
    from the tiny id range behind it) and would broadcast millions of rows to every task."""
    return df.hint("shuffle_merge")


def _equal(columns: list[str], left: str, right: str) -> Column:
    cond = F.lit(True)
    for c in columns:
        cond = cond & F.col(f"{left}.{c}").eqNullSafe(F.col(f"{right}.{c}"))
    return cond


def compare_frames(main: DataFrame, branch: DataFrame, key: list[str], sample: int = SAMPLE) -> Comparison:
    """The rule of the module docstring, as Spark jobs: counts and a sample, never the rows.
    Each side is read from storage once and kept by the executors (memory, then disk) for the
    few jobs the comparison runs."""
    columns = [c for c in main.columns if c in branch.columns]
    main = main.select(*columns).persist(StorageLevel.MEMORY_AND_DISK)
    branch = branch.select(*columns).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        return _compare(main, branch, columns, key, sample)
    finally:
        main.unpersist()
        branch.unpersist()


def _compare(main: DataFrame, branch: DataFrame, columns: list[str], key: list[str], sample: int) -> Comparison:
    main_rows, branch_rows = main.count(), branch.count()
    if not key:
        a = main.groupBy(*columns).agg(F.count(F.lit(1)).alias("__n"))
        b = branch.groupBy(*columns).agg(F.count(F.lit(1)).alias("__n"))
        j = a.alias("a").join(_shuffled(b).alias("b"), _equal(columns, "a", "b"), "full_outer")
        j = j.select(
            *[F.coalesce(F.col(f"a.{c}"), F.col(f"b.{c}")).alias(c) for c in columns],
            F.coalesce(F.col("a.__n"), F.lit(0)).alias("__a"),
            F.coalesce(F.col("b.__n"), F.lit(0)).alias("__b"),
        ).cache()
        try:
            matched = j.agg(F.sum(F.least("__a", "__b"))).first()[0] or 0
            differing = j.where(F.col("__a") != F.col("__b")).select(*columns).limit(sample).collect()
        finally:
            j.unpersist()
        return Comparison(main_rows, branch_rows, int(matched), (), tuple(r.asDict() for r in differing))
    rest = [c for c in columns if c not in key]

    def unique(df: DataFrame) -> DataFrame:
        once = df.groupBy(*key).agg(F.count(F.lit(1)).alias("__n")).where("__n = 1").drop("__n")
        return df.alias("d").join(_shuffled(once).alias("o"), _equal(key, "d", "o"), "left_semi")

    j = unique(main).alias("a").join(_shuffled(unique(branch)).alias("b"), _equal(key, "a", "b"), "inner")
    same = j.where(_equal(rest, "a", "b")).select(*[F.col(f"a.{k}").alias(k) for k in key])
    matched = same.count()
    keys = main.select(*key).unionByName(branch.select(*key)).distinct()
    differing = (
        keys.alias("k").join(_shuffled(same).alias("s"), _equal(key, "k", "s"), "left_anti").limit(sample).collect()
    )
    return Comparison(main_rows, branch_rows, matched, tuple(key), tuple(r.asDict() for r in differing))


def compare_snapshots(
    spark: SparkSession,
    table: Table,
    catalog_properties: dict[str, str],
    window: TimeWindow,
    reference: int | None,
    candidate: int | None,
    key: list[str],
    leave_out: Collection[str] = (),
) -> Comparison:
    """``candidate``'s window against ``reference``'s (``main_rows`` counts the reference),
    without the ``leave_out`` columns."""
    return compare_frames(
        window_frame(spark, table, reference, window, catalog_properties).drop(*leave_out),
        window_frame(spark, table, candidate, window, catalog_properties).drop(*leave_out),
        key,
    )


# -- the in-process reference -----------------------------------------------------------------
# pyarrow, in one process, as validation ran before it moved to Spark: the oracle the Spark
# comparison is tested against and the baseline `bench/operator_memory.py` measures. Nothing
# in the product calls it (its memory grows with the window).


def matched_rows(a: pa.Table, b: pa.Table, key: list[str]) -> int:
    columns = [c for c in a.column_names if c in b.column_names]
    if not key:
        ca = a.select(columns).group_by(columns).aggregate([([], "count_all")])
        cb = b.select(columns).group_by(columns).aggregate([([], "count_all")])
        j = ca.join(cb, columns, right_suffix="_b", join_type="inner")
        return int(pc.sum(pc.min_element_wise(j["count_all"], j["count_all_b"])).as_py() or 0)
    unique_a = _unique_on(a.select(columns), key)
    unique_b = _unique_on(b.select(columns), key)
    j = unique_a.join(unique_b, key, join_type="inner", right_suffix="__b")
    if j.num_rows == 0:
        return 0
    equal = None
    for c in (c for c in columns if c not in key):
        left, right = j[c], j[f"{c}__b"]
        same = pc.fill_null(pc.or_kleene(pc.equal(left, right), pc.and_(pc.is_null(left), pc.is_null(right))), False)
        equal = same if equal is None else pc.and_(equal, same)
    return j.num_rows if equal is None else int(pc.sum(equal).as_py() or 0)


def _unique_on(t: pa.Table, key: list[str]) -> pa.Table:
    counts = t.group_by(key).aggregate([([], "count_all")])
    once = counts.filter(pc.equal(counts["count_all"], 1)).select(key)
    return t.join(once, key, join_type="inner")


def compare_in_process(
    table: Table, window: TimeWindow, reference: int | None, candidate: int | None, key: list[str]
) -> Comparison:
    ref, cand = window.rows(table, reference), window.rows(table, candidate)
    return Comparison(ref.num_rows, cand.num_rows, matched_rows(ref, cand, key), tuple(key))
