"""The JVM half of the source, checked by its own JUnit tests: ``mvn test`` on
``spark_app/jvm/pom.xml`` (``DecodedRowsTest``: the executor's store of decoded rows;
``BridgeJsonTest``: the JSON that crosses the py4j bridge, as ``bridge.py`` writes and reads it).
Under the ``spark`` marker: it needs the JDK, Maven and the Spark jars Maven fetches once into
``~/.m2``."""

from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
POM = ROOT / "spark_app" / "jvm" / "pom.xml"
REPORTS = POM.parent / "target" / "surefire-reports"
EXPECTED = {"dev.kappa.source.DecodedRowsTest", "dev.kappa.source.BridgeJsonTest"}


def test_the_jvm_sources_pass_their_junit_tests() -> None:
    mvn = shutil.which("mvn")
    assert mvn, "Maven (mvn) the README names"
    shutil.rmtree(REPORTS, ignore_errors=True)  # only this run's reports count
    run = subprocess.run(
        [mvn, "-B", "-q", "-f", str(POM.relative_to(ROOT)), "test"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, f"mvn test failed:\n{run.stdout[-5000:]}\n{run.stderr[-3000:]}"
    suites = {}
    for report in sorted(REPORTS.glob("TEST-*.xml")):
        suite = ET.parse(report).getroot()
        suites[suite.get("name")] = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors")}
    assert suites.keys() >= EXPECTED, f"surefire ran {sorted(suites)}"
    for name, counts in suites.items():
        assert counts["tests"] > 0, f"{name}: no test ran"
        assert counts["failures"] == 0 and counts["errors"] == 0, f"{name}: {counts}"
