"""A real one-node cluster on this machine (issue 40): pods scheduled by kube-scheduler, run by a
kubelet through containerd and runc from images built here, on the CNI bridge, names resolved by
CoreDNS, logs read back through the API server as ``kubectl logs`` reads them; and the product's
whole path on it: a StreamingJob applied with kubectl, the operator in its pod (this chart), the
spark-operator in its pods (its chart, its webhook), driver and executor pods from our Spark
image, the Iceberg sink committed on S3 and the catalog's database, progress back in status.
One file: pytest-xdist's loadfile keeps the node's tests on one worker (the node's bridge,
ports and kubelet are the machine's)."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from confluent_kafka import Producer

from harness.browser import row_screenshots
from kappa_operator.dashboard.definition import kappa_dashboard
from kappa_operator.dashboard.perses import expression
from kappa_operator.local.example_data import START
from kappa_operator.local.kafka import SASL_SSL
from kappa_operator.local_cluster.addresses import PODS, SERVICES
from kappa_operator.local_cluster.cluster import (
    JOBS,
    KAFKA_USER,
    OPERATOR_LEADER,
    OPERATOR_NAMESPACE,
    OPERATOR_PODS,
    LocalCluster,
)
from kappa_operator.local_cluster.control_plane import ROOT, eventually
from kappa_operator.local_cluster.images import SPARK_IMAGE
from kappa_operator.local_cluster.kubernetes import Kubernetes
from kappa_operator.local_cluster.rest import path_of
from kappa_operator.local_cluster.system_images import BUSYBOX
from spark_app.examples.generator import GeneratedStats, GeneratorConfig, generate
from tests.node.objects import (
    KAFKA_METADATA,
    NODES,
    VALUES,
    archive_job,
    backfill,
    branch_rows,
    driver_log,
    kubectl,
    phase_of,
    pod,
    pods_of,
    removed_after,
    running,
)
from tests.secured_kafka import secured


def ended(kube: Kubernetes, namespace: str, name: str) -> dict[str, Any] | None:
    status = kube.plane.admin.get(path_of("Pod", namespace, name)).body.get("status") or {}
    return status if status.get("phase") in ("Succeeded", "Failed") else None


def create(kube: Kubernetes, body: dict[str, Any], node: str | None = None) -> None:
    """The pod, placed by kube-scheduler (on ``node`` when given: its hostname label)."""
    if node is not None:
        body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    meta = body["metadata"]
    kube.plane.admin.ok(kube.plane.admin.create(path_of("Pod", meta["namespace"]), body), meta["name"])


@pytest.fixture(scope="module")
def namespace(kube: Kubernetes) -> str:
    return kube.plane.namespace("node-tests")


def test_the_nodes_are_ready_each_in_a_zone_of_its_own(kube: Kubernetes) -> None:
    items = kube.plane.admin.get(path_of("Node")).body["items"]
    assert sorted(n["metadata"]["name"] for n in items) == [n.name for n in kube.nodes] == NODES
    zones = {n["metadata"]["name"]: n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in items}
    assert sorted(zones.values()) == ["zone-a", "zone-b", "zone-c"], zones
    addresses = {n["metadata"]["name"]: n["status"]["addresses"][0]["address"] for n in items}
    assert addresses == {n.name: n.address.ip for n in kube.nodes}


def test_a_pod_runs_from_an_image_built_here_with_an_address_of_its_nodes_range(
    kube: Kubernetes, namespace: str
) -> None:
    node = kube.nodes[-1]
    create(kube, pod(namespace, "hello", BUSYBOX, "echo hello from $(hostname)"), node.name)
    status = eventually(lambda: ended(kube, namespace, "hello"), "the pod to end", timeout=90, every=0.5)
    assert status["phase"] == "Succeeded", status
    assert ipaddress.ip_address(status["podIP"]) in ipaddress.ip_network(node.address.pods)
    assert status["hostIP"] == node.address.ip
    assert kube.pod_log(namespace, "hello") == "hello from hello\n", "read through the API server from the kubelet"


def test_pods_reach_each_other_across_nodes_and_have_no_route_out_of_the_machine(
    kube: Kubernetes, namespace: str
) -> None:
    serve = "while true; do echo served by $(hostname) | nc -l -p 8080; done"
    first, second = kube.nodes[0], kube.nodes[1]
    create(kube, pod(namespace, "server", BUSYBOX, serve), first.name)

    def address() -> str | None:
        status = kube.plane.admin.get(path_of("Pod", namespace, "server")).body.get("status") or {}
        return status.get("podIP") if status.get("phase") == "Running" else None

    ip = eventually(address, "the server pod running", timeout=90, every=0.5)
    assert ipaddress.ip_address(ip) in ipaddress.ip_network(first.address.pods)
    # the server may take a moment to listen after its container started
    fetch = f"for i in 1 2 3 4 5 6 7 8 9 10; do nc -w 5 {ip} 8080 </dev/null && break; sleep 1; done; ip route"
    create(kube, pod(namespace, "client", BUSYBOX, fetch), second.name)
    status = eventually(lambda: ended(kube, namespace, "client"), "the client pod to end", timeout=90, every=0.5)
    assert status["phase"] == "Succeeded", status
    served, *routes = kube.pod_log(namespace, "client").splitlines()
    assert served == "served by server", "from a pod on another node"
    allowed = (PODS, SERVICES, second.address.pods)
    assert routes and all(r.startswith(allowed) for r in routes), f"only the cluster's ranges: {routes}"
    kube.plane.admin.delete(path_of("Pod", namespace, "server"))


def test_a_pod_reaches_the_api_server_through_the_kubernetes_service(kube: Kubernetes, namespace: str) -> None:
    """What every in-cluster client does (the operator's pod, a Spark driver creating its
    executors): KUBERNETES_SERVICE_HOST, a Service's cluster IP, taken to the API server by
    its node's kube-proxy."""
    probe = (
        'for i in 1 2 3 4 5 6 7 8 9 10; do nc -w 3 "$KUBERNETES_SERVICE_HOST" 443 </dev/null && echo reached && exit 0;'
        " sleep 1; done; exit 1"
    )
    create(kube, pod(namespace, "client-of-the-api", BUSYBOX, probe), kube.nodes[-1].name)
    status = eventually(lambda: ended(kube, namespace, "client-of-the-api"), "the probe to end", timeout=90, every=0.5)
    assert status["phase"] == "Succeeded", kube.pod_log(namespace, "client-of-the-api")
    assert kube.pod_log(namespace, "client-of-the-api").strip() == "reached"


