"""``alignment.mode: bounded``: a backfill as the batch job a user would write, with the job's
own pipeline. Each source is handed to the pipeline as one bounded DataFrame of the rows the
streaming read would deliver over the whole run (``frame.iceberg_batch_frame``: the same files
of one snapshot, the same window, warm-up and drain, filter and columns), and each sink's
output is written into the backfill's branch as one batch, committed once by its batch id
under a query id kept in the checkpoint: a run killed mid-write resumes, a run killed after
its commit skips it. No state store, no micro-batches, no coordination.

A batch query gives the output the streaming run gives only where Spark's batch semantics
are its streaming ones. Stateless steps, stream-static joins and inner stream-stream joins
(range joins included) are: an inner join emits each match as it is found, and a batch join
finds the same matches (a streaming run drops none as late when the lateness guard passes;
a bounded run drops none at all). A windowed or session aggregation is, once the streaming
run's open/written rule is applied (``Closing``): the streaming run writes the results whose
end its final watermark (the newest event time of each watermarked source column, less the
delay, the least of them) has passed and holds the rest, and reads on while those that start
in the window are open and the history goes on; a bounded run computes that watermark from
the same rows, writes the same results, counts the same open ones and reads on as far.
Operators whose results depend on when the watermark passed (outer joins, arbitrary state with
timers, de-duplication within the watermark, chained aggregations) are not, and a bounded run
refuses them, naming the operator; so do processing-time functions (``current_timestamp``).

What the plans allow is ``query_shape``; whether ``auto`` runs it so, ``mode_choice``."""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from spark_app.apps.mode_choice import MODE_FILE, LatenessProbe, LateRowsFound, Proof
from spark_app.apps.query_shape import Closing
from spark_app.contract.alignment import ModeChoice
from spark_app.contract.config import JobConfig
from spark_app.contract.sinks import IcebergSink, ParquetSink

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_app.apps.result import RunResult
    from spark_app.sources.frames import Pipeline
    from spark_app.window.edges import Edges

log = logging.getLogger(__name__)


STATE_FILE = "bounded.json"
"""In the backfill's checkpoint location: the snapshot each source reads and each sink's query
id, written before any data is (a restarted run reads the same rows, commits under the same id)."""


