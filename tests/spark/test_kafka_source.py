"""The Kafka candidate: values parsed into the history table's schema, on a real local Spark.

The parsing rules on static DataFrames shaped exactly like the Kafka source's output (every edge
case in one place); the same path on a real broker and Spark's real Kafka connector in
tests/spark/test_kafka_broker.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import ListType, LongType, NestedField, StringType, TimestampType
from pyiceberg.types import StructType as IcebergStruct
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from spark_app.contract.config import JobConfig, parse_config
from spark_app.contract.errors import ConfigError
from spark_app.contract.sources import KafkaSource
from spark_app.sources.iceberg import schema as iceberg_schema
from spark_app.sources.kafka import (
    deserialize,
    is_missing_kafka_connector,
    kafka_frame,
    value_schema,
)

pytestmark = pytest.mark.spark

# Exactly the schema of Spark's Kafka source (KafkaRecordToRowConverter.kafkaSchema).
KAFKA_SCHEMA = T.StructType(
    [
        T.StructField("key", T.BinaryType(), True),
        T.StructField("value", T.BinaryType(), True),
        T.StructField("topic", T.StringType(), True),
        T.StructField("partition", T.IntegerType(), True),
        T.StructField("offset", T.LongType(), True),
        T.StructField("timestamp", T.TimestampType(), True),
        T.StructField("timestampType", T.IntegerType(), True),
    ]
)

ICEBERG_IMPRESSIONS = Schema(
    NestedField(1, "impression_id", StringType(), required=False),
    NestedField(2, "event_ts", TimestampType(), required=False),
    NestedField(3, "user_id", LongType(), required=False),
    NestedField(4, "tags", ListType(8, StringType(), element_required=False), required=False),
    NestedField(
        5,
        "__metadata__",
        IcebergStruct(
            NestedField(6, "ingestion_ts", TimestampType(), required=False),
            NestedField(7, "commit_id", LongType(), required=False),
        ),
        required=False,
    ),
)

# The same schema written by hand: what the pipeline sees, whichever candidate is read.
EXPECTED_SCHEMA = T.StructType(
    [
        T.StructField("impression_id", T.StringType()),
        T.StructField("event_ts", T.TimestampType()),
        T.StructField("user_id", T.LongType()),
        T.StructField("tags", T.ArrayType(T.StringType())),
        T.StructField(
            "__metadata__",
            T.StructType([T.StructField("ingestion_ts", T.TimestampType()), T.StructField("commit_id", T.LongType())]),
        ),
    ]
)


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def utc(value: Any) -> Any:
    """Collected timestamps are naive local time (PySpark's conversion): make them UTC-aware."""
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    if isinstance(value, dict):
        return {k: utc(v) for k, v in value.items()}
    if isinstance(value, list):
        return [utc(v) for v in value]
    return value


def rows(df: DataFrame) -> list[dict[str, Any]]:
    return [utc(r.asDict(recursive=True)) for r in df.collect()]


def without_nullability(dtype: T.DataType) -> T.DataType:
    if isinstance(dtype, T.StructType):
        return T.StructType([T.StructField(f.name, without_nullability(f.dataType), True) for f in dtype.fields])
    if isinstance(dtype, T.ArrayType):
        return T.ArrayType(without_nullability(dtype.elementType), True)
    if isinstance(dtype, T.MapType):
        return T.MapType(without_nullability(dtype.keyType), without_nullability(dtype.valueType), True)
    return dtype


def kafka_rows(
    spark: SparkSession, records: list[tuple[bytes | None, datetime]], topic: str = "impressions"
) -> DataFrame:
    """A static DataFrame exactly like Spark's Kafka source output: (value, Kafka timestamp) per record."""
    data = [(f"k{i}".encode(), value, topic, i % 2, 100 + i, stamp, 0) for i, (value, stamp) in enumerate(records)]
    df = spark.createDataFrame(data, KAFKA_SCHEMA)
    assert df.schema == KAFKA_SCHEMA
    return df


def job(catalogs: dict[str, Any], source: dict[str, Any], name: str = "impressions") -> JobConfig:
    return parse_config(
        {
            "name": "ads-live",
            "pipeline": "pkg.pipelines:build",
            "mode": "live",
            "catalogs": catalogs,
            "sources": {name: {"kind": "kafka", "bootstrapServers": "broker:9092", "topic": "impressions", **source}},
            "sinks": {"out": {"kind": "console"}},
            "checkpoint": {"location": "/tmp/ck"},
        }
    )


def kafka_source(cfg: JobConfig, name: str = "impressions") -> KafkaSource:
    src = cfg.sources[name]
    assert isinstance(src, KafkaSource)
    return src


@pytest.fixture
def catalog_props(tmp_path: Path) -> dict[str, str]:
    return {"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db", "warehouse": f"file://{tmp_path}/w"}


@pytest.fixture
def history_table(tmp_path: Path, catalog_props: dict[str, str]) -> Schema:
    """An (empty) Iceberg history table `local:ads.impressions`; returns its schema."""
    catalog = SqlCatalog("local", uri=catalog_props["uri"], warehouse=catalog_props["warehouse"])
    catalog.create_namespace("ads")
    return catalog.create_table("ads.impressions", ICEBERG_IMPRESSIONS).schema()


@pytest.fixture
def schema_from_cfg(catalog_props: dict[str, str], history_table: Schema) -> JobConfig:
    return job({"local": catalog_props}, {"schemaFrom": "local:ads.impressions"})


# --- value_schema ------------------------------------------------------------------------


def test_value_schema_from_iceberg_table(schema_from_cfg: JobConfig) -> None:
    got = value_schema(schema_from_cfg, kafka_source(schema_from_cfg))
    assert got == EXPECTED_SCHEMA


def test_value_schema_from_ddl(spark: SparkSession) -> None:
    ddl = "impression_id STRING, event_ts TIMESTAMP, __metadata__ STRUCT<ingestion_ts: TIMESTAMP>"
    cfg = job({}, {"schemaDdl": ddl})
    got = value_schema(cfg, kafka_source(cfg))
    assert got == T.StructType(
        [
            T.StructField("impression_id", T.StringType()),
            T.StructField("event_ts", T.TimestampType()),
            T.StructField("__metadata__", T.StructType([T.StructField("ingestion_ts", T.TimestampType())])),
        ]
    )


@pytest.mark.parametrize(
    "schema_from",
    ["ads.impressions", "local:impressions", ":ads.impressions", "local:ads.impressions:x", "local: ads.impressions"],
)
def test_value_schema_rejects_malformed_schema_from(catalog_props: dict[str, str], schema_from: str) -> None:
    cfg = job({"local": catalog_props}, {"schemaFrom": schema_from}, name="imps")
    with pytest.raises(ConfigError) as err:
        value_schema(cfg, kafka_source(cfg, "imps"))
    message = str(err.value)
    assert "sources.imps.schemaFrom" in message
    assert repr(schema_from) in message
    assert "'catalog:namespace.table'" in message


def test_value_schema_rejects_unknown_catalog(catalog_props: dict[str, str]) -> None:
    cfg = job({"local": catalog_props, "prod": catalog_props}, {"schemaFrom": "lake:ads.impressions"})
    with pytest.raises(ConfigError) as err:
        value_schema(cfg, kafka_source(cfg))
    message = str(err.value)
    assert "sources.impressions.schemaFrom" in message
    assert "catalog 'lake' is not in catalogs (local, prod)" in message
    assert "'catalog:namespace.table'" in message


def test_value_schema_names_missing_table(schema_from_cfg: JobConfig, catalog_props: dict[str, str]) -> None:
    cfg = job({"local": catalog_props}, {"schemaFrom": "local:ads.clicks"})
    with pytest.raises(ConfigError, match=r"^sources\.impressions\.schemaFrom: table ads\.clicks does not exist"):
        value_schema(cfg, kafka_source(cfg))


def test_value_schema_uses_given_name_when_source_is_a_copy(catalog_props: dict[str, str]) -> None:
    cfg = job({"local": catalog_props}, {"schemaFrom": "nope"})
    src = kafka_source(cfg).model_copy(update={"topic": "other"})  # not in cfg.sources
    with pytest.raises(ConfigError, match=r"^sources\.clicks\.schemaFrom "):
        value_schema(cfg, src, name="clicks")


@pytest.mark.parametrize(
    ("ddl", "expected"),
    [("id STRING, ts TIMESTAMPP", "not a valid Spark DDL schema"), ("int", "must list columns")],
)
def test_value_schema_rejects_bad_ddl(spark: SparkSession, ddl: str, expected: str) -> None:
    cfg = job({}, {"schemaDdl": ddl})
    with pytest.raises(ConfigError, match=rf"^sources\.impressions\.schemaDdl .*{expected}"):
        value_schema(cfg, kafka_source(cfg))


# --- deserialize -------------------------------------------------------------------------


def test_deserialize_gives_the_iceberg_schema_and_rows(
    spark: SparkSession, schema_from_cfg: JobConfig, history_table: Schema
) -> None:
    values = [
        # fields in any order, extra fields ignored, a __metadata__ in the value is overridden
        {
            "user_id": 7,
            "impression_id": "a",
            "event_ts": "2026-11-01T10:00:00Z",
            "tags": ["x", "y"],
            "extra": 1,
            "__metadata__": {"ingestion_ts": "2000-01-01T00:00:00Z", "commit_id": 5},
        },
        {"impression_id": "b", "event_ts": "2026-11-01T10:00:01.250Z"},  # missing fields -> null
    ]
    raw = kafka_rows(
        spark,
        [
            (json.dumps(values[0]).encode(), ts("2026-11-01T10:00:02")),
            (json.dumps(values[1]).encode(), ts("2026-11-01T10:00:03.5")),
        ],
    )

    out = deserialize(raw, value_schema(schema_from_cfg, kafka_source(schema_from_cfg)))

    iceberg = iceberg_schema.spark_schema(history_table)
    assert without_nullability(out.schema) == without_nullability(iceberg)
    assert out.columns == ["impression_id", "event_ts", "user_id", "tags", "__metadata__"]
    assert rows(out) == [
        {
            "impression_id": "a",
            "event_ts": ts("2026-11-01T10:00:00"),
            "user_id": 7,
            "tags": ["x", "y"],
            "__metadata__": {"ingestion_ts": ts("2026-11-01T10:00:02"), "commit_id": None},
        },
        {
            "impression_id": "b",
            "event_ts": ts("2026-11-01T10:00:01.250"),
            "user_id": None,
            "tags": None,
            "__metadata__": {"ingestion_ts": ts("2026-11-01T10:00:03.5"), "commit_id": None},
        },
    ]


def test_deserialize_malformed_json_gives_nulls(spark: SparkSession) -> None:
    raw = kafka_rows(
        spark,
        [
            (b'{"impression_id": "a", "event_ts": "2026-11-01T10:00:00Z", "user_id": 1}', ts("2026-11-01T10:00:05")),
            (b"{not json", ts("2026-11-01T10:00:06")),
            (b"\xff\xfe", ts("2026-11-01T10:00:07")),
            (None, ts("2026-11-01T10:00:08")),  # tombstone
        ],
    )

    out = deserialize(raw, EXPECTED_SCHEMA)
    got = rows(out)

    assert len(got) == 4
    assert got[0]["impression_id"] == "a"
    assert got[0]["user_id"] == 1
    for row, second in zip(got[1:], (6, 7, 8), strict=True):
        assert row == {
            "impression_id": None,
            "event_ts": None,
            "user_id": None,
            "tags": None,
            "__metadata__": {"ingestion_ts": ts(f"2026-11-01T10:00:0{second}"), "commit_id": None},
        }


def test_deserialize_fills_known_metadata_fields_cast_to_declared_types(spark: SparkSession) -> None:
    metadata = T.StructType(
        [
            T.StructField("topic", T.StringType()),
            T.StructField("ingestion_ts", T.TimestampType()),
            T.StructField("partition", T.LongType()),  # Kafka's is int: cast
            T.StructField("offset", T.StringType()),  # Kafka's is long: cast
            T.StructField("commit_id", T.LongType()),
            T.StructField("writer", T.StringType()),  # unknown: null, even if the value has it
        ]
    )
    schema = T.StructType([T.StructField("__metadata__", metadata), T.StructField("id", T.IntegerType())])
    raw = kafka_rows(
        spark,
        [(b'{"id": 3, "__metadata__": {"writer": "w", "commit_id": 9}}', ts("2026-11-01T10:00:00"))],
        topic="imps-eu",
    )

    out = deserialize(raw, schema)

    assert without_nullability(out.schema) == without_nullability(schema)
    assert rows(out) == [
        {
            "__metadata__": {
                "topic": "imps-eu",
                "ingestion_ts": ts("2026-11-01T10:00:00"),
                "partition": 0,
                "offset": "100",
                "commit_id": None,
                "writer": None,
            },
            "id": 3,
        }
    ]


def test_deserialize_parses_metadata_without_ingestion_ts_from_the_value(spark: SparkSession) -> None:
    schema = T.StructType(
        [
            T.StructField("id", T.IntegerType()),
            T.StructField("__metadata__", T.StructType([T.StructField("commit_id", T.LongType())])),
            T.StructField("topic", T.StringType()),  # a value field named like a Kafka column
        ]
    )
    raw = kafka_rows(spark, [(b'{"id": 1, "__metadata__": {"commit_id": 42}, "topic": "mine"}', ts("2026-11-01"))])

    out = deserialize(raw, schema)

    assert without_nullability(out.schema) == without_nullability(schema)
    assert rows(out) == [{"id": 1, "__metadata__": {"commit_id": 42}, "topic": "mine"}]


# --- kafka_frame -------------------------------------------------------------------------


def test_kafka_frame_reports_config_errors_first(spark: SparkSession) -> None:
    cfg = job({}, {"schemaFrom": "lake:ads.impressions"})
    with pytest.raises(ConfigError, match=r"sources\.impressions\.schemaFrom"):
        kafka_frame(spark, cfg, "impressions", kafka_source(cfg))


def test_other_missing_data_sources_are_not_mistaken_for_kafka(spark: SparkSession) -> None:
    with pytest.raises(Exception) as err:  # whatever Spark raises, it must not match
        spark.read.format("kappa_no_such_source").load()
    assert not is_missing_kafka_connector(err.value)
    assert not is_missing_kafka_connector(ValueError("kafka is down"))
    # Spark 3.x wording (no condition), and the provider class named instead of "kafka"
    assert is_missing_kafka_connector(RuntimeError("Failed to find data source: kafka. Please deploy ..."))
    assert is_missing_kafka_connector(
        RuntimeError("[DATA_SOURCE_NOT_FOUND] Failed to find the data source: org.apache.spark.sql.kafka010.Kafka")
    )


def test_missing_connector_is_matched_by_condition_whatever_the_wording() -> None:
    class Reworded(Exception):
        def getCondition(self) -> str:  # PySpark's name
            return "KAFKA_DATA_SOURCE_NOT_ENABLED"

    assert is_missing_kafka_connector(Reworded("the Kafka integration is not deployed"))
