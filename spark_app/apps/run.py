"""The Spark app: config in, one streaming query per output, a report out.

``python -m spark_app --config job.json`` (or ``run(cfg)``) builds the SparkSession, one
DataFrame per source (the candidate the config selected), calls the user's pipeline
``function(sources) -> {sink: DataFrame}`` and starts one query per output with checkpoint
``<location>/<sink>``. Each output gets its own source readers (Spark builds them per
query), so each (output, source) pair is its own member of the alignment group.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from spark_app.alignment.local import LocalWatermarkProvider
from spark_app.alignment.reads import ReadLedger, ledger_file
from spark_app.apps.lateness_guard import lateness_verdict
from spark_app.apps.mode_choice import LatenessProbe
from spark_app.apps.pipeline_code import make_importable
from spark_app.apps.queries import (
    ProgressListener,
    await_queries,
    drain_listener_bus,
    finish_writers,
    query_progress,
    start_query,
)
from spark_app.apps.query_shape import Closing
from spark_app.apps.result import RunResult
from spark_app.apps.session import PROGRESS_RETENTION, build_session, progress_retention
from spark_app.apps.window_end import DrainExtensions, next_read, record_finality
from spark_app.bluegreen.position import durable_position
from spark_app.bluegreen.trail import trailer_of
from spark_app.bootstrap.legs import BootstrapLeg, archive_config
from spark_app.bootstrap.steps import start as start_bootstrap
from spark_app.bootstrap.steps import switch as switch_bootstrap
from spark_app.checkpoints.driver import attach, detach
from spark_app.contract.alignment import ModeChoice, aligned_members, member_id
from spark_app.contract.config import JobConfig, TriggerConfig
from spark_app.contract.errors import IncompleteBackfillError, KappaError
from spark_app.contract.offsets import BackfillOffset
from spark_app.contract.reports.bootstrap import BootstrapRecord
from spark_app.contract.reports.progress import ProgressReporter
from spark_app.contract.reports.run import write_report as write_run_report
from spark_app.contract.storage import open_location
from spark_app.external_calls import ExternalCallsReport
from spark_app.external_calls import serve as serve_external_calls
from spark_app.jvm.calls import analyzed_plan
from spark_app.planning.split_spans import fit_sources
from spark_app.sinks.iceberg.writer import IcebergBatchWriter
from spark_app.sources.frames import (
    Pipeline,
    load_pipeline,
    outputs_for,
    reset_rounds,
    watermark_file,
)
from spark_app.sources.kafka import records_gone
from spark_app.sources.kafka_avro import (
    LEARNED,
    UndecodableRecordError,
    UnknownSchemaIdError,
    new_schema_id,
    undecodable,
)
from spark_app.window.edges import Edges, open_results, output_horizon, resolve
from spark_app.window.lateness import LatenessVerdict

log = logging.getLogger(__name__)


AVAILABLE_NOW = TriggerConfig(kind="availableNow")


def run(cfg: JobConfig, spark: SparkSession | None = None, timeout: float | None = None) -> RunResult:
    """Run the job to the end (availableNow) or until ``timeout`` (processingTime), in named
    stages: resolve what the run is (``resolve_run``: the window's edges and the mode), then
    either the bounded run, or the streaming legs (``Legs``) one after another, each saying
    what comes next, with what they hold owned and released by ``RunResources``; the result
    is built once at the end (``finish``)."""
    spark = spark or build_session(cfg)
    LEARNED.ids.clear()  # the schema ids an earlier run in this process met are not this run's
    log_window(cfg)
    make_importable(cfg.python_path, spark)
    pipeline = load_pipeline(cfg.pipeline)
    calls = serve_external_calls(cfg, spark)  # before the pipeline is called: its limiter() is this run's
    resolved = resolve_run(spark, cfg, pipeline)
    if resolved.choice is not None and resolved.choice.mode == "bounded":
        from spark_app.apps.bounded import run_bounded
        from spark_app.apps.mode_choice import LateRowsFound

        assert resolved.edges is not None
        # Out of the group at once: no split is read in event-time order. If the write finds
        # late rows, the aligned run's members rejoin (a first report resets the member).
        leave_group(resolved.cfg, resolved.members)
        try:
            return run_bounded(
                spark, resolved.cfg, pipeline, resolved.edges, calls.stop, resolved.choice, resolved.closes,
                resolved.probes,
            )  # fmt: skip
        except LateRowsFound as found:  # its write proved some rows late, before any commit
            resolved = resolved.run_as(found.choice)
    legs = Legs.plan(spark, resolved)
    verdict = lateness_verdict(legs.archives or legs.cfg, legs.outputs, resolved.read)
    ledger = start_reads(legs.cfg)
    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    # a live run reports its look-ahead with its progress: a blue/green switch needs each version's
    delay, horizon = output_horizon(legs.cfg, legs.outputs) if legs.cfg.mode == "live" else (None, None)
    with RunResources(
        spark, legs.cfg, calls, fresh=legs.fresh, bootstrapping=legs.boot is not None,
        lookahead=horizon.lookahead if horizon is not None else None, lateness=delay,
    ) as held:  # fmt: skip
        leg: Leg | None = legs.first()
        while leg is not None:
            try:
                ended = held.run_leg(leg, deadline)
            except Exception as exc:
                leg = legs.with_new_schema(leg, exc, held)  # or raised: not a schema it can learn
                continue
            leg = legs.next(ended, timed=timeout is not None)
    return finish(legs, held, verdict, ledger, time.monotonic() - started)


def checkpoint_watermarks(cfg: JobConfig) -> dict[str, datetime]:
    """Each sink query's watermark at its newest durable batch (a restart's starting point in
    event time; none before a batch with a watermark was done)."""
    out = {}
    for sink in cfg.sinks:
        try:
            at = durable_position(open_location(f"{cfg.checkpoint.location.rstrip('/')}/{sink}"))
        except (OSError, ValueError):  # no checkpoint yet, or an entry cut short: no seed
            continue
        if at is not None and at.watermark_ms is not None and at.watermark_ms > 0:
            out[sink] = datetime.fromtimestamp(at.watermark_ms / 1000, UTC)
    return out


def log_window(cfg: JobConfig) -> None:
    if cfg.window is None:
        return
    columns = sorted({cfg.ordering_column(n) for n in cfg.sources})
    log.info(
        "backfill window %s .. %s (warm-up %s) on ordering column(s) %s: the window, warm-up and drain apply "
        "to these columns (an ingestion-time column selects by ingestion, not event time; docs/ordering.md)",
        cfg.window.start,
        cfg.window.end,
        cfg.window.warmup,
        ", ".join(columns),
    )


@dataclass(frozen=True)
class Resolved:
    """What a run is, settled before any query starts: the config (a backfill's drain
    resolved and its mode chosen), its edges, the members its sources report as, and the mode
    ``auto`` chose with how each sink's results close (a bounded run's rule)."""

    cfg: JobConfig
    pipeline: Pipeline
    members: tuple[str, ...]
    edges: Edges | None = None
    choice: ModeChoice | None = None
    closes: dict[str, Closing | str] = field(default_factory=dict)
    probes: dict[str, LatenessProbe] = field(default_factory=dict)
    """The sources a bounded run's write proves not late (``choice.proving``)."""

    def run_as(self, choice: ModeChoice) -> Resolved:
        """The run in the mode ``choice`` says, chosen after the start (a bounded write that
        found late rows)."""
        mode = self.cfg.alignment.model_copy(update={"mode": choice.mode})
        return replace(self, cfg=self.cfg.model_copy(update={"alignment": mode}), choice=choice, probes={})

    @property
    def read(self) -> set[str] | None:
        """The sources some output reads (None: not a backfill)."""
        return None if self.edges is None else {n for names in self.edges.used.values() for n in names}


