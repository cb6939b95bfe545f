"""The chart's configuration for a Prometheus without the Prometheus Operator (issue 61): its
scrape jobs find exactly the pods the operator labels and the metrics its drivers serve, its rule
file is the PrometheusRule's alerts, and its ServiceAccount may read what discovery lists and
nothing else. tests/node/test_node.py runs a real Prometheus on it."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from kappa_operator.render.driver_metrics import DRIVER_METRICS, METRICS_NAMESPACE, METRICS_PATH, STREAMING_GAUGES
from kappa_operator.render.spark_application import MANAGED_BY, ROLE_LABEL, Owner
from tests.chart.test_chart import CHART, FULLNAME, NAMESPACE, PROMTOOL, needs_promtool, of_kind, one, render

JOBS = ["jobs-a", "jobs-b"]
ENABLED = {"prometheusConfig": {"enabled": True, "serviceAccount": {"create": True}, "interval": "15s"},
           "sparkServiceAccount": {"namespaces": JOBS}}  # fmt: skip


@pytest.fixture(scope="module")
def chart() -> Iterator[helm_python.Chart]:
    with helm_python.Chart.load(CHART) as loaded:
        yield loaded


@pytest.fixture(scope="module")
def rendered(chart: helm_python.Chart) -> list[dict[str, Any]]:
    return render(chart, ENABLED)


def prometheus_config(rendered: list[dict[str, Any]]) -> dict[str, str]:
    """The data of the chart's ConfigMap for Prometheus."""
    (config,) = [c for c in of_kind(rendered, "ConfigMap") if c["metadata"]["name"] == f"{FULLNAME}-prometheus"]
    return dict(config["data"])


