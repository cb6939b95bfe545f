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
a bounded run drops none at all). Operators that hold results until the watermark passes
them (windowed and session aggregates, outer joins, arbitrary state with timers) and
de-duplication within the watermark are not: which of their results the streaming run has
written depends on its watermark, so a bounded run refuses them, naming the operator, rather
than write something else. So do processing-time functions (``current_timestamp``)."""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spark_app.config import IcebergSink, JobConfig, ParquetSink
from spark_app.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_app.runtime import Pipeline, RunReport
    from spark_app.window_edges import Edges

log = logging.getLogger(__name__)

STATE_FILE = "bounded.json"
"""In the backfill's checkpoint location: the snapshot each source reads and each sink's query
id, written before any data is (a restarted run reads the same rows, commits under the same id)."""

_REFUSED: tuple[tuple[str, str], ...] = (
    (r"(?<![\w.])Aggregate\b", "an aggregation (a window or a group-by emits when the watermark passes it)"),
    (r"\bSessionWindow\b|session_window", "a session window (emitted when the watermark passes its gap)"),
    (r"\bDeduplicateWithinWatermark\b", "dropDuplicatesWithinWatermark (its state ends with the watermark)"),
    (r"\bDeduplicate\b", "dropDuplicates on a stream (its state ends with the watermark)"),
    (r"FlatMapGroups(InPandas)?WithState\b", "arbitrary state (applyInPandasWithState / flatMapGroupsWithState)"),
    (r"TransformWithState", "transformWithState (state with timers)"),
    (r"\b(current_timestamp|current_date|now|localtimestamp)\(", "a processing-time function"),
)
_JOIN = re.compile(r"\bJoin (\w+)")


def refusal(plans: dict[str, str]) -> str | None:
    """Why a bounded run would not write what the aligned run writes, naming the sink and
    the operator in its analyzed plan; None: it would write the same rows."""
    for sink, plan in sorted(plans.items()):
        for pattern, what in _REFUSED:
            if re.search(pattern, plan):
                return f"sink {sink}'s pipeline has {what}"
        outer = [kind for kind in _JOIN.findall(plan) if kind != "Inner" and kind != "Cross"]
        if outer:
            return f"sink {sink}'s pipeline has a {outer[0]} join (its unmatched rows wait for the watermark)"
    return None


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
    from spark_app.config import IcebergBackfillSource
    from spark_app.errors import SnapshotExpiredError
    from spark_app.storage import open_location

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


def run_bounded(spark: SparkSession, cfg: JobConfig, pipeline: Pipeline, edges: Edges, stop_calls: Any) -> RunReport:
    """The backfill as one batch query per sink (see the module's docstring); the run report
    as the streaming run's, with one batch per sink."""
    from spark_app.lateness import Verdict
    from spark_app.run_report import write_report as write_run_report
    from spark_app.runtime import RunReport, outputs_for, record_finality
    from spark_app.sources.iceberg.frame import field_ids_read
    from spark_app.window_edges import analyzed_plan

    assert cfg.window is not None
    probe = outputs_for(spark, cfg, pipeline)  # streaming frames: the plans the aligned run would run
    why = refusal({sink: analyzed_plan(df) for sink, df in probe.items()})
    if why is not None:
        raise ConfigError(
            f"alignment.mode bounded: {why}, whose batch result differs from what the streaming run writes; "
            "set alignment.mode to aligned (or unordered)"
        )
    state = fixed_state(cfg)
    started = time.monotonic()
    try:
        with field_ids_read(spark):
            progress = [_write_sink(spark, cfg, pipeline, state, name) for name in cfg.sinks]
    finally:
        called = stop_calls()
    record_finality(cfg, edges)
    verdict = Verdict(True, cfg.alignment.max_drift, edges.delay, "bounded: one batch query, no row is late")
    report = RunReport(cfg.name, cfg.mode, time.monotonic() - started, progress, verdict, edges)
    report.external_calls = called
    report.edges_end = cfg.window.end
    write_run_report(cfg, report.seconds, progress)
    return report


def _write_sink(spark: SparkSession, cfg: JobConfig, pipeline: Pipeline, state: BoundedState, name: str) -> dict:
    """One sink's batch query, run and written; its progress entry (one batch, the rows each
    source handed the pipeline, as the streaming run's observed metrics count them)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from spark_app.lookups.context import job_catalogs
    from spark_app.runtime import source_spec
    from spark_app.sinks.iceberg.writer import IcebergBatchWriter
    from spark_app.sinks.warmup import restrict_to_window
    from spark_app.sources.iceberg.frame import iceberg_batch_frame
    from spark_app.sources.iceberg.stream import micros

    assert cfg.window is not None
    sink, parallelism = cfg.sinks[name], spark.sparkContext.defaultParallelism
    observed = {src: Observation(f"{name}:{src}") for src in cfg.sources}
    frames = {
        src: iceberg_batch_frame(spark, source_spec(cfg, name, src, parallelism, ()), state.snapshots[src]).observe(
            observed[src], F.count(F.lit(1)).alias("rows")
        )
        for src in cfg.sources
    }
    with job_catalogs({n: c.properties() for n, c in cfg.catalogs.items()}):
        out = pipeline(frames, **cfg.pipeline_args)[name]
    out = restrict_to_window(out, sink.time_column, micros(cfg.window.start), micros(cfg.window.end))
    began = time.monotonic()
    if isinstance(sink, IcebergSink):
        checkpoint = f"{cfg.checkpoint.location.rstrip('/')}/{name}"
        writer = IcebergBatchWriter(
            cfg.name, name, sink, cfg.catalogs[sink.catalog], cfg.sink_branch(name), checkpoint, cfg.trace_path,
            query_id=state.query_ids[name],
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
    return {
        "id": state.query_ids[name],
        "name": f"{cfg.name}-{name}",
        "batchId": 0,
        "numInputRows": sum(rows.values()),
        "durationMs": {"triggerExecution": ms, "addBatch": ms},
        "rowsBySource": rows,
    }
