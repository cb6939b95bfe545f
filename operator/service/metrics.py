"""The operator's Prometheus metrics: reconciles and errors by kind, resources by phase,
backfill progress; and the embedded coordinator's metrics on the same endpoint.

Phases and progress are kept per object and turned into gauges at scrape time, so a deleted
object's series disappear instead of freezing at their last value."""

from __future__ import annotations

import re
import threading
import time
from collections import Counter as Tally
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kappa_operator.models.common import instant
from kappa_operator.service import exposition
from spark_app.contract.storage import REQUESTS

KINDS = ("StreamingJob", "Backfill", "Rewind")


@dataclass(frozen=True)
class Observed:
    phase: str
    progress: float | None = None
    queued_since: float | None = None
    """Epoch seconds: when a Backfill started waiting for a slot."""
    started_at: float | None = None
    """Epoch seconds: when its application was submitted."""
    ended_at: float | None = None
    planned_seconds: float | None = None
    """The plan's ETA (spec.dryRun)."""


def epoch(stamp: str | None) -> float | None:
    """RFC 3339 (as status carries it) to epoch seconds."""
    if not stamp:
        return None
    return instant(stamp).timestamp()


def duration_seconds(text: str | None) -> float | None:
    """A ``str(timedelta)`` (``1 day, 2:03:04``, ``0:01:00``) to seconds."""
    m = re.fullmatch(r"(?:(\d+) days?, )?(\d+):(\d\d):(\d\d)(?:\.\d+)?", text or "")
    if m is None:
        return None
    days, h, mi, s = (int(g or 0) for g in m.groups())
    return float(((days * 24 + h) * 60 + mi) * 60 + s)


def backfill_times(status: dict[str, object]) -> dict[str, float | None]:
    """What the queue and plan-vs-actual panels need of a Backfill's status."""
    plan = status.get("plan")
    return {
        "queued_since": epoch(status.get("queuedSince")),  # type: ignore[arg-type]
        "started_at": epoch(status.get("startedAt")),  # type: ignore[arg-type]
        "planned_seconds": duration_seconds(plan.get("eta")) if isinstance(plan, dict) else None,
    }


