"""A run's sources as the JobConfig names them: the candidate chosen for this run of each
named source (``icebergLive``, ``icebergBackfill`` or ``kafka``; the Netflix "dynamic
source"), and how a history source is split and paced."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from spark_app.contract.base import Duration, KappaModel, Timestamp
from spark_app.contract.kafka_security import KafkaSecurity, clashing_options
from spark_app.contract.schema_registry import SchemaRegistryAccess


class SplitConfig(KappaModel):
    """How data files become splits, the unit of admission."""

    target_bytes: int = Field(default=128 * 1024 * 1024, gt=0)
    """Files larger than this are sliced by row groups; smaller ones are bundled up to it."""
    open_file_cost: int = Field(default=4 * 1024 * 1024, ge=0)
    """Bytes a file counts for when bundling, so tiny files are not bundled without limit."""
    max_bundle_span: Duration = timedelta(minutes=5)
    """A bundle never spans more event time than this plus its widest file: bundling must
    not widen the out-of-orderness bound (maxDrift + largest split span: docs/concepts.md)."""
    slice_span: Duration | None = timedelta(minutes=5)
    """Backfill only: a file whose event-time range (within the window) is wider than this is
    cut into time slices, read from its ordering column at planning time, so a few late rows
    do not make the whole file one wide split: the largest split span (and the lateness the
    guard requires) becomes about this plus maxBundleSpan instead of the widest file. Costs
    one read of the ordering column per wide file when planning and one open per slice when
    reading. Keep it above the commit interval (a file's on-time rows span about one);
    null or 0 reads whole files."""
    task_target_bytes: int = Field(default=256 * 1024 * 1024, gt=0)
    """Admitted splits are packed into Spark tasks of about this size (several per task)."""


class ReadLimitConfig(KappaModel):
    """Per-micro-batch caps (Spark admission control); the engine may override them."""

    max_files: int | None = Field(default=None, gt=0)
    max_rows: int | None = Field(default=None, gt=0)
    max_bytes: int | None = Field(default=None, gt=0)
    max_snapshots: int | None = Field(default=None, gt=0)
    """Live only: snapshots consumed per micro-batch (1 replays commits one by one)."""


class ReadRateConfig(KappaModel):
    """A backfill's cap on the rate its history sources read, enforced when they admit splits:
    the object store the live jobs read must not be saturated by a backfill catching up."""

    max_bytes_per_second: int | None = Field(default=None, gt=0)
    """Bytes per second, averaged: of the files (or row groups) the admitted splits' reads open,
    as Iceberg records their sizes (a wide file read as two time slices counts twice)."""
    max_files_per_second: float | None = Field(default=None, gt=0)
    """File opens per second, averaged (a file read in two micro-batches counts twice)."""


class IcebergSourceBase(KappaModel):
    catalog: str = "default"
    """Name of an entry in `catalogs`."""
    table: str = Field(pattern=r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+$")
    """Table identifier, `namespace.table`."""
    columns: list[str] | None = None
    """Projection (top-level columns); the ordering column is read for filtering regardless."""
    filter: str | None = None
    """Row filter in pyiceberg's expression syntax, e.g. "country = 'US' and duration_s > 0"."""
    ordering_column: str | None = None
    """Overrides `alignment.orderingColumn` for this source (dotted for struct fields)."""
    split: SplitConfig = SplitConfig()
    read_limit: ReadLimitConfig = ReadLimitConfig()

    @field_validator("filter")
    @classmethod
    def _filter_parses(cls, value: str | None) -> str | None:
        if value is not None:
            from pyiceberg.expressions.parser import parse

            try:
                parse(value)
            except Exception as exc:  # pyparsing raises its own exception types
                raise ValueError(f"cannot parse filter {value!r}: {exc}") from None
        return value


class IcebergLiveSource(IcebergSourceBase):
    """Incremental appends, snapshot by snapshot, polled at the trigger interval."""

    kind: Literal["icebergLive"]
    starting_position: Literal["latest", "earliest"] | None = None
    """Where a new query starts; `startingTimestamp`/`startingSnapshotId` are alternatives.
    Default: latest."""
    starting_timestamp: Timestamp | None = None
    """Start with the first snapshot committed at or after this time."""
    starting_snapshot_id: int | None = None
    """Start with this snapshot (inclusive)."""
    on_non_append: Literal["skip", "fail"] = "fail"
    """What to do with delete/overwrite snapshots: `skip` logs and moves on, `fail` stops."""

    @model_validator(mode="after")
    def _one_start(self) -> IcebergLiveSource:
        given = [
            n
            for n, v in (
                ("startingPosition", self.starting_position),
                ("startingTimestamp", self.starting_timestamp),
                ("startingSnapshotId", self.starting_snapshot_id),
            )
            if v is not None
        ]
        if len(given) > 1:
            raise ValueError(
                f"give at most one of startingPosition, startingTimestamp, startingSnapshotId; got {given}"
            )
        return self


class IcebergBackfillSource(IcebergSourceBase):
    """History of the window from an Iceberg table, in ordering-column order."""

    kind: Literal["icebergBackfill"]
    snapshot_id: int | None = None
    """Read this snapshot; default: the table's current snapshot when the query starts."""


class OffsetRange(KappaModel):
    """Offsets ``[start, end)`` of one partition of a topic."""

    topic: str = Field(min_length=1)
    partition: int = Field(ge=0)
    start: int = Field(ge=0)
    end: int = Field(ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> OffsetRange:
        if self.end < self.start:
            raise ValueError(f"{self.topic}[{self.partition}]: end {self.end} is before start {self.start}")
        return self


class SchemaRegistrySource(SchemaRegistryAccess):
    """Where an Avro source's writer schemas are registered (Confluent's API)."""

    subjects: list[str] = []
    """The subjects whose versions are asked for when a query starts (TopicNameStrategy:
    ``<topic>-value``); an id a record names that none lists is asked for by id."""
    key_subjects: list[str] = []
    """``keyFormat: avro``: the keys' subjects (``<topic>-key``)."""


class KafkaSource(KappaModel):
    """Passthrough to Spark's Kafka source; values deserialized into the history table's schema."""

    kind: Literal["kafka"]
    bootstrap_servers: str = Field(min_length=1)
    topic: str | None = Field(default=None, min_length=1)
    topic_pattern: str | None = Field(default=None, min_length=1)
    """Every topic matching this Java regex (Spark's `subscribePattern`), instead of `topic`."""
    value_format: Literal["json", "avro"] = "json"
    """``avro``: the schema registry's wire format (a zero byte, the writer schema's id in four
    bytes, the Avro record), each record decoded with the schema it names (``registry``)."""
    registry: SchemaRegistrySource | None = None
    key_format: Literal["json", "avro"] | None = None
    """``avro``: each key in the wire format too, decoded with the schema it names; a column the
    value's writer lacks takes the key's field of that name. None: keys are not read (unset, so
    the config and its hash are what they were before)."""
    schema_from: str | None = None
    """`catalog:namespace.table` whose schema the values follow (the source's history table)."""
    schema_ddl: str | None = None
    """Alternatively, the value schema as a Spark DDL string."""
    options: dict[str, str] = {}
    """Extra options for Spark's Kafka source (startingOffsets, maxOffsetsPerTrigger, ...)."""
    security: KafkaSecurity | None = None
    """SASL and TLS from files (``spark_app.contract.kafka_security``)."""
    skip: list[OffsetRange] = []
    """Records not to process: an upstream job's output a cascade Rewind undid (the upstream
    job re-emits them after these ranges)."""

    @model_validator(mode="after")
    def _one_schema(self) -> KafkaSource:
        if (self.schema_from is None) == (self.schema_ddl is None):
            raise ValueError("give exactly one of schemaFrom (a history table) or schemaDdl")
        if (self.topic is None) == (self.topic_pattern is None):
            raise ValueError("give exactly one of topic or topicPattern")
        if (self.value_format == "avro") != (self.registry is not None):
            raise ValueError("valueFormat avro needs registry (and only avro takes one)")
        if self.key_format == "avro" and self.value_format != "avro":
            raise ValueError("keyFormat avro needs valueFormat avro (Avro keys are read with Avro values)")
        if self.security is not None and (clash := clashing_options(self.options)):
            raise ValueError(f"options {', '.join(clash)} are the security block's to set: give them there")
        return self

    @property
    def subscription(self) -> tuple[str, str]:
        """Spark's Kafka source option that names what it reads, and its value."""
        return ("subscribe", self.topic) if self.topic is not None else ("subscribePattern", str(self.topic_pattern))


SourceConfig = Annotated[IcebergLiveSource | IcebergBackfillSource | KafkaSource, Field(discriminator="kind")]
