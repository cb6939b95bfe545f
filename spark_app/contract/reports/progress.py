"""A live job's progress, per sink query, as its driver last saw it: left next to its
checkpoint (``_kappa/progress-<sink>.json``) for the operator, which shows it in the
StreamingJob's status (rates, batch duration, state rows, watermark, the last progress), in
Prometheus, and decides from it whether the job is ``Stalled`` or ``Lagging``.

Spark already measures all of it: each micro-batch's progress has the input and processing
rates, the batch's duration, the state operators' rows and the event-time watermark. A query
with nothing to read emits an idle event instead (at most every
``spark.sql.streaming.noDataProgressEventInterval``): alive, not stuck. So the report's
``heartbeat_at`` moves on both, ``at`` only on a batch.

Kafka's consumer lag comes with it: per source, the offsets the batch read up to
(``endOffset``) and the newest offset the broker had when the batch was planned
(``latestOffset``). Their difference per partition is the lag of a Flink or Kafka-consumer
dashboard, measured where it is true (the driver), without a consumer group (the Kafka source
commits none) and without the operator talking to Kafka. Light on purpose: the operator reads
it without Spark, every 30 s.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from spark_app.contract.base import parse_timestamp
from spark_app.contract.config import JobConfig
from spark_app.contract.reports import located
from spark_app.contract.storage import Location

log = logging.getLogger("kappa.progress_report")
EVERY_S = 5.0
"""A report is rewritten at most this often per query (and on the query's end)."""
HEARTBEAT_S = 30.0
"""An idle query's heartbeat is written at most this often (the operator looks every 30 s)."""


class PartitionLag(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: str
    partition: int
    offset: int
    """The next offset the query reads (the end of its last batch)."""
    latest: int
    """The newest offset the broker had when that batch was planned."""

    @property
    def lag(self) -> int:
        return max(self.latest - self.offset, 0)


class ProgressReport(BaseModel):
    """One sink query's last batch, and when it was last heard of."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sink: str
    batch_id: int | None
    """The last batch (None: the query ran none yet, only idled)."""
    at: datetime
    """When the driver saw the batch's progress (or, with no batch, the first idle event)."""
    heartbeat_at: datetime | None = None
    """The last progress or idle event (None: the batch's)."""
    input_rows_per_second: float = 0.0
    processed_rows_per_second: float = 0.0
    batch_duration_ms: int = 0
    input_rows: int = 0
    state_rows: int = 0
    """Rows in the query's state stores (every stateful operator)."""
    watermark: datetime | None = None
    """The query's event-time watermark (None: it has none, or none yet)."""
    partitions: list[PartitionLag] = []
    """Kafka sources' partitions (none for other sources)."""
    lateness_s: float | None = None
    """The pipeline's watermark delay (how far its watermark trails the newest event time), from
    its plan: a blue/green catch-up allows green the lateness it adds over blue (None: a
    driver from before it was reported, or no watermark)."""
    lookahead_s: float | None = None
    """The pipeline's look-ahead (how long after the watermark a result may still be emitted),
    from its plan: a blue/green switch's boundary subtracts it (None: a driver from before it
    was reported)."""
    notices: list[str] = []
    """What the driver found wrong at the job's first start and cannot undo (records a topic's
    retention removed before the job read them): the operator's ``RecordsLost`` condition."""

    @property
    def alive_at(self) -> datetime:
        return self.heartbeat_at or self.at

    @property
    def total(self) -> int:
        return sum(p.lag for p in self.partitions)


def _offsets(value: Any) -> dict[str, dict[int, int]]:
    """A Kafka source's offsets as they appear in progress: JSON text or an object."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    if not isinstance(value, dict):
        return {}
    out: dict[str, dict[int, int]] = {}
    for topic, partitions in value.items():
        if not isinstance(partitions, dict):
            return {}
        try:
            out[topic] = {int(p): int(o) for p, o in partitions.items()}
        except (TypeError, ValueError):
            return {}
    return out


def partition_lags(sources: Iterable[Mapping[str, Any]]) -> list[PartitionLag]:
    """Per partition of every Kafka source of one progress event (sources of other kinds, and
    a batch that read nothing new from a source, are told apart by their offsets' shape)."""
    out = []
    for source in sources:
        if not str(source.get("description", "")).startswith("Kafka"):
            continue
        end, latest = _offsets(source.get("endOffset")), _offsets(source.get("latestOffset"))
        for topic, partitions in end.items():
            for partition, offset in sorted(partitions.items()):
                newest = latest.get(topic, {}).get(partition, offset)
                out.append(PartitionLag(topic=topic, partition=partition, offset=offset, latest=newest))
    return sorted(out, key=lambda p: (p.topic, p.partition))


def _watermark(progress: Mapping[str, Any]) -> datetime | None:
    """Spark reports 1970-01-01 until a watermark exists: that is none."""
    text = (progress.get("eventTime") or {}).get("watermark")
    if not text:
        return None
    at = parse_timestamp(str(text))
    return None if at.timestamp() <= 0 else at


def from_progress(sink: str, progress: Mapping[str, Any], now: datetime) -> ProgressReport:
    """One progress event (its JSON) as the report of ``sink``'s query."""
    return ProgressReport(
        sink=sink,
        batch_id=int(progress["batchId"]),
        at=now,
        input_rows_per_second=float(progress.get("inputRowsPerSecond") or 0.0),
        processed_rows_per_second=float(progress.get("processedRowsPerSecond") or 0.0),
        batch_duration_ms=int(progress.get("batchDuration") or 0),
        input_rows=int(progress.get("numInputRows") or 0),
        state_rows=sum(int(op.get("numRowsTotal") or 0) for op in progress.get("stateOperators") or []),
        watermark=_watermark(progress),
        partitions=partition_lags(progress.get("sources") or []),
    )


def report_name(sink: str) -> str:
    return f"progress-{sink}.json"


def read_reports(cfg_location: Location, sinks: Iterable[str]) -> list[ProgressReport]:
    """The reports of ``sinks`` under a checkpoint's ``_kappa`` directory (absent ones left out)."""
    out = []
    for sink in sinks:
        name = report_name(sink)
        if cfg_location.stat(name) is not None:
            try:
                out.append(ProgressReport.model_validate_json(cfg_location.read_bytes(name)))
            except ValueError:  # a report from another version, or cut short: said, not fatal
                log.warning("unreadable progress report %s", name, exc_info=True)
    return out


class ProgressReporter:
    """A live job's query listener (``apps.run.run`` registers it): each progress event's
    report, written at most every ``EVERY_S`` seconds per query (and idle events' heartbeats
    at most every ``HEARTBEAT_S``), on the listener's thread (a write is one small object: it
    never holds a batch)."""

    def __init__(
        self,
        cfg: JobConfig,
        notices: Sequence[str] = (),
        lookahead_s: float | None = None,
        watermarks: Mapping[str, datetime] | None = None,
        lateness_s: float | None = None,
    ) -> None:
        """``watermarks``: per sink, the watermark its checkpoint holds (a restarted query):
        reported until the query's first batch, so a job restarted with nothing new to read
        still says where it is in event time (Spark reports none while a query is idle)."""
        self.cfg = cfg
        self.notices = list(notices)
        self.lookahead_s = lookahead_s
        self.lateness_s = lateness_s
        self.watermarks = dict(watermarks or {})
        self.queries = {f"{cfg.name}-{sink}": sink for sink in cfg.sinks}
        self.location, _ = located(cfg, None, "")
        self.last: dict[str, float] = {}
        self.newest: dict[str, int] = {}
        self.pending: dict[str, ProgressReport] = {}
        self.written: dict[str, ProgressReport] = {}
        self._lock = threading.Lock()

    def observe(self, progress: Mapping[str, Any]) -> None:
        """One query progress (its JSON, as the listener and ``recentProgress`` give it)."""
        sink = self.queries.get(str(progress.get("name")))
        if sink is None:
            return
        report = from_progress(sink, progress, datetime.now(UTC))
        report = report.model_copy(
            update={"notices": self.notices, "lookahead_s": self.lookahead_s, "lateness_s": self.lateness_s}
        )
        with self._lock:
            if report.batch_id is not None and report.batch_id < self.newest.get(sink, -1):
                return  # an event delivered late: the newer batch's report stands
            self.newest[sink] = report.batch_id or 0
            self.pending[sink] = report
            due = time.monotonic() - self.last.get(sink, float("-inf")) >= EVERY_S
        if due:
            self.flush(sink)

    def idle(self, name: str) -> None:
        """The query ``name`` had nothing to read: alive. Its last report gets a heartbeat."""
        sink = self.queries.get(name)
        if sink is None:
            return
        with self._lock:
            now = datetime.now(UTC)
            last = self.pending.get(sink) or self.written.get(sink)
            if last is None:  # nothing to read from the start: alive all the same
                last = ProgressReport(
                    sink=sink,
                    batch_id=None,
                    at=now,
                    notices=self.notices,
                    lookahead_s=self.lookahead_s,
                    lateness_s=self.lateness_s,
                    watermark=self.watermarks.get(sink),
                )
            self.pending[sink] = last.model_copy(update={"heartbeat_at": now})
            due = time.monotonic() - self.last.get(sink, float("-inf")) >= HEARTBEAT_S
        if due:
            self.flush(sink)

    def flush(self, sink: str | None = None) -> None:
        with self._lock:
            sinks = [sink] if sink is not None else list(self.pending)
            reports = [self.pending.pop(s) for s in sinks if s in self.pending]
            for r in reports:
                self.last[r.sink] = time.monotonic()
                self.written[r.sink] = r
        for r in reports:
            try:
                self.location.write_bytes(report_name(r.sink), r.model_dump_json().encode())
            except Exception:  # a progress report is worth a log line, never a failed query
                log.warning("could not write the progress of %s", r.sink, exc_info=True)
