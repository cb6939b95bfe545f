"""The Kafka candidate of a source: Spark's own Kafka source, values parsed into the history schema.

A source is *dynamic* (Netflix's "dynamic source"): the same named source is read live from
Kafka or re-read from its Iceberg history table, and the pipeline must not be able to tell the
two apart. So the Kafka candidate does not hand the pipeline Spark's raw Kafka columns
(key, value, topic, partition, offset, timestamp, timestampType): it parses each JSON value
into the schema of the source's history table (``schemaFrom``, or ``schemaDdl``) and returns
exactly that schema's columns, in its order, with its types and nesting. The same pipeline code
then runs unchanged on a live stream and on a backfill.

The history table usually carries a ``__metadata__`` struct written at ingestion (e.g.
``ingestion_ts``, the time ordering of a backfill by ingestion time relies on). A live record has
no such field in its value: it is filled from the Kafka record itself (``ingestion_ts`` = the
Kafka timestamp, plus ``partition``, ``offset`` and ``topic`` when the struct declares them), so
ordering by ``__metadata__.ingestion_ts`` means the same thing on both candidates.
"""

from __future__ import annotations

import re
from functools import reduce
from typing import Literal

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StructType

from spark_app.catalogs import load_table
from spark_app.contract.checkpoints.kafka_offsets import topics_matching
from spark_app.contract.config import JobConfig
from spark_app.contract.errors import ConfigError, ConnectorMissingError, KappaError
from spark_app.contract.kafka_reach import reach
from spark_app.contract.kafka_security import spark_options
from spark_app.contract.sources import KafkaSource, OffsetRange
from spark_app.jvm import GATED_KAFKA_CLASS
from spark_app.sources.iceberg import schema
from spark_app.sources.kafka_avro import Decoder, avro_decoder

METADATA_FIELD = "__metadata__"
"""Struct column of ingestion metadata; filled from the Kafka record when it has `ingestion_ts`."""

SCALA_BINARY_VERSION = "2.13"
"""Spark 4.x is built for Scala 2.13 only."""

KAFKA_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_" + SCALA_BINARY_VERSION
"""Maven coordinates (without version) of Spark's Kafka connector."""

_SCHEMA_FROM = re.compile(r"^(?P<catalog>[^:\s]+):(?P<table>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)$")
_SCHEMA_FROM_FORM = "'catalog:namespace.table' (a catalog named in `catalogs` and an Iceberg table in it)"

# Spark 4.x raises AnalysisException [KAFKA_DATA_SOURCE_NOT_ENABLED] at load() when format "kafka"
# cannot be resolved; naming the provider class instead gives [DATA_SOURCE_NOT_FOUND], and
# Spark 3.x gave the same text without a condition. All are matched.
_MISSING_CONDITIONS = frozenset({"KAFKA_DATA_SOURCE_NOT_ENABLED"})
_MISSING_TEXT = re.compile(
    r"Failed to find (?:the )?data source:\s*(?:kafka\b|org\.apache\.spark\.sql\.kafka010)", re.IGNORECASE
)

# Record fields of Spark's Kafka source that may fill `__metadata__` fields of the same name.
_RECORD_FIELDS = ("partition", "offset", "topic")


def _source_name(cfg: JobConfig, src: KafkaSource, name: str | None) -> str:
    if name is not None:
        return name
    for key, candidate in cfg.sources.items():
        if candidate is src:
            return key
    for key, candidate in cfg.sources.items():
        if candidate == src:
            return key
    return f"<kafka {src.subscription[1]}>"


