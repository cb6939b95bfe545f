"""JobConfig: the contract between the operator and the Spark app.

The operator renders one JobConfig per run (a live StreamingJob or a Backfill) and mounts it
into the driver; ``python -m spark_app --config job.json`` reads it. Everything a run needs
to be reproducible is here, so a restart from the checkpoint sees the same plan.

Each named source carries the *candidate* selected for this run (the Netflix "dynamic
source"): ``icebergLive`` (incremental appends), ``icebergBackfill`` (history of a window,
event-time ordered and aligned) or ``kafka`` (passthrough to Spark's Kafka source). The
pipeline sees the same DataFrame schema whichever candidate was chosen.

Field names are camelCase on the wire (as in the CRs) and snake_case in Python.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from spark_app.contract.base import Duration, KappaModel, Timestamp
from spark_app.contract.blue_green import GreenConfig
from spark_app.contract.dead_letters import DeadLetterConfig, output_name, source_of
from spark_app.contract.durations import check_positive, format_duration
from spark_app.contract.errors import ConfigError
from spark_app.contract.publish_defaults import DEFAULT_MIN_MATCH_RATIO
from spark_app.contract.sinks import IcebergSink, ParquetSink, SinkConfig
from spark_app.contract.sources import (
    IcebergBackfillSource,
    IcebergLiveSource,
    IcebergSourceBase,
    KafkaSource,
    ReadRateConfig,
    SourceConfig,
)


class ExternalCallsConfig(KappaModel):
    """A job-wide limit on the calls the pipeline makes outside (``spark_app.external_calls``):
    a backfill replaying history fast must not overwhelm a production service."""

    rate_per_second: float | None = Field(default=None, gt=0)
    """Calls per second for the whole run, across every executor (None: no limit, no server)."""


class CatalogConfig(KappaModel):
    """pyiceberg catalog properties (passed to `load_catalog`), e.g. type sql, uri, warehouse."""

    model_config = ConfigDict(frozen=True, extra="allow", alias_generator=None)
    type: str = "sql"

    def properties(self) -> dict[str, str]:
        return {k: str(v) for k, v in self.model_dump().items()}


class Window(KappaModel):
    """Backfill window `[start, end)` on the ordering column, with optional warm-up."""

    start: Timestamp
    end: Timestamp
    warmup: Duration = timedelta(0)
    """Read from `start - warmup` so stateful operators are warm; that output is suppressed.
    Refused when shorter than the pipeline's look-back (range-join bound, session gap, window
    length, dedup horizon) while there is history before it; see `allowShortWarmup`."""
    drain: Duration | None = None
    """Read this far past `end` so windows and sessions that start inside the window close and
    are emitted; that output is suppressed. Default: the pipeline's watermark delay + its
    look-ahead (window length, session gap) when it has an operator that emits on the
    watermark, else 0."""
    max_drain: Duration | None = None
    """Keep reading past `end + drain` while results that start in the window are still open in
    state (a session that goes on past the drain) and the history goes on, at most this far
    past `end`. None: no limit, so a backfill is final whenever the history allows."""
    allow_short_warmup: bool = False
    """Start even when `warmup` is shorter than the pipeline's look-back (results at the start
    of the window may differ from live)."""

    @model_validator(mode="after")
    def _ordered(self) -> Window:
        if self.end <= self.start:
            raise ValueError(f"end ({self.end.isoformat()}) must be after start ({self.start.isoformat()})")
        if self.warmup < timedelta(0):
            raise ValueError("warmup must not be negative")
        if self.max_drain is not None and self.drain is not None and self.max_drain < self.drain:
            raise ValueError(
                f"maxDrain ({format_duration(self.max_drain)}) must be at least drain ({format_duration(self.drain)})"
            )
        return self

    @property
    def read_start(self) -> datetime:
        return self.start - self.warmup

    @property
    def read_end(self) -> datetime:
        """Where reading stops: the end plus the drain (resolved by the runtime before reading)."""
        return self.end + (self.drain or timedelta(0))


DEFAULT_BATCH_ROW_BUDGET = 30_000


"""About the rows whose processing costs what a micro-batch's fixed cost does (~0.6-0.9 s at
~20 us per row on 2 cores, bench/RESULTS.md): batches smaller than that are mostly overhead."""


NO_DRIFT_HINT = " (use mode: strict for no drift)"


class AlignmentConfig(KappaModel):
    """Event-time alignment of the sources of a backfill (docs/concepts.md: "Alignment")."""

    mode: Literal["auto", "aligned", "strict", "unordered", "bounded"] = "auto"
    """`auto`: `bounded` where its output is provably the aligned run's, else `aligned` (the
    run report and status say which and why); `aligned`: admit a split only if lower <= global
    watermark + maxDrift; `strict`: the same with no drift; `unordered`: no coordination
    (stateless pipelines, top throughput); `bounded`: the pipeline over batch reads of the
    whole read, one Spark batch query per sink (batch speed, no state store; windows and
    sessions under the aligned run's open/written rule; pipelines whose streaming semantics
    differ from their batch ones are refused: ``spark_app/apps/query_shape.py``)."""
    group: str | None = None
    """Alignment group; default: the job name. Groups can span queries and jobs."""
    max_drift: Duration = timedelta(minutes=10)
    ordering_column: str = "event_ts"
    """Event time, or an ingestion-time column such as `__metadata__.ingestion_ts`."""
    lateness: Duration | None = None
    """The pipeline's watermark delay, when it cannot be read from the query plan."""
    allow_late_drops: bool = False
    """Start even when lateness < maxDrift + largest split span (rows may be dropped)."""
    state_dir: str | None = None
    """Local alignment state shared by the source processes on one driver; default: a
    directory under the system temp dir keyed by group and checkpoint location."""
    batch_row_budget: int = Field(default=DEFAULT_BATCH_ROW_BUDGET, ge=0, le=2**40)
    """Rows a micro-batch may take by merging admission rounds: while the rows admitted stay
    within it, the batch takes the next round under the same drift bound. Sparse history then
    makes a few batches instead of one per maxDrift of event time; output and the lateness
    needed are unchanged, the rows in state during a batch grow by at most this. A round larger
    than the budget still goes in whole; 0: one round per batch. Off under readRate."""

    @field_validator("max_drift", mode="before")
    @classmethod
    def _positive(cls, value: Any) -> Any:
        """Checked on the text as written, so the message is the Backfill's word for word."""
        check_positive(format_duration(value) if isinstance(value, timedelta) else value, NO_DRIFT_HINT)
        return value

    @property
    def coordinated(self) -> bool:
        """Whether its sources are admitted in event-time order (aligned, strict; auto until
        the run has chosen, so a coordinator group is made for it)."""
        return self.mode in ("aligned", "strict", "auto")

    @property
    def effective_drift(self) -> timedelta:
        return timedelta(0) if self.mode == "strict" else self.max_drift