def test_a_pod_resolves_services_by_name_through_the_clusters_dns_from_every_node(
    kube: Kubernetes, namespace: str
) -> None:
    """CoreDNS, as a cluster's own, on one node: what Spark's executors need to reach their
    driver by its Service's name in cluster mode, wherever each runs."""
    name = "kubernetes.default.svc.cluster.local"
    probe = f"for i in 1 2 3 4 5 6 7 8 9 10; do nslookup {name} && exit 0; sleep 1; done; exit 1"
    for node in kube.nodes:
        create(kube, pod(namespace, f"resolver-{node.address.index}", BUSYBOX, probe), node.name)
    for node in kube.nodes:
        resolver = f"resolver-{node.address.index}"
        status = eventually(lambda r=resolver: ended(kube, namespace, r), "the lookup to end", timeout=90, every=0.5)
        log = kube.pod_log(namespace, resolver)
        assert status["phase"] == "Succeeded", f"{node.name}: {log}"
        assert "10.96.0.1" in log, log


# --- a StreamingJob applied with kubectl, run by the spark-operator from our images ----------


def last_progress(cluster: LocalCluster) -> float | None:
    """The rmi job's ``kappa_streamingjob_last_progress_timestamp_seconds`` on the operator's
    metrics port (its pod's address), None before it is exported."""
    series = 'kappa_streamingjob_last_progress_timestamp_seconds{namespace="default",sink="attributed_plays",'
    for line in operator_metrics(cluster).splitlines():
        if line.startswith(series + 'streamingjob="rmi"}'):
            return float(line.rsplit(" ", 1)[1])
    return None


def operator_metrics(cluster: LocalCluster) -> str:
    (leader,) = pods_of(cluster, OPERATOR_NAMESPACE, OPERATOR_LEADER)
    return requests.get(f"http://{leader['status']['podIP']}:8080/metrics", timeout=10).text


def test_a_streaming_job_applied_with_kubectl_runs_as_driver_and_executor_pods_and_commits_its_sink(
    cluster: LocalCluster, history: GeneratedStats
) -> None:
    """The whole path a first install takes: the operator (in its pod, the chart's RBAC) renders
    the job's SparkApplication; the spark-operator (its own chart, its webhook) submits it; the
    driver pod from our image starts its executor pod, which reaches it through the driver's
    Service by name (CoreDNS); the driver reads its JobConfig ConfigMap, reads the sources from
    the catalog's database and S3, commits the Iceberg sink, writes checkpoints to S3 with the
    credentials of the job's envFrom, and reports progress, which the operator reads from S3
    into status and its gauges."""
    job = cluster.streaming_job(yaml.safe_load((ROOT / "examples" / "rmi-streamingjob.yaml").read_text()))
    for source in job["spec"]["sources"].values():
        source["live"]["startingPosition"] = "earliest"
    job["spec"]["triggerInterval"] = "5s"
    kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump(job))
    ns = job["metadata"]["namespace"]

    for role in ("driver", "executor"):
        selector = f"spark-role={role},sparkoperator.k8s.io/app-name=rmi"
        pods = eventually(lambda s=selector: running(cluster, ns, s), f"the {role} pod Running", timeout=240, every=2)
        assert pods[0]["spec"]["containers"][0]["image"] == SPARK_IMAGE

    catalog = cluster.host_catalog()

    def committed() -> int | None:
        if not catalog.table_exists("marts.attributed_plays"):
            return None
        rows = catalog.load_table("marts.attributed_plays").scan().to_arrow().num_rows
        return rows or None

    rows = eventually(committed, "the sink's first commit", timeout=300, every=3)
    assert 0 < rows <= history.playbacks

    def reported() -> dict[str, Any] | None:
        status = cluster.kube.plane.admin.get(path_of("StreamingJob", ns, "rmi")).body.get("status") or {}
        progress = [p for p in status.get("progress") or [] if p.get("batchId") is not None]
        return status if progress else None

    status = eventually(reported, "the driver's progress in status", timeout=120, every=2)
    assert status["phase"] == "Running", status
    assert status["progress"][0]["sink"] == "attributed_plays"
    # the operator's gauges (what Prometheus scrapes from its pod) carry the driver's figures,
    # and move with its next reports (idle batches' heartbeats every triggerInterval)
    first = eventually(lambda: last_progress(cluster), "the job's gauges", timeout=60, every=2)
    eventually(lambda: (last_progress(cluster) or 0) > first, "the gauge to move", timeout=90, every=2)
    for operator in pods_of(cluster, OPERATOR_NAMESPACE, OPERATOR_PODS):  # the leader and the follower
        log = cluster.kube.pod_log(OPERATOR_NAMESPACE, operator["metadata"]["name"])
        assert " 403" not in log and "Forbidden" not in log, log[-3000:]


# --- Prometheus on the cluster, as the chart configures it (issue 61) -------------------------

DRIVER_GAUGES_CHECKED = ("inputRate_total", "processingRate_total", "latency", "states_rowsTotal")
"""Spark's own gauges of a streaming query (``spark.sql.streaming.metricsEnabled``), renamed
``kappa_spark_streaming_<gauge>`` by the chart's scrape job: input and processing rates (rows/s),
the last batch's duration (ms) and its state store rows."""
PROMETHEUS_USER = "system:serviceaccount:kappa-system:kappa-kappa-operator-prometheus"


def stalled_alerts(cluster: LocalCluster, state: str) -> list[dict[str, Any]]:
    assert cluster.prometheus is not None
    return [
        a
        for a in cluster.prometheus.alerts()
        if a["labels"].get("alertname") == "KappaStreamingJobStalled"
        and a["labels"].get("streamingjob") == "rmi"
        and a["state"] == state
    ]


def test_prometheus_finds_the_operator_and_the_drivers_through_the_api_and_the_charts_alert_fires_and_resolves(
    cluster: LocalCluster,
) -> None:
    """The Prometheus `kappa cluster up` runs, configured only by the chart (its ConfigMap's scrape
    jobs and rule file, its ServiceAccount's Roles): it finds the operator through its Service's
    endpoints and the rmi job's driver pod (above) through the pods' labels, and has Spark's own
    streaming metrics of that driver with the job's labels. The driver frozen (SIGSTOP to every
    process of its container, as a hung JVM is), the operator sets Stalled past the job's
    progressTimeout and the chart's alert fires; continued, it resolves. Nothing the
    ServiceAccount asked was refused."""
    prometheus = cluster.prometheus
    assert prometheus is not None
    assert {"KappaStreamingJobStalled", "KappaAlignmentLagHigh", "KappaBackfillStalled"} <= set(prometheus.rule_names())
    (up,) = eventually(lambda: prometheus.query('up{job="kappa-operator"} == 1'), "the operator's scrape", 120, 1)
    assert up["metric"]["pod"].startswith("kappa-kappa-operator-"), up
    for gauge in DRIVER_GAUGES_CHECKED:
        selector = f'kappa_spark_streaming_{gauge}{{namespace="{JOBS}",streamingjob="rmi"}}'
        found = eventually(lambda q=selector: prometheus.query(q), f"the rmi driver's {gauge}", 180, 1)
        assert {s["metric"]["job"] for s in found} == {"kappa-spark-drivers"}, found
        assert all(s["metric"]["pod"].startswith("rmi-") and s["metric"].get("query") for s in found), found
    (driver,) = running(cluster, JOBS, "spark-role=driver,sparkoperator.k8s.io/app-name=rmi") or []

    health = {"spec": {"health": {"progressTimeout": "20s"}}}
    kubectl(cluster, "patch", "sj", "rmi", "--type=merge", "-p", json.dumps(health))
    frozen = cluster.kube.signal_pod(JOBS, driver["metadata"]["name"], signal.SIGSTOP)
    try:
        firing = "KappaStreamingJobStalled firing for rmi"
        eventually(lambda: stalled_alerts(cluster, "firing"), firing, timeout=240, every=2)
    finally:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        kubectl(cluster, "patch", "sj", "rmi", "--type=merge", "-p", json.dumps({"spec": {"health": None}}))
    eventually(
        lambda: not stalled_alerts(cluster, "firing") and not stalled_alerts(cluster, "pending"),
        "KappaStreamingJobStalled resolved for rmi",
        timeout=240,
        every=2,
    )
    assert cluster.kube.plane.forbidden(PROMETHEUS_USER) == []


