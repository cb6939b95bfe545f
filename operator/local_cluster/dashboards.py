"""The dashboard server beside the local cluster (issue 61): Perses, provisioned with the chart's
dashboard (charts/kappa-operator/dashboards/kappa.perses.json, generated from the one
definition in kappa_operator.dashboard) and the cluster's Prometheus as its default datasource.

Perses, not Grafana: Grafana is AGPL. It is built by cluster/perses/build.sh from its Go module
and npm packages; it runs here as Prometheus does, on the bridge the pods and the machine share,
with a file database in the cluster's directory (gone with it, as the cluster's data is).

The tests and `kappa cluster up` use its own HTTP API: the dashboard as the server holds it, and
its datasource proxy, which is how its UI asks Prometheus for each panel's series."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kappa_operator.dashboard.perses import PROJECT
from kappa_operator.local_cluster.storage import end, listening, port_unused

PERSES_PORT = 8080
DATASOURCE = "prometheus"
"""The GlobalDatasource every panel's query goes through (the project's default)."""


def perses_config(workdir: Path, plugins: Path) -> dict[str, Any]:
    """Perses's config.yaml: a file database and the provisioning folder under ``workdir``, the
    plugins built beside the binary (read only: archives are never unpacked into them). Pure."""
    return {
        "database": {"file": {"folder": str(workdir / "db"), "extension": "json"}},
        "provisioning": {"folders": [str(workdir / "provisioning")]},
        "plugin": {"path": str(plugins), "archive_path": str(workdir / "plugin-archives")},
    }


def provisioned(prometheus_url: str, scrape_interval: str, dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """What Perses is provisioned with: the dashboard's project, Prometheus as the default
    datasource (its proxy: the browser asks Perses, which asks Prometheus; its scrape interval,
    the smallest step a panel asks for: Perses's default, 15 s, would draw a Backfill of a
    minute as three points), the dashboard. Pure."""
    return [
        {"kind": "Project", "metadata": {"name": PROJECT}, "spec": {"display": {"name": "kappa-operator"}}},
        {
            "kind": "GlobalDatasource",
            "metadata": {"name": DATASOURCE},
            "spec": {
                "default": True,
                "plugin": {
                    "kind": "PrometheusDatasource",
                    "spec": {
                        "scrapeInterval": scrape_interval,
                        "proxy": {"kind": "HTTPProxy", "spec": {"url": prometheus_url}},
                    },
                },
            },
        },
        dashboard,
    ]


class DashboardServerError(RuntimeError):
    pass


@dataclass
class Perses:
    """Perses in a child process of this machine."""

    host: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path
    dashboard_name: str

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def dashboard_url(self) -> str:
        """The dashboard in a browser."""
        return f"{self.url}/projects/{PROJECT}/dashboards/{self.dashboard_name}"

    @classmethod
    def start(
        cls,
        workdir: Path,
        build: Path,
        prometheus_url: str,
        scrape_interval: str,
        dashboard: dict[str, Any],
        host: str,
        port: int = PERSES_PORT,
    ) -> Perses:
        """Perses from ``build`` (cluster/perses/build.sh's ``bin/perses`` and ``plugins/``) on
        ``host:port``, provisioned with ``dashboard``; returns once the dashboard is served."""
        workdir.mkdir(parents=True, exist_ok=True)
        port_unused(host, port, "Perses")
        (workdir / "provisioning").mkdir(exist_ok=True)
        (workdir / "plugin-archives").mkdir(exist_ok=True)  # none: without it, no plugin loads
        resources = provisioned(prometheus_url, scrape_interval, dashboard)
        (workdir / "provisioning" / "kappa.json").write_text(json.dumps(resources))
        config = workdir / "config.yaml"
        config.write_text(yaml.safe_dump(perses_config(workdir, build / "plugins")))
        log = workdir / "perses.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [str(build / "bin" / "perses"), f"--config={config}", f"--web.listen-address={host}:{port}",
                 "--log.level=warning"],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        perses = cls(host, port, proc, log, dashboard["metadata"]["name"])
        try:
            listening(host, port, 60, "Perses", log)
            perses.served_dashboard()
        except BaseException:
            perses.stop()
            raise
        return perses

    def api(self, path: str, form: dict[str, str] | None = None) -> Any:
        """An answer of Perses's HTTP API (``form``: POSTed, as its UI posts a range query)."""
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        try:
            with urllib.request.urlopen(f"{self.url}{path}", data=data, timeout=30) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            raise DashboardServerError(f"Perses {path}: {e.code} {e.read()[:500]!r} (log: {self.log})") from e

    def served_dashboard(self, timeout: float = 60) -> dict[str, Any]:
        """The dashboard as the server holds it, once provisioning has stored it."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return dict(self.api(f"/api/v1/projects/{PROJECT}/dashboards/{self.dashboard_name}"))
            except DashboardServerError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise
                time.sleep(0.5)

    def query_range(self, promql: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        """A range query through Perses's datasource proxy, as a panel asks for its series."""
        body = self.api(
            f"/proxy/globaldatasources/{DATASOURCE}/api/v1/query_range",
            {"query": promql, "start": str(start), "end": str(end), "step": str(step)},
        )
        if body.get("status") != "success":
            raise DashboardServerError(f"{promql}: {body}")
        return list(body["data"]["result"])

    def stop(self) -> None:
        end(self.proc, signal.SIGTERM)