def resolve_run(spark: SparkSession, cfg: JobConfig, pipeline: Pipeline) -> Resolved:
    if cfg.mode != "backfill":
        return Resolved(cfg, pipeline, aligned_members(cfg))
    cfg, edges, members, choice, closes, probes = resolve_edges(spark, cfg, pipeline)
    resolved = Resolved(cfg, pipeline, members, edges, choice, closes, probes)
    return resolved if choice.mode == "bounded" else resolved.run_as(choice)


@dataclass(frozen=True)
class Leg:
    """One pass of the job's queries over ``outputs``: a bootstrap's archive leg
    (``archive``, availableNow whatever the trigger), or the job itself (``job``: a live
    job, a backfill's window, or a backfill reading on past its drain)."""

    kind: str
    cfg: JobConfig
    outputs: dict[str, DataFrame]


@dataclass
class Legs:
    """The legs of a streaming run and the rule between them: a bootstrap's archive leg is
    followed by the job on Kafka; a backfill's window, by reading on while results that start
    in it are still open and the history goes on (``drain_step``); anything else ends."""

    spark: SparkSession
    cfg: JobConfig
    pipeline: Pipeline
    edges: Edges | None
    choice: ModeChoice | None
    reader_members: tuple[str, ...] | None
    fresh: bool
    boot: tuple[BootstrapRecord, BootstrapLeg] | None
    archives: JobConfig | None
    drains: DrainExtensions | None
    extended: tuple[int, ...]
    outputs: dict[str, DataFrame]
    schema_restarts: int = 0

    @classmethod
    def plan(cls, spark: SparkSession, resolved: Resolved) -> Legs:
        cfg, members = resolved.cfg, resolved.members
        fresh = not any(Path(cfg.checkpoint.location, s).exists() for s in cfg.sinks)
        boot = start_bootstrap(spark, cfg, fresh)
        archives = archive_config(cfg, boot[0]) if boot is not None and boot[1] == "archive" else None
        if archives is not None:  # the archive leg aligns the archives as a backfill aligns its history
            members = aligned_members(archives)
        if members and fresh and cfg.coordinator is None:
            LocalWatermarkProvider(watermark_file(cfg), members).reset()
        drains = DrainExtensions(cfg) if resolved.edges is not None and resolved.edges.drain else None
        extended = () if drains is None or fresh else drains.load()
        reader_members = members if cfg.mode == "backfill" else None
        outputs = outputs_for(spark, cfg, resolved.pipeline, reader_members, extended_to=extended, boot=boot)
        spark.conf.set(PROGRESS_RETENTION, str(progress_retention(cfg.mode, archives is not None)))
        return cls(
            spark, cfg, resolved.pipeline, resolved.edges, resolved.choice, reader_members, fresh, boot, archives,
            drains, extended, outputs,
        )  # fmt: skip

    def with_new_schema(self, leg: Leg, exc: BaseException, held: RunResources) -> Leg:
        """A query met a record whose schema id it did not know (a version registered while it
        ran): the same leg again, its queries built with the id (the registry asked again) and
        started from their checkpoints, where the batch that met it was not committed."""
        schema_id, where = _learn_schema(exc, self.schema_restarts)
        LEARNED.ids.add(schema_id)
        self.schema_restarts += 1
        held.stop_queries()
        log.info("%s names schema id %s, new to the query: started again with it from the checkpoint", where, schema_id)
        self.outputs = outputs_for(
            self.spark, self.cfg, self.pipeline, self.reader_members, extended_to=self.extended, boot=self.boot
        )
        return replace(leg, outputs=self.outputs)

    def first(self) -> Leg:
        if self.cfg.mode == "backfill" or self.archives is not None:
            reset_rounds(self.archives or self.cfg, self.outputs)
        if self.archives is not None:  # its batches back to back, ending when every archive is read
            return Leg("archive", self.cfg.model_copy(update={"trigger": AVAILABLE_NOW}), self.outputs)
        return Leg("job", self.cfg, self.outputs)

    def next(self, ended: list[StreamingQuery], timed: bool) -> Leg | None:
        """What runs after the leg whose queries ``ended`` (their batches committed); None: the run ends."""
        if self.archives is not None and self.boot is not None:  # the archive leg ended (or ran out of time)
            if any(q.isActive for q in ended):
                return None
            require_complete(self.archives, [p for q in ended for p in query_progress(q)], bootstrap=True)
            self.boot, self.archives = switch_bootstrap(self.cfg, self.boot[0]), None
            self.spark.conf.set(PROGRESS_RETENTION, str(progress_retention(self.cfg.mode, archive_leg=False)))
            self.outputs = outputs_for(self.spark, self.cfg, self.pipeline, None, boot=self.boot)
            return Leg("job", self.cfg, self.outputs)
        if self.drains is None or self.edges is None or timed:
            return None
        require_complete(self.cfg, [p for q in ended for p in query_progress(q)])
        self.edges, until = drain_step(self.spark, self.cfg, self.edges, self.extended)
        if until is None:
            return None
        self.extended = (*self.extended, until)
        self.drains.save(self.extended)  # intent first: a restart reads on from the same plan
        self.outputs = outputs_for(self.spark, self.cfg, self.pipeline, self.reader_members, extended_to=self.extended)
        reset_rounds(self.cfg, self.outputs)
        return Leg("job", self.cfg, self.outputs)