class ResourceCollector(Collector):
    def __init__(self) -> None:
        self._objects: dict[tuple[str, str, str], Observed] = {}
        self._lags: dict[tuple[str, str], dict[tuple[str, str, str], int]] = {}
        """(namespace, job) -> (sink, topic, partition) -> records behind (Kafka jobs)."""
        self._progress: dict[tuple[str, str], dict[str, dict[str, float]]] = {}
        """(namespace, job) -> sink -> gauge -> value (``reconcile.health.health_gauges``)."""
        self._health: dict[tuple[str, str], dict[str, bool]] = {}
        """(namespace, job) -> condition (Stalled, Lagging) -> whether it holds."""
        self._calls: dict[tuple[str, str, str], CallsSeen] = {}
        """(kind, namespace, name) -> (limit, observed calls per second) of its external calls."""
        self._lock = threading.Lock()

    def kafka_lag(self, namespace: str, name: str, lags: dict[tuple[str, str, str], int]) -> None:
        """A Kafka job's lag per sink query and partition, replacing what it was (a partition
        no longer reported disappears)."""
        with self._lock:
            self._lags[(namespace, name)] = dict(lags)

    def progress(self, namespace: str, name: str, series: dict[str, dict[str, float]], health: dict[str, bool]) -> None:
        """A live job's queries' last batch (replacing what it was) and its health conditions."""
        with self._lock:
            self._progress[(namespace, name)] = {sink: dict(values) for sink, values in series.items()}
            self._health[(namespace, name)] = dict(health)

    def external_calls(self, kind: str, namespace: str, name: str, status: dict[str, Any]) -> None:
        """A job's or backfill's limit on external calls and its observed rate (``status.externalCalls``)."""
        with self._lock:
            self._calls[(kind, namespace, name)] = (
                status.get("ratePerSecond"),
                status.get("observedPerSecond"),
                status.get("waitedSeconds"),
            )

    def observe(
        self,
        kind: str,
        namespace: str,
        name: str,
        phase: str,
        progress: float | None = None,
        times: dict[str, float | None] | None = None,
    ) -> None:
        """``times``: a Backfill's queue and run times (None values keep what was seen)."""
        with self._lock:
            old = self._objects.get((kind, namespace, name))
            if progress is None and old is not None and old.phase == phase:
                progress = old.progress
            seen = Observed(phase, progress)
            if old is not None:
                seen = replace(old, phase=phase, progress=progress)
            seen = replace(seen, **{k: v for k, v in (times or {}).items() if v is not None})
            if phase in ("Succeeded", "Failed") and seen.ended_at is None:
                seen = replace(seen, ended_at=time.time())
            self._objects[(kind, namespace, name)] = seen

    def forget(self, kind: str, namespace: str, name: str) -> None:
        with self._lock:
            self._objects.pop((kind, namespace, name), None)
            self._calls.pop((kind, namespace, name), None)
            if kind == "StreamingJob":
                self._lags.pop((namespace, name), None)
                self._progress.pop((namespace, name), None)
                self._health.pop((namespace, name), None)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            objects = dict(self._objects)
            lags = {job: dict(series) for job, series in self._lags.items()}
            queries = {job: {s: dict(v) for s, v in sinks.items()} for job, sinks in self._progress.items()}
            health = {job: dict(c) for job, c in self._health.items()}
            calls = dict(self._calls)
        yield from _progress_families(queries, health)
        yield from _calls_families(calls)
        kafka_lag = GaugeMetricFamily(
            "kappa_streamingjob_kafka_lag_records",
            "Records of a Kafka partition a StreamingJob's sink query has not read yet (its driver's last batch)",
            labels=["namespace", "streamingjob", "sink", "topic", "partition"],
        )
        for (ns, name), series in sorted(lags.items()):
            for (sink, topic, partition), behind in sorted(series.items()):
                kafka_lag.add_metric([ns, name, sink, topic, partition], behind)
        backfills = GaugeMetricFamily("kappa_operator_backfills", "Backfills by phase", labels=["phase"])
        jobs = GaugeMetricFamily("kappa_operator_streamingjobs", "StreamingJobs by phase", labels=["phase"])
        job_phase = GaugeMetricFamily(
            "kappa_streamingjob_phase",
            "1 for the StreamingJob's current phase",
            labels=["namespace", "streamingjob", "phase"],
        )
        bf_phase = GaugeMetricFamily(
            "kappa_backfill_phase", "1 for the Backfill's current phase", labels=["namespace", "backfill", "phase"]
        )
        progress = GaugeMetricFamily(
            "kappa_backfill_progress_ratio",
            "Global watermark of the backfill's group between window start (0) and end (1)",
            labels=["namespace", "backfill"],
        )
        labels = ["namespace", "backfill"]
        wait = GaugeMetricFamily(
            "kappa_backfill_queue_wait_seconds", "Time waiting in phase Queued (until started)", labels=labels
        )
        elapsed = GaugeMetricFamily(
            "kappa_backfill_elapsed_seconds", "Time since the application was submitted (until it ended)", labels=labels
        )
        planned = GaugeMetricFamily(
            "kappa_backfill_planned_seconds", "The plan's ETA (spec.dryRun), for plan-vs-actual", labels=labels
        )
        now = time.time()
        by_phase: dict[str, Tally[str]] = {k: Tally() for k in KINDS}
        for (kind, ns, name), seen in sorted(objects.items()):
            by_phase[kind][seen.phase] += 1
            if kind == "StreamingJob":
                job_phase.add_metric([ns, name, seen.phase], 1)
            elif kind == "Backfill":
                bf_phase.add_metric([ns, name, seen.phase], 1)
                if seen.progress is not None:
                    progress.add_metric([ns, name], seen.progress)
                if seen.queued_since is not None:
                    wait.add_metric([ns, name], max(0.0, (seen.started_at or now) - seen.queued_since))
                if seen.started_at is not None:
                    elapsed.add_metric([ns, name], max(0.0, (seen.ended_at or now) - seen.started_at))
                if seen.planned_seconds is not None:
                    planned.add_metric([ns, name], seen.planned_seconds)
        for phase, n in sorted(by_phase["Backfill"].items()):
            backfills.add_metric([phase], n)
        for phase, n in sorted(by_phase["StreamingJob"].items()):
            jobs.add_metric([phase], n)
        yield from (backfills, jobs, job_phase, bf_phase, progress, wait, elapsed, planned, kafka_lag)


CallsSeen = tuple[float | None, float | None, float | None]
"""A resource's external calls as its status shows them: limit, observed rate, time waited."""