def scrape_jobs(rendered: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    jobs = yaml.safe_load(prometheus_config(rendered)["scrape-configs.yaml"])["scrape_configs"]
    return {job["job_name"]: job for job in jobs}


def relabelled(rules: list[dict[str, Any]], labels: dict[str, str]) -> dict[str, str] | None:
    """Prometheus's ``relabel_configs`` (keep, replace) applied to ``labels``; None if dropped.
    RE2's regexes are anchored at both ends, as ``re.fullmatch``."""
    out = dict(labels)
    for rule in rules:
        value = ";".join(out.get(name, "") for name in rule["source_labels"])
        match = re.fullmatch(rule.get("regex", "(.*)"), value)
        if rule.get("action", "replace") == "keep":
            if match is None:
                return None
        elif match is not None:
            out[rule["target_label"]] = match.expand(rule.get("replacement", "$1").replace("$", "\\"))
    return out


def test_disabled_by_default_and_refused_without_the_jobs_namespaces(chart: helm_python.Chart) -> None:
    names = [c["metadata"]["name"] for c in of_kind(render(chart), "ConfigMap")]
    assert f"{FULLNAME}-prometheus" not in names
    with pytest.raises(Exception, match=r"prometheusConfig\.enabled needs sparkServiceAccount\.namespaces"):
        render(chart, {"prometheusConfig": {"enabled": True}})


def test_the_operator_is_found_through_its_services_metrics_endpoints(rendered: list[dict[str, Any]]) -> None:
    job = scrape_jobs(rendered)["kappa-operator"]
    service = one(rendered, "Service")
    assert job["honor_labels"] is True and job["scrape_interval"] == "15s"
    (sd,) = job["kubernetes_sd_configs"]
    assert sd == {"role": "endpoints", "namespaces": {"names": [NAMESPACE]}}
    endpoint = {"__meta_kubernetes_service_name": service["metadata"]["name"],
                "__meta_kubernetes_endpoint_port_name": "metrics", "__meta_kubernetes_pod_name": "kappa-1"}  # fmt: skip
    assert "metrics" in {p["name"] for p in service["spec"]["ports"]}
    assert relabelled(job["relabel_configs"], endpoint) == {**endpoint, "pod": "kappa-1"}
    assert (
        relabelled(job["relabel_configs"], {**endpoint, "__meta_kubernetes_endpoint_port_name": "coordinator"}) is None
    )


def driver_pod(kind: str, name: str, role: str = "driver", port: str = "spark-ui") -> dict[str, str]:
    """The discovery labels of a pod the operator's SparkApplication makes (its labels: ours
    (``Owner.labels``), Spark's role), on one of its container ports."""
    labels = {**Owner(kind, name, "jobs-a", "u").labels, ROLE_LABEL: role}
    meta = {f"__meta_kubernetes_pod_label_{re.sub('[^a-zA-Z0-9]', '_', k)}": v for k, v in labels.items()}
    return {**meta, "__meta_kubernetes_namespace": "jobs-a", "__meta_kubernetes_pod_name": f"{name}-driver",
            "__meta_kubernetes_pod_container_port_name": port, "__meta_kubernetes_pod_phase": "Running"}  # fmt: skip


def test_each_driver_is_scraped_on_sparks_own_endpoint_with_its_jobs_labels(rendered: list[dict[str, Any]]) -> None:
    job = scrape_jobs(rendered)["kappa-spark-drivers"]
    (sd,) = job["kubernetes_sd_configs"]
    assert sd == {"role": "pod", "namespaces": {"names": JOBS}}
    assert job["metrics_path"] == METRICS_PATH == DRIVER_METRICS["spark.metrics.conf.*.sink.prometheusServlet.path"]
    assert MANAGED_BY == {"app.kubernetes.io/managed-by": "kappa-operator"}
    live = relabelled(job["relabel_configs"], driver_pod("StreamingJob", "rmi"))
    assert live is not None
    assert (live["namespace"], live["streamingjob"], live["pod"]) == ("jobs-a", "rmi", "rmi-driver")
    backfill = relabelled(job["relabel_configs"], driver_pod("Backfill", "rmi-outage"))
    assert backfill is not None and backfill["backfill"] == "rmi-outage" and not backfill.get("streamingjob")
    for other in (
        driver_pod("StreamingJob", "rmi", role="executor"),
        driver_pod("StreamingJob", "rmi", port="driver-rpc-port"),
    ):
        assert relabelled(job["relabel_configs"], other) is None
    assert (
        relabelled(
            job["relabel_configs"], {**driver_pod("StreamingJob", "rmi"), "__meta_kubernetes_pod_phase": "Succeeded"}
        )
        is None
    )


def test_a_querys_gauges_are_renamed_with_the_query_as_a_label(rendered: list[dict[str, Any]]) -> None:
    """The names Spark's PrometheusServlet gives a streaming query's gauges: ``metrics_`` and the
    key with every other character ``_`` (``<spark.metrics.namespace>.driver.spark.streaming.
    <query>.<gauge>``), then ``_Value`` (and the same as ``_Number``, dropped)."""
    rules = scrape_jobs(rendered)["kappa-spark-drivers"]["metric_relabel_configs"]
    for kept in STREAMING_GAUGES:  # the names the dashboard's Spark drivers row reads
        gauge = kept.replace("_", "-")
        key = f"{METRICS_NAMESPACE}.driver.spark.streaming.rmi_attributed_plays.{gauge}"
        name = f"metrics_{re.sub('[^a-zA-Z0-9]', '_', key)}_Value"
        renamed = f"kappa_spark_streaming_{kept}"
        want = {"__name__": renamed, "query": "rmi_attributed_plays", "type": "gauges"}
        assert relabelled(rules, {"__name__": name, "type": "gauges"}) == want
    other = {"__name__": "metrics_kappa_driver_BlockManager_memory_memUsed_MB_Value", "type": "gauges"}
    assert relabelled(rules, other) == other, "Spark's other metrics stay as Spark names them"


def test_the_rule_file_is_the_prometheus_rules_alerts(chart: helm_python.Chart, rendered: list[dict[str, Any]]) -> None:
    rule = one(render(chart, {**ENABLED, "prometheusRule": {"enabled": True}}), "PrometheusRule")
    assert yaml.safe_load(prometheus_config(rendered)["rules.yaml"]) == {"groups": rule["spec"]["groups"]}


@needs_promtool
def test_promtool_checks_the_rule_file(rendered: list[dict[str, Any]], tmp_path: Path) -> None:
    config = next(c for c in of_kind(rendered, "ConfigMap") if c["metadata"]["name"] == f"{FULLNAME}-prometheus")
    (tmp_path / "rules.yaml").write_text(config["data"]["rules.yaml"])
    done = subprocess.run(
        [str(PROMTOOL), "check", "rules", str(tmp_path / "rules.yaml")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_prometheus_service_account_may_list_what_discovery_lists_and_nothing_more(
    rendered: list[dict[str, Any]],
) -> None:
    name = f"{FULLNAME}-prometheus"
    (account,) = [a for a in of_kind(rendered, "ServiceAccount") if a["metadata"]["name"] == name]
    assert account["metadata"]["namespace"] == NAMESPACE
    roles = [r for r in of_kind(rendered, "Role") if r["metadata"]["name"] == name]
    assert sorted(r["metadata"]["namespace"] for r in roles) == sorted([NAMESPACE, *JOBS])
    for role in roles:
        assert role["rules"] == [{"apiGroups": [""], "resources": ["pods", "services", "endpoints"],
                                  "verbs": ["get", "list", "watch"]}]  # fmt: skip
    bindings = [b for b in of_kind(rendered, "RoleBinding") if b["metadata"]["name"] == name]
    assert len(bindings) == len(roles)
    for binding in bindings:
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]
    assert not [r for r in of_kind(rendered, "ClusterRole") if r["metadata"]["name"] == name]