# --- the dashboard people watch, served by Perses and drawn by a browser (issue 61) --------

PLAYBACKS_FROM = "2026-11-01T12:25:00"
SHOTS = "KAPPA_DASHBOARD_SHOTS"
"""Where the test also saves its screenshots (the README's is docs/dashboard/01-alignment.png)."""
NO_DATA_HERE = {
    "Reconcile errors": "no reconcile fails in this run",
    "Kafka consumer lag": "the rmi job reads Iceberg tables, no Kafka topic (the Kafka tests come later)",
    "Queue wait": "no Backfill waits in the queue: backfills.maxConcurrent is not reached",
    "External calls against their limit": "no job here calls an external service",
    "Time waiting for the call limit": "no job here calls an external service",
}
"""The panels that may have no series in this scenario, and why: every other panel must have
some (these may too, from the tests before: their objects stay)."""


def panel_series(perses: Any, panel: Any, values: dict[str, str], start: float, end: float) -> list[dict[str, Any]]:
    """A panel's series as its Perses chart asks for them: each query's PromQL with the
    dashboard's variables set as the URL sets them, through Perses's datasource proxy."""
    found = []
    for query in panel.queries:
        promql = expression(panel, query).replace("$__rate_interval", "1m")
        for name, value in values.items():
            promql = promql.replace(f"${name}", value)
        found += perses.query_range(promql, start, end, 5)
    return found


def test_the_dashboard_in_perses_shows_a_backfill_held_back_by_max_drift_and_a_browser_draws_each_row(
    cluster: LocalCluster, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    """Perses, provisioned with the chart's dashboard, on the cluster's Prometheus; the rmi job
    live (above) and a Backfill whose playbacks read ahead of its impressions by more than its
    maxDrift, so the coordinator holds them back. Through Perses's own query API: every panel of
    the Alignment row has series of the Backfill's group and members; the held-back member's
    lag is > 0 while the drift bound cuts its admission, then 0 once the impressions catch up;
    every panel of the dashboard has data or is in ``NO_DATA_HERE`` with why. Chromium draws
    each row over the last 3 minutes (held back, caught up, finished), and the lag panel's legend
    names the member (its Max: by how much)."""
    perses = cluster.perses
    assert perses is not None
    served = perses.served_dashboard()
    shipped = json.loads((ROOT / "charts" / "kappa-operator" / "dashboards" / "kappa.perses.json").read_text())
    assert served["spec"]["panels"] == shipped["spec"]["panels"], "the chart's dashboard, as provisioned"
    began = time.time() - 60
    name = "rmi-dashboard"
    alignment = {"mode": "aligned", "maxDrift": "1m", "batchRowBudget": 0}
    # The window's playbacks start it (12:40) and the impressions they attribute to its
    # warm-up (12:10): playbacks before 12:25 only make output before the window, so this
    # Backfill reads them from 12:25, 15 minutes ahead of the impressions, and the coordinator
    # holds them back until the impressions are within maxDrift.
    sources = {"playbacks": {"filter": f"event_ts >= '{PLAYBACKS_FROM}'"}}
    kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump(backfill(name, alignment=alignment, sources=sources)))

    def held_back() -> list[dict[str, Any]] | None:
        failed = phase_of(cluster, "Backfill", name, "Failed")
        assert failed is None, failed["message"]
        promql = (
            f'kappa_alignment_lag_seconds{{group=~".*[.]{name}",member=~".*/playbacks"}} > 0 '
            f"and on (group, member) kappa_alignment_member_throttled == 1"
        )
        return perses.query_range(promql, began, time.time(), 5) or None

    (held,) = eventually(held_back, "the playbacks held back with lag > 0", timeout=420, every=3)
    group, member = held["metric"]["group"], held["metric"]["member"]
    by = max(float(v) for _, v in held["values"])
    assert 60 < by <= 15 * 60, f"held back by more than maxDrift, at most the 15 minutes it starts ahead: {held}"

    def released() -> list[dict[str, Any]] | None:
        promql = f'kappa_alignment_lag_seconds{{group="{group}",member="{member}"}} == 0'
        return perses.query_range(promql, held["values"][0][0], time.time(), 5) or None

    eventually(released, f"{member} released: lag 0, the impressions caught up", timeout=420, every=3)

    status = eventually(
        lambda: phase_of(cluster, "Backfill", name, "Succeeded", "Failed"), "the Backfill to finish", 420, 3
    )
    assert status["phase"] == "Succeeded", status

    # a person's view of it: each row drawn by Chromium (the last 3 minutes: the Backfill's whole run)
    out = Path(os.environ.get(SHOTS) or tmp_path / "shots")
    url = f"{perses.dashboard_url}?start=3m&refresh=0s&var-group={group}&var-namespace=$__all"
    shots = row_screenshots(url, out)
    assert [s.title for s in shots] == [row.title for row in kappa_dashboard().rows]
    assert all(s.png.stat().st_size > 10_000 for s in shots), [(s.png, s.png.stat().st_size) for s in shots]
    lag_legend = shots[0].text.split("Alignment lag per member", 1)[1].split("Throttled members", 1)[0]
    assert member in lag_legend, f"the lag panel's legend names the held-back member: {lag_legend}"

    values = {"group": group, "namespace": ".*"}
    for panel in kappa_dashboard().rows[0].panels:
        found = panel_series(perses, panel, values, began, time.time())
        assert found, f"{panel.title}: no series of {group}"
        grouped = [s["metric"] for s in found if "group" in s["metric"]]  # report latency: all groups'
        assert all(m["group"] == group for m in grouped), (panel.title, grouped[:3])
    members = {s["metric"]["member"] for s in perses.query_range(
        f'kappa_alignment_member_watermark_seconds{{group="{group}"}}', began, time.time(), 5)}  # fmt: skip
    assert {m.rsplit("/", 1)[1] for m in members} == {"impressions", "playbacks"}, members
    empty = {
        panel.title
        for panel in kappa_dashboard().panels()
        if not panel_series(perses, panel, values, began, time.time())
    }
    assert empty <= set(NO_DATA_HERE), f"no data, and not said why: {sorted(empty - set(NO_DATA_HERE))}"
    record_property("measured", json.dumps({"held_back": member, "by_s": round(by, 1), "no_data": sorted(empty)}))


