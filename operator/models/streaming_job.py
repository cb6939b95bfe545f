"""``StreamingJob`` (``sj``): a live PySpark pipeline, and what its backfills and rewinds reuse."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator

from kappa_operator.models.common import (
    API_VERSION,
    ARGS_MAX,
    CATALOG_PROPERTIES_MAX,
    CATALOGS_MAX,
    COLUMN_MAX,
    INT32_MAX,
    INT64_BOUND,
    SINKS_MAX,
    SOURCES_MAX,
    SPARK_CONF_MAX,
    URI_MAX,
    ArgName,
    CRModel,
    DurationStr,
    ExecutorResources,
    K8sObject,
    Name,
    ObjectMeta,
    PositiveDurationStr,
    PropertyKey,
    Resources,
    Setting,
    SettingKey,
    TimestampStr,
    check_pod_settings_size,
    exactly_one,
)
from kappa_operator.models.external_calls import ExternalCalls
from kappa_operator.models.kafka_security import KafkaSecuritySpec
from kappa_operator.models.packaging import Dependencies, PipelineFrom
from kappa_operator.models.sinks import JobSink
from kappa_operator.models.sources import DeadLetterTableSpec, JobSource, SchemaRegistrySpec
from kappa_operator.models.streaming_job_status import (
    StreamingJobStatus,
)
from spark_app.contract.publish_defaults import DEFAULT_MIN_MATCH_RATIO

CatalogProperties = Annotated[dict[PropertyKey, Setting], Field(max_length=CATALOG_PROPERTIES_MAX)]


ENTRY_POINT = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"


class CheckpointRetention(CRModel):
    """Which externalized snapshots are kept; the newest restorable one always is."""

    count: int = Field(default=24, ge=1, le=INT32_MAX)
    """Keep at most this many snapshots per query."""
    max_age: DurationStr | None = None
    """Drop snapshots older than this (e.g. 168h), never the newest."""


class CheckpointSpec(CRModel):
    """Where Spark keeps the job's checkpoints, and where restorable copies of them go."""

    location: str = Field(min_length=1, max_length=URI_MAX)
    """Base URI (s3a://, hdfs://, file://); one query per sink under `<location>/live/<sink>`."""
    external_location: str | None = Field(default=None, max_length=URI_MAX)
    """Where snapshots are copied to (s3://, file://, ...); unset: no snapshots, no Rewind."""
    interval: DurationStr = "10m"
    """How often the job's driver copies the newest committed batch (incrementally)."""
    retention: CheckpointRetention = CheckpointRetention()
    """Snapshots kept."""


class HealthSpec(CRModel):
    """When a running job counts as ``Stalled`` or ``Lagging`` (conditions, Events, metrics):
    from its driver's progress reports, which the operator reads every 30 s."""

    progress_timeout: PositiveDurationStr = "10m"
    """Stalled: no micro-batch and no idle heartbeat from a query for this long while the
    application runs (a batch that legitimately takes longer needs a longer timeout)."""
    max_kafka_lag: int | None = Field(default=None, ge=0, le=INT64_BOUND)
    """Lagging: more Kafka records than this not read yet, over all partitions (kafka)."""
    max_watermark_delay: PositiveDurationStr | None = None
    """Lagging: a query's event-time watermark further than this behind the wall clock."""


class RestartSpec(CRModel):
    """How the operator restarts a live application that failed: after an exponentially
    growing delay with a cap (the Spark operator's own restart policy waits a fixed interval,
    forever), from the same checkpoint. The delay starts over once the job ran ``resetAfter``."""

    initial_backoff: PositiveDurationStr = "10s"
    """The delay before the first restart."""
    max_backoff: PositiveDurationStr = "10m"
    """The delay never grows past this."""
    multiplier: float = Field(default=2.0, ge=1.0, le=10.0)
    """Each further restart waits this many times longer."""
    reset_after: PositiveDurationStr = "30m"
    """A failure after running this long counts as a first failure again."""
    max_attempts: int | None = Field(default=None, ge=1, le=INT32_MAX)
    """Restarts in a row before the job stays Failed (unset: no limit)."""


