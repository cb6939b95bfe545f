"""The generator's two tables, ``impressions`` and ``playbacks``, as Iceberg and Arrow schemas,
hour-partitioned on their event time, each row with the ``__metadata__`` an ingestion
would stamp (when it was ingested, in which commit)."""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import HourTransform
from pyiceberg.types import (
    IntegerType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
)


def metadata_field(field_id: int) -> NestedField:
    return NestedField(
        field_id,
        "__metadata__",
        StructType(
            NestedField(field_id + 1, "ingestion_ts", TimestampType(), required=True),
            NestedField(field_id + 2, "commit_id", LongType(), required=True),
        ),
        required=True,
    )


IMPRESSIONS_SCHEMA = Schema(
    NestedField(1, "impression_id", StringType(), required=True),
    NestedField(2, "profile_id", LongType(), required=True),
    NestedField(3, "title_id", LongType(), required=True),
    NestedField(4, "event_ts", TimestampType(), required=True),
    metadata_field(5),
)


PLAYBACKS_SCHEMA = Schema(
    NestedField(1, "playback_id", StringType(), required=True),
    NestedField(2, "profile_id", LongType(), required=True),
    NestedField(3, "title_id", LongType(), required=True),
    NestedField(4, "event_ts", TimestampType(), required=True),
    NestedField(5, "duration_s", IntegerType(), required=True),
    metadata_field(6),
)


ARROW_TIMESTAMP = pa.timestamp("us")  # naive = UTC by convention; what pyiceberg accepts for Iceberg `timestamp`


METADATA_ARROW = pa.struct(
    [pa.field("ingestion_ts", ARROW_TIMESTAMP, nullable=False), pa.field("commit_id", pa.int64(), nullable=False)]
)


IMPRESSIONS_ARROW_SCHEMA = pa.schema(
    [
        pa.field("impression_id", pa.string(), nullable=False),
        pa.field("profile_id", pa.int64(), nullable=False),
        pa.field("title_id", pa.int64(), nullable=False),
        pa.field("event_ts", ARROW_TIMESTAMP, nullable=False),
        pa.field("__metadata__", METADATA_ARROW, nullable=False),
    ]
)


PLAYBACKS_ARROW_SCHEMA = pa.schema(
    [
        pa.field("playback_id", pa.string(), nullable=False),
        pa.field("profile_id", pa.int64(), nullable=False),
        pa.field("title_id", pa.int64(), nullable=False),
        pa.field("event_ts", ARROW_TIMESTAMP, nullable=False),
        pa.field("duration_s", pa.int32(), nullable=False),
        pa.field("__metadata__", METADATA_ARROW, nullable=False),
    ]
)


_SQL_TYPES = {pa.string(): "STRING", pa.int64(): "BIGINT", pa.int32(): "INT", ARROW_TIMESTAMP: "TIMESTAMP"}


def value_ddl(schema: pa.Schema) -> str:
    """A table's columns (less ``__metadata__``) as a Kafka source's ``valueSchema``: what its
    rows look like as the JSON values of a topic, for the tests and benches that put the
    generated history on topics (one definition, not a copy per caller)."""
    return ", ".join(f"{f.name} {_SQL_TYPES[f.type]}" for f in schema if f.name != "__metadata__")


KAFKA_VALUE_DDL = {"impressions": value_ddl(IMPRESSIONS_ARROW_SCHEMA), "playbacks": value_ddl(PLAYBACKS_ARROW_SCHEMA)}
"""Each generated table's value columns as a topic carries them, by topic name."""

KAFKA_ARCHIVE_METADATA_DDL = (
    "__metadata__ STRUCT<ingestion_ts: TIMESTAMP, topic: STRING, partition: INT, offset: BIGINT>"
)
"""The struct a Kafka archive's rows carry: when the record arrived and where it was (a source
declares it after the value columns; the archive job writes it)."""


def hour_spec(schema: Schema) -> PartitionSpec:
    # hour(event_ts): each commit writes one file per touched hour, like a real ingestion job.
    return PartitionSpec(
        PartitionField(
            source_id=schema.find_field("event_ts").field_id,
            field_id=1000,
            transform=HourTransform(),
            name="event_ts_hour",
        )
    )
