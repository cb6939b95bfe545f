"""One Iceberg source as a streaming DataFrame read by the JVM (``dev.kappa.source``).

The query is built here, in the driver, once: the JVM stream reads the admitted pieces with
Spark's own Parquet reader, each row carrying its piece's time slice as the constant columns
``_kappa_lo_i``/``_kappa_hi_i``; this module adds the static filters that cut the slices, the
backfill window and the source's ``filter``, then projects to the source's columns. Spark
pushes none of it into a streaming scan, but all of it runs in whole-stage generated code over
columnar batches: no Python touches a row.

Columns are matched by Iceberg field id (a renamed column keeps its id), falling back to names
for files written without ids. Parquet types are read as Spark reads them; the one Iceberg
type Spark's reader cannot map to its Spark type (``uuid``, 16 fixed bytes, shown as a
string) is read as bytes and formatted in the projection.
"""

from __future__ import annotations

import contextlib
import functools
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyiceberg import types as it
from pyiceberg.schema import Schema
from pyiceberg.table import TableProperties
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as st

from spark_app.catalogs import load_table
from spark_app.contract.errors import ConfigError
from spark_app.contract.row_counts import OBSERVED_ROWS
from spark_app.jvm import SOURCE_CLASS
from spark_app.jvm.calls import known_files
from spark_app.planning.splits import DataFileInfo
from spark_app.sources.iceberg.backfill_reader import BackfillReader
from spark_app.sources.iceberg.bridge import register
from spark_app.sources.iceberg.byte_ranges import SLICE_RANGES
from spark_app.sources.iceberg.filters import filter_columns, spark_filter
from spark_app.sources.iceberg.live_reader import LiveReader
from spark_app.sources.iceberg.object_store import on_s3, s3a_options
from spark_app.sources.iceberg.schema import ordering_field, project, spark_type
from spark_app.sources.iceberg.spec import SourceSpec, micros

SLICE_PREFIX = "_kappa_"
FIELD_ID = "parquet.field.id"


def _parquet_type(t: Any, where: str, by_id: bool = True) -> st.DataType:
    """The Spark type the reader reads a column as (``spark_type`` but uuid as bytes), with field ids."""
    if isinstance(t, it.UUIDType):
        return st.BinaryType()
    if isinstance(t, it.StructType):
        return st.StructType([_field(f, f"{where}.{f.name}", by_id) for f in t.fields])
    if isinstance(t, it.ListType | it.MapType) and _has_uuid(t):
        raise ConfigError(f"column {where}: a uuid inside a list or map cannot be read; leave it out with `columns`")
    return spark_type(t, where)


def _has_uuid(t: Any) -> bool:
    if isinstance(t, it.UUIDType):
        return True
    if isinstance(t, it.StructType):
        return any(_has_uuid(f.field_type) for f in t.fields)
    if isinstance(t, it.ListType):
        return _has_uuid(t.element_type)
    if isinstance(t, it.MapType):
        return _has_uuid(t.key_type) or _has_uuid(t.value_type)
    return False


def _field(f: it.NestedField, where: str, by_id: bool = True) -> st.StructField:
    metadata = {FIELD_ID: f.field_id} if by_id else {}
    return st.StructField(f.name, _parquet_type(f.field_type, where, by_id), True, metadata)


def slice_columns() -> list[tuple[str, str]]:
    """The (lo, hi) constant columns of the time ranges one read keeps."""
    return [(f"{SLICE_PREFIX}lo_{i}", f"{SLICE_PREFIX}hi_{i}") for i in range(SLICE_RANGES)]


def read_schema(table_schema: Schema, columns: list[str], by_id: bool = True) -> st.StructType:
    """What the JVM reads: ``columns`` of the table as Parquet holds them, then the slices' bounds.

    ``by_id``: match the files' columns by Iceberg field id (renames keep their id). A table
    with a name mapping (``schema.name-mapping.default``) has files without ids (written by
    Spark's writer, ``sinks/iceberg/spark_files.py``, or added from elsewhere): Spark's reader
    matches by id whenever the read schema has ids, and a file without them would read as
    nulls, so such a table is read by name, which is what its mapping says."""
    fields = [_field(table_schema.find_field(c), c, by_id) for c in columns]
    bounds = [st.StructField(name, st.TimestampType(), True) for pair in slice_columns() for name in pair]
    return st.StructType([*fields, *bounds])


def in_slices(ordering: Column) -> Column:
    """Rows of a read without time ranges (its first bound null), or in any of its ranges; a
    range left unused is null and keeps nothing."""
    (lo0, _), *_ = slice_columns()
    kept = [(ordering >= F.col(lo)) & (ordering < F.col(hi)) for lo, hi in slice_columns()]
    return functools.reduce(lambda a, b: a | b, kept, F.col(lo0).isNull())


def _uuid_text(c: Column) -> Column:
    h = F.lower(F.hex(c))
    parts = [F.substring(h, start, n) for start, n in ((1, 8), (9, 4), (13, 4), (17, 4), (21, 12))]
    return F.concat_ws("-", *parts)