class CoordinatorConfig(KappaModel):
    url: str = Field(pattern=r"^https?://")
    token: str | None = None
    timeout: Duration = timedelta(minutes=5)


class TriggerConfig(KappaModel):
    kind: Literal["processingTime", "availableNow"]
    interval: Duration = timedelta(seconds=10)
    """processingTime only: also the poll interval of live Iceberg sources."""


class PublishConfig(KappaModel):
    """Validate a backfill's branches against main and publish its window
    (``python -m spark_app publish``, after the backfill's query has ended)."""

    min_match_ratio: float = Field(default=DEFAULT_MIN_MATCH_RATIO, ge=0, le=1)
    """Refuse (main unchanged) below this match ratio; 0 publishes whatever the match."""
    tag: str | None = None
    """Recorded on the publish snapshot (``kappa.backfill``): a resumed publish that finds main
    already equal to the branch reports what its earlier run did."""
    report: str | None = None
    """Where the report goes. Default: ``<checkpoint>/_kappa/publish-report.json``."""


class RestorePoint(KappaModel):
    """One sink query's restore point: an externalized snapshot, as of its last committed
    batch. The one type for it: the operator lists them (``status.checkpoints``) and chooses
    one for a Rewind or an initial snapshot; the restore application restores it. (The
    custom resources show it as ``RestorePointStatus``, made by its ``of``.)"""

    sink: str = Field(min_length=1)
    batch_id: int = Field(ge=0)
    """The snapshot's last committed batch: the query resumes at batch_id + 1."""
    query_id: str = Field(min_length=1)
    """The query whose batches after batch_id the sink undo removes."""
    committed_at: datetime | None = None
    """When Spark committed ``batch_id`` (what a rewind "to before T" compares); the restore
    application does not need it."""
    watermark_ms: int | None = None
    """The query's event-time watermark at that batch (epoch ms; None or <= 0: none yet)."""