@dataclass
class BoundedState:
    """What a bounded run fixes before it writes (``STATE_FILE``)."""

    snapshots: dict[str, int] = field(default_factory=dict)
    query_ids: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return json.dumps({"snapshots": self.snapshots, "queryIds": self.query_ids}, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> BoundedState:
        raw = json.loads(data)
        return cls({k: int(v) for k, v in raw["snapshots"].items()}, dict(raw["queryIds"]))


def fixed_state(cfg: JobConfig) -> BoundedState:
    """The run's snapshots and query ids: those a previous attempt fixed, else fixed now (each
    source's ``snapshotId``, else its table's current snapshot) and saved before any write."""
    from spark_app.catalogs import load_table
    from spark_app.contract.errors import SnapshotExpiredError
    from spark_app.contract.sources import IcebergBackfillSource
    from spark_app.contract.storage import open_location

    location = open_location(cfg.checkpoint.location)
    if location.stat(STATE_FILE) is not None:
        return BoundedState.from_json(location.read_bytes(STATE_FILE))
    state = BoundedState()
    for name, src in cfg.sources.items():
        assert isinstance(src, IcebergBackfillSource)
        sid = src.snapshot_id
        if sid is None:
            current = load_table(src.catalog, cfg.catalogs[src.catalog].properties(), src.table).current_snapshot()
            if current is None:
                raise SnapshotExpiredError(f"{src.table} has no snapshot: nothing to backfill")
            sid = current.snapshot_id
        state.snapshots[name] = sid
    state.query_ids = {sink: str(uuid.uuid4()) for sink in cfg.sinks}
    location.write_bytes(STATE_FILE, state.to_json())
    return state


def run_bounded(
    spark: SparkSession,
    cfg: JobConfig,
    pipeline: Pipeline,
    edges: Edges,
    stop_calls: Any,
    choice: ModeChoice,
    closes: dict[str, Closing | str],
    probes: dict[str, LatenessProbe],
) -> RunResult:
    """The backfill as one batch query per sink (see the module's docstring; ``decided`` has
    checked its plans); the run report as the streaming run's, with one batch per sink.
    A sink whose results close on the watermark writes those whose end the final watermark
    has passed, and reads on past the drain while some that start in the window are open
    and the history goes on: the aligned run's rule, step for step (``window_end.next_read``).

    ``probes``: the sources (``choice.proving``) the first sink's write proves were not late,
    from what it observes on the rows it reads, before its commit; if some were, its files are
    removed, the mode file says aligned and ``LateRowsFound`` tells the caller to run aligned."""
    from spark_app.apps.result import RunResult
    from spark_app.apps.window_end import next_read, record_finality
    from spark_app.contract.reports.run import write_report as write_run_report
    from spark_app.contract.storage import open_location
    from spark_app.sources.iceberg.frame import field_ids_read
    from spark_app.window.lateness import LatenessVerdict

    assert cfg.window is not None
    state = fixed_state(cfg)
    started = time.monotonic()
    extended: tuple[int, ...] = ()
    marks: dict[str, int | None] = {}
    try:
        with field_ids_read(spark):
            while True:
                marks = {
                    name: _final_watermark(spark, cfg, state, close, extended, name)
                    for name, close in closes.items()
                    if isinstance(close, Closing)
                }
                if not marks or not edges.drain:
                    break
                still = sum(
                    _still_open(spark, cfg, pipeline, state, name, closes[name], marks[name], extended)  # type: ignore[arg-type]
                    for name in marks
                )
                edges, until = next_read(cfg, edges, extended, still, None)
                if until is None:
                    break
                extended = (*extended, until)
            proof = Proof(probes) if probes else None
            progress = [
                _write_sink(
                    spark,
                    cfg,
                    pipeline,
                    state,
                    name,
                    extended,
                    closes.get(name),
                    marks.get(name),
                    proof if at == 0 else None,
                )
                for at, name in enumerate(cfg.sinks)
            ]
    except LateRowsFound as found:  # nothing committed: the run goes on aligned, its calls still served
        open_location(cfg.checkpoint.location).write_bytes(MODE_FILE, found.choice.to_json())
        log.info("backfill %s: the bounded write found late rows, runs aligned: %s", cfg.name, found.choice.reason)
        raise
    except BaseException:
        stop_calls()
        raise
    called = stop_calls()
    record_finality(cfg, edges)
    verdict = LatenessVerdict(True, cfg.alignment.max_drift, edges.delay, "bounded: one batch query, no row is late")
    report = RunResult(cfg.name, cfg.mode, time.monotonic() - started, progress, verdict, edges)
    report.external_calls = called
    report.edges_end = cfg.window.end
    report.extended_to = extended
    choice = replace(choice, proving=())  # proven by the commit
    report.mode_choice = choice
    write_run_report(cfg, report.seconds, progress, choice)
    return report


def _frames(
    spark: SparkSession, cfg: JobConfig, state: BoundedState, sink: str, extended: tuple[int, ...]
) -> dict[str, Any]:
    """Each source as one bounded DataFrame of the rows the streaming read delivers."""
    from spark_app.sources.frames import source_spec, task_slots
    from spark_app.sources.iceberg.frame import iceberg_batch_frame

    slots = task_slots(spark)
    return {
        src: iceberg_batch_frame(spark, source_spec(cfg, sink, src, slots, (), extended), state.snapshots[src])
        for src in cfg.sources
    }


def _output(spark: SparkSession, cfg: JobConfig, pipeline: Pipeline, frames: dict[str, Any], name: str) -> Any:
    """The sink's output of the job's own pipeline over ``frames``, cut to the window."""
    from spark_app.lookups.context import job_catalogs
    from spark_app.sinks.warmup import restrict_to_window
    from spark_app.sources.iceberg.spec import micros

    assert cfg.window is not None
    with job_catalogs({n: c.properties() for n, c in cfg.catalogs.items()}):
        out = pipeline(frames, **cfg.pipeline_args)[name]
    return restrict_to_window(out, cfg.sinks[name].time_column, micros(cfg.window.start), micros(cfg.window.end))


def _final_watermark(
    spark: SparkSession, cfg: JobConfig, state: BoundedState, close: Closing, extended: tuple[int, ...], name: str
) -> int | None:
    """The watermark the aligned run of sink ``name`` ends with, from the newest event time
    each watermarked column holds among the rows read (one aggregate over that column)."""
    from pyspark.sql import functions as F

    frames = _frames(spark, cfg, state, name, extended)
    newest: dict[tuple[str, str], int | None] = {}
    for w in close.watermarks:
        if (w.source, w.column) not in newest:
            value = frames[w.source].agg(F.max(F.unix_micros(F.col(w.column)))).first()
            newest[(w.source, w.column)] = None if value is None or value[0] is None else int(value[0])
    return close.final_watermark_us(newest)


def _still_open(
    spark: SparkSession,
    cfg: JobConfig,
    pipeline: Pipeline,
    state: BoundedState,
    name: str,
    close: Closing,
    watermark_us: int | None,
    extended: tuple[int, ...],
) -> int:
    """Results that start in the window and the final watermark has not passed: those the
    aligned run holds in state when it stops reading (``window.edges.open_results``)."""
    from spark_app.sinks.warmup import restrict_closed

    out = _output(spark, cfg, pipeline, _frames(spark, cfg, state, name, extended), name)
    return int(restrict_closed(out, close.end_column, watermark_us, still_open=True).count())


def _write_sink(
    spark: SparkSession,
    cfg: JobConfig,
    pipeline: Pipeline,
    state: BoundedState,
    name: str,
    extended: tuple[int, ...],
    close: Closing | str | None,
    watermark_us: int | None,
    proof: Proof | None = None,
) -> dict:
    """One sink's batch query, run and written; its progress entry (one batch, the rows each
    source handed the pipeline, as the streaming run's observed metrics count them). With a
    ``proof``, the same observation carries its probes' maxima, checked before the commit."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from spark_app.sinks.iceberg.writer import IcebergBatchWriter
    from spark_app.sinks.warmup import restrict_closed

    sink = cfg.sinks[name]
    probes = proof.probes if proof is not None else {}
    observed = {src: Observation(f"{name}:{src}") for src in cfg.sources}
    read = _frames(spark, cfg, state, name, extended)
    frames = {
        src: df.observe(
            observed[src], F.count(F.lit(1)).alias("rows"), *(probes[src].metrics() if src in probes else ())
        )
        for src, df in read.items()
    }
    out = _output(spark, cfg, pipeline, frames, name)
    if isinstance(close, Closing):  # what the aligned run has written when it stops
        out = restrict_closed(out, close.end_column, watermark_us)
    began = time.monotonic()
    if isinstance(sink, IcebergSink):
        checkpoint = f"{cfg.checkpoint.location.rstrip('/')}/{name}"
        writer = IcebergBatchWriter(
            cfg.name, name, sink, cfg.catalogs[sink.catalog], cfg.sink_branch(name), checkpoint, cfg.trace_path,
            query_id=state.query_ids[name],
            before_commit=None if proof is None else lambda: proof.check(read, observed),
        )  # fmt: skip
        writer(out, 0)
    else:  # the backfill's own path (the operator gives it one): a rerun writes it again
        assert isinstance(sink, ParquetSink)
        files = out.write.mode("overwrite")
        files = files.partitionBy(*sink.partition_by) if sink.partition_by else files
        files.parquet(sink.path)
    rows = {src: int((o.get or {}).get("rows") or 0) for src, o in observed.items()}
    ms = int((time.monotonic() - began) * 1000)
    log.info("bounded: sink %s written in one batch (%d rows read, %d ms)", name, sum(rows.values()), ms)
    progress: dict[str, Any] = {
        "id": state.query_ids[name],
        "name": f"{cfg.name}-{name}",
        "batchId": 0,
        "numInputRows": sum(rows.values()),
        "durationMs": {"triggerExecution": ms, "addBatch": ms},
        "rowsBySource": rows,
    }
    if watermark_us is not None:  # as a streaming progress says it (its run summary's last watermark)
        at = datetime.fromtimestamp(watermark_us / 1e6, tz=UTC)
        progress["eventTime"] = {"watermark": at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"}
    return progress
