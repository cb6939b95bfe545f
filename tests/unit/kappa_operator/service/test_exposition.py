"""The operator's ``/metrics`` text is byte for byte what prometheus_client's ``generate_latest``
writes, on the operator's and the coordinator's own registries (gauges, counters with their
``_created``, a histogram, label values a user chose), and its endpoint serves it as
Prometheus expects."""

from __future__ import annotations

import time
import urllib.request

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, Info, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kappa_operator.coordinator.core import Coordinator
from kappa_operator.coordinator.messages import GroupSpec, Report
from kappa_operator.coordinator.metrics import CoordinatorMetrics
from kappa_operator.local_cluster.control_plane import free_port
from kappa_operator.service.exposition import latest, serve
from kappa_operator.service.metrics import OperatorMetrics


def populated() -> OperatorMetrics:
    now = time.time_ns() // 1000
    core = Coordinator()
    coordinator = CoordinatorMetrics(core)
    m = OperatorMetrics()
    m.include(coordinator.registry)
    for i in range(20):
        m.resources.observe("StreamingJob", "ns", f"job-{i}", "Running")
        m.resources.progress(
            "ns", f"job-{i}", {"out": {"input_rows_per_second": 1.5, "state_rows": 3e9}}, {"Stalled": i % 2 == 0}
        )
        m.resources.kafka_lag("ns", f"job-{i}", {("out", "plays", "0"): 12})
        m.resources.observe(
            "Backfill", "ns", f"bf-{i}", "Running", 0.5, {"queued_since": 1.0, "started_at": 2.0, "ended_at": 3.0}
        )
        group, members = f"ns.bf-{i}", (f"bf-{i}/out/a", f"bf-{i}/out/b")
        core.declare(GroupSpec(name=group, members=members, max_drift_us=60_000_000), now)
        core.report(group, Report(member=members[0], watermark=now - 10**9, read_bytes=10, read_files=1), now)
        coordinator.observe(group, members[0], True, time.time())
    m.reconciles.labels("Backfill").inc(7)
    coordinator.report_latency.observe(0.002)
    coordinator.rejected.labels('a "quoted"\\ reason\nover two lines').inc()
    return m


def test_the_text_is_generate_latests_on_the_operators_and_the_coordinators_registries() -> None:
    m = populated()
    assert latest(m.registry) == generate_latest(m.registry)
    other = CollectorRegistry()
    Info("kappa_build", "the build", registry=other).info({"version": "1.0"})
    Gauge("kappa_nan", "not a number\\ help", registry=other).set(float("nan"))
    assert latest(other) == generate_latest(other)


def test_the_endpoint_serves_it_to_a_scraper() -> None:
    m = populated()
    port = free_port()
    server = serve(m.registry, port, "127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            assert resp.headers["Content-Type"] == CONTENT_TYPE_LATEST
            body = resp.read().decode()
    finally:
        server.shutdown()
    families = {f.name for f in text_string_to_metric_families(body)}
    assert {
        "kappa_streamingjob_phase",
        "kappa_alignment_lag_seconds",
        "kappa_coordinator_report_duration_seconds",
    } <= families
