"""``Backfill`` (``bf``): re-run a StreamingJob's pipeline over its Iceberg history for a window,
aligned, into a branch; optionally validate and publish."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from kappa_operator.models.common import (
    API_VERSION,
    COLUMN_MAX,
    FILTER_MAX,
    INT32_MAX,
    INT64_BOUND,
    NAME_MAX,
    SOURCES_MAX,
    TABLE_MAX,
    URI_MAX,
    CRModel,
    DriftStr,
    DurationStr,
    Name,
    ObjectMeta,
    PodOverrides,
    StatusBase,
    TimestampStr,
    check_pod_settings_size,
    instant,
)
from kappa_operator.models.external_calls import BackfillExternalCalls, ExternalCallsStatus
from kappa_operator.models.sources import TABLE
from kappa_operator.models.streaming_job import RestartSpec
from spark_app.contract.config import DEFAULT_BATCH_ROW_BUDGET
from spark_app.contract.publish_defaults import DEFAULT_MIN_MATCH_RATIO


class JobRef(CRModel):
    name: str = Field(min_length=1, max_length=NAME_MAX)
    """Name of the StreamingJob (same namespace)."""


class BackfillWindow(CRModel):
    """The event-time window to rewrite, `[start, end)`."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "timestamp(self.end) > timestamp(self.start)", "message": "window.end must be after start"}
            ]
        }
    )
    start: TimestampStr
    """Inclusive start (RFC 3339)."""
    end: TimestampStr
    """Exclusive end (RFC 3339)."""
    warmup: DurationStr = "0s"
    """Read from start - warmup so state is warm; that output is not written. Refused when
    shorter than the pipeline's look-back (range-join bound, session gap, window length,
    dedup horizon) while there is history before it."""
    drain: DurationStr | None = None
    """Read this far past end so windows and sessions starting inside close and are written;
    that output is not written. Default: the pipeline's watermark delay + its look-ahead."""
    max_drain: DurationStr | None = None
    """Read on past end + drain, while results that start in the window are still open and
    history remains, at most this far past end. Default: no limit (the backfill is final
    whenever the history allows)."""
    allow_short_warmup: bool = False
    """Run even when warmup is shorter than the pipeline's look-back."""

    @model_validator(mode="after")
    def _ordered(self) -> BackfillWindow:
        if instant(self.end) <= instant(self.start):
            raise ValueError("window.end must be after start")
        return self


class SourceOverride(CRModel):
    """Per-source changes for this backfill."""

    catalog: str | None = Field(default=None, max_length=NAME_MAX)
    """Another catalog for the history table."""
    table: str | None = Field(default=None, pattern=TABLE, max_length=TABLE_MAX)
    """Another history table."""
    filter: str | None = Field(default=None, max_length=FILTER_MAX)
    """An extra row filter (pyiceberg syntax)."""
    snapshot_id: int | None = Field(default=None, ge=0, le=INT64_BOUND)
    """Read the history as of this snapshot (default: current at the start)."""


class BackfillAlignment(CRModel):
    """How the sources are kept in event-time order."""

    mode: Literal["auto", "aligned", "strict", "unordered", "bounded"] = "auto"
    """auto: bounded where its output is provably the aligned run's, else aligned
    (status.alignmentMode says which and why); aligned: within maxDrift of the group; strict:
    no drift; unordered: no alignment; bounded: one Spark batch query per sink over the whole
    read (batch speed; pipelines whose streaming results differ from their batch ones, such as
    outer joins or arbitrary state, are refused)."""
    group: str | None = Field(default=None, max_length=NAME_MAX, pattern=r"^[a-z0-9]([-_a-z0-9]*[a-z0-9])?$")
    """Alignment group shared with other backfills of this namespace (default: this backfill's
    name): lowercase letters, digits, '-' and '_'."""
    max_drift: DriftStr = "10m"
    """How far a source may read ahead of the slowest one (> 0)."""
    ordering_column: str | None = Field(default=None, max_length=COLUMN_MAX)
    """Column to order by (default: the job's)."""
    lateness: DurationStr | None = None
    """The pipeline's watermark delay, when it cannot be read from its plan."""
    allow_late_drops: bool = False
    """Run even if the lateness guard says rows would be dropped."""
    batch_row_budget: int = Field(default=DEFAULT_BATCH_ROW_BUDGET, ge=0, le=2**40)
    """Rows a micro-batch may take by merging admission rounds under the same drift bound
    (fewer batches on sparse history; output unchanged); 0: one round per batch."""


class BackfillOutput(CRModel):
    branch: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][-_.A-Za-z0-9]*$", max_length=COLUMN_MAX)
    """Iceberg branch the output goes to (default backfill-<name>); main keeps serving."""


