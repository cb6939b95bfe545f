"""A class-data-sharing archive of Spark's classes for the local sessions of this machine
(``kappa run``, the demo, the tests' drivers), as the Spark image has its own for drivers and
executors (images/spark/Dockerfile).

Why: a local Spark session's JVM spends most of its start, and of its first queries, loading
and verifying classes from PySpark's jars. Mapped from an archive instead, a session starts in
about half the time on 2 cores (bench/RESULTS.md, issue 58). The archive belongs to one Java
and one set of jars, so it is named by both (``archive``); a JVM whose class path differs
ignores it. It is made once, by ``python -m spark_app.jvm.class_sharing`` (the tests' first
session runs it): spark-submit runs ``class_sharing_workload.py`` with
``-XX:ArchiveClassesAtExit``, and the JVM writes the archive as it exits. Sessions then use it
when it exists (``java_options``); nothing waits for it or needs it.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from spark_app.jars import cache_root
from spark_app.jvm import spark_home

WORKLOAD = Path(__file__).with_name("class_sharing_workload.py")
DUMP_TIMEOUT_S = 600


def java() -> Path | None:
    """The ``java`` a local session runs (JAVA_HOME's, else the PATH's), resolved."""
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else None
    if found is None or not found.exists():
        on_path = shutil.which("java")
        found = Path(on_path) if on_path else None
    return found.resolve() if found is not None else None


def archive(java_binary: Path, jars: Path) -> Path:
    """Where this machine's archive for ``java_binary`` and the jars in ``jars`` is kept: named
    by the Java (its path, size and time) and each jar (its path, size and time: what the JVM
    checks of its class path before it maps an archive), so a new Java, a new PySpark or another
    checkout's ``.venv`` gets an archive of its own instead of one the JVM would refuse. (Named
    by the jars' names alone, a second checkout's sessions mapped the first one's archive, and
    their JVMs refused it: "The top archive failed to load", every start without it.)"""
    h = hashlib.sha256()
    stat = java_binary.stat()
    h.update(f"{java_binary}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    for jar in sorted(jars.glob("*.jar")):
        jar_stat = jar.stat()
        h.update(f"{jar}\0{jar_stat.st_size}\0{jar_stat.st_mtime_ns}\0".encode())
    return cache_root() / f"class-sharing-{h.hexdigest()[:12]}.jsa"


def java_options() -> str:
    """What a session about to start its JVM adds to ``spark.driver.extraJavaOptions``: the
    archive, when this machine has one; nothing when there is none, or when the JVM already
    runs (under spark-submit, e.g. a Spark image's driver, whose entrypoint maps the image's)."""
    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        return ""
    binary = java()
    if binary is None:
        return ""
    path = archive(binary, spark_home() / "jars")
    return f"-XX:SharedArchiveFile={path}" if path.exists() else ""


def dump() -> Path | None:
    """This machine's archive, made now if missing (one maker at a time; atomically: a killed
    dump leaves none). None when there is no ``java`` to make it with."""
    binary = java()
    if binary is None:
        return None
    path = archive(binary, spark_home() / "jars")
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / ".class-sharing.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():
            return path
        partial = path.with_name(path.name + ".partial")
        partial.unlink(missing_ok=True)
        env = {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_SUBMIT_OPTS": f"-XX:ArchiveClassesAtExit={partial} -Xlog:cds=error",
        }
        env.pop("PYSPARK_GATEWAY_PORT", None)
        submit = spark_home() / "bin" / "spark-submit"
        done = subprocess.run(
            [str(submit), "--master", "local[2]", str(WORKLOAD)],
            env=env, capture_output=True, text=True, timeout=DUMP_TIMEOUT_S, check=False,
        )  # fmt: skip
        if done.returncode != 0 or not partial.exists():
            partial.unlink(missing_ok=True)
            raise RuntimeError(f"the class-sharing archive was not made ({submit}):\n{done.stdout[-2000:]}")
        partial.replace(path)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spark_app.jvm.class_sharing", description=__doc__.split("\n")[0])
    parser.parse_args(argv)
    made = dump()
    print(made if made is not None else "no java: nothing to make")
    return 0


if __name__ == "__main__":
    sys.exit(main())