class RestoreConfig(KappaModel):
    """A Rewind's data work (``python -m spark_app restore``): each point's snapshot copied into
    `<checkpoint.location>/<sink>`, the snapshots after it dropped, then (``resetSinks``) what
    the sink queries wrote after it undone. Runs where the job's credentials are, never in the
    operator."""

    points: list[RestorePoint] = Field(min_length=1)
    reset_sinks: bool = True
    downstream: bool = False
    """The Rewind also rewinds the jobs reading this job's output: a Kafka sink's records after
    the restored batch must then be known (what those jobs skip), else the restore fails."""
    tag: str | None = None
    """The Rewind (``namespace/name``), named in the report."""
    report: str | None = None
    """Where the report goes. Default: ``<checkpoint>/_kappa/restore-report.json``."""
    copy_only: bool = False
    """Copy the snapshots and nothing else: a new job started from another one's snapshot (a
    StreamingJob's ``initialSnapshot``) must leave that job's later snapshots, its sinks and
    its topics as they are."""

    @model_validator(mode="after")
    def _copy_only_touches_nothing_else(self) -> RestoreConfig:
        if self.copy_only and (self.reset_sinks or self.downstream):
            raise ValueError("restore.copyOnly restores checkpoints only: resetSinks and downstream must be false")
        return self


class ExternalCheckpoints(KappaModel):
    """Restorable copies of the live checkpoint, taken by this job's own driver (a
    StreamingJob's `checkpoints.externalLocation`); the operator only reads their manifests."""

    location: str = Field(min_length=1)
    """Each sink's query is copied to `<location>/<sink name>`."""
    interval: Duration = timedelta(minutes=10)
    """Copy the newest committed batch once this long has passed since the last copy."""
    keep_last: int = Field(default=24, ge=1)
    max_age: Duration | None = None
    """Retention: at most `keepLast` snapshots, none older than this (never the newest)."""
    every_batch: bool = False
    """Copy every committed batch not copied yet (a local run of a minute), not one per interval."""
    requests_file: str | None = None
    """Where the operator's snapshot requests appear (the mounted control ConfigMap); unset: none
    (a local run)."""


class CheckpointConfig(KappaModel):
    location: str = Field(min_length=1)
    """Each output's query checkpoints under `<location>/<sink name>`."""
    external: ExternalCheckpoints | None = None
    """Live jobs: where the driver externalizes its checkpoint (`spark_app.checkpoints.driver`)."""


class BootstrapConfig(KappaModel):
    """A live job that starts from history (``spark_app.bootstrap``): each Kafka source's
    Iceberg archive read from ``from`` in event-time order, aligned under ``alignment``, then
    the topic from the exact offsets where the archive ends, in the same query and checkpoint."""

    start: Timestamp = Field(alias="from")
    """The event time the job's history starts at (the archives' rows before it are not read)."""
    archives: dict[str, IcebergBackfillSource] = Field(min_length=1)
    """Each Kafka source's archive, by source name: the table the archive job writes, with
    ``__metadata__`` {partition, offset} (and topic, for a topicPattern) of every record."""


_ENTRY_POINT = r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*$"