# --- a Backfill of that job's history, aligned through the coordinator, and kappa run's ------


def test_a_backfill_with_two_aligned_sources_runs_in_pods_and_equals_the_same_backfill_by_kappa_run(
    cluster: LocalCluster, history: GeneratedStats, by_kappa_run: list[dict[str, Any]]
) -> None:
    """Driver and executor pods of the Backfill; its driver reaches the coordinator through the
    chart's Service with the token scoped to its alignment group (from a Secret, set on the pod
    by the spark-operator's webhook); the branch is validated against main and published; and
    its rows are those the same Backfill writes when `kappa run` runs it on this machine,
    reading the same tables."""
    kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump(backfill("rmi-window")))
    seen: dict[str, dict[str, Any]] = {}

    def succeeded() -> dict[str, Any] | None:
        for found in pods_of(cluster, JOBS, "sparkoperator.k8s.io/app-name=rmi-window-backfill"):
            seen[found["metadata"]["name"]] = found
        status = phase_of(cluster, "Backfill", "rmi-window", "Succeeded", "Failed")
        return status

    status = eventually(succeeded, "the Backfill to finish", timeout=420, every=2)
    assert status["phase"] == "Succeeded", status
    assert status["published"][0]["matchRatio"] == 1.0, status["published"]
    roles = {p["metadata"]["labels"].get("spark-role") for p in seen.values()}
    assert roles == {"driver", "executor"}, sorted(seen)
    # one application: validated and published in the backfill's own driver (issue 58)
    apps = cluster.kube.plane.admin.get(path_of("SparkApplication", JOBS)).body.get("items") or []
    assert [a["metadata"]["name"] for a in apps if a["metadata"]["name"].startswith("rmi-window-")] == [
        "rmi-window-backfill"
    ]
    driver = next(p for p in seen.values() if p["metadata"]["labels"]["spark-role"] == "driver")
    env = {e["name"]: e for e in driver["spec"]["containers"][0].get("env") or []}
    token = env["KAPPA_COORDINATOR_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert token["name"] == "rmi-window-backfill-coordinator", "the scoped token, from its Secret, by the webhook"
    # the alignment group's watermark as the coordinator holds it (a driver that never reached
    # the coordinator leaves it unset): at least the warm-up's start, 30 minutes before the window
    assert status["globalWatermark"] >= "2026-11-01T12:10:00Z", status

    # the same Backfill by `kappa run`, into a table of its own, from the same history
    on_node = branch_rows(cluster.host_catalog(), "marts.attributed_plays", status["branch"])
    assert on_node and on_node == by_kappa_run, (len(on_node), len(by_kappa_run))


def test_kubectl_delete_of_a_running_backfill_removes_its_pods_and_objects_and_leaves_main_untouched(
    cluster: LocalCluster, history: GeneratedStats
) -> None:
    catalog = cluster.host_catalog()
    main_before = catalog.load_table("marts.attributed_plays").refs()["main"].snapshot_id
    kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump(backfill("rmi-deleted")))
    selector = "sparkoperator.k8s.io/app-name=rmi-deleted-backfill"
    eventually(
        lambda: running(cluster, JOBS, selector + ",spark-role=driver"), "its driver Running", timeout=240, every=1
    )
    started = time.monotonic()
    kubectl(cluster, "delete", "backfill", "rmi-deleted", "--wait=true", "--timeout=120s")
    plane = cluster.kube.plane

    def gone() -> bool:
        left = pods_of(cluster, JOBS, selector)
        app = plane.admin.get(path_of("SparkApplication", JOBS, "rmi-deleted-backfill")).status
        secret = plane.admin.get(path_of("Secret", JOBS, "rmi-deleted-backfill-coordinator")).status
        return not left and app == 404 and secret == 404

    eventually(gone, "its pods, SparkApplication and Secret gone", timeout=DELETE_BOUND, every=1)
    took = time.monotonic() - started
    assert took < DELETE_BOUND, took
    assert catalog.load_table("marts.attributed_plays").refs()["main"].snapshot_id == main_before


DELETE_BOUND = 90.0
"""Seconds from `kubectl delete` to the last pod gone: the operator's finalizer, the
SparkApplication's deletion, the spark-operator's and the garbage collector's, and the pods'
graceful termination (30 s by default) on one node."""


# --- Kafka: the broker on the node's bridge, read by the job's pods ---------------------------


def test_a_streaming_job_reads_the_kafka_broker_from_its_pods(cluster: LocalCluster, history: GeneratedStats) -> None:
    """The broker listens on, and advertises, the node's bridge address: the driver asks it for
    offsets and the executors fetch the records. The history's rows go to two topics as JSON
    (the example's Kafka job parses each value into its history table's schema), and the job's
    sink commits the attributed plays.

    As a company's broker would have it, impressions are read through the SASL_SSL listener
    (SCRAM over TLS, the cluster's own CA) with the user's and the CA's Secrets applied with
    kubectl beside the job; playbacks through PLAINTEXT. The password then appears nowhere but
    in its Secret. Then the password is rotated to a wrong one: the job restarts with it, and the
    listener's refusal is one line on the job (no Java trace), naming the source and the fix."""
    catalog = cluster.host_catalog()
    producer = Producer({"bootstrap.servers": cluster.broker.bootstrap, "enable.idempotence": True})
    for topic in ("impressions", "playbacks"):
        cluster.broker.create_topic(topic, partitions=2, config={"retention.ms": "-1"})
        rows = catalog.load_table(f"ingest.{topic}").scan().to_arrow().drop_columns(["__metadata__"])
        for row in rows.to_pylist():
            producer.produce(topic, value=json.dumps(row, default=lambda v: v.isoformat()).encode())
    assert producer.flush(60) == 0
    assert cluster.broker.secured is not None
    password = cluster.broker.secured.scram[KAFKA_USER]
    ca = cluster.broker.secured.authority.ca.read_text()
    kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump_all(kafka_secrets(password, ca)))
    job = cluster.streaming_job(yaml.safe_load((ROOT / "examples" / "kafka-rmi-streamingjob.yaml").read_text()))
    job = secured(job, "impressions")
    for name, source in job["spec"]["sources"].items():
        source["live"]["bootstrapServers"] = cluster.broker.bootstrap
        source["live"]["startingPosition"] = "earliest"
        source["history"]["table"] = f"ingest.{name}"
    job["spec"]["sources"]["impressions"]["live"]["bootstrapServers"] = cluster.broker.bootstrap_of(SASL_SSL)
    job["spec"]["triggerInterval"] = "5s"
    name, sink = job["metadata"]["name"], job["spec"]["sinks"]["attributed_plays"]["table"]
    with removed_after(cluster, ("streamingjob", name), ("secret", "kafka-user"), ("secret", "kafka-ca")):
        kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump(job))

        def committed() -> int | None:
            if not catalog.table_exists(sink):
                return None
            return catalog.load_table(sink).scan().to_arrow().num_rows or None

        rows = eventually(committed, "the Kafka job's first commit", timeout=300, every=3)
        assert 0 < rows <= history.playbacks
        app = json.loads(kubectl(cluster, "get", "sparkapplication", name, "-n", JOBS, "-o", "json"))
        mounts = {m["mountPath"] for m in app["spec"]["driver"]["volumeMounts"]}
        assert {"/etc/kappa/kafka/kafka-user", "/etc/kappa/kafka/kafka-ca"} <= mounts, mounts
        config = kubectl(cluster, "get", "configmap", "-n", JOBS, "-o", "json")
        assert cluster.broker.bootstrap_of(SASL_SSL) in config, "the job's config names the SASL_SSL listener"
        driver = driver_log(cluster, name)
        assert_nowhere(cluster, password, driver)

        # Rotated to a wrong password: restarted with it (the operator looks at a running job's
        # Secrets every 30 s), and refused by the listener, said on the job.
        wrong = "not-the-password-" + password[:4]
        rotated = time.monotonic()
        kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump_all(kafka_secrets(wrong, ca)))

        def refused() -> dict[str, Any] | None:
            status = cluster.kube.plane.admin.get(path_of("StreamingJob", JOBS, name)).body.get("status") or {}
            return status if "refused the SASL username or password" in str(status.get("message")) else None

        status = eventually(refused, "the listener's refusal on the job", timeout=240, every=2)
        print(f"rotated to a wrong password -> refusal on the job: {time.monotonic() - rotated:.1f} s")
        message = status["message"]
        listener = f"SASL_SSL listener {cluster.broker.bootstrap_of(SASL_SSL)}"
        assert f"sources.impressions: {listener}: " in message, message
        assert "check the username and password keys" in message, message
        assert "\tat " not in message and "Traceback" not in message, "one line, no trace"
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "False" and "refused the SASL username or password" in ready["message"]
        assert_nowhere(cluster, wrong, "")