MAX_SCHEMA_RESTARTS = 20
"""Restarts of a run's queries for schema ids met mid-stream: a bound, so a registry that names
an id and then cannot serve it is a failure, not a loop."""


def _learn_schema(exc: BaseException, restarts: int) -> tuple[int, str]:
    """The schema id a query stopped at, to be learned; any other failure raised as it should
    read (an undecodable record's line, not Spark's trace)."""
    met = new_schema_id(exc)
    if met is None:
        said = undecodable(exc)
        if said is not None:
            raise UndecodableRecordError(said) from None
        raise exc
    schema_id, where = met
    if schema_id in LEARNED.ids or restarts >= MAX_SCHEMA_RESTARTS:
        raise UnknownSchemaIdError(
            f"{where} names schema id {schema_id}, which the schema registry does not have: the record cannot "
            "be decoded. Nothing from it on was written; register the schema it was written with, or move the "
            "job past the record (a Rewind with skipOffsets)"
        ) from None
    return met


class RunResources:
    """What a streaming run holds while its queries run, taken in one place and released in
    one place (``__exit__``, whatever ended the run): the queries, the Iceberg sinks' writers,
    the checkpoint externalizer, a live job's progress listener, and the external-calls
    service. What releasing them reports (the snapshots taken, the calls made) stays here for
    the result."""

    def __init__(
        self,
        spark: SparkSession,
        cfg: JobConfig,
        calls: Any,
        fresh: bool,
        bootstrapping: bool,
        lookahead: timedelta | None = None,
        lateness: timedelta | None = None,
    ) -> None:
        self.spark, self.cfg, self.calls = spark, cfg, calls
        self.queries: list[StreamingQuery] = []
        self.writers: list[IcebergBatchWriter] = []
        self.externalized: dict[str, list[int]] = {}
        self.called: ExternalCallsReport | None = None
        self.gone = records_gone(cfg) if cfg.mode == "live" and fresh and not bootstrapping else []
        for notice in self.gone:
            log.warning("job %s: %s", cfg.name, notice)
        self.externalizer: Any = None
        seconds = None if lookahead is None else lookahead.total_seconds()
        late_s = None if lateness is None else lateness.total_seconds()
        self.listener = (
            ProgressListener(ProgressReporter(cfg, self.gone, seconds, checkpoint_watermarks(cfg), late_s))
            if cfg.mode == "live"
            else None
        )
        self.trailer = trailer_of(cfg)

    def __enter__(self) -> RunResources:
        if self.trailer is not None:  # green's first look before its first batch: it never reads ahead
            self.trailer.once()
            self.trailer.start()
        self.externalizer = attach(self.spark, self.cfg)
        if self.listener is not None:
            self.spark.streams.addListener(self.listener)
        return self

    def run_leg(self, leg: Leg, deadline: float | None) -> list[StreamingQuery]:
        current = [start_query(leg.cfg, name, df, self.writers) for name, df in leg.outputs.items()]
        self.queries += current
        try:
            await_queries(current, deadline)
        finally:  # every batch Spark logged is in Iceberg before anything reads the sinks
            finish_writers(self.writers)
        return current

    def stop_queries(self) -> None:
        for q in self.queries:
            if q.isActive:
                q.stop()

    def __exit__(self, *exc: object) -> None:
        self.stop_queries()
        if self.trailer is not None:
            self.trailer.stop()
        self.externalized = detach(self.spark, self.externalizer)
        self.called = self.calls.stop()  # after the executors' last counts: the report's final numbers
        if self.listener is not None:
            drain_listener_bus(self.spark)
            self.spark.streams.removeListener(self.listener)
            for q in self.queries:  # listeners get progress asynchronously: the last may not have come
                for last in query_progress(q)[-1:]:
                    self.listener.reporter.observe(last)
            self.listener.reporter.flush()  # the last batch's report, whenever the one before was written

    @property
    def progress(self) -> list[dict[str, Any]]:
        return [p for q in self.queries for p in query_progress(q)]


