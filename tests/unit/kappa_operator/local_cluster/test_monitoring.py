"""The local cluster's Prometheus configuration (``kappa_operator.local_cluster.monitoring``):
the chart's scrape jobs, given only what being outside the cluster needs."""

from __future__ import annotations

from pathlib import Path

from kappa_operator.local_cluster.monitoring import outside_cluster, prometheus_config

JOBS = [
    {"job_name": "kappa-operator", "honor_labels": True,
     "kubernetes_sd_configs": [{"role": "endpoints", "namespaces": {"names": ["kappa-system"]}}],
     "relabel_configs": [{"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"}]},
    {"job_name": "static", "static_configs": [{"targets": ["10.244.0.1:9000"]}]},
]  # fmt: skip


def test_each_discovery_names_the_api_server_its_ca_and_the_token_and_nothing_else_changes() -> None:
    out = outside_cluster(JOBS, "https://10.244.0.1:6443", Path("/c/ca.crt"), Path("/p/token"))
    (sd,) = out[0]["kubernetes_sd_configs"]
    assert sd == {"role": "endpoints", "namespaces": {"names": ["kappa-system"]}, "api_server": "https://10.244.0.1:6443",
                  "tls_config": {"ca_file": "/c/ca.crt"},
                  "authorization": {"type": "Bearer", "credentials_file": "/p/token"}}  # fmt: skip
    assert {k: v for k, v in out[0].items() if k != "kubernetes_sd_configs"} == {
        k: v for k, v in JOBS[0].items() if k != "kubernetes_sd_configs"
    }
    assert out[1] == JOBS[1]
    assert "api_server" not in JOBS[0]["kubernetes_sd_configs"][0], "the chart's jobs are not changed in place"


def test_the_config_loads_the_rule_file_and_evaluates_often() -> None:
    config = prometheus_config(JOBS, Path("/p/rules.yaml"))
    assert config["rule_files"] == ["/p/rules.yaml"] and config["scrape_configs"] == JOBS
    assert config["global"]["evaluation_interval"] == "5s"
