"""The operator's Prometheus metrics: reconciles and errors by kind, resources by phase,
backfill progress; and the embedded coordinator's metrics on the same endpoint.

Phases and progress are kept per object and turned into gauges at scrape time, so a deleted
object's series disappear instead of freezing at their last value."""

from __future__ import annotations

import threading
from collections import Counter as Tally
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

KINDS = ("StreamingJob", "Backfill", "Rewind")


@dataclass(frozen=True)
class Observed:
    phase: str
    progress: float | None = None


class ResourceCollector(Collector):
    def __init__(self) -> None:
        self._objects: dict[tuple[str, str, str], Observed] = {}
        self._lock = threading.Lock()

    def observe(self, kind: str, namespace: str, name: str, phase: str, progress: float | None = None) -> None:
        with self._lock:
            old = self._objects.get((kind, namespace, name))
            if progress is None and old is not None and old.phase == phase:
                progress = old.progress
            self._objects[(kind, namespace, name)] = Observed(phase, progress)

    def forget(self, kind: str, namespace: str, name: str) -> None:
        with self._lock:
            self._objects.pop((kind, namespace, name), None)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            objects = dict(self._objects)
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
        by_phase: dict[str, Tally[str]] = {k: Tally() for k in KINDS}
        for (kind, ns, name), seen in sorted(objects.items()):
            by_phase[kind][seen.phase] += 1
            if kind == "StreamingJob":
                job_phase.add_metric([ns, name, seen.phase], 1)
            elif kind == "Backfill":
                bf_phase.add_metric([ns, name, seen.phase], 1)
                if seen.progress is not None:
                    progress.add_metric([ns, name], seen.progress)
        for phase, n in sorted(by_phase["Backfill"].items()):
            backfills.add_metric([phase], n)
        for phase, n in sorted(by_phase["StreamingJob"].items()):
            jobs.add_metric([phase], n)
        yield from (backfills, jobs, job_phase, bf_phase, progress)


class OperatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()
        self.reconciles = Counter("kappa_operator_reconciles", "Handler runs by resource kind", ["kind"], registry=r)
        self.errors = Counter(
            "kappa_operator_reconcile_errors", "Handler runs that raised (kopf retries them)", ["kind"], registry=r
        )
        self.resources = ResourceCollector()
        r.register(self.resources)

    def include(self, other: CollectorRegistry) -> None:
        """Serve another registry's metrics (the embedded coordinator's) from this one."""
        self.registry.register(_Forward(other))

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        start_http_server(port, addr=host, registry=self.registry)


class _Forward(Collector):
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        yield from self.registry.collect()
