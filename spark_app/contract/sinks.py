"""A run's sinks as the JobConfig names them: Iceberg, Kafka, Parquet and the console, and
what an appending sink keeps (its snapshot history, its compaction)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from spark_app.contract.base import Duration, KappaModel
from spark_app.contract.kafka_security import KafkaSecurity, clashing_options
from spark_app.contract.schema_registry import SchemaRegistryAccess


class SinkBase(KappaModel):
    time_column: str | None = None
    """Output event-time column: in a backfill, rows before the window start (warm-up output)
    are not written."""
    output_mode: Literal["append", "update", "complete"] = "append"


class ParquetSink(SinkBase):
    """Spark's file sink (exactly-once through its `_spark_metadata` log)."""

    kind: Literal["parquet"]
    path: str = Field(min_length=1)
    partition_by: list[str] = []


class ConsoleSink(SinkBase):
    kind: Literal["console"]


_PARTITION = r"^(\w+|(hour|day|month|year)\(\w+\)|(bucket|truncate)\(\d+,\s*\w+\))$"


class SnapshotHistory(KappaModel):
    """How much of the table's history the sink keeps: each commit costs ~0.5 ms per snapshot
    kept, so the driver expires old ones every few batches. A rewind never needs them (the
    sink's files carry their batch); a downstream live reader may lag at most `minAge`."""

    keep_last: int = Field(default=100, ge=1)
    """Never expire the newest this many snapshots."""
    min_age: Duration = timedelta(hours=1)
    """Never expire a snapshot younger than this: how far a job reading the table may fall behind."""
    expire_every: int = Field(default=20, ge=0)
    """Expire every this many batches (0: never; the table's history then grows without bound)."""


class Compaction(KappaModel):
    """Small files rewritten into few by the driver's Spark jobs, as one `replace` snapshot."""

    every: int = Field(default=100, ge=0)
    """Compact every this many commits (0: never)."""
    min_files: int = Field(default=10, ge=2)
    """Rewrite a partition's small files once at least this many are there."""
    small_file_bytes: int = Field(default=32 * 1024 * 1024, gt=0)
    """Files below this size are small."""
    protect_batches: int = Field(default=360, ge=0)
    """Leave the newest this many batches' own files whole: a rewind undoes within this horizon
    (the operator sets it from the checkpoint retention and the trigger interval)."""


class AppendingSink(SinkBase):
    """A sink that only ever adds rows (a table's appends, a topic's records)."""

    appends: ClassVar[str] = "a sink"

    @field_validator("output_mode")
    @classmethod
    def _append_only(cls, value: str) -> str:
        if value != "append":
            raise ValueError(f"{cls.appends} appends: outputMode must be append (aggregate with a watermark)")
        return value


class IcebergSink(AppendingSink):
    """Exactly-once Iceberg table: executors write Parquet, the driver commits one snapshot per
    micro-batch carrying the query and batch ids (a replayed batch is skipped)."""

    appends: ClassVar[str] = "an iceberg sink"
    kind: Literal["iceberg"]
    catalog: str = "default"
    """Name of an entry in `catalogs`."""
    table: str = Field(pattern=r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+$")
    """Table identifier, `namespace.table`; created from the output schema if missing."""
    branch: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][-_.A-Za-z0-9]*$")
    """Default: `main` live, `backfill-<name>` in a backfill (main keeps serving meanwhile)."""
    partition_by: list[str] = []
    """Partition spec of a table the sink creates: `col`, `hour(col)`, `day(col)`,
    `month(col)`, `year(col)`, `bucket(N, col)`, `truncate(N, col)`."""
    key: list[str] = []
    """Columns identifying a row, for the full diff of validate/publish (else counts only)."""
    commit_retries: int = Field(default=20, ge=0)
    """Commit conflicts with other writers are retried this many times (with backoff)."""
    pipelined_commit: bool = True
    """Commit each batch to Iceberg while Spark runs the next one (``sinks.iceberg.pending``):
    its files are recorded durably first, so a crash between Spark's commit and ours loses
    nothing. False: commit before the batch ends (a reader sees batch N once Spark logged it)."""
    target_file_bytes: int = Field(default=128 * 1024 * 1024, gt=0)
    """Each task rolls to a new file after about this many bytes of Arrow data."""
    history: SnapshotHistory = SnapshotHistory()
    """Snapshot expiry, done by the driver on the Spark side."""
    compaction: Compaction = Compaction()
    """Small-file compaction, done by the driver's Spark jobs."""

    @field_validator("partition_by")
    @classmethod
    def _transforms(cls, value: list[str]) -> list[str]:
        for i, item in enumerate(value):
            if not re.match(_PARTITION, item.replace(" ", "")):
                raise ValueError(
                    f"partitionBy[{i}] {item!r}: use col, hour(col), day(col), month(col), year(col), "
                    "bucket(N, col) or truncate(N, col)"
                )
        return value


class SchemaRegistrySink(SchemaRegistryAccess):
    """Where an Avro sink registers its values' schema (Confluent's API)."""

    subject: str = Field(min_length=1)
    """TopicNameStrategy: ``<topic>-value``."""
    key_subject: str | None = None
    """``keyFormat: avro``: ``<topic>-key``."""


class KafkaSink(AppendingSink):
    """A topic, written by Spark's Kafka writer: at least once, with idempotent keys.

    Spark's Kafka sink has no transactions, so a batch replayed after a crash could be
    written twice. Two things narrow that to almost never and make what remains harmless:
    each batch's produced offsets are recorded in the checkpoint (a replayed batch already
    recorded is not written again), and every record's key is the row's ``key`` columns, the
    same on a replay (a consumer keeping the last record per key sees each row once). Only a
    driver killed between the write and its record leaves the batch twice in the topic, under
    the same keys. Each record carries the headers ``kappa.query`` and ``kappa.batch``."""

    appends: ClassVar[str] = "a kafka sink"
    kind: Literal["kafka"]
    bootstrap_servers: str = Field(min_length=1)
    topic: str = Field(min_length=1)
    key: list[str] = Field(min_length=1)
    """Columns whose values (a JSON object of them) are the record key: what identifies a row downstream."""
    options: dict[str, str] = {}
    """Extra options for Spark's Kafka writer (kafka.compression.type, ...)."""
    security: KafkaSecurity | None = None
    """SASL and TLS from files (``spark_app.contract.kafka_security``)."""
    value_format: Literal["json", "avro"] | None = None
    """``avro``: each value in the schema registry's wire format, its schema (Spark's Avro form
    of the output's columns) registered under ``registry.subject`` when the query starts. None:
    JSON (unset, so a JSON sink's config and its hash are what they were before Avro)."""
    registry: SchemaRegistrySink | None = None
    key_format: Literal["json", "avro"] | None = None
    """``avro``: each key (the ``key`` columns) in the wire format, its schema registered under
    ``registry.keySubject``. None: a JSON object of the key columns."""

    @model_validator(mode="after")
    def _security_in_one_place(self) -> KafkaSink:
        if (self.value_format == "avro") != (self.registry is not None):
            raise ValueError("valueFormat avro needs registry (and only avro takes one)")
        if (self.key_format == "avro") != (self.registry is not None and self.registry.key_subject is not None):
            raise ValueError("keyFormat avro needs valueFormat avro and registry.keySubject (and only it takes one)")
        if self.security is not None and (clash := clashing_options(self.options)):
            raise ValueError(f"options {', '.join(clash)} are the security block's to set: give them there")
        return self


SinkConfig = Annotated[ParquetSink | ConsoleSink | IcebergSink | KafkaSink, Field(discriminator="kind")]
