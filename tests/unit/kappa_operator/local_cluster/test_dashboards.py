"""What the local cluster's Perses is given: its files in the cluster's directory, the plugins
read where the build left them, and the chart's dashboard with Prometheus as the default
datasource it proxies to."""

from __future__ import annotations

import json
from pathlib import Path

from kappa_operator.dashboard.__main__ import CHART
from kappa_operator.dashboard.perses import PROJECT
from kappa_operator.local_cluster.dashboards import DATASOURCE, perses_config, provisioned


def test_the_database_and_provisioning_live_in_the_clusters_directory_and_the_plugins_where_built(
    tmp_path: Path,
) -> None:
    config = perses_config(tmp_path / "perses", Path("/cache/perses/plugins"))
    assert config["database"]["file"]["folder"] == str(tmp_path / "perses" / "db")
    assert config["provisioning"]["folders"] == [str(tmp_path / "perses" / "provisioning")]
    assert config["plugin"]["path"] == "/cache/perses/plugins"
    assert config["plugin"]["archive_path"].startswith(str(tmp_path / "perses"))


def test_the_charts_dashboard_in_its_project_with_prometheus_as_the_default_datasource() -> None:
    dashboard = json.loads((CHART / "dashboards" / "kappa.perses.json").read_text())
    project, datasource, shipped = provisioned("http://10.244.0.1:9090", "5s", dashboard)
    assert project["kind"] == "Project" and project["metadata"]["name"] == PROJECT
    assert shipped is dashboard and shipped["metadata"]["project"] == PROJECT
    assert datasource["kind"] == "GlobalDatasource" and datasource["metadata"]["name"] == DATASOURCE
    assert datasource["spec"]["default"] is True
    assert datasource["spec"]["plugin"]["spec"]["scrapeInterval"] == "5s"
    proxy = datasource["spec"]["plugin"]["spec"]["proxy"]
    assert proxy == {"kind": "HTTPProxy", "spec": {"url": "http://10.244.0.1:9090"}}
    queries = [q["spec"]["plugin"] for panel in dashboard["spec"]["panels"].values() for q in panel["spec"]["queries"]]
    assert queries and all("datasource" not in q["spec"] for q in queries), "every query on the default"
