"""Executor side of the sink, on the JVM: a micro-batch's rows written as Parquet data files by
Spark's own writer, whose paths the driver then commits through pyiceberg (``commit``).

Why not pyiceberg's writer in ``mapInArrow`` (``arrow_files``, still used where this cannot
serve): every batch then starts a Python worker per task and moves its rows through Arrow,
and under CPU pressure a worker that fails to connect back fails the query. Spark's writer
runs in the task's own JVM.

What makes the files Iceberg data files:
- **Columns by name.** Spark cannot write the field ids of list elements and map entries, so it
  writes none (the frame's columns may carry the ids of the tables they were read from, which
  are not the sink table's: ``plain`` drops them), and the table carries
  ``schema.name-mapping.default`` (``name_mapping``): what Iceberg (Java and pyiceberg) reads a
  file without ids with. pyiceberg keeps the mapping in step with later schema changes.
- **Timestamps as micros** (``spark.sql.parquet.outputTimestampType``): Iceberg's own; Spark's
  default INT96 is not an Iceberg type.
- **One partition per file.** Each partition field of the table's spec becomes a column Spark
  partitions the write by (so it is left out of the file); each file then holds one Iceberg
  partition, which pyiceberg reads back from the file's column bounds when it commits. The
  column only needs to group rows at least as finely as the transform; it is computed from
  epoch micros and epoch days, never in the session's time zone.
- **The batch's tag** (``batch_tags``) names the write's directory, under the table's data
  location: a failed attempt leaves its own directory behind (orphans, as before), never a
  file the committed batch lists.

Where a table needs what Spark's writer cannot give (a ``bucket`` partition: Iceberg hashes
with its own Murmur3 of its own byte layout; a transform of a decimal, a binary or a local
timestamp; decimal or fixed columns; an object-store or custom location layout), the sink
keeps pyiceberg's writer. ``unsupported`` says which and why, and the sink logs it once.
"""

from __future__ import annotations

import uuid

from pyiceberg.partitioning import PartitionField
from pyiceberg.schema import Schema, index_by_id
from pyiceberg.table import Table, TableProperties
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.transforms import (
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    TruncateTransform,
    YearTransform,
)
from pyiceberg.types import (
    BooleanType,
    DateType,
    DecimalType,
    FixedType,
    IcebergType,
    IntegerType,
    LongType,
    StringType,
    TimestamptzType,
    TimeType,
    UUIDType,
)
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StructField, StructType

from spark_app.jvm.calls import hadoop_filesystem
from spark_app.sinks.iceberg import batch_tags
from spark_app.sinks.iceberg.write_conf import SESSION_CONF
from spark_app.sources.iceberg.object_store import on_s3, s3a_options

NAME_MAPPING = TableProperties.DEFAULT_NAME_MAPPING
_MICROS_PER_DAY = 86_400_000_000
_MICROS_PER_HOUR = 3_600_000_000
_UNWRITABLE = (DecimalType, FixedType, TimeType, UUIDType)
_PLAIN = (IntegerType, LongType, DateType, BooleanType)


def unsupported(table: Table) -> str | None:
    """Why Spark's writer cannot write this table's files (None: it can). Pure."""
    schema = table.schema()
    if found := _unwritable(schema):
        return found
    for pf in table.spec().fields:
        source = schema.find_field(pf.source_id)
        if _partition_column(pf, schema.find_column_name(pf.source_id) or source.name, source.field_type) is None:
            return f"partition field {pf.name!r} is {pf.transform} of a {source.field_type} column"
    props = table.metadata.properties
    if str(props.get(TableProperties.OBJECT_STORE_ENABLED, "")).lower() == "true":
        return "the table lays files out for object stores (write.object-storage.enabled)"
    if props.get(TableProperties.WRITE_PY_LOCATION_PROVIDER_IMPL):
        return "the table names a custom location provider"
    return None


def _unwritable(schema: Schema) -> str | None:
    for field in index_by_id(schema).values():
        if isinstance(field.field_type, _UNWRITABLE):
            return f"column {field.name!r} is {field.field_type}"
    return None


def _partition_column(pf: PartitionField, column: str, source: IcebergType) -> Column | None:
    """A column that groups rows at least as finely as ``pf`` (None: no such column here)."""
    c, t = F.col(".".join(f"`{part}`" for part in column.split("."))), pf.transform  # a struct's field too
    if isinstance(t, IdentityTransform):
        # Values that name a directory as they are; any other value by its hash (a string's
        # characters would be escaped into the path, a timestamp formatted in the session's
        # zone). Two values with one hash would share a file, and its commit would refuse it.
        return c if isinstance(source, _PLAIN) else F.xxhash64(c)
    if isinstance(t, TruncateTransform):
        if isinstance(source, IntegerType | LongType):
            return c - F.pmod(c, F.lit(t.width))
        if isinstance(source, StringType):
            return F.xxhash64(F.substring(c, 1, t.width))  # code points, as Iceberg truncates
        return None
    if not isinstance(t, DayTransform | HourTransform | MonthTransform | YearTransform):
        return None
    if isinstance(source, TimestamptzType):
        micros = F.unix_micros(c)
        if isinstance(t, HourTransform):
            return F.floor(micros / _MICROS_PER_HOUR)
        day = F.date_from_unix_date(F.floor(micros / _MICROS_PER_DAY).cast("int"))
    elif isinstance(source, DateType) and not isinstance(t, HourTransform):
        day = c
    else:
        return None
    if isinstance(t, DayTransform):
        return day
    return F.year(day) * 12 + F.month(day) - 1 if isinstance(t, MonthTransform) else F.year(day)