def finish(
    legs: Legs, held: RunResources, verdict: LatenessVerdict | None, ledger: ReadLedger | None, seconds: float
) -> RunResult:
    """A backfill that did not read its window fails here; what is not final is put on its
    sinks' tables; the run report (whose costs calibrate the next plans' ETAs) and the result
    are built once."""
    cfg, progress = legs.cfg, held.progress
    if cfg.mode == "backfill":
        require_complete(cfg, progress)
    if legs.edges is not None:
        record_finality(cfg, legs.edges)
    if cfg.mode == "backfill":
        write_run_report(cfg, seconds, progress, legs.choice)
    return RunResult(
        cfg.name,
        cfg.mode,
        seconds,
        progress,
        verdict,
        legs.edges,
        externalized=held.externalized,
        reads={} if ledger is None else ledger.members(),
        read_cap=(None, None) if ledger is None else ledger.cap(),
        extended_to=legs.extended,
        edges_end=cfg.window.end if cfg.window else None,
        external_calls=held.called,
        notices=held.gone,
        mode_choice=legs.choice,
    )


def start_reads(cfg: JobConfig) -> ReadLedger | None:
    """A backfill's read ledger, fresh for this run: full buckets for ``readRate`` (or none:
    uncapped) and zero counts. Its sources, each in its own process, find it by name."""
    if cfg.mode != "backfill":
        return None
    ledger = ReadLedger(ledger_file(watermark_file(cfg), cfg.name))
    rate = cfg.read_rate
    ledger.start(
        None if rate is None else rate.max_bytes_per_second,
        None if rate is None else rate.max_files_per_second,
        time.monotonic(),
    )
    if rate is not None:
        log.info(
            "backfill %s: reads capped at %s bytes/s, %s files/s",
            cfg.name,
            rate.max_bytes_per_second or "any",
            rate.max_files_per_second or "any",
        )
    return ledger