def _calls_families(calls: dict[tuple[str, str, str], CallsSeen]) -> Iterator[Metric]:
    """Per kind: the limit on a resource's external calls, the rate its driver observed, and the
    time its calls waited for the limit (a counter of the running application: its rate is the
    share of task time the limit costs, and a new application starts it again from zero)."""
    for kind, label in (("StreamingJob", "streamingjob"), ("Backfill", "backfill")):
        limit = GaugeMetricFamily(
            f"kappa_{label}_external_calls_limit_per_second",
            f"The {kind}'s limit on its pipeline's external calls (calls per second, the whole job)",
            labels=["namespace", label],
        )
        seen = GaugeMetricFamily(
            f"kappa_{label}_external_calls_per_second",
            f"Calls per second the {kind}'s pipeline made outside, over the last 30 s (its driver's report)",
            labels=["namespace", label],
        )
        waited = CounterMetricFamily(
            f"kappa_{label}_external_calls_waited_seconds",
            f"Seconds the {kind}'s external calls waited for its limit, summed over its tasks (this application)",
            labels=["namespace", label],
        )
        for (k, ns, name), (rate, observed, wait) in sorted(calls.items()):
            if k != kind:
                continue
            if rate is not None:
                limit.add_metric([ns, name], rate)
            if observed is not None:
                seen.add_metric([ns, name], observed)
            if wait is not None:
                waited.add_metric([ns, name], wait)
        yield from (limit, seen, waited)


PROGRESS_GAUGES = {
    "input_rows_per_second": "Rows per second arriving at a StreamingJob's sink query (its last micro-batch)",
    "processed_rows_per_second": "Rows per second the query processed (its last micro-batch)",
    "batch_duration_seconds": "How long the query's last micro-batch took",
    "state_rows": "Rows in the query's state stores",
    "watermark_timestamp_seconds": "The query's event-time watermark (Unix seconds)",
    "last_progress_timestamp_seconds": "The query's last batch or idle heartbeat (Unix seconds)",
}


def _progress_families(
    queries: dict[tuple[str, str], dict[str, dict[str, float]]], health: dict[tuple[str, str], dict[str, bool]]
) -> Iterator[Metric]:
    """One gauge per measure of a live job's queries, and one per health condition."""
    for gauge, text in PROGRESS_GAUGES.items():
        family = GaugeMetricFamily(f"kappa_streamingjob_{gauge}", text, labels=["namespace", "streamingjob", "sink"])
        for (ns, name), sinks in sorted(queries.items()):
            for sink, values in sorted(sinks.items()):
                if gauge in values:
                    family.add_metric([ns, name, sink], values[gauge])
        yield family
    condition = GaugeMetricFamily(
        "kappa_streamingjob_condition",
        "1 while a StreamingJob's health condition (Stalled, Lagging) holds, else 0",
        labels=["namespace", "streamingjob", "condition"],
    )
    for (ns, name), conds in sorted(health.items()):
        for type_, holds in sorted(conds.items()):
            condition.add_metric([ns, name, type_], 1.0 if holds else 0.0)
    yield condition


class OperatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()
        self.reconciles = Counter("kappa_operator_reconciles", "Handler runs by resource kind", ["kind"], registry=r)
        self.errors = Counter(
            "kappa_operator_reconcile_errors", "Handler runs that raised (kopf retries them)", ["kind"], registry=r
        )
        self.leading = Gauge(
            "kappa_operator_leading",
            "1 on the replica that holds the operator's Lease and reconciles, 0 on a follower",
            registry=r,
        )
        self.resources = ResourceCollector()
        r.register(self.resources)
        r.register(StoreRequests())

    def include(self, other: CollectorRegistry) -> None:
        """Serve another registry's metrics (the embedded coordinator's) from this one."""
        self.registry.register(_Forward(other))

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        """``/metrics`` on its own thread, in the text format ``exposition.latest`` writes."""
        exposition.serve(self.registry, port, host)


class StoreRequests(Collector):
    """What the operator asked the jobs' object stores (reports, snapshot manifests), counted by
    ``spark_app.contract.storage.REQUESTS`` where the calls are made."""

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "kappa_operator_store_requests",
            "Requests the operator made to the jobs' object stores, by operation (list, stat, read, write, delete)",
            labels=["op"],
        )
        for op, count in sorted(REQUESTS.counts().items()):
            family.add_metric([op], count)
        yield family


class _Forward(Collector):
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        yield from self.registry.collect()