def value_schema(cfg: JobConfig, src: KafkaSource, *, name: str | None = None) -> StructType:
    """The schema Kafka values are parsed into: the history table's (`schemaFrom`) or `schemaDdl`.

    `name` is the source's key in `cfg.sources` (found by lookup when not given); errors name
    the field to change, e.g. `sources.<name>.schemaFrom`.
    """
    where = f"sources.{_source_name(cfg, src, name)}"
    if src.schema_ddl is not None:
        return _ddl_schema(src.schema_ddl, f"{where}.schemaDdl")
    assert src.schema_from is not None  # KafkaSource guarantees exactly one of the two
    field = f"{where}.schemaFrom"
    match = _SCHEMA_FROM.fullmatch(src.schema_from.strip())
    if match is None:
        raise ConfigError(
            f"{field} is {src.schema_from!r}: expected {_SCHEMA_FROM_FORM}, e.g. 'default:ads.impressions'"
        )
    catalog, table = match["catalog"], match["table"]
    if catalog not in cfg.catalogs:
        known = ", ".join(sorted(cfg.catalogs)) or "none defined"
        raise ConfigError(
            f"{field} is {src.schema_from!r}: catalog {catalog!r} is not in catalogs ({known}); "
            f"expected {_SCHEMA_FROM_FORM}"
        )
    try:
        iceberg_table = load_table(catalog, cfg.catalogs[catalog].properties(), table)
        return schema.spark_schema(iceberg_table.schema())
    except ConfigError as exc:
        raise ConfigError(f"{field}: {exc}") from None


def _ddl_schema(ddl: str, field: str) -> StructType:
    try:
        parsed = DataType.fromDDL(ddl)
    except Exception as exc:  # ParseException (classic or Connect) or a py4j error
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"{field} is not a valid Spark DDL schema such as 'id STRING, ts TIMESTAMP': {first_line}"
        ) from None
    if not isinstance(parsed, StructType):
        raise ConfigError(
            f"{field} must list columns ('id STRING, ts TIMESTAMP'), got the type {parsed.simpleString()}"
        )
    return parsed


def _metadata_struct(schema: StructType) -> StructType | None:
    """The `__metadata__` struct type, when the schema has one containing `ingestion_ts`."""
    if METADATA_FIELD not in schema.fieldNames():
        return None
    dtype = schema[METADATA_FIELD].dataType
    if isinstance(dtype, StructType) and "ingestion_ts" in dtype.fieldNames():
        return dtype
    return None


def _metadata_column(struct: StructType) -> Column:
    """`__metadata__` built from the Kafka record, each field cast to its declared type."""
    fields = []
    for f in struct.fields:
        source: Column
        if f.name == "ingestion_ts":
            source = F.col("timestamp")
        elif f.name in _RECORD_FIELDS:
            source = F.col(f.name)
        else:  # commit_id (a Kafka record is in no Iceberg commit) and anything unknown
            source = F.lit(None)
        fields.append(source.cast(f.dataType).alias(f.name))
    return F.struct(*fields)


def decoded_fields(schema: StructType) -> StructType:
    """The value schema's columns a record's value gives (all but ``__metadata__``, which comes
    from the record itself)."""
    metadata = _metadata_struct(schema)
    return StructType([f for f in schema.fields if not (metadata is not None and f.name == METADATA_FIELD)])


def deserialize(raw: DataFrame, schema: StructType, decode: Decoder | None = None) -> DataFrame:
    """Spark Kafka source rows -> the value schema's columns, in its order (PERMISSIVE JSON, or
    ``decode``'s format).

    A value that is not valid JSON (or a null tombstone) gives nulls for the value's columns,
    never a failed query; `__metadata__` (if it has `ingestion_ts`) still comes from the record.
    A record ``decode`` gives a reason for (a dead letter) is left out: its own query writes it
    to the dead-letter table (``sources.dead_letters``).
    """
    metadata = _metadata_struct(schema)
    parsed_fields = decoded_fields(schema).fields
    value_col = "__kappa_value__"
    reason = None
    if decode is None:
        value = F.from_json(F.col("value").cast("string"), StructType(parsed_fields), {"mode": "PERMISSIVE"})
    else:
        got = decode(raw, StructType(parsed_fields))
        raw, value, reason = got.staged, got.value, got.reason
    if reason is not None:
        raw = raw.where(reason.isNull())
    # Parse once (kept in its own projection: from_json is not cheap, Spark does not duplicate it),
    # then pick fields: getField is safe for any column name (dots, spaces).
    staged = raw.select(value.alias(value_col), *(F.col(c) for c in ("timestamp", *_RECORD_FIELDS)))
    columns: list[Column] = []
    for f in schema.fields:
        if metadata is not None and f.name == METADATA_FIELD:
            columns.append(_metadata_column(metadata).alias(f.name))
        else:
            columns.append(F.col(value_col).getField(f.name).alias(f.name))
    return staged.select(*columns)