def partition_columns(table: Table, data_columns: list[str]) -> dict[str, Column]:
    """The write's partitioning columns, named after the spec's fields (``_value`` appended
    where a name is already a data column, as an identity field's is)."""
    schema: Schema = table.schema()
    out: dict[str, Column] = {}
    for pf in table.spec().fields:
        source = schema.find_field(pf.source_id)
        column = _partition_column(pf, schema.find_column_name(pf.source_id) or source.name, source.field_type)
        assert column is not None, "unsupported() first"
        name = pf.name if pf.name not in data_columns else f"{pf.name}_value"
        out[name] = column
    return out


def plain(t: DataType) -> DataType:
    """``t`` without field metadata (Spark writes a ``parquet.field.id`` it finds there)."""
    if isinstance(t, StructType):
        return StructType([StructField(f.name, plain(f.dataType), f.nullable) for f in t.fields])
    if isinstance(t, ArrayType):
        return ArrayType(plain(t.elementType), t.containsNull)
    if isinstance(t, MapType):
        return MapType(plain(t.keyType), plain(t.valueType), t.valueContainsNull)
    return t


def name_mapping(table: Table) -> dict[str, str]:
    """The property to set with the batch's commit, when the table has no name mapping yet."""
    if table.metadata.properties.get(NAME_MAPPING):
        return {}
    return {NAME_MAPPING: table.schema().name_mapping.model_dump_json()}


def rows_per_file(head: Snapshot | None, target_bytes: int) -> int:
    """Spark rolls files by rows, not bytes: rows of ``target_bytes`` at the width of the
    rows the last commit added (0, no limit, before anything was committed). Pure."""
    summary = head.summary if head is not None else None
    props = summary.additional_properties if summary is not None else {}
    rows, size = int(props.get("added-records", 0) or 0), int(props.get("added-files-size", 0) or 0)
    if not rows or not size or not target_bytes:
        return 0
    return max(1, target_bytes * rows // size)


def write_files(
    df: DataFrame, table: Table, tag: str, catalog_properties: dict[str, str], max_rows_per_file: int
) -> tuple[str, list[str]]:
    """Write ``df`` under the table's data location, in a new directory named by ``tag``: the
    directory and the Parquet files in it (the empty file Spark writes for an empty frame
    included)."""
    spark = df.sparkSession
    for key, value in SESSION_CONF.items():
        if spark.conf.get(key, None) != value:
            spark.conf.set(key, value)
    props = table.metadata.properties
    root = props.get(TableProperties.WRITE_DATA_PATH, f"{table.location().rstrip('/')}/data").rstrip("/")
    directory = f"{root}/{tag}_{uuid.uuid4().hex[:12]}"
    options = s3a_options({**catalog_properties, **table.io.properties}) if on_s3(directory) else {}
    parts = partition_columns(table, df.columns)
    columns = [F.col(f"`{f.name}`").cast(plain(f.dataType)).alias(f.name, metadata={}) for f in df.schema.fields]
    out = df.select(*columns, *[col.alias(name) for name, col in parts.items()])
    codec = props.get(TableProperties.PARQUET_COMPRESSION, TableProperties.PARQUET_COMPRESSION_DEFAULT)
    writer = out.write.mode("errorifexists").options(**options).option("compression", codec)
    if max_rows_per_file:
        writer = writer.option("maxRecordsPerFile", str(max_rows_per_file))
    if parts:
        writer = writer.partitionBy(*parts)
    writer.parquet(directory)
    return directory, _parquet_files(spark, directory, options)


def _parquet_files(spark: SparkSession, directory: str, options: dict[str, str]) -> list[str]:
    """The data files under ``directory`` (``_SUCCESS`` and hidden files are not data)."""
    filesystem, path = hadoop_filesystem(spark, directory, options)
    files = filesystem.listFiles(path, True)
    leaf = directory.rsplit("/", 1)[-1] + "/"
    found: list[str] = []
    while files.hasNext():
        # Hadoop qualifies the path (file:/tmp/...): keep the table's own spelling of it.
        relative = files.next().getPath().toString().split(leaf, 1)[1]
        if relative.endswith(".parquet") and not relative.rsplit("/", 1)[-1].startswith(("_", ".")):
            found.append(f"{directory}/{relative}")
    return sorted(found)


def discard(spark: SparkSession, directory: str, catalog_properties: dict[str, str], table: Table) -> None:
    """Remove a write that had no rows (Spark writes an empty file for an empty frame, or
    just its ``_SUCCESS``): an idle batch leaves nothing behind."""
    assert batch_tags.parse(directory) is not None, "only a batch's own directory"
    options = s3a_options({**catalog_properties, **table.io.properties}) if on_s3(directory) else {}
    filesystem, path = hadoop_filesystem(spark, directory, options)
    filesystem.delete(path, True)
