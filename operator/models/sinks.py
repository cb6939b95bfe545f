"""A StreamingJob's sinks (Iceberg, Kafka, Parquet), and what an Iceberg sink keeps: its
snapshot history and its compaction."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from kappa_operator.models.common import (
    COLUMN_MAX,
    HOSTS_MAX,
    INT32_MAX,
    INT64_BOUND,
    KEY_COLUMNS_MAX,
    NAME_MAX,
    PARTITION_FIELDS_MAX,
    TABLE_MAX,
    URI_MAX,
    Column,
    CRModel,
    DurationStr,
    Name,
)
from kappa_operator.models.sources import TABLE


class SinkHistory(CRModel):
    """How much of an iceberg sink table's history the job's driver keeps. Each commit costs
    ~0.5 ms per snapshot kept; a Rewind never needs expired ones (files carry their batch)."""

    keep_last: int = Field(default=100, ge=1, le=INT32_MAX)
    """Never expire the newest this many snapshots."""
    min_age: DurationStr = "1h"
    """Never expire younger snapshots: how far a job reading this table may fall behind."""
    expire_every: int = Field(default=20, ge=0, le=INT32_MAX)
    """Expire every this many commits; 0 never (the history then grows without bound)."""


class SinkCompaction(CRModel):
    """Small-file compaction by the job's Spark driver (iceberg), as `replace` snapshots. The
    newest batches' files stay whole for as long as spec.checkpoints keeps restore points."""

    every: int = Field(default=100, ge=0, le=INT32_MAX)
    """Compact every this many commits; 0 never."""
    min_files: int = Field(default=10, ge=2, le=INT32_MAX)
    """Rewrite a partition's small files once at least this many are there."""
    small_file_bytes: int = Field(default=32 * 1024 * 1024, ge=1, le=INT64_BOUND)
    """Files below this size are small."""


SINK_AVRO_NEEDS_REGISTRY = "valueFormat avro needs schemaRegistry (a kafka sink's), and only avro takes one"
SINK_AVRO_KEYS_NEED_AVRO_VALUES = "keyFormat avro needs valueFormat avro (the key registered in the same registry)"


class JobSink(CRModel):
    """One named output of the pipeline."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self.kind != 'iceberg' || has(self.table)", "message": "an iceberg sink needs table"},
                {"rule": "self.kind != 'parquet' || has(self.path)", "message": "a parquet sink needs path"},
                {
                    "rule": "self.kind != 'kafka' || (has(self.bootstrapServers) && has(self.topic) && "
                    "size(self.key) > 0)",
                    "message": "a kafka sink needs bootstrapServers, topic and key",
                },
                {"rule": "self.kind == 'kafka' || !has(self.security)", "message": "security is for a kafka sink"},
                {
                    "rule": "(has(self.valueFormat) && self.valueFormat == 'avro') == has(self.schemaRegistry) && "
                    "(self.kind == 'kafka' || !has(self.schemaRegistry))",
                    "message": SINK_AVRO_NEEDS_REGISTRY,
                },
                {
                    "rule": "!has(self.keyFormat) || self.keyFormat != 'avro' || "
                    "(has(self.valueFormat) && self.valueFormat == 'avro')",
                    "message": SINK_AVRO_KEYS_NEED_AVRO_VALUES,
                },
            ]
        }
    )
    kind: Literal["iceberg", "parquet", "kafka"] = "iceberg"
    """`iceberg`: the exactly-once sink (branches, publish, undo); `parquet`: Spark's file sink;
    `kafka`: a topic, at least once with idempotent keys (a replayed batch already written is
    not written again; records keyed by `key`), what a downstream job reads live."""
    catalog: str = Field(default="default", max_length=NAME_MAX)
    """Name of an entry in spec.catalogs (iceberg)."""
    table: str | None = Field(default=None, pattern=TABLE, max_length=TABLE_MAX)
    """`namespace.table` (iceberg); created from the output schema if missing."""
    path: str | None = Field(default=None, max_length=URI_MAX)
    """Output directory (parquet)."""
    bootstrap_servers: str | None = Field(default=None, max_length=HOSTS_MAX)
    """Kafka bootstrap servers (kafka)."""
    security: Name | None = None
    """The entry of spec.kafkaSecurity this sink reaches its listener with: SASL and TLS from
    Secrets (kafka). None: PLAINTEXT."""
    value_format: Literal["json", "avro"] = "json"
    """Kafka: each value a JSON object, or `avro` in the schema registry's wire format, the
    output's schema (Spark's Avro form of its columns) registered under `<topic>-value` when
    the query starts."""
    key_format: Literal["json", "avro"] = "json"
    """Kafka, valueFormat avro: `avro` writes each key (the `key` columns) in the wire format
    too, its schema registered under `<topic>-key`. `json`: a JSON object of the key columns."""
    schema_registry: Name | None = None
    """Kafka, valueFormat avro: the entry of spec.schemaRegistries to register in."""
    topic: str | None = Field(default=None, max_length=249)
    """The topic written (kafka). A Backfill writes `<topic>-backfill-<backfill name>` instead,
    never the live topic."""
    time_column: str | None = Field(default=None, max_length=COLUMN_MAX)
    """Output event-time column: what a backfill's window and publish apply to."""
    partition_by: list[Column] = Field(default=[], max_length=PARTITION_FIELDS_MAX)
    """Partition spec of a table the sink creates, e.g. hour(playback_ts)."""
    key: list[Column] = Field(default=[], max_length=KEY_COLUMNS_MAX)
    """Columns identifying a row: a backfill's validation diff (iceberg); the record key
    (kafka, required)."""
    history: SinkHistory = SinkHistory()
    """Snapshot expiry (iceberg)."""
    compaction: SinkCompaction = SinkCompaction()
    """Small-file compaction (iceberg)."""

    @model_validator(mode="after")
    def _complete(self) -> JobSink:
        if self.kind == "iceberg" and self.table is None:
            raise ValueError("an iceberg sink needs table")
        if self.kind == "parquet" and self.path is None:
            raise ValueError("a parquet sink needs path")
        if self.kind == "kafka" and (self.bootstrap_servers is None or self.topic is None or not self.key):
            raise ValueError("a kafka sink needs bootstrapServers, topic and key")
        if self.kind != "kafka" and self.security is not None:
            raise ValueError("security is for a kafka sink")
        avro = self.value_format == "avro"
        if avro != (self.schema_registry is not None) or (avro and self.kind != "kafka"):
            raise ValueError(SINK_AVRO_NEEDS_REGISTRY)
        if self.key_format == "avro" and not avro:
            raise ValueError(SINK_AVRO_KEYS_NEED_AVRO_VALUES)
        return self
