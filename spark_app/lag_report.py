"""A live Kafka job's consumer lag, per partition, as its driver last saw it: left next to its
checkpoint (``_kappa/kafka-lag-<sink>.json``) for the operator, which shows it in the
StreamingJob's status and as a Prometheus gauge.

Spark's Kafka source already knows the lag: each micro-batch's progress has, per source, the
offsets the batch read up to (``endOffset``) and the newest offset the broker had when the batch
was planned (``latestOffset``). Their difference per partition is the lag of a Flink or
Kafka-consumer dashboard, measured where it is true (the driver), without a consumer group (the
Kafka source commits none) and without the operator talking to Kafka. Light on purpose: the
operator reads it without Spark, every 30 s.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from spark_app.config import JobConfig, KafkaSource
from spark_app.publish_report import located
from spark_app.storage import Location

log = logging.getLogger("kappa.lag_report")
EVERY_S = 5.0
"""A report is rewritten at most this often per query (and on the query's end)."""


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


class LagReport(BaseModel):
    """One sink query's lag after its last batch."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sink: str
    batch_id: int
    at: datetime
    partitions: list[PartitionLag]

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


def report_name(sink: str) -> str:
    return f"kafka-lag-{sink}.json"


def read_reports(cfg_location: Location, sinks: Iterable[str]) -> list[LagReport]:
    """The reports of ``sinks`` under a checkpoint's ``_kappa`` directory (absent ones left out)."""
    out = []
    for sink in sinks:
        name = report_name(sink)
        if cfg_location.stat(name) is not None:
            out.append(LagReport.model_validate_json(cfg_location.read_bytes(name)))
    return out


def reads_kafka(cfg: JobConfig) -> bool:
    return any(isinstance(src, KafkaSource) for src in cfg.sources.values())


class LagReporter:
    """A query listener of a live job that reads Kafka (``runtime.run`` registers it): each
    progress event's lag, written at most every ``EVERY_S`` seconds per query, on the
    listener's thread (a write is one small object: it never holds a batch)."""

    def __init__(self, cfg: JobConfig) -> None:
        self.cfg = cfg
        self.queries = {f"{cfg.name}-{sink}": sink for sink in cfg.sinks}
        self.location, _ = located(cfg, None, "")
        self.last: dict[str, float] = {}
        self.newest: dict[str, int] = {}
        self.pending: dict[str, LagReport] = {}
        self._lock = threading.Lock()

    def observe(self, progress: Mapping[str, Any]) -> None:
        """One query progress (its JSON, as the listener and ``recentProgress`` give it)."""
        self.progress(str(progress.get("name")), int(progress["batchId"]), progress.get("sources") or [])

    def progress(self, name: str, batch_id: int, sources: Iterable[Mapping[str, Any]]) -> None:
        sink = self.queries.get(name)
        if sink is None:
            return
        report = LagReport(sink=sink, batch_id=batch_id, at=datetime.now(UTC), partitions=partition_lags(sources))
        if not report.partitions:
            return
        with self._lock:
            if batch_id < self.newest.get(sink, -1):
                return  # an event delivered late: the newer batch's lag stands
            self.newest[sink] = batch_id
            self.pending[sink] = report
            due = time.monotonic() - self.last.get(sink, float("-inf")) >= EVERY_S
        if due:
            self.flush(sink)

    def flush(self, sink: str | None = None) -> None:
        with self._lock:
            sinks = [sink] if sink is not None else list(self.pending)
            reports = [self.pending.pop(s) for s in sinks if s in self.pending]
            for r in reports:
                self.last[r.sink] = time.monotonic()
        for r in reports:
            try:
                self.location.write_bytes(report_name(r.sink), r.model_dump_json().encode())
            except Exception:  # a lag report is worth a log line, never a failed query
                log.warning("could not write the Kafka lag of %s", r.sink, exc_info=True)