class Dependencies(KappaModel):
    """What spark-submit adds to a run besides the image (the StreamingJob's ``spec.deps``, the
    SparkApplication's ``spec.deps``). On a cluster spark-submit has applied them before the
    driver starts, so the driver does not (pyFiles on a Hadoop filesystem aside: those are on
    ``pythonPath`` too, for the driver to fetch with its own credentials); they are here
    because the code a run executes is part of what makes it reproducible: a new version
    (another pyFiles zip) changes the config's hash, which restarts the application as any
    spec change does. `kappa run`, which
    has no spark-submit, applies them itself (``kappa_operator.local.overrides``)."""

    py_files: list[str] = []
    jars: list[str] = []
    packages: list[str] = []
    repositories: list[str] = []
    exclude_packages: list[str] = []
    files: list[str] = []
    archives: list[str] = []


class JobConfig(KappaModel):
    """One run of a pipeline: live, or a backfill of a window."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    pipeline: str = Field(pattern=_ENTRY_POINT)
    """`module:function`; the function takes `{source name: DataFrame}` and returns
    `{sink name: DataFrame}`."""
    pipeline_args: dict[str, Any] = {}
    """Keyword arguments for the pipeline function (e.g. its watermark delay)."""
    mode: Literal["live", "backfill"]
    catalogs: dict[str, CatalogConfig] = {}
    sources: dict[str, SourceConfig] = Field(min_length=1)
    sinks: dict[str, SinkConfig] = Field(min_length=1)
    checkpoint: CheckpointConfig
    trigger: TriggerConfig | None = None
    """Default: processingTime 10s live, availableNow for a backfill."""
    window: Window | None = None
    publish: PublishConfig | None = None
    """Backfills only: what ``python -m spark_app publish`` does with the branches."""
    restore: RestoreConfig | None = None
    """Live jobs only: what ``python -m spark_app restore`` restores (a Rewind)."""
    alignment: AlignmentConfig = AlignmentConfig()
    coordinator: CoordinatorConfig | None = None
    spark_conf: dict[str, str] = {}
    master: str | None = None
    """Spark master: `local[N]` for a local run, or for a job on Kubernetes whose tasks run in its
    driver (`executor.instances: 0`); unset, spark-submit's (the executors' pods)."""
    trace_path: str | None = None
    """Append admission decisions and file opens as JSON lines here (tests, demo plots)."""
    read_rate: ReadRateConfig | None = None
    """Backfills: a cap on the rate the query's history sources read (one token bucket shared by all its sources,
    across micro-batches), so a backfill cannot saturate the object store live jobs read."""
    deps: Dependencies | None = None
    """The run's pyFiles, jars and packages as spark-submit was given them (see Dependencies)."""
    external_calls: ExternalCallsConfig | None = None
    """The run's limit on the pipeline's external calls (``external_calls.limiter()``)."""
    bootstrap: BootstrapConfig | None = None
    """Live jobs: start from the Kafka sources' archives, then go on to Kafka (``spark_app.bootstrap``)."""
    python_path: list[str] | None = None
    """Put on the driver's ``sys.path`` before the pipeline is imported and shipped to the
    executors (``spark_app.apps.pipeline_code``): directories (a ConfigMap's mount: its modules,
    and each .zip/.egg in it) and .py/.zip/.egg files or URIs (`kappa run`'s pyFiles)."""
    dead_letters: DeadLetterConfig | None = None
    """Live jobs with Avro sources: records that do not decode go here instead of stopping the
    job (``spark_app.contract.dead_letters``)."""
    green: GreenConfig | None = None
    """A blue/green upgrade's new version: a bootstrapped job that trails the running one
    (``spark_app.contract.blue_green``)."""

    @model_validator(mode="after")
    def _read_rate_backfill_only(self) -> JobConfig:
        if self.read_rate is not None and self.mode != "backfill":
            raise ValueError(
                "readRate is only meaningful with mode: backfill (it caps how fast a backfill reads history; "
                "a live job reads what arrives)"
            )
        return self

    @model_validator(mode="after")
    def _bounded_reads_at_once(self) -> JobConfig:
        """What a bounded run cannot do: it reads the whole window in one batch query."""
        if self.alignment.mode != "bounded":
            return self
        if self.mode != "backfill":
            raise ValueError("alignment.mode bounded is only meaningful with mode: backfill")
        if self.read_rate is not None:
            raise ValueError(
                "readRate cannot cap a bounded run (it reads the window in one batch query): remove readRate, or "
                "set alignment.mode to aligned or unordered"
            )
        for name, sink in self.sinks.items():
            if not isinstance(sink, IcebergSink | ParquetSink):
                raise ValueError(
                    f"sinks.{name} is {sink.kind}: a bounded run writes Iceberg sinks (their branch, committed "
                    "once by its batch id) and Parquet sinks (their path, overwritten); set alignment.mode to "
                    "aligned or unordered"
                )
        return self

    @model_validator(mode="after")
    def _consistent(self) -> JobConfig:
        if self.mode == "backfill" and self.window is None:
            raise ValueError("mode backfill needs a window: {start, end[, warmup]}")
        if self.mode == "live" and self.window is not None:
            raise ValueError("a window is only meaningful with mode: backfill")
        if self.mode == "live" and self.publish is not None:
            raise ValueError("publish is only meaningful with mode: backfill (it publishes a window)")
        if self.restore is not None:
            if self.mode != "live":
                raise ValueError("restore is only meaningful with mode: live (a Rewind restores a live job)")
            if self.checkpoint.external is None:
                raise ValueError("restore needs checkpoint.external: the snapshots it restores from")
            for i, point in enumerate(self.restore.points):
                if point.sink not in self.sinks:
                    known = ", ".join(sorted(self.sinks))
                    raise ValueError(f"restore.points[{i}].sink {point.sink!r} is not one of the sinks ({known})")
        wanted = "icebergBackfill" if self.mode == "backfill" else None
        for name, src in self.sources.items():
            if wanted and src.kind != wanted:
                raise ValueError(
                    f"sources.{name}.kind is {src.kind!r} but mode backfill reads history: use icebergBackfill"
                )
            if self.mode == "live" and src.kind == "icebergBackfill":
                raise ValueError(f"sources.{name}.kind icebergBackfill needs mode: backfill")
            if isinstance(src, IcebergSourceBase) and src.catalog not in self.catalogs:
                known = ", ".join(sorted(self.catalogs)) or "none defined"
                raise ValueError(f"sources.{name}.catalog {src.catalog!r} is not in catalogs ({known})")
        for name, sink in self.sinks.items():
            if isinstance(sink, IcebergSink) and sink.catalog not in self.catalogs:
                known = ", ".join(sorted(self.catalogs)) or "none defined"
                raise ValueError(f"sinks.{name}.catalog {sink.catalog!r} is not in catalogs ({known})")
        if self.bootstrap is not None:
            self._check_bootstrap(self.bootstrap)
        if self.dead_letters is not None:
            self._check_dead_letters(self.dead_letters)
        if self.green is not None and self.bootstrap is None:
            raise ValueError(
                "green trails the running version's input after reading its history: it needs bootstrap (each "
                "source's history: a Kafka topic's archive, or an icebergLive table itself)"
            )
        if self.trigger and self.trigger.kind == "processingTime" and self.mode == "backfill":
            raise ValueError("a backfill ends by itself: trigger.kind must be availableNow")
        return self

    def _check_bootstrap(self, boot: BootstrapConfig) -> None:
        if self.mode != "live":
            raise ValueError("bootstrap is only meaningful with mode: live (a backfill reads history already)")
        for name, src in self.sources.items():
            if name not in boot.archives:
                raise ValueError(f"bootstrap.archives has no archive for sources.{name}: name its archive table")
            archive = boot.archives[name]
            own_history = (
                self.green is not None
                and isinstance(src, IcebergLiveSource)
                and (archive.catalog, archive.table) == (src.catalog, src.table)
            )
            if not isinstance(src, KafkaSource) and not own_history:
                raise ValueError(
                    f"bootstrap reads each source's archive and then its topic: sources.{name} is {src.kind}, "
                    "not kafka (bootstrap a job whose sources are all Kafka topics with an Iceberg archive; only a "
                    "blue/green upgrade's green reads an icebergLive table as its own history)"
                )
        for name, archive in boot.archives.items():
            if name not in self.sources:
                known = ", ".join(sorted(self.sources))
                raise ValueError(f"bootstrap.archives.{name} is not one of the sources ({known})")
            if archive.catalog not in self.catalogs:
                known = ", ".join(sorted(self.catalogs)) or "none defined"
                raise ValueError(f"bootstrap.archives.{name}.catalog {archive.catalog!r} is not in catalogs ({known})")

    def _check_dead_letters(self, dead: DeadLetterConfig) -> None:
        if self.mode != "live" or not self.avro_sources:
            raise ValueError(
                "deadLetters is only meaningful for a live job with a kafka source of valueFormat avro (the "
                "records it cannot decode go there): remove deadLetters, or read an Avro topic"
            )
        if dead.catalog not in self.catalogs:
            known = ", ".join(sorted(self.catalogs)) or "none defined"
            raise ValueError(f"deadLetters.catalog {dead.catalog!r} is not in catalogs ({known})")

    @property
    def avro_sources(self) -> tuple[str, ...]:
        """The Kafka sources whose values are Avro in the registry's wire format."""
        return tuple(n for n, s in self.sources.items() if isinstance(s, KafkaSource) and s.value_format == "avro")

    @property
    def dead_letter_outputs(self) -> tuple[str, ...]:
        """The dead-letter queries' output names, one per Avro source (none without a table)."""
        return () if self.dead_letters is None else tuple(output_name(n) for n in self.avro_sources)

    def sink_config(self, output: str) -> SinkConfig:
        """What the query of ``output`` writes to: a sink, or the dead-letter table."""
        if source_of(output) is not None and self.dead_letters is not None:
            return self.dead_letters.sink()
        return self.sinks[output]

    @property
    def round_budget(self) -> int:
        """The rows a batch's merged admission rounds may take (0: one round per batch). Off
        under a read-rate cap, which may cut a source's admission anywhere, while a merged
        batch needs every source to complete its rounds; and when nothing is aligned."""
        if self.read_rate is not None or self.mode != "backfill" or not self.alignment.coordinated:
            return 0
        return self.alignment.batch_row_budget

    @property
    def effective_trigger(self) -> TriggerConfig:
        if self.trigger is not None:
            return self.trigger
        kind = "availableNow" if self.mode == "backfill" else "processingTime"
        return TriggerConfig(kind=kind)

    @property
    def alignment_group(self) -> str:
        return self.alignment.group or self.name

    def ordering_column(self, source: str) -> str:
        src = self.sources[source]
        own = getattr(src, "ordering_column", None)
        return own or self.alignment.ordering_column

    def sink_branch(self, sink: str) -> str:
        """Where a sink's snapshots go: its branch, else main live and `backfill-<name>` in a backfill."""
        cfg = self.sink_config(sink)
        given = getattr(cfg, "branch", None)
        return given or (f"backfill-{self.name}" if self.mode == "backfill" else "main")

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=True, indent=2)


