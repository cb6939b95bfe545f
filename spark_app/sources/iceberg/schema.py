"""One schema whatever the candidate: Iceberg types mapped to Spark, and the Arrow shape Spark
expects from a Python source (timestamps ``timestamp[us, tz=UTC]``, every field nullable).

Iceberg ``timestamp`` is naive and means UTC (the job runs with session time zone UTC), so
it maps to Spark's TimestampType: ``withWatermark`` rejects TIMESTAMP_NTZ.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyiceberg import types as it
from pyiceberg.schema import Schema
from pyspark.sql import types as st
from pyspark.sql.pandas.types import to_arrow_schema

from spark_app.contract.errors import ConfigError

_PRIMITIVES: dict[type, st.DataType] = {
    it.BooleanType: st.BooleanType(),
    it.IntegerType: st.IntegerType(),
    it.LongType: st.LongType(),
    it.FloatType: st.FloatType(),
    it.DoubleType: st.DoubleType(),
    it.DateType: st.DateType(),
    it.TimestampType: st.TimestampType(),
    it.TimestamptzType: st.TimestampType(),
    it.StringType: st.StringType(),
    it.UUIDType: st.StringType(),
    it.BinaryType: st.BinaryType(),
}


def spark_type(t: Any, where: str) -> st.DataType:
    if isinstance(t, it.DecimalType):
        return st.DecimalType(t.precision, t.scale)
    if isinstance(t, it.FixedType):
        return st.BinaryType()
    if isinstance(t, it.StructType):
        return st.StructType(
            [st.StructField(f.name, spark_type(f.field_type, f"{where}.{f.name}"), True) for f in t.fields]
        )
    if isinstance(t, it.ListType):
        return st.ArrayType(spark_type(t.element_type, f"{where}[]"), True)
    if isinstance(t, it.MapType):
        return st.MapType(spark_type(t.key_type, f"{where}.key"), spark_type(t.value_type, f"{where}.value"), True)
    for cls, spark in _PRIMITIVES.items():
        if isinstance(t, cls):
            return spark
    raise ConfigError(f"column {where}: Iceberg type {t} has no Spark equivalent; leave it out with `columns`")


def project(schema: Schema, columns: list[str] | None, table: str) -> Schema:
    if not columns:
        return schema
    names = {f.name for f in schema.fields}
    unknown = [c for c in columns if c not in names]
    if unknown:
        raise ConfigError(f"columns {unknown} are not in {table} (it has: {', '.join(sorted(names))})")
    return schema.select(*columns)


def spark_schema(schema: Schema) -> st.StructType:
    return st.StructType([st.StructField(f.name, spark_type(f.field_type, f.name), True) for f in schema.fields])


def arrow_schema(schema: st.StructType) -> pa.Schema:
    """Exactly the Arrow schema Spark checks a yielded RecordBatch against."""
    return to_arrow_schema(schema, timezone="UTC")


def ordering_field(schema: Schema, column: str, table: str) -> Any:
    """The ordering column's field (dotted names reach into structs, e.g. __metadata__.ingestion_ts)."""
    try:
        field = schema.find_field(column)
    except ValueError:
        raise ConfigError(
            f"ordering column {column!r} is not in {table}: set alignment.orderingColumn (or the "
            "source's orderingColumn) to a timestamp column, dotted for struct fields"
        ) from None
    if not isinstance(field.field_type, it.TimestampType | it.TimestamptzType):
        raise ConfigError(f"ordering column {column!r} of {table} is {field.field_type}: it must be a timestamp")
    return field
