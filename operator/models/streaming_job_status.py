"""A StreamingJob's status: what its driver reports (progress, Kafka lag), its restore
points and snapshots, and the steps in flight (an upgrade, a drain, a bootstrap's switch).
Written by the operator only, through the status subresource."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal, Self

from pydantic import Field

from kappa_operator.models.common import (
    CRModel,
    StatusBase,
    rfc3339,
)
from kappa_operator.models.external_calls import ExternalCallsStatus
from spark_app.contract.config import RestorePoint


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


UpgradeStep = Literal[
    "Snapshotting",
    "Starting",
    "SnapshotFailed",
    "RolledBack",
    "GreenStarting",
    "CatchingUp",
    "Comparing",
    "StoppingBlue",
    "Draining",
    "Switching",
    "Promoting",
    "Discarding",
    "GreenRemoved",
    "Refused",
]
BEFORE_THE_SWITCH = ("GreenStarting", "CatchingUp", "Comparing")
"""The blueGreen steps where blue still writes main alone: the upgrade can be given up (green
removed) with nothing to undo."""

SWITCH_UNDER_WAY = ("StoppingBlue", "Draining", "Switching", "Promoting")
"""The blueGreen steps from blue's stop to green running as the job: main is being handed over
and only forward is safe (a suspend or a Rewind waits for them)."""

BLUE_GREEN_ACTIVE = (*BEFORE_THE_SWITCH, *SWITCH_UNDER_WAY, "Discarding")
"""The blueGreen steps in flight: the upgrade's dispatch decides the job while one is recorded."""


class UpgradeTable(CRModel):
    """One sink table in a blueGreen upgrade: the comparison of blue's rows (main) with
    green's (its branch) over the compared window, and what the switch did."""

    table: str
    match_ratio: float | None = None
    main_rows: int | None = None
    branch_rows: int | None = None
    matched: int | None = None
    differing_keys: list[str] = []
    """Up to 10 keys (JSON) found on one side only or with other values."""
    new_columns: list[str] = []
    """Columns the new version added to the table (null in the old version's rows; not compared)."""
    rows_removed: int | None = None
    """The switch: blue's rows from the boundary on, removed from main."""
    rows_added: int | None = None
    """The switch: green's rows from the boundary on, added to main."""
    snapshot_id: int | None = None
    """The switch's one snapshot on main."""


class UpgradeStepAt(CRModel):
    step: str
    at: str


class UpgradeStatus(CRModel):
    """The last spec change of a running job (recorded before any of its steps)."""

    mode: str
    """spec.upgrade.mode when it started."""
    from_hash: str | None = None
    """The config the application ran before."""
    to_hash: str
    """The config of the edited spec."""
    step: UpgradeStep
    """`Snapshotting`: waiting for the snapshot before the upgrade (the previous spec runs);
    `Starting`: the new application is started, not yet RUNNING (a rollback may follow);
    `SnapshotFailed`: no snapshot within snapshotTimeout, the previous spec keeps running;
    `RolledBack`: the new spec failed, the last stable one runs again. blueGreen:
    `GreenStarting` (the new version's application created), `CatchingUp` (it reads history,
    then trails the running version), `Comparing`, `StoppingBlue`, `Draining` (green reaches
    where blue stopped), `Switching` (main cut at the boundary), `Promoting` (green's spec runs
    as the job on green's checkpoint), `Discarding` (green and its branches removed; blue runs),
    `GreenRemoved` and `Refused` (ended: the running version goes on; `reason` says why)."""
    started_at: str
    snapshot_nonce: str | None = None
    """The snapshot taken before it (mode snapshot): `status.snapshots[].nonce`."""
    generation: int | None = None
    """blueGreen: the generation green runs (its application, checkpoint and branch are named by it)."""
    branch: str | None = None
    """blueGreen: green's branch of every sink table."""
    green_checkpoint: str | None = None
    blue_checkpoint: str | None = None
    history_from: str | None = None
    """blueGreen: the event time green reads the sources' history from."""
    green_watermark: str | None = None
    blue_watermark: str | None = None
    """blueGreen: the lowest watermark over the sinks of each version, last looked at."""
    compare_start: str | None = None
    compare_end: str | None = None
    """blueGreen: the event-time window the comparison read."""
    boundary: str | None = None
    """blueGreen: the switch's event time: main keeps blue's rows before it, green's from it on."""
    tables: list[UpgradeTable] = []
    reason: str | None = None
    """blueGreen, GreenRemoved or Refused: why (the running version goes on)."""
    step_attempts: int = 0
    """blueGreen: runs of the current step's application that failed (each step is safe to repeat)."""
    held: str | None = None
    """blueGreen: a suspend or a Rewind that waits for the switch under way (said once)."""
    retry_at: str | None = None
    """blueGreen: when a failed step application is run again (a backoff, so a short outage of
    the catalog or the store does not use up the step's attempts in seconds)."""
    green_spec: str | None = None
    """blueGreen: the spec green runs (JSON), recorded at its start. From blue's stop until green
    runs as the job, the job runs this spec whatever the spec says meanwhile: an edit then
    waits, and upgrades from it once it runs (v3's code never starts on v2's checkpoint)."""
    steps: list[UpgradeStepAt] = []
    """blueGreen: each step with the time it was entered."""


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
    missing_secrets: list[Annotated[str, Field(max_length=253)]] | None = Field(default=None, max_length=6)
    """The Secrets spec.kafkaSecurity names that do not exist (unset: none): the job waits for
    them and starts once they do."""
    secret_versions: dict[Annotated[str, Field(max_length=253)], Annotated[str, Field(max_length=64)]] | None = Field(
        default=None, max_length=6
    )
    """The ``resourceVersion`` of each Secret spec.kafkaSecurity names, as the running
    application mounted them: a Secret changed since restarts the job from its checkpoint."""