def _format_errors(exc: ValidationError, origin: str) -> str:
    lines = [f"invalid job config {origin}:"]
    tags = {"icebergLive", "icebergBackfill", "kafka", "parquet", "console", "iceberg"}
    for err in exc.errors():
        parts = [str(p) for p in err["loc"] if not str(p).startswith("function-")]
        # sources.<name>.<kind tag>.<field>: the tag is pydantic's, not a key of the user's file
        if len(parts) > 2 and parts[0] in ("sources", "sinks") and parts[2] in tags:
            del parts[2]
        loc = ".".join(parts)
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "literal_error" or err["type"] == "union_tag_invalid":
            msg = msg.replace("Input should be", "allowed:")
        if err["type"] == "extra_forbidden":
            msg = "unknown field (check the spelling; fields are camelCase)"
        lines.append(f"  {loc or '<root>'}: {msg}")
    return "\n".join(lines)


def parse_config(data: dict[str, Any], origin: str = "") -> JobConfig:
    try:
        return JobConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, origin)) from None


def load_config(path: str | Path) -> JobConfig:
    """Read JSON or YAML; every problem is reported with its field path and what is allowed."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read job config {p}: {exc.strerror}") from None
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"job config {p} is not valid {'JSON' if p.suffix == '.json' else 'YAML'}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"job config {p} must be a mapping at the top level, got {type(data).__name__}")
    return parse_config(data, origin=str(p))
