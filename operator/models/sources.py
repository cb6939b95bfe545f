"""A StreamingJob's sources: each one's live definition (an Iceberg table's appends, or Kafka)
and the Iceberg table holding its history, which its Backfills read."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from kappa_operator.models.common import (
    COLUMN_MAX,
    COLUMNS_MAX,
    FILTER_MAX,
    HOSTS_MAX,
    INT64_BOUND,
    NAME_MAX,
    TABLE_MAX,
    Column,
    CRModel,
    Name,
    TimestampStr,
)
from kappa_operator.models.kafka_security import KEY, KEY_MAX, CaSpec, SecretName

TABLE = r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$"


AVRO_NEEDS_REGISTRY = "valueFormat avro needs schemaRegistry (a kafka source's), and only avro takes one"
AVRO_KEYS_NEED_AVRO_VALUES = "keyFormat avro needs valueFormat avro (keys are read from the same registry)"


class RegistryBasicAuth(CRModel):
    """A Secret holding the registry's username and password, each exactly its value."""

    secret_ref: SecretName
    username_key: str = Field(default="username", pattern=KEY, max_length=KEY_MAX)
    password_key: str = Field(default="password", pattern=KEY, max_length=KEY_MAX)


class SchemaRegistrySpec(CRModel):
    """A schema registry the job's Avro topics are registered in: Confluent's REST API, which
    Confluent's registry, Karapace and Apicurio Registry (``/apis/ccompat/v7``) serve. A
    topic's versions are those of subject ``<topic>-value`` (the serializers'
    TopicNameStrategy); a record naming any other id is decoded with the schema the registry
    gives for that id."""

    url: str = Field(pattern=r"^https?://[^\s]+$", max_length=HOSTS_MAX)
    """The API's base URL, e.g. `http://schema-registry:8081` or
    `http://apicurio:8080/apis/ccompat/v7`."""
    basic_auth: RegistryBasicAuth | None = None
    """HTTP basic authentication (Confluent Cloud's API key and secret, a registry behind a
    proxy that asks for a user): a Secret with the username and the password."""
    ca: CaSpec | None = None
    """An `https` registry whose certificate a private CA signed: the CA (PEM). None: the CAs the
    Spark image trusts."""

    @property
    def secrets(self) -> tuple[str, ...]:
        """The Secrets it names, each once, in a stable order."""
        names = [
            self.basic_auth.secret_ref.name if self.basic_auth else None,
            self.ca.secret_ref.name if self.ca else None,
        ]
        return tuple(dict.fromkeys(n for n in names if n is not None))


DEAD_LETTER_TABLE_MAX = 128
"""Shorter than a sink's table bound: the maximal StreamingJob spec must stay within SPEC_JSON_MAX."""


class DeadLetterTableSpec(CRModel):
    """Where a job's Avro sources put the records they cannot decode (not the wire format, not
    decodable with the schema they name, or naming an id the registry does not have), instead
    of stopping the job at them: an Iceberg table of the job's catalogs, created if missing,
    with columns `source, topic, partition, offset, timestamp, key, value, schema_id, reason`."""

    catalog: Name = "default"
    """An entry of spec.catalogs."""
    table: str = Field(pattern=TABLE, max_length=DEAD_LETTER_TABLE_MAX)
    """`namespace.table`."""


PER_TRIGGER_ICEBERG_ONLY = (
    "maxSnapshotsPerTrigger and maxFilesPerTrigger are for an icebergLive source; a kafka source caps its "
    "batches with maxOffsetsPerTrigger"
)