def _spark_condition(exc: BaseException) -> str | None:
    getter = getattr(exc, "getCondition", None)
    if not callable(getter):
        return None
    try:
        condition = getter()
    except Exception:
        return None
    return condition if isinstance(condition, str) else None


def is_missing_kafka_connector(exc: BaseException) -> bool:
    """Whether Spark failed because the "kafka" data source is not on the classpath."""
    if _spark_condition(exc) in _MISSING_CONDITIONS:
        return True
    return _MISSING_TEXT.search(str(exc)) is not None


def connector_missing_message(name: str, spark_version: str, cause: BaseException | None = None) -> str:
    detail = ""
    if cause is not None:
        lines = str(cause).strip().splitlines()
        detail = f" (Spark: {lines[0]})" if lines else ""
    return (
        f"sources.{name} reads Kafka, but Spark's Kafka connector is missing from the classpath{detail}. "
        f"Add the package {KAFKA_PACKAGE}:{spark_version} through sparkConf "
        f"`spark.jars.packages` (it is read when the session starts), "
        "or run on a Spark image that has the spark-sql-kafka-0-10 jar (and its kafka-clients "
        "dependency) in $SPARK_HOME/jars"
    )


def kafka_frame(
    spark: SparkSession,
    cfg: JobConfig,
    name: str,
    src: KafkaSource,
    gate: Literal["open", "closed"] | None = None,
    starting_offsets: str | None = None,
    trail: str | None = None,
) -> DataFrame:
    """The live Kafka candidate of source `name`, with the value schema's columns.

    ``gate``: read through ``dev.kappa.source.GatedKafkaSource`` (a bootstrapped job's topic,
    which reads nothing until its archive is read), from ``starting_offsets`` (Spark's JSON)."""
    value = value_schema(cfg, src, name=name)
    raw = kafka_records(spark, name, src, gate, starting_offsets, trail)
    decoder = avro_decoder(src, f"sources.{name}", dead_letters=cfg.dead_letters is not None)
    return deserialize(without(raw, src.skip), value, decoder)


def kafka_records(
    spark: SparkSession,
    name: str,
    src: KafkaSource,
    gate: Literal["open", "closed"] | None = None,
    starting_offsets: str | None = None,
    trail: str | None = None,
) -> DataFrame:
    """Source `name`'s topic as Spark's Kafka source gives it (key, value, topic, partition,
    offset, timestamp, headers), its listener and topics checked first. ``trail``: a
    blue/green upgrade's green reads through the gate no further than the offsets in that file
    (``spark_app.bluegreen.trail``; a gate is needed)."""
    if trail is not None and gate is None:
        raise ValueError("a trail caps a gated Kafka source: give gate='open' with it")
    if src.security is not None and src.security.protocol != "PLAINTEXT":
        reach(src.bootstrap_servers, src.security, f"sources.{name}")  # a refusal in one line, before Spark's trace
    require_topics(name, src)
    reader = (
        spark.readStream.format("kafka" if gate is None else GATED_KAFKA_CLASS)
        .option("kafka.bootstrap.servers", src.bootstrap_servers)
        .option(*src.subscription)
        .options(**src.options)
        .options(**spark_options(src.security))
    )
    if gate is not None:
        reader = reader.option("kappa.gate", gate)
    if trail is not None:
        reader = reader.option("kappa.trail", trail)
    if starting_offsets is not None:
        reader = reader.option("startingOffsets", starting_offsets)
    try:
        return reader.load()
    except Exception as exc:
        if is_missing_kafka_connector(exc):
            raise ConnectorMissingError(connector_missing_message(name, spark.version, exc)) from exc
        raise