def kafka_secrets(password: str, ca: str) -> list[dict[str, Any]]:
    """The Secrets COMPANY's block names: the SCRAM user's, and the CA the broker's certificate
    is signed by."""
    return [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": JOBS}, "stringData": data}
        for name, data in (("kafka-user", {"username": KAFKA_USER, "password": password}), ("kafka-ca", {"ca.crt": ca}))
    ]


def assert_nowhere(cluster: LocalCluster, value: str, driver: str) -> None:
    """``value`` (a Secret's) is in none of what the operator and the job write: applications,
    ConfigMaps, the jobs and their status, Events, the driver's and the operator's logs."""
    written = {
        kind: kubectl(cluster, "get", kind, "-n", JOBS, "-o", "json")
        for kind in ("sparkapplications", "configmaps", "streamingjobs", "events")
    }
    written["driver log"] = driver
    operators = path_of("Pod", OPERATOR_NAMESPACE) + f"?labelSelector={OPERATOR_PODS}"
    for found in cluster.kube.plane.admin.get(operators).body["items"]:
        written[f"operator log {found['metadata']['name']}"] = cluster.kube.pod_log(
            OPERATOR_NAMESPACE, found["metadata"]["name"]
        )
    assert [where for where, text in written.items() if value in text] == [], "a Secret's value outside its Secret"


def test_a_job_bootstraps_from_its_archive_then_takes_over_the_topics_on_the_node(
    cluster: LocalCluster, history: GeneratedStats
) -> None:
    """The topics of the Kafka test archived by the example's archive job (one per topic, each
    in its driver's pod), then the bootstrap example: it reads both archives aligned from
    `bootstrap.from`, records where each partition takes over, switches to Kafka in the same
    query, and commits its sink. Their tasks run in their drivers: the Kafka test above reads
    the broker from executor pods."""
    catalog = cluster.host_catalog()
    archives = {topic: archive_job(cluster, topic, f"{values}, {KAFKA_METADATA}") for topic, values in VALUES.items()}
    for job in archives.values():  # side by side: their pods' starts overlap
        kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump(job))
    for topic in archives:
        produced = catalog.load_table(f"ingest.{topic}").scan().to_arrow().num_rows

        def archived(table: str = f"archive.{topic}", rows: int = produced) -> bool:
            return catalog.table_exists(table) and catalog.load_table(table).scan().to_arrow().num_rows == rows

        eventually(archived, f"{topic} archived", timeout=300, every=3)
    for job in archives.values():
        kubectl(cluster, "delete", "streamingjob", job["metadata"]["name"], "--wait=true", "--timeout=120s")
    job = cluster.streaming_job(
        yaml.safe_load((ROOT / "examples" / "kafka-rmi-bootstrap-streamingjob.yaml").read_text()), executors=0
    )
    for source in job["spec"]["sources"].values():
        source["live"]["bootstrapServers"] = cluster.broker.bootstrap
    job["spec"]["bootstrap"]["from"] = "2026-11-01T12:00:00Z"
    job["spec"]["triggerInterval"] = "5s"
    kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump(job))
    name, sink = job["metadata"]["name"], job["spec"]["sinks"]["attributed_plays"]["table"]

    def switched() -> dict[str, Any] | None:
        status = cluster.kube.plane.admin.get(path_of("StreamingJob", JOBS, name)).body.get("status") or {}
        return status if (status.get("bootstrap") or {}).get("switchedAt") else None

    status = eventually(switched, "the switch from the archives to Kafka", timeout=360, every=3)
    assert {o["topic"] for o in status["bootstrap"]["offsets"]} == set(VALUES), status["bootstrap"]
    assert catalog.load_table(sink).scan().to_arrow().num_rows > 0
    kubectl(cluster, "delete", "streamingjob", name, "--wait=true", "--timeout=120s")


# --- a blue/green upgrade --------------------------------------------------------------------


def produce_later(cluster: LocalCluster, shift: timedelta, suffix: str) -> int:
    """The history's records again, ``shift`` later in event time with ids of their own: what
    arrives while the upgrade runs. Returns how many."""
    catalog = cluster.host_catalog()
    producer = Producer({"bootstrap.servers": cluster.broker.bootstrap, "enable.idempotence": True})
    count = 0
    for topic, ids in (("impressions", ("impression_id",)), ("playbacks", ("playback_id",))):
        rows = catalog.load_table(f"ingest.{topic}").scan().to_arrow().drop_columns(["__metadata__"])
        for row in rows.to_pylist():
            row["event_ts"] = row["event_ts"] + shift
            for column in ids:
                row[column] = f"{row[column]}{suffix}"
            producer.produce(topic, value=json.dumps(row, default=lambda v: v.isoformat()).encode())
            count += 1
    assert producer.flush(60) == 0
    return count


