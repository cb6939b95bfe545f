"""The JVM source's store of decoded rows (``DecodedRows.java``), checked in a JVM of its own:
``tests/jvm/DecodedRowsTest.java`` compiled against this Spark and the source's jar, and run.
Under the ``spark`` marker: it needs the JDK and Spark's jars the Spark tests need."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from spark_app.jvm import shipped, source_jar, spark_home

pytestmark = pytest.mark.spark

TEST = Path(__file__).resolve().parents[1] / "jvm" / "DecodedRowsTest.java"


def test_decoded_rows_serve_only_what_is_kept_and_keep_what_is_needed_soonest(tmp_path: Path) -> None:
    javac, java = shutil.which("javac"), shutil.which("java")
    assert javac and java, "the JDK (javac, java) the README names"
    jar = source_jar() or shipped()
    assert jar is not None
    classpath = os.pathsep.join([str(spark_home() / "jars" / "*"), str(jar)])
    subprocess.run(
        [javac, "--release", "17", "-nowarn", "-cp", classpath, "-d", str(tmp_path), str(TEST)],
        check=True,
        capture_output=True,
        text=True,
    )
    run = subprocess.run(
        [java, "-cp", os.pathsep.join([str(tmp_path), classpath]), "dev.kappa.source.DecodedRowsTest"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().endswith("DecodedRowsTest: ok")
