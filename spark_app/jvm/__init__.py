"""The JVM half of the kappa-iceberg source, built from the sources in ``src/main/java``.

The jar is compiled with ``javac`` against the jars of the installed PySpark, never against
another Spark: the reader it delegates to (``ParquetPartitionReaderFactory``, ``PartitionedFile``)
is internal to Spark and pinned with it, so the only Spark it can meet is the one it was built
from. Built once per machine for each (sources, Spark version) into the jar cache of
``spark_app.jars`` (``~/.cache/kappa-jars/kappa-source-<hash>/``); a Spark image builds it into
``$SPARK_HOME/jars`` (``python -m spark_app.jvm --out DIR``), where a session finds it and
builds nothing.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from spark_app.contract.errors import ConfigError
from spark_app.jars import cache_root

SOURCES = Path(__file__).resolve().parent / "src" / "main" / "java"
RESOURCES = SOURCES.parent / "resources"
"""What the jar carries besides classes (its data source registration), as Maven packages it."""
JAR = "kappa-source.jar"
SOURCE_CLASS = "dev.kappa.source.KappaSource"
"""What ``spark.readStream.format(...)`` names."""
GATED_KAFKA_CLASS = "dev.kappa.source.GatedKafkaSource"
"""Spark's Kafka source behind the gate of a job bootstrapped from its archive (by class name: it is
not registered as a service, so listing data sources never loads Kafka's classes)."""
PLANNER_INTERFACE = "dev.kappa.source.AdmissionPlanner"
PLANNERS = "dev.kappa.source.Planners"
KNOWN_FILES = "dev.kappa.source.KnownFiles"
"""Spark's Parquet relation over data files the manifests named, made without a listing."""
DECODED_ROWS_MAX_BYTES = "spark.kappa.source.decodedRows.maxBytes"
"""Bytes of decoded rows each executor keeps for a file's later time slices (``DecodedRows``
in the JVM); unset: a tenth of its heap; 0: keep none (every slice decodes its file)."""


def spark_home() -> Path:
    import pyspark

    return Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)


def _java_files() -> list[Path]:
    return sorted(SOURCES.rglob("*.java"))


def digest(spark_version: str) -> str:
    h = hashlib.sha256(spark_version.encode())
    for root, files in ((SOURCES, _java_files()), (RESOURCES, sorted(p for p in RESOURCES.rglob("*") if p.is_file()))):
        for f in files:
            h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:12]


def shipped(jars_dir: Path | None = None) -> Path | None:
    """The jar a Spark installation already has on its classpath (a Spark image), if any."""
    found = sorted((jars_dir or spark_home() / "jars").glob("kappa-source*.jar"))
    return found[0] if found else None


def source_jar() -> Path | None:
    """The jar a session must add to ``spark.jars``: None when Spark already ships it, else the
    cached build for this Spark, built now if missing (needs a JDK once)."""
    if shipped() is not None:
        return None
    import pyspark

    target = cache_root() / f"kappa-source-{digest(pyspark.__version__)}"
    jar = target / JAR
    if not jar.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target.parent / ".kappa-source.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # two test workers starting sessions at once
            if not jar.exists():
                target.mkdir(parents=True, exist_ok=True)
                build(jar)
    return jar


def build(jar: Path, jars_dir: Path | None = None) -> Path:
    """Compile the sources against ``jars_dir`` (the installed Spark's jars) into ``jar``,
    atomically: a killed build leaves no jar behind."""
    javac, jar_tool = shutil.which("javac"), shutil.which("jar")
    if javac is None or jar_tool is None:
        raise ConfigError(
            "the kappa-iceberg source's jar is not built yet and the JDK's `javac` and `jar` are missing: install "
            "a JDK 17 (Debian: apt-get install openjdk-17-jdk-headless) so it can be built once for this Spark"
        )
    classpath = str((jars_dir or spark_home() / "jars") / "*")
    with tempfile.TemporaryDirectory(prefix="kappa-source-") as tmp:
        classes = Path(tmp) / "classes"
        cmd = [javac, "--release", "17", "-nowarn", "-encoding", "UTF-8", "-cp", classpath, "-d", str(classes)]
        run = subprocess.run([*cmd, *map(str, _java_files())], capture_output=True, text=True)
        if run.returncode != 0:
            raise ConfigError(f"building the kappa-iceberg source failed ({javac}):\n{run.stderr.strip()}")
        partial = jar.with_name(jar.name + ".partial")
        partial.unlink(missing_ok=True)
        packed = subprocess.run(
            [jar_tool, "--create", "--file", str(partial), "-C", str(classes), ".", "-C", str(RESOURCES), "."],
            capture_output=True,
            text=True,
        )
        if packed.returncode != 0:
            raise ConfigError(f"packaging the kappa-iceberg source failed ({jar_tool}):\n{packed.stderr.strip()}")
        partial.replace(jar)
    return jar


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spark_app.jvm", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="directory to build the jar into (default: the cache)")
    args = parser.parse_args(argv)
    if args.out is None:
        print(source_jar() or shipped())
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    print(build(args.out / JAR))
    return 0