def _output(name: str, f: it.NestedField) -> Column:
    """A read column as the source's schema has it."""
    if isinstance(f.field_type, it.UUIDType):
        return _uuid_text(F.col(name)).alias(name)
    if isinstance(f.field_type, it.StructType) and _has_uuid(f.field_type):
        inner = [_output(f"{name}.{c.name}", c).alias(c.name) for c in f.field_type.fields]
        return F.when(F.col(name).isNull(), F.lit(None)).otherwise(F.struct(*inner)).alias(name)
    return F.col(name)


def reader_for(spec: SourceSpec) -> BackfillReader | LiveReader:
    return BackfillReader(spec) if spec.source.kind == "icebergBackfill" else LiveReader(spec)


@dataclass(frozen=True)
class _Read:
    """What a read of one source takes from its table: the table, its schema, the projection
    the pipeline gets (``names``), the columns read only to filter (``extra``), and whether
    columns are matched by field id (``read_schema``)."""

    table: Any
    schema: Schema
    output: Schema
    names: list[str]
    extra: list[str]
    by_id: bool


def _read_of(spec: SourceSpec) -> _Read:
    table = load_table(spec.catalog_name, spec.catalog, spec.source.table)
    schema = table.schema()
    ordering_field(schema, spec.ordering_column, spec.source.table)
    output = project(schema, spec.source.columns, spec.source.table)
    names = [f.name for f in output.fields]
    root = spec.ordering_column.split(".")[0]
    extra = sorted(({root} | filter_columns(schema, spec.source.filter)) - set(names))
    by_id = TableProperties.DEFAULT_NAME_MAPPING not in table.metadata.properties
    return _Read(table, schema, output, names, extra, by_id)


def iceberg_frame(
    spark: SparkSession, spec: SourceSpec, planner: BackfillReader | LiveReader | None = None
) -> DataFrame:
    """The source's streaming DataFrame: its columns (``spark_schema`` of the projection), the
    rows its planner (by default the spec's) admits, in the batches it decides."""
    r = _read_of(spec)
    table, schema, output, names, extra, by_id = r.table, r.schema, r.output, r.names, r.extra, r.by_id
    key = register(spark, planner or reader_for(spec))
    reader = (
        spark.readStream.format(SOURCE_CLASS)
        .schema(read_schema(schema, names + extra, by_id))
        .option("planner", key)
        .option("ordering", spec.ordering_column)
    )
    if on_s3(table.metadata.location):
        reader = reader.options(**s3a_options({**spec.catalog, **table.io.properties}))
    df = reader.load()
    ordering = F.col(spec.ordering_column)
    keep = in_slices(ordering)
    window = spec.window
    if window is not None and spec.source.kind == "icebergBackfill":
        start = F.timestamp_micros(F.lit(micros(window.read_start)))
        keep = keep & (ordering >= start) & (ordering < F.timestamp_micros(F.lit(spec.read_until)))
    row_filter = spark_filter(schema, spec.source.filter)
    if row_filter is not None:
        keep = keep & row_filter
    delivered = F.count(F.lit(1)).alias("rows")
    return (
        df.where(keep)
        .select(*[_output(n, output.find_field(n)) for n in names])
        .observe(OBSERVED_ROWS + key, delivered)
    )


_BATCH_FRAMES: OrderedDict[tuple[int, str, str, int], DataFrame] = OrderedDict()
_BATCH_FRAMES_KEPT = 8
_PER_QUERY = {"member", "members", "rounds_file", "watermark_file", "trace_path", "batch_rows", "batch_row_budget"}
"""What a bounded frame does not depend on (the spec's parts for a streaming query's planner)."""


def iceberg_batch_frame(spark: SparkSession, spec: SourceSpec, snapshot_id: int) -> DataFrame:
    """``bounded_frame``, made once per session, spec and snapshot. Making one plans the
    snapshot's files in pyiceberg and has Spark list them (~0.5 s a source at the dense
    profile), and a bounded run asks for each source's frame more than once: to prove no row
    was late, to find its final watermark, to write. A snapshot's files never change, so the
    frame made first is the frame; its schema is the table's current one, hence the metadata
    file in the key. The key's session id cannot be another session's while the entry, which
    holds its session, is kept."""
    r = _read_of(spec)
    key = (id(spark), r.table.metadata_location, spec.model_dump_json(exclude=_PER_QUERY), snapshot_id)
    if key in _BATCH_FRAMES:
        _BATCH_FRAMES.move_to_end(key)
        return _BATCH_FRAMES[key]
    frame = bounded_frame(spark, spec, snapshot_id, r)
    _BATCH_FRAMES[key] = frame
    while len(_BATCH_FRAMES) > _BATCH_FRAMES_KEPT:
        _BATCH_FRAMES.popitem(last=False)
    return frame