class PublishSpec(CRModel):
    """Validate the branch against main over the window and replace main's rows."""

    enabled: bool = False
    """Publish after a successful run."""
    min_match_ratio: float = Field(default=DEFAULT_MIN_MATCH_RATIO, ge=0, le=1)
    """Refuse to publish below this match ratio against main (0: publish whatever the match)."""


class ReadLimit(CRModel):
    """A cap on the rate this backfill reads its history (one token bucket shared by all its sources, across
    micro-batches, in the source's admission): a backfill cannot saturate the object store
    the live jobs read. Alignment is unchanged: the cap only ever admits less, later."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.maxBytesPerSecond) || has(self.maxFilesPerSecond)",
                    "message": "set readLimit.maxBytesPerSecond or readLimit.maxFilesPerSecond (or remove readLimit)",
                }
            ]
        }
    )
    max_bytes_per_second: int | None = Field(default=None, ge=1024, le=INT64_BOUND)
    """Bytes of data files per second, averaged (at least 1024)."""
    max_files_per_second: float | None = Field(default=None, ge=0.001, le=100_000)
    """Data files (or file slices) opened per second, averaged."""

    @model_validator(mode="after")
    def _one(self) -> ReadLimit:
        if self.max_bytes_per_second is None and self.max_files_per_second is None:
            raise ValueError("set readLimit.maxBytesPerSecond or readLimit.maxFilesPerSecond (or remove readLimit)")
        return self


@dataclass(frozen=True)
class Immutable:
    """A spec field the API server keeps as created, in the form Kubernetes documents: a
    transition rule ``self == oldSelf`` on the field itself (the server runs it only when the
    field is in both the old and the new object, and skips it when the field did not change),
    plus, for an optional field, a rule on the spec that it is neither added nor removed. The
    value comparison stays out of that rule: one rule comparing both presence and value failed
    to evaluate on kube-apiserver 1.25 during a status patch of a deleted object, and the object
    kept its finalizer (issue 27)."""

    field: str
    optional: bool
    why: str

    @property
    def message(self) -> str:
        return f"spec.{self.field} is immutable: {self.why}"

    def on_field(self) -> dict[str, str]:
        return {"rule": "self == oldSelf", "message": self.message}

    def on_spec(self) -> dict[str, str] | None:
        if not self.optional:
            return None
        f = self.field  # the ternary form: 1.25's cost estimator prices has() == has() over budget
        return {"rule": f"has(oldSelf.{f}) ? has(self.{f}) : !has(self.{f})", "message": self.message}


IMMUTABLE = (
    Immutable("jobRef", False, "create a new Backfill for another job"),
    Immutable("window", False, "create a new Backfill for another window"),
    Immutable("sources", True, "create a new Backfill to read other sources"),
    Immutable("alignment", True, "create a new Backfill to align differently"),
    Immutable("output", True, "create a new Backfill to write elsewhere"),
    Immutable("image", True, "create a new Backfill to run another image"),
    Immutable("readLimit", True, "create a new Backfill to read at another rate"),
)
"""What a running backfill was launched with. Its application, checkpoint and branch belong to
these values: an edit would be silently ignored by the running application, or mix two
windows in one branch. Only ``publish`` (its driver publishes with it as submitted; a change before
the run completes publishes through a separate application), ``restartNonce`` (the
documented way to run it again), ``dryRun`` (false runs a planned backfill), ``priority``
(its place in the queue), the pods' ``driver`` and ``executor`` and ``externalCalls`` (read
at the next submission) may change."""


def _immutability(schema: dict[str, Any]) -> None:
    """Puts each field's rule next to the field, the presence rules on the spec."""
    for item in IMMUTABLE:
        prop = schema["properties"][item.field]
        prop["x-kubernetes-validations"] = [*prop.get("x-kubernetes-validations", []), item.on_field()]
    rules = [r for r in (item.on_spec() for item in IMMUTABLE) if r is not None]
    schema["x-kubernetes-validations"] = [*schema.get("x-kubernetes-validations", []), *rules]


class BackfillRestart(RestartSpec):
    """How the operator runs a backfill again whose application failed (its driver pod deleted
    or evicted, its node lost, the driver's error): a new application from the same checkpoint
    and branch, after a growing delay; nothing is read or written twice (each sink batch
    commits once, by its batch id). After ``maxAttempts`` restarts in a row it stays Failed,
    and ``restartNonce`` runs it again."""

    max_attempts: int | None = Field(default=3, ge=0, le=INT32_MAX)
    """Restarts before it stays Failed (0: none; unset: no limit)."""


