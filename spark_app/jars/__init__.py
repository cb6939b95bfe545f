"""Jars from Maven Central, pinned by a pom in this package and cached per machine.

Each bundle is a directory here with a ``pom.xml`` that pins its artifacts (``kafka-connector``:
Spark's Kafka source and sink for the pinned PySpark; ``kafka-broker``: an Apache Kafka broker
for tests and local runs). :func:`resolve` runs Maven's ``dependency:copy-dependencies`` once
into ``~/.cache/kappa-jars/<bundle>-<hash of the pom>/`` and returns the jars; a changed pom is a
new directory, so a cache never serves other versions than the pom names. Spark's own
``spark.jars.packages`` (Ivy) would do the first job at every session start and needs the
network then; this resolves once, under a lock, and a Spark image copies the same jars into
``$SPARK_HOME/jars`` (``images/spark/Dockerfile``).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from spark_app.contract.errors import ConfigError

HERE = Path(__file__).resolve().parent
BUNDLES = ("kafka-connector", "kafka-broker", "hadoop-aws")
CACHE_ENV = "KAPPA_JARS_CACHE"
"""Where the bundles are cached (default ``~/.cache/kappa-jars``)."""


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "kappa-jars")


def pom(bundle: str) -> Path:
    if bundle not in BUNDLES:
        raise ValueError(f"unknown jar bundle {bundle!r}: one of {', '.join(BUNDLES)}")
    return HERE / bundle / "pom.xml"


def bundle_dir(bundle: str) -> Path:
    digest = hashlib.sha256(pom(bundle).read_bytes()).hexdigest()[:12]
    return cache_root() / f"{bundle}-{digest}"


def resolve(bundle: str) -> list[Path]:
    """The bundle's jars, fetched from Maven Central on first use (needs ``mvn`` then)."""
    target = bundle_dir(bundle)
    once(target, bundle, lambda partial: _fetch(bundle, partial))
    return sorted(target.glob("*.jar"))


def once(target: Path, name: str, make: Callable[[Path], None]) -> Path:
    """``target``, made once per machine by ``make(partial)``: under the lock ``.<name>.lock``
    beside it (two test workers, a test and `kappa kafka start`, or CI's prebuild and a test: the
    second waits, then finds it made), into ``<target>.partial``, renamed whole when ``make``
    returns and marked ``.complete``. A failed ``make`` leaves nothing; a killed one only the
    partial directory, made anew by the next call."""
    done = target / ".complete"
    if not done.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target.parent / f".{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not done.exists():
                partial = target.with_name(target.name + ".partial")
                shutil.rmtree(partial, ignore_errors=True)
                partial.mkdir()
                try:
                    make(partial)
                except BaseException:
                    shutil.rmtree(partial, ignore_errors=True)
                    raise
                shutil.rmtree(target, ignore_errors=True)
                partial.rename(target)  # whole or not at all
                done.touch()
    return target


def _fetch(bundle: str, partial: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ConfigError(
            f"the {bundle} jars are not cached in {bundle_dir(bundle)} and Maven (`mvn`) is not installed: install "
            "Maven (Debian: apt-get install maven) so they can be fetched from Maven Central once"
        )
    cmd = [mvn, "-q", "-B", "-f", str(pom(bundle)), "dependency:copy-dependencies", f"-DoutputDirectory={partial}"]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        tail = (run.stdout + run.stderr).strip().splitlines()[-5:]
        raise ConfigError(
            f"could not fetch the {bundle} jars from Maven Central ({' '.join(cmd)}): " + " / ".join(tail)
        )