def test_a_blue_green_upgrade_applied_with_kubectl_switches_main_once_on_the_node(
    cluster: LocalCluster, history: GeneratedStats
) -> None:
    """Issue 64 on the node: rmi v1 on Kafka (the topics and their archives from the tests
    above), then `kubectl apply` of v2 (a new column, a narrower attribution window) while
    records go on arriving. Green, the compare and switch applications run as pods; the job
    ends on green's checkpoint writing main. Main then holds each attribution once: v1's rows
    before the switch's boundary, v2's (with the new column) from it on. The time from the
    apply to the switch is printed per step (bench/RESULTS.md)."""
    catalog = cluster.host_catalog()
    example = yaml.safe_load((ROOT / "examples" / "kafka-rmi-bootstrap-streamingjob.yaml").read_text())
    example["metadata"]["name"] = name = "rmi-bluegreen"  # first: the checkpoint's location is named after it
    job = cluster.streaming_job(example, executors=0)
    spec = job["spec"]
    spec.pop("bootstrap")
    for source in spec["sources"].values():
        source["live"]["bootstrapServers"] = cluster.broker.bootstrap
        source["live"]["startingPosition"] = "earliest"
    spec["sinks"]["attributed_plays"]["table"] = table = "marts.rmi_bluegreen"
    spec["pipelineArgs"] = {"lateness": "30 minutes"}
    spec["triggerInterval"] = "5s"
    # green reads 2 hours of history (3 overlaps before blue's watermark) and compares 40 minutes
    spec["upgrade"] = {"mode": "blueGreen", "overlap": "40m", "catchUp": "20m", "minMatchRatio": 0}
    key = spec["sinks"]["attributed_plays"]["key"]
    status_path = path_of("StreamingJob", JOBS, name)

    def status() -> dict[str, Any]:
        return dict(cluster.kube.plane.admin.get(status_path).body.get("status") or {})

    with removed_after(cluster, ("streamingjob", name)):
        kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump(job))

        def blue_read_all() -> bool:
            marks = [p.get("watermark") for p in status().get("progress") or []]
            return bool(marks) and all(m and m >= "2026-11-01T13:29" for m in marks)

        eventually(blue_read_all, "blue read the topics (its watermark at the history's end)", timeout=420, every=3)
        v2 = json.loads(json.dumps(job))
        v2["spec"]["pipelineArgs"] = {
            "lateness": "30 minutes",
            "attribution_window": "20 minutes",
            "time_to_play": "true",
        }
        applied = time.monotonic()
        kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump(v2))
        later = produce_later(cluster, timedelta(hours=2), "-later")  # records go on arriving

        def upgraded() -> dict[str, Any] | None:
            s = status()
            up = s.get("upgrade") or {}
            assert up.get("step") not in ("GreenRemoved", "Refused"), up
            return (
                s if not up and s.get("lastStableHash") == s.get("configHash") and s.get("phase") == "Running" else None
            )

        seen_steps: list[dict[str, Any]] = []
        faults: dict[str, str] = {}
        """What was killed, each once: green's driver pod while it catches up, the leading
        operator's pod during the switch."""

        def inject(step: str | None) -> None:
            if step == "CatchingUp" and "green driver" not in faults:
                found = running(cluster, JOBS, f"sparkoperator.k8s.io/app-name={name}-green,spark-role=driver")
                if found:  # the Spark operator runs it again (OnFailure), on green's checkpoint
                    pod_name = found[0]["metadata"]["name"]
                    kubectl(
                        cluster, "delete", "pod", pod_name, "-n", JOBS, "--grace-period=0", "--force", "--wait=false"
                    )
                    faults["green driver"] = pod_name
            if step == "Switching" and "operator" not in faults:
                found = pods_of(cluster, OPERATOR_NAMESPACE, OPERATOR_LEADER)
                if found:  # the other replica leads and repeats the recorded step
                    pod_name = found[0]["metadata"]["name"]
                    kubectl(cluster, "delete", "pod", pod_name, "-n", OPERATOR_NAMESPACE, "--wait=false")
                    faults["operator"] = pod_name

        green_attempts = [0]
        """The most runs of green's driver its application counted (the Spark operator's rerun)."""

        def switched_and_promoted() -> dict[str, Any] | None:
            up = status().get("upgrade") or {}
            if up.get("steps"):
                seen_steps[:] = up["steps"]
            inject(up.get("step"))
            green = cluster.kube.plane.admin.get(path_of("SparkApplication", JOBS, f"{name}-green"))
            if green.status == 200:  # from GreenStarting to Switching
                attempts = int((green.body.get("status") or {}).get("executionAttempts") or 0)
                green_attempts[0] = max(green_attempts[0], attempts)
            return upgraded()

        final = eventually(switched_and_promoted, "the upgrade switched and promoted", timeout=1200, every=1)
        took = time.monotonic() - applied
        print(f"blue/green: kubectl apply of v2 -> promoted: {took:.0f} s; faults {faults}; steps {seen_steps}")
        assert set(faults) == {"green driver", "operator"}, f"both faults injected: {faults}"
        assert green_attempts[0] >= 2, f"green's driver ran again after its pod was deleted: {green_attempts}"
        assert [s["step"] for s in seen_steps][:7] == [
            "GreenStarting", "CatchingUp", "Comparing", "StoppingBlue", "Draining", "Switching", "Promoting",
        ], seen_steps  # fmt: skip
        assert final["checkpointLocation"].endswith(f"/checkpoints/{name}/green-g2")
        reasons = {e["reason"] for e in json.loads(kubectl(cluster, "get", "events", "-n", JOBS, "-o", "json"))["items"]
                   if e["involvedObject"]["name"] == name}  # fmt: skip
        assert {"GreenStarted", "CaughtUp", "Compared", "BlueStopped", "Switched", "Upgraded"} <= reasons, reasons

        t = catalog.load_table(table)
        switch = next(
            s for s in t.snapshots() if s.summary is not None and "kappa.boundary" in s.summary.additional_properties
        )
        boundary = switch.summary.additional_properties["kappa.boundary"]  # type: ignore[union-attr]

        def all_later_in_main() -> bool:
            rows = catalog.load_table(table).scan().to_arrow().to_pylist()
            return any(str(r["playback_id"]).endswith("-later") for r in rows) and len(rows) > 0

        eventually(all_later_in_main, "the promoted job writing main", timeout=300, every=3)
        rows = catalog.load_table(table).scan().to_arrow().to_pylist()
        keys = [tuple(r[k] for k in key) for r in rows]
        assert len(keys) == len(set(keys)), "each attribution once in main"
        from datetime import datetime as _dt

        b = _dt.fromisoformat(boundary)
        before = [r for r in rows if r["playback_ts"] < b]
        after = [r for r in rows if r["playback_ts"] >= b]
        assert before and after, (len(before), len(after), boundary)
        assert all(r["time_to_play_s"] is None for r in before), "v1's rows before the boundary"
        assert all(r["time_to_play_s"] is not None for r in after), "v2's rows from it on"
        assert all(r["time_to_play_s"] <= 20 * 60 for r in after), "v2's attribution window"
        assert "green-rmi-bluegreen-g2" not in t.metadata.refs, "green's branch removed"
        assert later > 0

        # v3's output differs beyond its minMatchRatio, then v4 cannot start: each time green is
        # removed with the reason on the job, and the running version (v2) never stops writing
        serving = json.loads(kubectl(cluster, "get", "sparkapplication", name, "-n", JOBS, "-o", "json"))
        for generation, edit, said in (
            (3, {"pipelineArgs": {**v2["spec"]["pipelineArgs"], "attribution_window": "3 minutes"},
                 "upgrade": {**spec["upgrade"], "minMatchRatio": 0.999}}, f"{table}: "),
            (4, {"pipeline": "spark_app.examples.rmi_v4:pipeline"}, "rmi_v4"),
        ):  # fmt: skip
            failing = json.loads(json.dumps(v2))
            failing["spec"].update(edit)
            kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump(failing))

            def removed(g: int = generation) -> dict[str, Any] | None:
                up = status().get("upgrade") or {}
                return up if up.get("step") == "GreenRemoved" and up.get("generation") == g else None

            up = eventually(removed, f"green g{generation} removed", timeout=600, every=2)
            assert said in up["reason"], up["reason"]
            assert status().get("rolledBackGeneration") == generation
            assert not kubectl(cluster, "get", "sparkapplication", f"{name}-green", "-n", JOBS, "--ignore-not-found")
            assert f"green-{name}-g{generation}" not in catalog.load_table(table).metadata.refs, "its branch removed"
            now = json.loads(kubectl(cluster, "get", "sparkapplication", name, "-n", JOBS, "-o", "json"))
            assert now["metadata"]["uid"] == serving["metadata"]["uid"], "the running version was never stopped"
        commits = len(catalog.load_table(table).snapshots())
        produce_later(cluster, timedelta(hours=4), "-after")
        eventually(
            lambda: len(catalog.load_table(table).snapshots()) > commits,
            "the running version writing main",
            timeout=300,
        )