def drain_step(
    spark: SparkSession, cfg: JobConfig, edges: Edges, extended: tuple[int, ...]
) -> tuple[Edges, int | None]:
    """After the queries read to the end of their plan: count the results that start in the
    window but are still open in state (a session that goes on past the drain), and decide
    whether to read on (``horizon.next_drain_step``). Returns the edges with the count (and
    the notice when reading stops with results open) and where to read on to (µs), if at all."""
    assert cfg.window is not None
    window = cfg.window
    still, first = 0, None
    for sink in cfg.sinks:
        n, earliest = open_results(spark, f"{cfg.checkpoint.location.rstrip('/')}/{sink}", window.start, window.end)
        still += n
        if earliest is not None and (first is None or earliest < first):
            first = earliest
    return next_read(cfg, edges, extended, still, first)


def resolve_edges(
    spark: SparkSession, cfg: JobConfig, pipeline: Pipeline
) -> tuple[JobConfig, Edges, tuple[str, ...], ModeChoice, dict[str, Closing | str], dict[str, LatenessProbe]]:
    """Build the pipeline once to learn its edges; the config with the drain resolved, the
    members this driver reports as, the mode it runs in (``alignment.mode: auto`` decided
    from the same plans), and how each sink's results close (a bounded run's rule). Members
    for sources no output reads are reported finished (to a coordinator that was told of
    every configured source), so they never hold the group."""
    from spark_app.apps.mode_choice import decided
    from spark_app.apps.query_shape import closings

    frames: dict[str, dict[str, DataFrame]] = {}
    outputs = outputs_for(spark, cfg, pipeline, frames=frames)
    edges = resolve(cfg, frames, outputs)
    assert cfg.window is not None
    cfg = cfg.model_copy(update={"window": cfg.window.model_copy(update={"drain": edges.drain})})
    cfg = fit_sources(cfg, cfg.alignment.lateness or edges.delay)
    all_members = aligned_members(cfg)
    read = {member_id(cfg, sink, src) for sink, srcs in edges.used.items() for src in srcs}
    members = tuple(m for m in all_members if m in read)
    leave_group(cfg, tuple(m for m in all_members if m not in read))
    if edges.drain:
        log.info("backfill %s: reading %s past the end to close %s", cfg.name, edges.drain, edges.horizon.describe())
    closes = closings(outputs, frames)
    plans = {sink: analyzed_plan(df) for sink, df in outputs.items()}
    choice, probes = decided(spark, cfg, plans, edges, closes)
    return cfg, edges, members, choice, closes, probes