class BackfillSpec(CRModel):
    model_config = ConfigDict(json_schema_extra=_immutability)

    job_ref: JobRef
    """The StreamingJob whose pipeline is re-run. Immutable."""
    window: BackfillWindow
    """The event-time window. Immutable: create a new Backfill for another window."""
    sources: dict[Name, SourceOverride] = Field(default={}, max_length=SOURCES_MAX)
    """Overrides by source name. Immutable."""
    alignment: BackfillAlignment = BackfillAlignment()
    """Event-time alignment. Immutable."""
    output: BackfillOutput = BackfillOutput()
    """Where output goes. Immutable."""
    publish: PublishSpec = PublishSpec()
    """Validation and publish, by the backfill's own application once its query has written the
    window. It may be changed until the run completes: settings other than the run was
    submitted with then publish through a separate application; but disabled while the run goes
    on, it does not stop that run's driver from publishing."""
    image: str | None = Field(default=None, min_length=1, max_length=URI_MAX)
    """Another Spark image (default: the job's). Immutable."""
    driver: PodOverrides | None = None
    """The backfill's driver: the fields set here replace its StreamingJob's `driver` (more
    memory for a wide window, another node pool). Read when an application is submitted: a
    change reaches a running backfill with its next restart (`restartNonce`), from its
    checkpoint (no CEL immutability rule: the pod objects' size is unbounded, so the API
    server cannot cost one)."""
    executor: PodOverrides | None = None
    """The backfill's executors: the fields set here replace its StreamingJob's `executor`
    (more instances to catch up faster, spot nodes). Read when an application is submitted,
    as `driver`."""
    restart_nonce: int = Field(default=0, ge=0, le=INT64_BOUND)
    """Change it to run a failed backfill again from its checkpoint and branch (as Flink's
    restartNonce): the operator deletes the old application and submits a new one."""
    restart: BackfillRestart = BackfillRestart()
    """When a failed application is run again by itself (read at each failure)."""
    dry_run: bool = False
    """Plan only: a short plan application computes what the backfill will read and do (from
    Iceberg metadata, never rows) into status.plan, and it stops in phase Planned. Set it to
    false to run it."""
    priority: int = Field(default=0, ge=-1000, le=1000)
    """Its place among queued backfills (backfills.maxConcurrent): higher starts first, then
    older. Running backfills are never preempted."""
    read_limit: ReadLimit | None = None
    """Cap on the rate it reads history. Immutable."""
    external_calls: BackfillExternalCalls | None = None
    """A limit on the calls its pipeline makes outside (default: its job's
    `externalCalls.backfillRatePerSecond`, else `ratePerSecond`)."""

    @model_validator(mode="after")
    def _pod_settings_fit(self) -> BackfillSpec:
        check_pod_settings_size(driver=self.driver, executor=self.executor)
        return self


class PublishedTable(CRModel):
    """One sink table's validation and publish."""

    table: str
    """The table (`namespace.table`)."""
    match_ratio: float
    """Rows matching on the key / rows in either side, over the window."""
    rows_removed: int
    """Rows of main's window replaced."""
    rows_added: int
    """Rows the branch put in main's window."""
    snapshot_id: int | None = None
    """The one snapshot that replaced main's window (none: main already equalled the branch)."""
    main_rows: int | None = None
    """Rows of main in the window, before the publish."""
    branch_rows: int | None = None
    """Rows of the branch in the window."""
    matched: int | None = None
    """Rows equal on both sides (on the sink's key)."""
    differing_keys: list[str] = []
    """Up to 10 keys (JSON) found on one side only or with other values: where to look first."""


class SourcePlanStatus(CRModel):
    """One source's share of the plan (from its manifests)."""

    source: str
    table: str
    files: int
    bytes: int
    rows: int
    splits: int
    max_split_span: str
    """The largest event-time span of one split (e.g. 1h0m0s)."""
    out_of_order: str
    """How far behind the newest event time read an event can come, in the read order."""
    has_statistics: bool


class PlanStatus(CRModel):
    """What the backfill will read and do, planned from Iceberg metadata (spec.dryRun, or
    ``kappa plan``), with an ETA from this cluster's finished backfills."""

    files: int
    bytes: int
    rows: int
    """Rows the backfill reads (window + warm-up)."""
    expected_batches: int
    """Micro-batches the admission will make."""
    peak_state_rows: int
    """Estimated peak rows in the pipeline's state."""
    lateness_required: str
    """The watermark delay alignment.maxDrift needs (maxDrift + the largest split span)."""
    pipeline_lateness: str | None = None
    """The pipeline's watermark delay (none: no watermark)."""
    lateness_ok: bool
    """The lateness guard's verdict at start, computed now."""
    lateness_message: str
    """The guard's message, with the fix when it fails."""
    max_drift_fitting: str | None = None
    """The largest maxDrift the pipeline's lateness allows."""
    recommended_warmup: str | None = None
    """The pipeline's state horizon: warm-up that makes state at the window's start complete."""
    eta: str | None = None
    """Expected duration of the run (none: no calibration yet)."""
    eta_basis: str
    """Which finished backfills the ETA's throughput comes from, or why there is none."""
    warnings: list[str] = []
    sources: list[SourcePlanStatus] = []
    planned_at: str
    error: str | None = None
    """The plan application failed: why (the backfill can still run: the guard checks at start)."""
    mode: str | None = None
    """The alignment mode the run would run in (alignment.mode auto resolved)."""
    mode_reason: str | None = None
    """Why that mode: as set in the spec, or what auto proved or found."""


