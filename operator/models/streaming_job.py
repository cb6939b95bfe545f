"""``StreamingJob`` (``sj``): a live PySpark pipeline, and what its backfills and rewinds reuse."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal, Self

from pydantic import ConfigDict, Field, model_validator

from kappa_operator.models.common import (
    API_VERSION,
    ARGS_MAX,
    CATALOG_PROPERTIES_MAX,
    CATALOGS_MAX,
    COLUMN_MAX,
    COLUMNS_MAX,
    FILTER_MAX,
    HOSTS_MAX,
    INT32_MAX,
    INT64_BOUND,
    KEY_COLUMNS_MAX,
    NAME_MAX,
    PARTITION_FIELDS_MAX,
    SINKS_MAX,
    SOURCES_MAX,
    SPARK_CONF_MAX,
    TABLE_MAX,
    URI_MAX,
    ArgName,
    Column,
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
    StatusBase,
    TimestampStr,
    check_pod_settings_size,
    exactly_one,
    rfc3339,
)
from kappa_operator.models.external_calls import ExternalCalls, ExternalCallsStatus
from kappa_operator.models.packaging import Dependencies, PipelineFrom
from spark_app.contract.config import RestorePoint

CatalogProperties = Annotated[dict[PropertyKey, Setting], Field(max_length=CATALOG_PROPERTIES_MAX)]
ENTRY_POINT = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"
TABLE = r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$"


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
    topic: str | None = Field(default=None, max_length=249)
    """Kafka topic (kafka; Kafka allows at most 249 characters)."""
    topic_pattern: str | None = Field(default=None, max_length=249)
    """Kafka: every topic matching this Java regex, those created later included (instead of
    topic)."""
    value_schema: str | None = Field(default=None, max_length=FILTER_MAX)
    """Kafka: the JSON values' schema as Spark DDL (`id STRING, event_ts TIMESTAMP`). Default:
    the history table's, so the pipeline gets the same columns live and in a backfill. An
    archive job, which creates that table, declares it here."""
    max_offsets_per_trigger: int | None = Field(default=None, ge=1, le=INT64_BOUND)
    """Kafka: at most this many records per micro-batch (Spark's `maxOffsetsPerTrigger`)."""
    fail_on_data_loss: bool = True
    """Kafka: fail the query when offsets it must read were deleted by retention (Spark's
    `failOnDataLoss`); false skips them (a gap in the output, said only in the driver's log)."""

    @model_validator(mode="after")
    def _complete(self) -> LiveSource:
        if self.kind == "icebergLive" and self.table is None:
            raise ValueError("icebergLive needs table")
        one_topic = (self.topic is None) != (self.topic_pattern is None)
        if self.kind == "kafka" and (self.bootstrap_servers is None or not one_topic):
            raise ValueError("kafka needs bootstrapServers and one of topic or topicPattern")
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
        return self


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

    mode: Literal["stateless", "last-state", "snapshot"] = "last-state"
    """`last-state`: restart from the job's checkpoint (state kept). `stateless`: start on an
    empty checkpoint (state dropped; sources start at startingPosition). `snapshot`: take a
    snapshot first (needs checkpoints.externalLocation), then upgrade as last-state; a
    rollback restores that snapshot."""
    rollback: bool = False
    """Run the last spec that reached RUNNING again when an upgraded application fails or
    does not run within readyTimeout (the edited spec stays as written; status says so)."""
    ready_timeout: PositiveDurationStr = "5m"
    """How long an upgraded application has to reach RUNNING."""
    snapshot_timeout: PositiveDurationStr = "10m"
    """How long the snapshot before an upgrade may take (mode snapshot); past it the upgrade
    is not made and the job keeps running the previous spec."""


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
                    "rule": "!has(self.snapshotTriggerNonce) || has(self.checkpoints.externalLocation)",
                    "message": "snapshotTriggerNonce needs checkpoints.externalLocation (where snapshots go)",
                },
                {
                    "rule": "!has(self.bootstrap) || self.sources.all(k, self.sources[k].live.kind == 'kafka')",
                    "message": BOOTSTRAP_NEEDS_KAFKA,
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
    bootstrap: BootstrapSpec | None = None
    """Start from the Kafka sources' archives (their `history` tables) at `from`, then go on to
    Kafka where each archive ends, in one run (phase Bootstrapping, then Running)."""

    @model_validator(mode="after")
    def _bootstrap_reads_kafka(self) -> StreamingJobSpec:
        if self.bootstrap is not None and any(s.live.kind != "kafka" for s in self.sources.values()):
            raise ValueError(BOOTSTRAP_NEEDS_KAFKA)
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


class RestorePointStatus(CRModel):
    """One restore point as the custom resources show it: an externalized snapshot of one sink's
    query (``status.checkpoints``), the one a new job starts from (``status.initialRestore``),
    the one a Rewind chose (``status.restores``, which adds its reset). The status form of the
    contract's ``RestorePoint``, made by ``of``."""

    sink: str
    """The query (one per sink)."""
    batch_id: int
    """The snapshot's last committed micro-batch: the query resumes at batch_id + 1."""
    committed_at: str
    """When that batch was committed (RFC 3339, microseconds)."""
    query_id: str
    """The query the snapshot is of (a Rewind undoes its batches after batch_id)."""
    watermark: str | None = None
    """The query's event-time watermark at that batch (RFC 3339; unset: none yet)."""

    @classmethod
    def of(cls, point: RestorePoint) -> Self:
        """``point`` in status: its times in RFC 3339, a watermark of 0 or less (none yet) unset."""
        assert point.committed_at is not None, "a listed snapshot has its commit time"
        wm = point.watermark_ms
        return cls(
            sink=point.sink,
            batch_id=point.batch_id,
            committed_at=rfc3339(point.committed_at, micros=True),
            query_id=point.query_id,
            watermark=None if wm is None or wm <= 0 else rfc3339(datetime.fromtimestamp(wm / 1000, UTC)),
        )


class ListedRestorePoint(RestorePointStatus):
    """A restore point as ``status.checkpoints`` lists it: the same form, but its query may be
    unset, in points listed by an operator older than the one form (rewritten at the next
    listing), which an upgraded operator must still read."""

    query_id: str | None = None  # type: ignore[assignment]
    """The query the snapshot is of (unset only in points an older operator listed)."""


class PartitionLag(CRModel):
    """One partition's consumer lag."""

    topic: str
    partition: int
    lag: int
    """Records after the next offset the query reads, up to the newest the broker had."""


class KafkaLag(CRModel):
    """A Kafka job's consumer lag (from its driver's query progress)."""

    total: int
    """Over every partition of every sink query."""
    at: str
    """When the driver measured it (its last micro-batch)."""
    partitions: list[PartitionLag] = []
    """The partitions furthest behind first (at most 20; Prometheus has them all)."""


class QueryProgress(CRModel):
    """One sink query's last micro-batch, as its driver reported it."""

    sink: str
    batch_id: int | None = None
    """The last batch (unset: none yet, the query only idled)."""
    at: str
    """When the driver saw that batch (RFC 3339)."""
    last_heartbeat: str | None = None
    """The last sign of life: a batch or an idle event (RFC 3339)."""
    input_rows_per_second: float = 0.0
    processed_rows_per_second: float = 0.0
    batch_duration_ms: int = 0
    state_rows: int = 0
    """Rows in the query's state stores."""
    watermark: str | None = None
    """Its event-time watermark (RFC 3339)."""


class TakenSnapshot(CRModel):
    """A snapshot the operator asked for (a trigger nonce, or before an upgrade)."""

    reason: Literal["trigger", "upgrade", "nodeDrain"]
    nonce: str
    """What asked for it: `spec.snapshotTriggerNonce`, `upgrade-<config hash>`, or
    `node-drain-<driver pod uid>` (its node drained: the job moves off it)."""
    requested_at: str
    taken_at: str | None = None
    """When the last sink's snapshot was committed (unset: not yet taken)."""
    batch_ids: dict[str, int] = {}
    """Sink -> the micro-batch of its snapshot: an `initialSnapshot.batchId` or a Rewind's
    `target.batchId` names it."""
    location: str | None = None
    """The externalLocation it was written to (an `initialSnapshot.location`)."""
    error: str | None = None


class UpgradeStatus(CRModel):
    """The last spec change of a running job (recorded before any of its steps)."""

    mode: str
    """spec.upgrade.mode when it started."""
    from_hash: str | None = None
    """The config the application ran before."""
    to_hash: str
    """The config of the edited spec."""
    step: Literal["Snapshotting", "Starting", "SnapshotFailed", "RolledBack"]
    """`Snapshotting`: waiting for the snapshot before the upgrade (the previous spec runs);
    `Starting`: the new application is started, not yet RUNNING (a rollback may follow);
    `SnapshotFailed`: no snapshot within snapshotTimeout, the previous spec keeps running;
    `RolledBack`: the new spec failed, the last stable one runs again."""
    started_at: str
    snapshot_nonce: str | None = None
    """The snapshot taken before it (mode snapshot): `status.snapshots[].nonce`."""


class NodeDrainStatus(CRModel):
    """The driver's node drained (cordoned): the job moves off it, a snapshot first."""

    node: str
    """The cordoned node the driver ran on."""
    pod: str
    """The driver pod that ran there."""
    step: Literal["Snapshotting", "Moving"]
    """`Snapshotting`: the driver takes a snapshot, still running (its PodDisruptionBudget holds
    the drain's eviction meanwhile); `Moving`: the application was deleted and runs again from its
    checkpoint on another node (cleared once it runs)."""
    started_at: str
    snapshot_nonce: str | None = None
    """The snapshot taken before it moved: `status.snapshots[].nonce` (unset: no
    spec.checkpoints.externalLocation, so none could be taken)."""


class SwitchOffset(CRModel):
    """Where a topic's partition takes over from its archive (``status.bootstrap.offsets``)."""

    source: str
    topic: str
    partition: int
    offset: int | None = None
    """The first offset read from Kafka (None: the partition's earliest; the archive had none of it)."""


class BootstrapStatus(CRModel):
    """The bootstrap as the driver recorded it (``_kappa/bootstrap.json`` by the checkpoint)."""

    start: str = Field(alias="from")
    """The event time the history was read from."""
    decided_at: str
    """When the archives' snapshots and the switch offsets were chosen."""
    archive_end: str | None = None
    """The newest event time in the archives read."""
    switched_at: str | None = None
    """When the archives were read and Kafka took over (unset: still reading the archives)."""
    offsets: list[SwitchOffset] = []
    """Where each partition takes over (at most 64 shown)."""


class StreamingJobStatus(StatusBase):
    """What the operator observed."""

    application_state: str | None = None
    """The SparkApplication's state (RUNNING, FAILED, ...)."""
    application_name: str | None = None
    """The SparkApplication this job runs as."""
    config_hash: str | None = None
    """Hash of the rendered JobConfig the application runs: a spec change restarts it."""
    last_checkpoint: str | None = None
    """Commit time of the newest restorable snapshot."""
    checkpoints: list[ListedRestorePoint] = []
    """The newest restorable snapshots (a Rewind picks one)."""
    checkpoint_location: str | None = None
    """The checkpoint the application runs from (a Rewind moves it to a restored copy)."""
    last_snapshot_at: str | None = None
    """When the operator last listed the restore points (the interval runs from it)."""
    snapshot_error: str | None = None
    """Why the driver's snapshot copies fail now, per sink (unset once one succeeds): the
    restore points stop advancing until it is fixed."""
    watermark: str | None = None
    """Latest event-time watermark reported by the job."""
    kafka_lag: KafkaLag | None = None
    """Records in the job's Kafka topics not read yet, as its driver last reported (kafka)."""
    progress: list[QueryProgress] = []
    """Each sink query's last micro-batch: rates, duration, state, watermark."""
    last_progress_at: str | None = None
    """The newest sign of life of any query (a batch or an idle event)."""
    spark_ui: str | None = None
    """The driver's Spark UI (ingress address, or the in-cluster service)."""
    restarts: int = 0
    """Restarts in the current run of failures (a failure after the job ran
    spec.restart.resetAfter counts as the first again)."""
    next_restart_at: str | None = None
    """When the failed application is restarted (phase BackingOff)."""
    snapshots: list[TakenSnapshot] = []
    """Snapshots asked for by trigger or upgrade, newest last (at most 10)."""
    snapshot_trigger_nonce: int | None = None
    """The last spec.snapshotTriggerNonce acted on."""
    upgrade: UpgradeStatus | None = None
    """The spec change in progress (unset: none)."""
    node_drain: NodeDrainStatus | None = None
    """The driver's node being drained, and the job's move off it (unset: none)."""
    last_stable_hash: str | None = None
    """The config of the last spec whose application reached RUNNING."""
    last_stable_spec: str | None = None
    """That spec (JSON): what a rollback runs."""
    rolled_back_generation: int | None = None
    """The metadata.generation whose spec failed and was rolled back: while the spec stays at
    it, the job runs lastStableSpec (an edit makes a new upgrade)."""
    initial_restore: list[RestorePointStatus] = []
    """The snapshots spec.initialSnapshot chose, per sink (chosen once)."""
    initial_snapshot_restored: bool | None = None
    """spec.initialSnapshot was restored into the checkpoint (done once, before the first
    application)."""
    external_calls: ExternalCallsStatus | None = None
    """spec.externalCalls: the limit the running application enforces and the calls it made."""
    bootstrap: BootstrapStatus | None = None
    """spec.bootstrap: the archives read, and where and when Kafka took over."""


class StreamingJob(CRModel):
    """A live streaming job."""

    model_config = ConfigDict(extra="ignore")
    api_version: Literal["kappa.dev/v1alpha1"] = API_VERSION
    kind: Literal["StreamingJob"] = "StreamingJob"
    metadata: ObjectMeta
    spec: StreamingJobSpec
    status: StreamingJobStatus | None = None