def leave_group(cfg: JobConfig, members: tuple[str, ...]) -> None:
    """Report ``members`` finished to the coordinator (told of every configured source), so
    they never hold the group: sources no output reads, or a run that reads no split in
    event-time order (a bounded one)."""
    if not members or cfg.coordinator is None:
        return
    from spark_app.alignment.http import HttpWatermarkProvider

    coord = cfg.coordinator
    provider = HttpWatermarkProvider(coord.url, cfg.alignment_group, coord.token, coord.timeout.total_seconds())
    for m in members:
        provider.report(m, None)


def require_complete(cfg: JobConfig, progress: list[dict[str, Any]], bootstrap: bool = False) -> None:
    """A backfill whose query ended before admitting every split of its window has not read
    the window: that is a failure, never a success with fewer rows. A bootstrap's archive leg
    likewise: switching to Kafka then would skip the archived records not yet read."""
    last: dict[str, BackfillOffset] = {}
    for p in progress:
        for src in p.get("sources", []):
            try:
                end = src.get("endOffset")
                off = BackfillOffset.from_dict(json.loads(end) if isinstance(end, str) else end or {})
            except (KappaError, KeyError, ValueError, TypeError):
                continue
            last[f"{p.get('name')}/{off.source}"] = off
    short = {k: o for k, o in last.items() if not o.complete}
    if short:
        detail = "; ".join(f"{k} admitted {o.position} of {o.splits} splits" for k, o in sorted(short.items()))
        if bootstrap:
            raise IncompleteBackfillError(
                f"job {cfg.name} ended its bootstrap before reading its archives ({detail}): a source's archive "
                "was not read to its end, so it has not switched to Kafka (nothing was skipped; the switch is "
                "not recorded). Check that the pipeline reads every configured source, then start the job again: "
                "it resumes the archives from its checkpoint"
            )
        raise IncompleteBackfillError(
            f"backfill {cfg.name} ended before reading its window ({detail}): a member of alignment group "
            f"{cfg.alignment_group!r} held the group (a source that never reported, or another query that did not "
            "start); nothing is complete. Check that every configured source is read by the pipeline and that "
            "every job of the group runs, then start the backfill again"
        )