def bounded_frame(spark: SparkSession, spec: SourceSpec, snapshot_id: int, r: _Read | None = None) -> DataFrame:
    """The same rows as ``iceberg_frame`` delivers over a whole backfill (the files of
    ``snapshot_id`` whose ordering range meets the read, cut to ``[read_start, read_until)``
    and the source's filter, projected to its columns), as one bounded DataFrame read by
    Spark's own Parquet reader with the same read schema: for ``alignment.mode: bounded``,
    where no admission decides anything, so nothing is planned in splits or slices. Columns
    are matched by field id while ``FIELD_ID_READ`` is on (``field_ids_read``, around the
    query's run: the JVM source sets it for its own reader only)."""
    window = spec.window
    if window is None or spec.source.kind != "icebergBackfill":
        raise ConfigError(f"source {spec.name}: a bounded read needs a backfill window and an icebergBackfill source")
    r = r or _read_of(spec)
    table, schema, output, names, extra, by_id = r.table, r.schema, r.output, r.names, r.extra, r.by_id
    columns = st.StructType(read_schema(schema, names + extra, by_id).fields[: len(names) + len(extra)])
    from spark_app.sources.iceberg import scan

    scan.require_snapshot(table, snapshot_id, "the snapshot this backfill reads")
    bounds = (micros(window.read_start), spec.read_until)
    files = scan.files_in_window(table, snapshot_id, spec.ordering_column, bounds, spec.source.filter)
    if not files:
        return spark.createDataFrame([], columns).select(*[_output(n, output.find_field(n)) for n in names])
    df = read_known_files(spark, files, columns, store_options(table, spec.catalog))
    ordering = F.col(spec.ordering_column)
    start = F.timestamp_micros(F.lit(micros(window.read_start)))
    keep = (ordering >= start) & (ordering < F.timestamp_micros(F.lit(spec.read_until)))
    row_filter = spark_filter(schema, spec.source.filter)
    if row_filter is not None:
        keep = keep & row_filter
    return df.where(keep).select(*[_output(n, output.find_field(n)) for n in names])


@contextlib.contextmanager
def session_conf(spark: SparkSession, key: str, value: str) -> Iterator[None]:
    """A session setting for the block, then as it was (unset if it was)."""
    before = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def read_data_files(
    spark: SparkSession,
    table: Any,
    catalog_properties: Mapping[str, str],
    paths: Sequence[str],
    schema: st.StructType | None = None,
) -> DataFrame:
    """Data files the manifests named, read by Spark's Parquet reader: through S3A with the
    catalog's and the table's options on S3 (``s3://`` too: ``s3a_options`` maps it), indexed
    on the driver elsewhere (``listed_on_driver``)."""
    reader = spark.read if schema is None else spark.read.schema(schema)
    if on_s3(table.metadata.location):
        return reader.options(**store_options(table, catalog_properties)).parquet(*paths)
    with listed_on_driver(spark, len(paths)):
        return reader.parquet(*paths)


def read_known_files(
    spark: SparkSession, files: Sequence[DataFileInfo], schema: st.StructType, options: Mapping[str, str]
) -> DataFrame:
    """The data files the manifests named, read by Spark's Parquet reader as ``read_data_files``
    reads them, but with each file's status made from its manifest entry (path and size) in the
    JVM (``calls.known_files``): no status is asked of the store, where ``spark.read`` lists every path
    first, in a Spark job past 32 of them (2-3 s of a Backfill on a new executor over 127 files on
    S3, bench/node.py). ``options``: the Hadoop settings of the files' store (``store_options``)."""
    return known_files(spark, [f.path for f in files], [f.size_bytes for f in files], schema.json(), options)


def store_options(table: Any, catalog_properties: Mapping[str, str]) -> dict[str, str]:
    """The Hadoop settings Spark reads ``table``'s data files with: S3A's on S3 (the catalog's and
    the table's ``s3.*`` properties), none elsewhere."""
    return s3a_options({**catalog_properties, **table.io.properties}) if on_s3(table.metadata.location) else {}


LISTING_THRESHOLD = "spark.sql.sources.parallelPartitionDiscovery.threshold"


def listed_on_driver(spark: SparkSession, files: int) -> contextlib.AbstractContextManager[None]:
    """Spark's file index made without a listing job: the manifests already named each file, so
    all Spark needs is each one's status. Past ``parallelPartitionDiscovery.threshold`` paths
    (32) Spark lists them in a distributed job, which for a local or HDFS path costs more than
    it saves: 0.6-0.8 s against 0.16-0.20 s for the 84 files of a source at the dense profile
    (bench/RESULTS.md). Object stores keep the job (a status there is a round trip). The
    setting is read when the DataFrame is made, so it is set around that only."""
    threshold = max(int(spark.conf.get(LISTING_THRESHOLD, None) or 32), files + 1)
    return session_conf(spark, LISTING_THRESHOLD, str(threshold))


FIELD_ID_READ = "spark.sql.parquet.fieldId.read.enabled"


def field_ids_read(spark: SparkSession) -> contextlib.AbstractContextManager[None]:
    """Spark's Parquet reader matching columns by field id for the block (Spark reads the
    setting when a query runs, not when its DataFrame is made), then as it was: a session's
    other reads (a job's own outputs carry the ids of the columns they came from, which may
    repeat) are left to match by name."""
    return session_conf(spark, FIELD_ID_READ, "true")
