"""A real Prometheus (the Debian package, started here on 127.0.0.1) scrapes the coordinator
with its bearer token; a PromQL query for alignment lag returns the value the test set."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from kappa_operator.coordinator.server import EmbeddedCoordinator, Service
from kappa_operator.local.ports import free_port
from spark_app.alignment.http import HttpWatermarkProvider

TOKEN = "scrape-token"
MIN = 60_000_000
PROMETHEUS = shutil.which("prometheus")

pytestmark = pytest.mark.skipif(
    PROMETHEUS is None, reason="needs the prometheus binary (apt-get install prometheus; .ci/run installs it)"
)


@pytest.fixture
def coordinator() -> Iterator[EmbeddedCoordinator]:
    with EmbeddedCoordinator(Service(TOKEN)) as c:
        yield c


def query(port: int, promql: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())["data"]["result"]


def test_prometheus_scrapes_alignment_lag(coordinator: EmbeddedCoordinator, tmp_path: Path) -> None:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", coordinator.port)
    body = json.dumps({"members": ["imp", "play"], "maxDrift": "5m"})
    conn.request("PUT", "/v1/groups/rmi", body, {"Authorization": f"Bearer {TOKEN}"})
    assert conn.getresponse().status == 200
    p = HttpWatermarkProvider(coordinator.url, "rmi", TOKEN, unavailable_timeout=5)
    p.report("play", 10 * MIN)
    p.report("imp", 13 * MIN, throttled=True)  # 3 minutes ahead of the global watermark

    prom_port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: kappa-coordinator
    authorization: {{type: Bearer, credentials: {TOKEN}}}
    static_configs: [{{targets: ["127.0.0.1:{coordinator.port}"]}}]
"""
    )
    proc = subprocess.Popen(
        [
            str(PROMETHEUS),
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "prometheus.log").open("w"),
    )
    try:
        deadline = time.monotonic() + 90
        result: list[dict] = []
        while time.monotonic() < deadline:
            try:
                result = query(prom_port, 'kappa_alignment_lag_seconds{group="rmi"}')
            except OSError:
                result = []
            if {r["metric"].get("member") for r in result} >= {"imp", "play"}:
                break
            time.sleep(0.5)
        by_member = {r["metric"]["member"]: float(r["value"][1]) for r in result}
        assert by_member == {"imp": 180.0, "play": 0.0}, (tmp_path / "prometheus.log").read_text()[-2000:]
        (up,) = query(prom_port, 'up{job="kappa-coordinator"}')
        assert up["value"][1] == "1"
        throttled = query(prom_port, 'kappa_alignment_member_throttled{group="rmi",member="imp"}')
        assert throttled and throttled[0]["value"][1] == "1"
        assert query(prom_port, 'kappa_alignment_global_watermark_seconds{group="rmi"}')[0]["value"][1] == "600"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