class UpgradeSpec(CRModel):
    """What a spec change of a running job does (the Flink Kubernetes Operator's
    ``upgradeMode``), and whether a failed upgrade rolls back."""

    mode: Literal["stateless", "last-state", "snapshot", "blueGreen"] = "last-state"
    """`last-state`: restart from the job's checkpoint (state kept). `stateless`: start on an
    empty checkpoint (state dropped; sources start at startingPosition). `snapshot`: take a
    snapshot first (needs checkpoints.externalLocation), then upgrade as last-state; a
    rollback restores that snapshot. `blueGreen`: run the new spec beside the old one, its
    state rebuilt from the sources' history into a branch of each sink, compare, then switch
    each sink's main at one event time in one snapshot (Kafka sources, or icebergLive sources
    whose history is the live table; Iceberg sinks with timeColumn; docs/operations.md)."""
    rollback: bool = False
    """Run the last spec that reached RUNNING again when an upgraded application fails or
    does not run within readyTimeout (the edited spec stays as written; status says so)."""
    ready_timeout: PositiveDurationStr = "5m"
    """How long an upgraded application has to reach RUNNING."""
    snapshot_timeout: PositiveDurationStr = "10m"
    """How long the snapshot before an upgrade may take (mode snapshot); past it the upgrade
    is not made and the job keeps running the previous spec."""
    overlap: PositiveDurationStr = "30m"
    """blueGreen: the event time over which both versions' output is compared before the
    switch. The new version reads the sources' history from three overlaps before the running
    version's watermark (the wall clock before it reports one):
    one is its warm-up (state built, output not compared), one covers the watermark delay, one
    is compared. Set it above the pipeline's lateness and look-back."""
    catch_up: PositiveDurationStr = "1h"
    """blueGreen: how long the new version has from its start to reach the running one's
    watermark; past it, it is removed and the running one goes on."""
    min_match_ratio: float = Field(default=DEFAULT_MIN_MATCH_RATIO, ge=0, le=1)
    """blueGreen: the share of the compared rows that must be equal in both versions; below it
    the new version is removed. 0: the output is meant to change (compared, reported, not
    required)."""


class SnapshotRef(CRModel):
    """A snapshot to start from: one taken by this or another job (``status.snapshots``)."""

    model_config = exactly_one("time", "batchId", "set exactly one of initialSnapshot.time, initialSnapshot.batchId")
    location: str = Field(min_length=1, max_length=URI_MAX)
    """The externalLocation the snapshot was written to (`spec.checkpoints.externalLocation`
    of the job that took it)."""
    time: TimestampStr | None = None
    """The newest snapshot committed before this time (RFC 3339), per sink."""
    batch_id: int | None = Field(default=None, ge=0, le=INT64_BOUND)
    """The newest snapshot at or before this micro-batch (`status.snapshots[].batchIds`;
    single-sink jobs)."""

    @model_validator(mode="after")
    def _one(self) -> SnapshotRef:
        if (self.time is None) == (self.batch_id is None):
            raise ValueError("set exactly one of initialSnapshot.time, initialSnapshot.batchId")
        return self


class BootstrapSpec(CRModel):
    """Start from history and go live in one run (a hybrid source, as Flink's FLIP-150): each
    Kafka source's history table (its archive) is read from ``from`` in event-time order,
    aligned as a Backfill reads it, and each topic then takes over at
    the exact offsets where its archive ends, in the same query and checkpoint."""

    start: TimestampStr = Field(alias="from")
    """Where the job's history starts (RFC 3339): the archives' rows from here on are read.
    Applies to a new checkpoint only (a new job, or an upgrade with upgrade.mode stateless)."""
    max_drift: DurationStr = "10m"
    """How far one archive may read ahead of the others in event time (a Backfill's maxDrift)."""