def shifted_rows(catalog: Any, table: str, shift: timedelta, suffix: str) -> list[dict[str, Any]]:
    """``table``'s rows again, ``shift`` later (event and arrival time), each id with ``suffix``:
    more of the same input, arriving later."""
    rows = catalog.load_table(table).scan().to_arrow().to_pylist()
    for row in rows:
        row["event_ts"] += shift
        row["__metadata__"]["ingestion_ts"] += shift
        for column in ("impression_id", "playback_id"):
            if column in row:
                row[column] = f"{row[column]}{suffix}"
    return rows


def append_rows(catalog: Any, table: str, rows: list[dict[str, Any]], appends: int = 1) -> None:
    """``rows`` appended to ``table`` in ``appends`` snapshots, in arrival order."""
    import pyarrow as pa

    t = catalog.load_table(table)
    schema = t.schema().as_arrow()
    ordered = sorted(rows, key=lambda r: r["__metadata__"]["ingestion_ts"])
    size = -(-len(ordered) // appends)
    for start in range(0, len(ordered), size):
        catalog.load_table(table).append(pa.Table.from_pylist(ordered[start : start + size], schema=schema))


def test_a_blue_green_upgrade_of_rmi_on_live_appends_switches_main_exactly_on_the_node(
    cluster: LocalCluster, history: GeneratedStats, tmp_path: Path
) -> None:
    """Issue 64 on the rmi example's own sources: two Iceberg tables read by their appends
    (``icebergLive``, each table its own history), appends going on while `kubectl apply` of v2
    (a new column, a narrower attribution window) runs green beside blue, compares and switches.
    No late row is dropped (lateness 2 hours), so the output is exact whatever the batches: once
    every append is read, main holds v1's attributions before the boundary and v2's from it, each
    once and none missing, compared with `kappa run` of v1 and of v2 over the same appends."""
    catalog = cluster.host_catalog()
    catalog.create_namespace_if_not_exists("live")
    catalog.create_namespace_if_not_exists("oracle")
    later = {
        n: shifted_rows(catalog, f"ingest.{n}", timedelta(hours=2), "-later") for n in ("impressions", "playbacks")
    }
    after = {
        n: shifted_rows(catalog, f"ingest.{n}", timedelta(hours=4), "-after") for n in ("impressions", "playbacks")
    }
    for n in ("impressions", "playbacks"):
        schema = catalog.load_table(f"ingest.{n}").schema()
        for ns in ("live", "oracle"):
            catalog.create_table(f"{ns}.{n}", schema=schema)
        history_rows = catalog.load_table(f"ingest.{n}").scan().to_arrow().to_pylist()
        append_rows(catalog, f"live.{n}", history_rows, appends=3)
        append_rows(catalog, f"oracle.{n}", history_rows + later[n] + after[n])

    example = yaml.safe_load((ROOT / "examples" / "rmi-streamingjob.yaml").read_text())
    example["metadata"]["name"] = name = "rmi-live"
    job = cluster.streaming_job(example, executors=0)
    spec = job["spec"]
    for n, source in spec["sources"].items():
        source["live"].update(table=f"live.{n}", startingPosition="earliest")
        source["history"]["table"] = f"live.{n}"
    spec["sinks"]["attributed_plays"]["table"] = table = "marts.rmi_live"
    spec["pipelineArgs"] = {"lateness": "2 hours"}
    spec["triggerInterval"] = "5s"
    spec["upgrade"] = {"mode": "blueGreen", "overlap": "40m", "catchUp": "20m", "minMatchRatio": 0}
    v2 = json.loads(json.dumps(job))
    v2["spec"]["pipelineArgs"] = {"lateness": "2 hours", "attribution_window": "20 minutes", "time_to_play": "true"}

    # the oracles, on this machine while the node runs: each version over every append at once
    commands = []
    for version, manifest in (("v1", job), ("v2", v2)):
        local = json.loads(json.dumps(manifest))
        local["metadata"]["name"] = f"rmi-oracle-{version}"
        for n, source in local["spec"]["sources"].items():
            source["live"]["table"] = source["history"]["table"] = f"oracle.{n}"
        local["spec"]["sinks"]["attributed_plays"]["table"] = f"marts.rmi_live_oracle_{version}"
        local["spec"]["checkpoints"] = {"location": str(tmp_path / version / "checkpoints")}
        local["spec"].pop("upgrade")
        (tmp_path / version).mkdir()
        (tmp_path / version / "job.yaml").write_text(yaml.safe_dump(local))
        commands.append(
            [str(Path(sys.executable).parent / "kappa"), "run", str(tmp_path / version / "job.yaml"),
             "--state", str(tmp_path / version / "objects")]
        )  # fmt: skip

    def run_oracles() -> list[subprocess.CompletedProcess[str]]:  # one after the other: two cores
        env = {**os.environ, **cluster.store.environment()}
        return [subprocess.run(c, capture_output=True, text=True, timeout=900, env=env) for c in commands]

    oracles = ThreadPoolExecutor(max_workers=1).submit(run_oracles)
    status_path = path_of("StreamingJob", JOBS, name)

    def status() -> dict[str, Any]:
        return dict(cluster.kube.plane.admin.get(status_path).body.get("status") or {})

    with removed_after(cluster, ("streamingjob", name)):
        kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump(job))
        read_all = (history.last_event - timedelta(hours=2, minutes=1)).isoformat().replace("+00:00", "Z")

        def blue_read_all() -> bool:
            marks = [p.get("watermark") for p in status().get("progress") or []]
            return bool(marks) and all(m and m >= read_all for m in marks)

        eventually(blue_read_all, "blue read the tables (its watermark at the history's end)", timeout=420, every=3)
        applied = time.monotonic()
        kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump(v2))
        for n in ("impressions", "playbacks"):  # appends go on: blue reads them, green trails it
            append_rows(catalog, f"live.{n}", later[n], appends=2)
        steps: list[dict[str, Any]] = []

        def promoted() -> dict[str, Any] | None:
            s = status()
            up = s.get("upgrade") or {}
            assert up.get("step") not in ("GreenRemoved", "Refused"), up
            steps[:] = up.get("steps") or steps
            done = not up and s.get("lastStableHash") == s.get("configHash") and s.get("phase") == "Running"
            return s if done else None

        final = eventually(promoted, "the upgrade switched and promoted", timeout=900, every=1)
        print(
            f"blue/green on icebergLive: kubectl apply of v2 -> promoted: {time.monotonic() - applied:.0f} s; {steps}"
        )
        assert [s["step"] for s in steps][:7] == [
            "GreenStarting", "CatchingUp", "Comparing", "StoppingBlue", "Draining", "Switching", "Promoting",
        ], steps  # fmt: skip
        assert final["checkpointLocation"].endswith(f"/checkpoints/{name}/green-g2")
        t = catalog.load_table(table)
        switch = next(s for s in t.snapshots() if s.summary and "kappa.boundary" in s.summary.additional_properties)
        b = datetime.fromisoformat(switch.summary.additional_properties["kappa.boundary"])  # type: ignore[union-attr]
        assert f"green-{name}-g2" not in t.metadata.refs, "green's branch removed"
        for n in ("impressions", "playbacks"):  # and on, once the promoted job runs
            append_rows(catalog, f"live.{n}", after[n], appends=2)

        for done in oracles.result(timeout=1800):
            assert done.returncode == 0, f"{done.args}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
        key = ("playback_id", "impression_id")

        def rows_of(name: str) -> dict[tuple[Any, ...], dict[str, Any]]:
            got = catalog.load_table(name).scan().to_arrow().to_pylist()
            out = {tuple(r[k] for k in key): r for r in got}
            assert len(out) == len(got), f"{name}: each attribution once"
            return out

        old, new = rows_of("marts.rmi_live_oracle_v1"), rows_of("marts.rmi_live_oracle_v2")
        assert set(old) > set(new) and any(str(k[0]).endswith("-after") for k in new), (len(old), len(new))
        expected = {k for k, r in old.items() if r["playback_ts"] < b} | {
            k for k, r in new.items() if r["playback_ts"] >= b
        }

        def exact() -> dict[tuple[Any, ...], dict[str, Any]] | None:
            main = rows_of(table)
            return main if set(main) == expected else None

        main = eventually(
            exact, "main: v1's before the boundary, v2's from it, every append read", timeout=300, every=5
        )
        assert all(r["time_to_play_s"] is None for r in main.values() if r["playback_ts"] < b), "v1's rows"
        assert all(r["time_to_play_s"] == new[k]["time_to_play_s"] for k, r in main.items() if r["playback_ts"] >= b)