class LiveSource(CRModel):
    """Where the live job reads a source."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self.kind != 'icebergLive' || has(self.table)", "message": "icebergLive needs table"},
                {
                    "rule": "self.kind != 'kafka' || has(self.bootstrapServers)",
                    "message": "kafka needs bootstrapServers and one of topic or topicPattern",
                },
                {
                    "rule": "self.kind != 'kafka' || "
                    "(has(self.topic) ? !has(self.topicPattern) : has(self.topicPattern))",
                    "message": "kafka needs bootstrapServers and one of topic or topicPattern",
                },
                {"rule": "self.kind == 'kafka' || !has(self.security)", "message": "security is for a kafka source"},
                {
                    "rule": "self.kind == 'icebergLive' || !(has(self.maxSnapshotsPerTrigger) || "
                    "has(self.maxFilesPerTrigger))",
                    "message": PER_TRIGGER_ICEBERG_ONLY,
                },
                {
                    "rule": "(has(self.valueFormat) && self.valueFormat == 'avro') == has(self.schemaRegistry) && "
                    "(self.kind == 'kafka' || !has(self.schemaRegistry))",
                    "message": AVRO_NEEDS_REGISTRY,
                },
                {
                    "rule": "!has(self.keyFormat) || self.keyFormat != 'avro' || "
                    "(has(self.valueFormat) && self.valueFormat == 'avro')",
                    "message": AVRO_KEYS_NEED_AVRO_VALUES,
                },
            ]
        }
    )
    kind: Literal["icebergLive", "kafka"]
    """`icebergLive` reads a table's appends snapshot by snapshot; `kafka` reads a topic."""
    catalog: str = Field(default="default", max_length=NAME_MAX)
    """Name of an entry in spec.catalogs (icebergLive)."""
    table: str | None = Field(default=None, pattern=TABLE, max_length=TABLE_MAX)
    """`namespace.table` (icebergLive)."""
    starting_position: Literal["earliest", "latest"] = "latest"
    """Where a new query starts: the oldest retained record or snapshot, or only what comes
    next (icebergLive, kafka; a query started from a checkpoint resumes there instead)."""
    starting_time: TimestampStr | None = None
    """Kafka: a new query starts at the first record of each partition at or after this time
    (Kafka's own timestamp index); overrides startingPosition."""
    on_non_append: Literal["skip", "fail"] = "fail"
    """What a delete/overwrite snapshot does to the live query (icebergLive)."""
    bootstrap_servers: str | None = Field(default=None, max_length=HOSTS_MAX)
    """Kafka bootstrap servers (kafka)."""
    security: Name | None = None
    """The entry of spec.kafkaSecurity this source reaches its listener with: SASL and TLS from
    Secrets (kafka; its archive and a bootstrap read the same topic the same way). None: PLAINTEXT."""
    topic: str | None = Field(default=None, max_length=249)
    """Kafka topic (kafka; Kafka allows at most 249 characters)."""
    topic_pattern: str | None = Field(default=None, max_length=249)
    """Kafka: every topic matching this Java regex, those created later included (instead of
    topic)."""
    value_schema: str | None = Field(default=None, max_length=FILTER_MAX)
    """Kafka: the JSON values' schema as Spark DDL (`id STRING, event_ts TIMESTAMP`). Default:
    the history table's, so the pipeline gets the same columns live and in a backfill. An
    archive job, which creates that table, declares it here."""
    value_format: Literal["json", "avro"] = "json"
    """Kafka: `json` values, or `avro` in a schema registry's wire format (a zero byte, the
    writer schema's id, the Avro record), each record decoded with the schema it names into
    the value schema's columns; a field a record's schema lacks takes the newest version's
    default. A compatible new version registered while the job runs is read without a restart
    of the job."""
    key_format: Literal["json", "avro"] = "json"
    """Kafka, valueFormat avro: `avro` reads each key too (wire format, subject `<topic>-key`):
    a column the value's writer lacks takes the key's field of that name. `json`: keys are not
    read."""
    schema_registry: Name | None = None
    """Kafka, valueFormat avro: the entry of spec.schemaRegistries the records' schema ids are
    registered in."""
    max_offsets_per_trigger: int | None = Field(default=None, ge=1, le=INT64_BOUND)
    """Kafka: at most this many records per micro-batch (Spark's `maxOffsetsPerTrigger`)."""
    max_snapshots_per_trigger: int | None = Field(default=None, ge=1, le=INT64_BOUND)
    """icebergLive: at most this many of the table's snapshots per micro-batch (1 reads the
    commits one by one). Without a cap, a query from `earliest`, or one that fell behind, reads
    everything new in one batch, and its state and shuffle must hold all of it at once."""
    max_files_per_trigger: int | None = Field(default=None, ge=1, le=INT64_BOUND)
    """icebergLive: at most about this many data files per micro-batch (at least one split is
    read, however large)."""
    fail_on_data_loss: bool = True
    """Kafka: fail the query when offsets it must read were deleted by retention (Spark's
    `failOnDataLoss`); false skips them (a gap in the output, said only in the driver's log)."""

    def per_trigger(self) -> dict[str, int]:
        """The icebergLive per-micro-batch caps that are set, as the JobConfig's ``readLimit``."""
        caps = {
            "maxSnapshots": self.max_snapshots_per_trigger,
            "maxFiles": self.max_files_per_trigger,
        }
        return {k: v for k, v in caps.items() if v is not None}

    @model_validator(mode="after")
    def _complete(self) -> LiveSource:
        if self.kind == "icebergLive" and self.table is None:
            raise ValueError("icebergLive needs table")
        one_topic = (self.topic is None) != (self.topic_pattern is None)
        if self.kind == "kafka" and (self.bootstrap_servers is None or not one_topic):
            raise ValueError("kafka needs bootstrapServers and one of topic or topicPattern")
        if self.kind != "kafka" and self.security is not None:
            raise ValueError("security is for a kafka source")
        if self.kind != "icebergLive" and self.per_trigger():
            raise ValueError(PER_TRIGGER_ICEBERG_ONLY)
        avro = self.value_format == "avro"
        if avro != (self.schema_registry is not None) or (avro and self.kind != "kafka"):
            raise ValueError(AVRO_NEEDS_REGISTRY)
        if self.key_format == "avro" and not avro:
            raise ValueError(AVRO_KEYS_NEED_AVRO_VALUES)
        return self


class HistorySource(CRModel):
    """The Iceberg table that holds a source's history: what a Backfill reads."""

    catalog: str = Field(default="default", max_length=NAME_MAX)
    """Name of an entry in spec.catalogs."""
    table: str = Field(pattern=TABLE, max_length=TABLE_MAX)
    """`namespace.table`."""
    ordering_column: str | None = Field(default=None, max_length=COLUMN_MAX)
    """The source's event-time column: the order a backfill replays, and what the live job
    reads as this source's event time (default: spec.orderingColumn)."""


class JobSource(CRModel):
    """One named source of the pipeline: its live definition and its history."""

    live: LiveSource
    """What the live job reads."""
    history: HistorySource
    """What a backfill of this job reads instead."""
    columns: list[Column] | None = Field(default=None, max_length=COLUMNS_MAX)
    """Projection (top-level columns); default all."""
    filter: str | None = Field(default=None, max_length=FILTER_MAX)
    """Row filter in pyiceberg expression syntax."""
