"""The streaming queries of a run: one per sink, started with its writer (the exactly-once Iceberg
sink, Kafka, Parquet, the console), waited for, and their progress read back from the queries
and from the listener bus."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener

from spark_app.contract.config import JobConfig
from spark_app.contract.reports.progress import ProgressReporter
from spark_app.contract.sinks import ConsoleSink, IcebergSink, KafkaSink, ParquetSink
from spark_app.jvm.calls import wait_for_listener_bus
from spark_app.sinks.iceberg.writer import IcebergBatchWriter
from spark_app.sinks.kafka import KafkaBatchWriter
from spark_app.sinks.warmup import restrict_to_window
from spark_app.sources.iceberg.spec import micros

log = logging.getLogger(__name__)


def start_query(
    cfg: JobConfig, name: str, df: DataFrame, writers: list[IcebergBatchWriter] | None = None
) -> StreamingQuery:
    """``writers``: gets the query's Iceberg sink writer, whose pipelined commits the caller
    finishes (``IcebergBatchWriter.finish``) once the query ended."""
    sink = cfg.sink_config(name)
    if cfg.mode == "backfill" and cfg.window is not None:
        df = restrict_to_window(df, sink.time_column, micros(cfg.window.start), micros(cfg.window.end))
    checkpoint = f"{cfg.checkpoint.location.rstrip('/')}/{name}"
    writer = df.writeStream.queryName(f"{cfg.name}-{name}").option("checkpointLocation", checkpoint)
    writer = writer.outputMode(sink.output_mode)
    trig = cfg.effective_trigger
    if trig.kind == "availableNow":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{int(trig.interval.total_seconds() * 1000)} milliseconds")
    if isinstance(sink, ParquetSink):
        writer = writer.format("parquet").option("path", sink.path)
        if sink.partition_by:
            writer = writer.partitionBy(*sink.partition_by)
    elif isinstance(sink, ConsoleSink):
        writer = writer.format("console").option("truncate", "false")
    elif isinstance(sink, IcebergSink):
        pipelined = sink.pipelined_commit and writers is not None
        batch_writer = IcebergBatchWriter(
            cfg.name,
            name,
            sink,
            cfg.catalogs[sink.catalog],
            cfg.sink_branch(name),
            checkpoint,
            cfg.trace_path,
            pipelined=pipelined,
            add_columns=cfg.green is not None,
        )
        if writers is not None:
            writers.append(batch_writer)
        writer = writer.foreachBatch(batch_writer)
    elif isinstance(sink, KafkaSink):
        writer = writer.foreachBatch(KafkaBatchWriter(name, sink, checkpoint, cfg.trace_path))
    return writer.start()


def query_progress(q: StreamingQuery) -> list[dict[str, Any]]:
    """Every progress of a finished query, read from the query itself: a listener's events
    arrive asynchronously and may still be queued when the query has ended."""
    return [p if isinstance(p, dict) else json.loads(p.json) for p in q.recentProgress]


def drain_listener_bus(spark: SparkSession, timeout_ms: int = 10_000) -> None:
    """Wait until Spark's listener bus delivered every event posted so far: the progress
    listener is a Python callback, and an event still queued when it is removed (and the
    process exits) was delivered to a closed callback server, logging a Py4J error and a Java
    trace after the run's last line (issue 44)."""
    try:
        wait_for_listener_bus(spark, timeout_ms)
    except Exception:  # a bus that does not drain in time: the events are only progress
        log.debug("the listener bus did not drain within %s ms", timeout_ms, exc_info=True)


def finish_writers(writers: list[IcebergBatchWriter]) -> None:
    """Each Iceberg sink's recorded batches committed (the first failure raised, after all
    were tried: a record that stays is committed by the next run)."""
    failures = []
    while writers:
        try:
            writers.pop().finish()
        except Exception as exc:
            failures.append(exc)
    if failures:
        raise failures[0]


def await_queries(queries: list[StreamingQuery], deadline: float | None) -> None:
    """Wait for every query to end (availableNow) or the deadline, then raise the first failure."""
    for q in queries:
        remaining = None if deadline is None else max(deadline - time.monotonic(), 0.001)
        finished = q.awaitTermination(remaining) if remaining is not None else q.awaitTermination()
        if finished is False:
            q.stop()
    for q in queries:
        if q.exception() is not None:
            raise q.exception()  # type: ignore[misc]


class ProgressListener(StreamingQueryListener):
    """Hands each progress and idle event of a live job to its ``ProgressReporter`` (an idle
    event names its query by id only: the start event gives the name)."""

    def __init__(self, reporter: ProgressReporter) -> None:
        self.reporter = reporter
        self.names: dict[str, str] = {}

    def onQueryStarted(self, event: Any) -> None:
        self.names[str(event.id)] = str(event.name)

    def onQueryProgress(self, event: Any) -> None:
        self.reporter.observe(json.loads(event.progress.json))

    def onQueryIdle(self, event: Any) -> None:
        name = self.names.get(str(event.id))
        if name is not None:
            self.reporter.idle(name)

    def onQueryTerminated(self, event: Any) -> None:
        pass