# --- a Rewind of the StreamingJob ------------------------------------------------------------


def test_a_rewind_restores_in_a_pod_undoes_the_sink_and_the_job_resumes_to_the_same_output(
    cluster: LocalCluster, history: GeneratedStats
) -> None:
    """A snapshot asked for (spec.snapshotTriggerNonce), an hour of history appended and
    committed by the live job, then a Rewind to the snapshot's batch: the restore application
    runs as a pod, the sink's commits after that batch are undone, the job resumes from the
    restored checkpoint, re-reads the hour and ends with exactly the rows it had."""
    plane = cluster.kube.plane
    catalog = cluster.host_catalog()
    kubectl(cluster, "patch", "sj", "rmi", "--type", "merge", "-p", '{"spec":{"snapshotTriggerNonce":1}}')

    def snapshot() -> int | None:
        status = plane.admin.get(path_of("StreamingJob", JOBS, "rmi")).body.get("status") or {}
        taken = [s for s in status.get("snapshots") or [] if s.get("takenAt")]
        return taken[-1]["batchIds"]["attributed_plays"] if taken else None

    batch = eventually(snapshot, "the snapshot taken", timeout=180, every=2)
    sink = catalog.load_table("marts.attributed_plays")
    rows_at_snapshot = sink.scan().to_arrow().num_rows
    more = GeneratorConfig(
        start=START + timedelta(hours=2), hours=1, impressions_per_hour=2000, commit_interval=timedelta(minutes=20),
        namespace="ingest", seed=11,
    )  # fmt: skip
    generate(catalog, more)
    # the live job reads one snapshot per micro-batch: the appended hour's six commits take some
    # batches; `before` is its output once every one of them is in (no change over 30 s)
    grown = eventually(lambda: settled(catalog, rows_at_snapshot), "the appended hour committed", timeout=300, every=1)
    before = sorted_rows(catalog)
    rewind = {
        "apiVersion": "kappa.dev/v1alpha1",
        "kind": "Rewind",
        "metadata": {"name": "rmi-back", "namespace": JOBS},
        "spec": {"jobRef": {"name": "rmi"}, "target": {"batchId": batch}, "resetSinks": True},
    }
    kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump(rewind))
    status = eventually(
        lambda: phase_of(cluster, "Rewind", "rmi-back", "Succeeded", "Failed"), "the Rewind", timeout=300, every=2
    )
    assert status["phase"] == "Succeeded", status
    assert status["restoredBatch"] <= batch and status["restores"][0]["filesRemoved"] > 0, status["restores"]
    app = plane.admin.get(path_of("SparkApplication", JOBS, status["restoreApplicationName"])).body
    assert app["status"]["applicationState"]["state"] == "COMPLETED", "the restore ran as a pod"
    eventually(
        lambda: sorted_rows(catalog) == before or None, "the resumed job back to the same rows", timeout=300, every=3
    )
    assert len(before) == grown


def settled(catalog: Any, above: int, quiet: float = 30.0) -> int | None:
    """The sink's row count once it is above ``above`` and has not changed for ``quiet`` s."""
    count = catalog.load_table("marts.attributed_plays").scan().to_arrow().num_rows
    if count <= above:
        return None
    time.sleep(quiet)
    return count if catalog.load_table("marts.attributed_plays").scan().to_arrow().num_rows == count else None


def sorted_rows(catalog: Any) -> list[dict[str, Any]]:
    rows = catalog.load_table("marts.attributed_plays").scan().to_arrow().to_pylist()
    return sorted(rows, key=lambda r: (r["playback_id"], r["impression_id"]))