class Calibration(CRModel):
    """A finished backfill's measured throughput: what the next plans' ETAs are made from."""

    rows: int
    seconds: float
    cores: int
    """Executor cores (instances x cores)."""
    rows_per_second_per_core: float
    batches: int | None = None
    """Micro-batches that read rows (from its driver's run report, as the next four)."""
    seconds_per_batch: float | None = None
    """What a micro-batch cost whatever it carried."""
    core_microseconds_per_row: float | None = None
    """What a row cost one executor core."""
    seconds_outside_batches: float | None = None
    """Submission, query start, planning and publish."""
    mode: str | None = None
    """The alignment mode it ran in (ETAs take costs from runs of the planned mode)."""


class BackfillStatus(StatusBase):
    """What the operator observed."""

    application_name: str | None = None
    """The SparkApplication running the backfill."""
    application_state: str | None = None
    """Its state."""
    publish_application_name: str | None = None
    """The separate SparkApplication validating and publishing the branch (phase Publishing:
    only where the backfill's own application left no publish report of its run)."""
    publish_application_state: str | None = None
    """Its state."""
    checkpoint: str | None = None
    """The backfill's own (fresh) checkpoint location."""
    branch: str | None = None
    """The branch written."""
    global_watermark: str | None = None
    """The alignment group's global watermark."""
    progress: str | None = None
    """Global watermark between window start and end, e.g. 42%."""
    alignment_lag: str | None = None
    """Largest member watermark minus the global watermark."""
    alignment_held: str | None = Field(default=None, max_length=2048)
    """Why the group admits nothing now: the members it waits for to report (after a
    coordinator restart or an operator failover every source holds at its last bound until all
    have reported again)."""
    eta: str | None = None
    """Estimated time to the end of the window."""
    match_ratio: float | None = None
    """Validation result against main (the lowest over the published tables)."""
    restart_nonce: int | None = None
    """The spec.restartNonce of the last submission."""
    restarts: int = 0
    """Restarts after a failed application since the last submission by restartNonce."""
    next_restart_at: str | None = None
    """When the failed application is run again (spec.restart), while it backs off."""
    published: list[PublishedTable] = []
    """What publish did, per Iceberg sink table."""
    job_deleted: bool | None = None
    """True once the StreamingJob was deleted after this was submitted: it finishes with the
    copy of the job kept at submission, and a restartNonce bump resumes from that copy."""
    final: bool | None = None
    """False when the run could not close every result of the window (the history does not
    reach end + drain yet, or sessions were still open): the message says which."""
    plan: PlanStatus | None = None
    """The plan (spec.dryRun): what it will read, batches, state, lateness verdict, ETA."""
    plan_application_name: str | None = None
    """The SparkApplication computing the plan (phase Planning)."""
    plan_application_state: str | None = None
    queue_position: int | None = None
    """Phase Queued: 1-based place among the waiting backfills (priority, then age)."""
    queued_since: str | None = None
    """When it started waiting (the wait time on the dashboard)."""
    started_at: str | None = None
    """When its application was submitted (admitted)."""
    read_rate: str | None = None
    """How fast its sources read now (over the last minute or two; from the coordinator)."""
    read_bytes_per_second: float | None = None
    """The same, for machines (``spec.readLimit.maxBytesPerSecond`` caps it)."""
    read_bytes: int | None = None
    """Bytes its admitted splits have read so far (data files or their row groups)."""
    read_files: int | None = None
    """File opens of its admitted splits so far."""
    calibration: Calibration | None = None
    """Succeeded after a plan: its measured throughput (also kept for the namespace's next plans)."""
    alignment_mode: str | None = None
    """Succeeded: the alignment mode its driver ran (alignment.mode auto resolved)."""
    alignment_mode_reason: str | None = None
    """Why that mode: as set in the spec, or what auto proved (bounded) or found (aligned)."""
    external_calls: ExternalCallsStatus | None = None
    """The limit on its pipeline's external calls in force and the calls made (from its driver)."""


class Backfill(CRModel):
    """A backfill of a StreamingJob."""

    model_config = ConfigDict(extra="ignore")
    api_version: Literal["kappa.dev/v1alpha1"] = API_VERSION
    kind: Literal["Backfill"] = "Backfill"
    metadata: ObjectMeta
    spec: BackfillSpec
    status: BackfillStatus | None = None
