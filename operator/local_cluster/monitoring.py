"""Prometheus beside the local cluster (issue 61), configured as the chart tells a Prometheus
without the Prometheus Operator: the chart's ``<release>-prometheus`` ConfigMap (its scrape jobs
for the operator and the Spark drivers, found through the Kubernetes API, and its alerts as a
rule file), read back from the cluster where helm installed it, and the chart's Prometheus
ServiceAccount's token for the discovery (its Roles: nothing more).

It runs on this machine, as the S3 API and the broker do, on the bridge the pods and the
machine share: it reaches the operator's and the drivers' pods at their addresses. Being
outside the cluster is the one thing added to the chart's configuration (``outside_cluster``):
each discovery names the API server, its CA and the token file, which a Prometheus in a pod
takes from its own mounted ServiceAccount.

The binary is Prometheus built from its Go module by cluster/build.sh, with only its Kubernetes
discovery (``remove_all_sd,enable_kubernetes_sd``): Debian's package is built without
``kubernetes_sd_configs``."""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kappa_operator.local_cluster.storage import end, listening, port_unused

PROMETHEUS_PORT = 9090
EVALUATION_INTERVAL = "5s"
"""How often the alerts are evaluated here (a local cluster shows an alert within seconds of
its ``for``; Prometheus's default is a minute)."""


def outside_cluster(
    scrape_configs: list[dict[str, Any]], server: str, ca: Path, token_file: Path
) -> list[dict[str, Any]]:
    """The chart's scrape jobs, written for a Prometheus in the cluster, for one outside it:
    each ``kubernetes_sd_configs`` entry given the API server, its CA and the ServiceAccount
    token a pod would have mounted. Pure."""
    out = json.loads(json.dumps(scrape_configs))
    for job in out:
        for sd in job.get("kubernetes_sd_configs") or []:
            sd["api_server"] = server
            sd["tls_config"] = {"ca_file": str(ca)}
            sd["authorization"] = {"type": "Bearer", "credentials_file": str(token_file)}
    return out


def prometheus_config(scrape_configs: list[dict[str, Any]], rule_file: Path) -> dict[str, Any]:
    """prometheus.yml: the scrape jobs and the rule file, alerts evaluated every
    ``EVALUATION_INTERVAL``. Pure."""
    return {
        "global": {"evaluation_interval": EVALUATION_INTERVAL},
        "rule_files": [str(rule_file)],
        "scrape_configs": scrape_configs,
    }


class PrometheusError(RuntimeError):
    pass


@dataclass
class Prometheus:
    """Prometheus in a child process of this machine, and the parts of its HTTP API the
    tests and `kappa cluster up` read (queries, targets, alerts, rules)."""

    host: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @classmethod
    def start(
        cls,
        workdir: Path,
        binary: Path,
        chart_config: dict[str, str],
        server: str,
        ca: Path,
        token: str,
        host: str,
        port: int = PROMETHEUS_PORT,
    ) -> Prometheus:
        """Prometheus on ``host:port`` with the chart's ConfigMap's data (``chart_config``:
        ``scrape-configs.yaml``, ``rules.yaml``), discovering through ``server`` with
        ``token``."""
        workdir.mkdir(parents=True, exist_ok=True)
        port_unused(host, port, "Prometheus")
        token_file = workdir / "token"
        token_file.write_text(token)
        token_file.chmod(0o600)
        rules = workdir / "rules.yaml"
        rules.write_text(chart_config["rules.yaml"])
        jobs = yaml.safe_load(chart_config["scrape-configs.yaml"])["scrape_configs"]
        config = workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump(prometheus_config(outside_cluster(jobs, server, ca, token_file), rules)))
        log = workdir / "prometheus.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [
                    str(binary),
                    f"--config.file={config}",
                    f"--storage.tsdb.path={workdir / 'data'}",
                    f"--web.listen-address={host}:{port}",
                    "--web.enable-lifecycle",  # POST /-/reload after the rule file changes
                    "--log.level=warn",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        prometheus = cls(host, port, proc, log)
        try:
            listening(host, port, 60, "Prometheus", log)
        except BaseException:
            prometheus.stop()
            raise
        return prometheus

    def api(self, path: str, **params: str) -> Any:
        """``data`` of a Prometheus HTTP API answer (``/api/v1/...``)."""
        url = f"{self.url}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.loads(resp.read())
        if body.get("status") != "success":
            raise PrometheusError(f"{path}: {body}")
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's series."""
        return list(self.api("/api/v1/query", query=promql)["result"])

    def targets(self) -> list[dict[str, Any]]:
        """The active targets discovery found, with their labels and last scrape's health."""
        return list(self.api("/api/v1/targets", state="active")["activeTargets"])

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts pending or firing now."""
        return list(self.api("/api/v1/alerts")["alerts"])

    def rule_names(self) -> list[str]:
        """The alerting rules loaded from the rule file."""
        groups = self.api("/api/v1/rules", type="alert")["groups"]
        return [rule["name"] for group in groups for rule in group["rules"]]

    def stop(self) -> None:
        end(self.proc, signal.SIGTERM)