class LocalRef(CRModel):
    """An object in the job's namespace."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", max_length=253)


class EnvFrom(CRModel):
    """Environment variables of the job's Spark pods from a Secret or ConfigMap in its
    namespace (a container's ``envFrom``): where catalog and object-store credentials come
    from (``AWS_ACCESS_KEY_ID``, ``PYICEBERG_CATALOG__...``). The operator only names the
    object in the applications it renders; it never reads it."""

    model_config = exactly_one("secretRef", "configMapRef", "set exactly one of secretRef, configMapRef")
    secret_ref: LocalRef | None = None
    config_map_ref: LocalRef | None = None
    prefix: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=64)
    """Prepended to every variable's name."""

    @model_validator(mode="after")
    def _one(self) -> EnvFrom:
        if (self.secret_ref is None) == (self.config_map_ref is None):
            raise ValueError("set exactly one of secretRef, configMapRef")
        return self


BOOTSTRAP_NEEDS_KAFKA = (
    "bootstrap reads each source's history (its archive) and then its topic: every source's live.kind must be kafka"
)


BLUE_GREEN_NEEDS = (
    "upgrade.mode blueGreen needs every sink to be kind iceberg with timeColumn (kafka and parquet sinks cannot "
    "switch atomically) and every source kafka, or icebergLive with history the same table (the new version "
    "reads history up to the running one's input position)"
)


UNKNOWN_SECURITY = "a source's live.security or a sink's security must name an entry of spec.kafkaSecurity"
UNKNOWN_REGISTRY = (
    "a source's live.schemaRegistry or a sink's schemaRegistry must name an entry of spec.schemaRegistries"
)
DEAD_LETTERS_NEED_AVRO = (
    "deadLetterTable holds the records an Avro source cannot decode: a source needs live.valueFormat avro "
    "(else remove deadLetterTable)"
)
SCHEMA_REGISTRIES_MAX = 2
"""The registry read from and one written to (or the old and the new one of a migration)."""
KAFKA_SECURITY_MAX = 2
"""One for the cluster read from and one for the cluster written to: a job whose sources and sinks
share a listener names one block from both."""


class StreamingJobSpec(CRModel):
    """A live PySpark Structured Streaming job."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.upgrade) || !has(self.upgrade.mode) || self.upgrade.mode != 'snapshot' || "
                    "has(self.checkpoints.externalLocation)",
                    "message": "upgrade.mode snapshot needs checkpoints.externalLocation (where snapshots go)",
                },
                {
                    "rule": "!has(self.upgrade) || !has(self.upgrade.mode) || self.upgrade.mode != 'blueGreen' || "
                    "(self.sinks.all(k, self.sinks[k].kind == 'iceberg' && has(self.sinks[k].timeColumn)) && "
                    "self.sources.all(k, self.sources[k].live.kind == 'kafka' || "
                    "(has(self.sources[k].live.table) && self.sources[k].live.table == self.sources[k].history.table "
                    "&& self.sources[k].live.catalog == self.sources[k].history.catalog)))",
                    "message": BLUE_GREEN_NEEDS,
                },
                {
                    "rule": "!has(self.snapshotTriggerNonce) || has(self.checkpoints.externalLocation)",
                    "message": "snapshotTriggerNonce needs checkpoints.externalLocation (where snapshots go)",
                },
                {
                    "rule": "!has(self.bootstrap) || self.sources.all(k, self.sources[k].live.kind == 'kafka')",
                    "message": BOOTSTRAP_NEEDS_KAFKA,
                },
                {
                    "rule": "self.sources.all(k, !has(self.sources[k].live.security) || "
                    "(has(self.kafkaSecurity) && self.sources[k].live.security in self.kafkaSecurity)) && "
                    "self.sinks.all(k, !has(self.sinks[k].security) || "
                    "(has(self.kafkaSecurity) && self.sinks[k].security in self.kafkaSecurity))",
                    "message": UNKNOWN_SECURITY,
                },
                {
                    "rule": "self.sources.all(k, !has(self.sources[k].live.schemaRegistry) || "
                    "(has(self.schemaRegistries) && self.sources[k].live.schemaRegistry in self.schemaRegistries)) && "
                    "self.sinks.all(k, !has(self.sinks[k].schemaRegistry) || "
                    "(has(self.schemaRegistries) && self.sinks[k].schemaRegistry in self.schemaRegistries))",
                    "message": UNKNOWN_REGISTRY,
                },
                {
                    "rule": "!has(self.deadLetterTable) || self.sources.exists(k, "
                    "has(self.sources[k].live.valueFormat) && self.sources[k].live.valueFormat == 'avro')",
                    "message": DEAD_LETTERS_NEED_AVRO,
                },
            ]
        }
    )

    image: str = Field(min_length=1, max_length=URI_MAX)
    """Spark image holding spark_app and the pipeline's code."""
    pipeline: str = Field(pattern=ENTRY_POINT, max_length=256)
    """Entry point `module:function`; it takes {source: DataFrame} and returns {sink: DataFrame}."""
    pipeline_args: dict[ArgName, Setting] = Field(default={}, max_length=ARGS_MAX)
    """Keyword arguments of the pipeline function, as strings (the pipeline parses them, as
    Spark parses "30 minutes")."""
    deps: Dependencies | None = None
    """Extra pyFiles, jars and packages of every Spark application of the job (the
    spark-operator's `spec.deps`): e.g. the pipeline's package zipped on object storage."""
    pipeline_from: PipelineFrom | None = None
    """The pipeline's modules from a ConfigMap instead of the image."""
    catalogs: dict[Name, CatalogProperties] = Field(min_length=1, max_length=CATALOGS_MAX)
    """pyiceberg catalog properties by name (type, uri, warehouse, ...)."""
    sources: dict[Name, JobSource] = Field(min_length=1, max_length=SOURCES_MAX)
    """The pipeline's inputs by name."""
    sinks: dict[Name, JobSink] = Field(min_length=1, max_length=SINKS_MAX)
    """The pipeline's outputs by name."""
    checkpoints: CheckpointSpec
    """Checkpoint location and externalized snapshots (Rewind restores from them)."""
    trigger_interval: DurationStr = "10s"
    """Micro-batch interval of the live job (and the poll interval of Iceberg sources)."""
    ordering_column: str = Field(default="event_ts", max_length=COLUMN_MAX)
    """Default ordering column of the sources' history (event time)."""
    spark_conf: dict[SettingKey, Setting] = Field(default={}, max_length=SPARK_CONF_MAX)
    """Extra Spark configuration."""
    driver: Resources = Resources()
    """The driver: cores, memory and pod settings (placement, volumes, env, security)."""
    executor: ExecutorResources = ExecutorResources()
    """The executors: instances, cores, memory and pod settings. A Backfill may override
    either (`spec.driver`, `spec.executor`); Rewinds' restore applications use the job's."""
    volumes: list[K8sObject] = Field(default=[], max_length=32)
    """Kubernetes Volumes of the Spark pods (mounted by `driver.volumeMounts` and
    `executor.volumeMounts`)."""
    image_pull_secrets: list[Annotated[str, Field(max_length=253)]] = Field(default=[], max_length=16)
    """Secrets (names) to pull the Spark image with."""
    service_account: str = Field(default="spark", max_length=253)
    """Service account of the Spark driver (workload identity for the object store goes here)."""
    env_from: list[EnvFrom] = Field(default=[], max_length=8)
    """Secrets and ConfigMaps whose keys become environment variables of every Spark pod of
    this job: its live application, its Backfills' and publish applications, its Rewinds'
    restore applications. The operator itself needs none of them."""
    suspend: bool = False
    """Stop the application and keep its checkpoint; false resumes from it."""
    health: HealthSpec = HealthSpec()
    """When the running job is Stalled or Lagging."""
    restart: RestartSpec = RestartSpec()
    """Restarts of a failed live application: exponential backoff with a cap."""
    upgrade: UpgradeSpec = UpgradeSpec()
    """What a spec change does to the running job, and rollback."""
    snapshot_trigger_nonce: int | None = Field(default=None, ge=0, le=INT64_BOUND)
    """Change it to take a snapshot now (Flink's `savepointTriggerNonce`); needs
    checkpoints.externalLocation. The snapshot shows in `status.snapshots`."""
    initial_snapshot: SnapshotRef | None = None
    """Start a new job from this snapshot (Flink's `initialSavepointPath`): restored into the
    job's checkpoint before its first application. Ignored once the job has run."""
    external_calls: ExternalCalls | None = None
    """A limit on the calls the pipeline makes outside (`external_calls.limiter()`), for the
    whole job, live and in its Backfills: a backfill must not overwhelm a production service."""
    schema_registries: dict[Name, SchemaRegistrySpec] = Field(default={}, max_length=SCHEMA_REGISTRIES_MAX)
    """The schema registries the job's Avro topics are registered in, by name: a source with
    `live.valueFormat: avro` names one."""
    dead_letter_table: DeadLetterTableSpec | None = None
    """Records of the Avro sources that do not decode are appended here, each with its place and
    why, and the job goes on; without it the job stops at such a record (its place in one line on
    the job). The table is read and decoded a second time for it (one more Spark query per Avro
    source); a Rewind does not rewind it."""
    kafka_security: dict[Name, KafkaSecuritySpec] = Field(default={}, max_length=KAFKA_SECURITY_MAX)
    """How the job's Kafka clients reach secured listeners, by name: a source's `live.security`
    and a Kafka sink's `security` name one. The Secrets are mounted as files in the driver and
    every executor; the operator never reads them."""
    bootstrap: BootstrapSpec | None = None
    """Start from the Kafka sources' archives (their `history` tables) at `from`, then go on to
    Kafka where each archive ends, in one run (phase Bootstrapping, then Running)."""

    @model_validator(mode="after")
    def _security_declared(self) -> StreamingJobSpec:
        if any(n not in self.kafka_security for n in self.security_named):
            raise ValueError(UNKNOWN_SECURITY)
        named = [s.live.schema_registry for s in self.sources.values()] + [
            k.schema_registry for k in self.sinks.values()
        ]
        if any(n not in (None, *self.schema_registries) for n in named):
            raise ValueError(UNKNOWN_REGISTRY)
        if self.dead_letter_table is not None and not any(s.live.value_format == "avro" for s in self.sources.values()):
            raise ValueError(DEAD_LETTERS_NEED_AVRO)
        return self

    def registry_of(self, name: str | None) -> SchemaRegistrySpec | None:
        return None if name is None else self.schema_registries[name]

    def security_of(self, name: str | None) -> KafkaSecuritySpec | None:
        return None if name is None else self.kafka_security[name]

    @property
    def security_named(self) -> tuple[str, ...]:
        """The names of kafkaSecurity blocks its sources and sinks give, each once."""
        named = [s.live.security for s in self.sources.values()] + [k.security for k in self.sinks.values()]
        return tuple(dict.fromkeys(n for n in named if n is not None))

    @property
    def security_in_use(self) -> tuple[KafkaSecuritySpec, ...]:
        """The kafkaSecurity blocks a source or sink names (those its pods mount)."""
        return tuple(self.kafka_security[n] for n in self.security_named)

    @property
    def registries_in_use(self) -> tuple[SchemaRegistrySpec, ...]:
        """The schema registries a source or sink names, each once."""
        named = [s.live.schema_registry for s in self.sources.values()] + [
            k.schema_registry for k in self.sinks.values()
        ]
        return tuple(self.schema_registries[n] for n in dict.fromkeys(n for n in named if n is not None))

    @property
    def secrets_in_use(self) -> tuple[str, ...]:
        """The Secrets those Kafka blocks and registries name, each once: what the job's pods
        cannot start without (mounted as files), and what a rotation restarts the job for."""
        holders = (*self.security_in_use, *self.registries_in_use)
        return tuple(dict.fromkeys(name for holder in holders for name in holder.secrets))

    @model_validator(mode="after")
    def _bootstrap_reads_kafka(self) -> StreamingJobSpec:
        if self.bootstrap is not None and any(s.live.kind != "kafka" for s in self.sources.values()):
            raise ValueError(BOOTSTRAP_NEEDS_KAFKA)
        return self

    @model_validator(mode="after")
    def _blue_green_parts(self) -> StreamingJobSpec:
        if self.upgrade.mode != "blueGreen":
            return self
        for name, sink in self.sinks.items():
            if sink.kind != "iceberg":
                raise ValueError(
                    f"upgrade.mode blueGreen: sinks.{name} is a {sink.kind} sink: only an Iceberg sink can switch at "
                    "one event-time boundary in one snapshot (a topic's records or a directory's files cannot be "
                    "taken back); use upgrade.mode last-state or snapshot for this job"
                )
            if sink.time_column is None:
                raise ValueError(
                    f"upgrade.mode blueGreen: sinks.{name} needs timeColumn (the switch replaces its rows from one "
                    "event time on)"
                )
        for name, src in self.sources.items():
            if src.live.kind == "icebergLive" and (src.live.catalog, src.live.table) != (
                src.history.catalog,
                src.history.table,
            ):
                raise ValueError(
                    f"upgrade.mode blueGreen: sources.{name} is icebergLive with history {src.history.catalog}/"
                    f"{src.history.table} != live {src.live.catalog}/{src.live.table}: the new version reads the "
                    "table's history up to where the running one reads it live, which needs one table; set "
                    "history to the live table, or use upgrade.mode last-state or snapshot for this job"
                )
        return self

    @model_validator(mode="after")
    def _snapshots_have_a_place(self) -> StreamingJobSpec:
        if self.checkpoints.external_location is None:
            if self.upgrade.mode == "snapshot":
                raise ValueError("upgrade.mode snapshot needs checkpoints.externalLocation (where snapshots go)")
            if self.snapshot_trigger_nonce is not None:
                raise ValueError("snapshotTriggerNonce needs checkpoints.externalLocation (where snapshots go)")
        return self

    @model_validator(mode="after")
    def _pod_settings_fit(self) -> StreamingJobSpec:
        check_pod_settings_size(
            driver=self.driver,
            executor=self.executor,
            volumes=self.volumes,
            imagePullSecrets=self.image_pull_secrets,
        )
        return self


class StreamingJob(CRModel):
    """A live streaming job."""

    model_config = ConfigDict(extra="ignore")
    api_version: Literal["kappa.dev/v1alpha1"] = API_VERSION
    kind: Literal["StreamingJob"] = "StreamingJob"
    metadata: ObjectMeta
    spec: StreamingJobSpec
    status: StreamingJobStatus | None = None