def require_topics(name: str, src: KafkaSource) -> None:
    """Refuses a ``topic`` the cluster does not have, before the query starts: Spark's own
    failure comes from inside a batch as ``UnknownTopicOrPartitionException`` and a Java trace
    that names neither the source nor the topic. A ``topicPattern`` may match topics created
    later, so it is not checked. One metadata request to the brokers, no record read."""
    if src.topic is None:
        return
    wanted = [t.strip() for t in src.topic.split(",") if t.strip()]
    where = f"sources.{name}"
    try:
        listed = topics_matching(src.bootstrap_servers, ".*", src.security)
    except KappaError as exc:
        raise ConfigError(
            f"{where}: {exc}; check {where}.bootstrapServers ({src.bootstrap_servers}) and that the driver reaches "
            "those brokers"
        ) from None
    missing = [t for t in wanted if t not in listed]
    if missing:
        has = sorted(t for t in listed if not t.startswith("__"))
        shown = ", ".join(has[:10]) + (f" and {len(has) - 10} more" if len(has) > 10 else "") if has else "no topics"
        raise ConfigError(
            f"{where}.topic: topic {', '.join(repr(t) for t in missing)} does not exist on the Kafka cluster at "
            f"{src.bootstrap_servers} (it has {shown}); correct {where}.topic, or create the topic before the job "
            "starts"
        )


def gone_notice(name: str, earliest: dict[tuple[str, int], int]) -> str | None:
    """The notice of records a topic no longer holds at a job's first read from its earliest
    offset (pure; None: every partition still starts at 0). A job archiving the topic never
    saw them, so they are in no archive either."""
    gone = {tp: o for tp, o in sorted(earliest.items()) if o > 0}
    if not gone:
        return None
    where = ", ".join(f"{t}[{p}] from offset {o}" for (t, p), o in gone.items())
    return (
        f"source {name}: {sum(gone.values()):,} records were removed from the topic (its retention, or a "
        f"deletion) before this job first read it: {where}; they are in no output of this job and no archive "
        "it writes. Keep records until they are archived (the topic's retention.ms, e.g. -1 on a topic an "
        "archive job reads)"
    )


def records_gone(cfg: JobConfig) -> list[str]:
    """At a job's first start: each Kafka source read from its earliest offset whose topic has
    already lost records (one metadata request per source, no record read)."""
    from spark_app.contract.checkpoints.kafka_offsets import offsets, partitions_of

    out = []
    for name, src in cfg.sources.items():
        if not isinstance(src, KafkaSource) or src.topic is None:
            continue
        if str(src.options.get("startingOffsets", "latest")).strip() != "earliest":
            continue
        topics = [t.strip() for t in src.topic.split(",") if t.strip()]
        partitions = partitions_of(src.bootstrap_servers, topics, src.security)
        notice = gone_notice(name, offsets(src.bootstrap_servers, partitions, "earliest", src.security))
        if notice is not None:
            out.append(notice)
    return out


def without(raw: DataFrame, skip: list[OffsetRange]) -> DataFrame:
    """The records outside ``skip`` (a cascade Rewind's ranges: read past, never processed)."""
    if not skip:
        return raw
    inside = [
        (F.col("topic") == r.topic) & (F.col("partition") == r.partition) & F.col("offset").between(r.start, r.end - 1)
        for r in skip
        if r.end > r.start
    ]
    if not inside:
        return raw
    return raw.where(~reduce(lambda a, b: a | b, inside))
