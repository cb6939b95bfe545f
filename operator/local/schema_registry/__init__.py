"""A real schema registry on 127.0.0.1 for the tests: Apicurio Registry (Apache-2.0),
through its Confluent-compatible API (``/apis/ccompat/v7``), which Confluent's clients speak.

Built from Maven Central, never downloaded whole: ``pom.xml`` and ``application.properties`` in
this package pin Apicurio Registry 2.4.2.Final on Quarkus 2.16.4 (the newest release whose
modules Maven Central serves: ``docs/design/schema-registry-research.md``). :func:`build` runs
``mvn -B -q -DskipTests package`` once per machine into the jar cache of ``spark_app.jars``
(``~/.cache/kappa-jars/schema-registry-<hash of both files>/``, under the same lock and
``.complete`` marker as its bundles; Maven's own downloads go to ``~/.m2``): 226 s with
nothing cached, 25 s with ``~/.m2`` filled. :class:`SchemaRegistry` starts it on the machine's
Java 17 with in-memory storage (H2): each start is an empty registry.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from kappa_operator.local.kafka import free_port
from kappa_operator.local.processes import stop_group
from spark_app import jars
from spark_app.contract.errors import ConfigError

HERE = Path(__file__).resolve().parent
FILES = ("pom.xml", "application.properties")
"""What the build is made of (and its cache directory keyed by)."""
RUNNER = "apicurio-registry-runner-1-runner.jar"
"""What Quarkus's legacy-jar packaging (the app's own setting) makes: the runnable jar, its
classpath in ``lib/`` beside it (129 MB)."""
NAME = "schema-registry"
API = "/apis/ccompat/v7"
"""The Confluent Schema Registry API's base path on Apicurio."""
START_TIMEOUT = 180.0
"""Ready in 4-9 s on the 2-core machine when quiet, 6-60 s at a load of 9-12 (2026-12-03,
``docs/design/schema-registry-research.md``)."""


def digest() -> str:
    h = hashlib.sha256()
    for name in FILES:
        h.update(name.encode() + b"\0" + (HERE / name).read_bytes())
    return h.hexdigest()[:12]


def app_dir() -> Path:
    return jars.cache_root() / f"{NAME}-{digest()}"


def build() -> Path:
    """The registry's runnable jar, built from Maven Central on first use (needs ``mvn`` and a
    JDK 17 then). Another process building it at the same time (CI's prebuild, another test
    worker) is waited for: it is built once."""
    return jars.once(app_dir(), NAME, _build) / RUNNER


def _build(out: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ConfigError(
            f"the schema registry is not built yet in {app_dir()} and Maven (`mvn`) is not installed: install Maven "
            "and a JDK 17 (Debian: apt-get install maven openjdk-17-jdk-headless) so it can be built from Maven "
            "Central once"
        )
    project = out / "project"
    resources = project / "src" / "main" / "resources"
    resources.mkdir(parents=True)
    shutil.copyfile(HERE / "pom.xml", project / "pom.xml")
    shutil.copyfile(HERE / "application.properties", resources / "application.properties")
    cmd = [mvn, "-B", "-q", "-DskipTests", "-f", str(project / "pom.xml"), "package"]
    run = subprocess.run(cmd, capture_output=True, text=True)
    built = project / "target"
    if run.returncode != 0 or not (built / RUNNER).is_file():
        tail = [line for line in (run.stdout + run.stderr).strip().splitlines() if line.strip()][-12:]
        raise ConfigError(
            f"could not build the schema registry from Maven Central ({' '.join(cmd)}, exit {run.returncode}):\n"
            + "\n".join(tail)
        )
    (built / RUNNER).rename(out / RUNNER)
    (built / "lib").rename(out / "lib")
    shutil.rmtree(project)  # the build's classes and Maven's intermediate jars: only the app is kept


@dataclass
class SchemaRegistry:
    """One running registry; ``url`` is what Confluent's clients are given (``SchemaRegistryClient
    ({"url": registry.url})``, a job's ``schema.registry.url``)."""

    workdir: Path
    port: int
    process: subprocess.Popen[bytes]
    log: Path
    host: str = "127.0.0.1"
    _stopped: bool = field(default=False, repr=False)

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """The Confluent-compatible API's base URL."""
        return self.base + API

    @classmethod
    def start(
        cls, workdir: Path, port: int | None = None, heap: str = "192m", host: str = "127.0.0.1"
    ) -> SchemaRegistry:
        """Start an empty registry (built first if need be) on ``port`` (a free one by default);
        returns when its Confluent API answers. Fails with the registry's log when it does not."""
        java = shutil.which("java")
        if java is None:
            raise ConfigError("the schema registry needs Java 17 (`java` on PATH)")
        runner = build()
        workdir.mkdir(parents=True, exist_ok=True)
        tmp = workdir / "tmp"  # Vert.x's file cache and Quarkus's scratch files: the registry's own
        tmp.mkdir(exist_ok=True)
        port = port or free_port()
        log = workdir / "registry.log"
        cmd = [
            java,
            f"-Xmx{heap}",  # the JVM's own collector: JAVA_TOOL_OPTIONS may choose another
            f"-Djava.io.tmpdir={tmp}",
            f"-Dquarkus.http.host={host}",
            f"-Dquarkus.http.port={port}",
            "-jar",
            str(runner),
        ]
        with log.open("ab") as out:
            process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=workdir, start_new_session=True)
        registry = cls(workdir, port, process, log, host=host)
        registry._wait_ready()
        return registry

    def _wait_ready(self) -> None:
        """Until ``GET /subjects`` answers with a list: the API is served and its storage ready."""
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ConfigError(f"the schema registry exited ({self.process.returncode}): {self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/subjects", timeout=2.0) as resp:
                    if resp.status == 200 and isinstance(json.loads(resp.read()), list):
                        return
            except (OSError, ValueError):  # refused while it starts; URLError and HTTPError are OSErrors
                pass
            time.sleep(0.3)
        self.stop()
        raise ConfigError(f"the schema registry did not start in {START_TIMEOUT:.0f} s: {self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    @property
    def running(self) -> bool:
        return not self._stopped and self.process.poll() is None

    def stop(self) -> None:
        """SIGTERM, SIGKILL after 20 s. A stopped registry refuses connections on its port: what
        a client meets when a company's registry is down. Its schemas are gone (in memory)."""
        if self._stopped:
            return
        self._stopped = True
        stop_group(self.process)
