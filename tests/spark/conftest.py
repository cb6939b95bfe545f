"""Shared fixtures of the Spark tests: one local SparkSession and one generated dataset.

The dataset is written once per test session the way an ingestion job writes it (a commit
every 5 minutes of ingestion time, late events, 4x skew) into a SQLite SqlCatalog.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import SparkSession

from spark_app import jars
from spark_app.apps.session import session_jars
from spark_app.contract.config import JobConfig, parse_config
from spark_app.examples.generator import GeneratedStats, GeneratorConfig, generate
from spark_app.jvm import class_sharing

T0 = datetime(2026, 11, 1, 10, tzinfo=UTC)


class Driver:
    """A job run as its own driver process (``python -m spark_app``), as on a cluster: it can
    be killed, by a fault the sink injects, and started again on the same checkpoint."""

    def __init__(self, cfg: JobConfig, tmp: Path, command: str = "run") -> None:
        stem = "" if command == "run" else f"{command}-"
        path = tmp / f"{stem}job.json"
        path.write_text(cfg.to_json())
        self.log = tmp / f"{stem}driver.log"
        self.cmd = [sys.executable, "-m", "spark_app", command, "--config", str(path)]

    def run(self, **env: str) -> subprocess.CompletedProcess[bytes]:
        """Run to its end (or its kill); its own process group, since a fault kills the group."""
        environ = {**os.environ, "PYSPARK_PYTHON": sys.executable, **env}
        with self.log.open("ab") as out:
            return subprocess.run(
                self.cmd, env=environ, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, timeout=600
            )

    def tail(self) -> str:
        return self.log.read_text()[-3000:]


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # this machine's class-sharing archive, once: every local JVM the tests start then maps it
    # (this session's, each driver a test runs in a process of its own)
    class_sharing.dump()
    session = (
        SparkSession.builder.master("local[2]")
        .appName("kappa-tests")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", class_sharing.java_options())
        # the kappa-iceberg source, and Spark's Kafka connector, as a local run gets them
        .config("spark.jars", ",".join(str(jar) for jar in [*session_jars(), *jars.resolve("kafka-connector")]))
        .getOrCreate()
    )
    yield session
    session.stop()


@dataclass(frozen=True)
class Dataset:
    root: Path
    props: dict[str, str]
    stats: GeneratedStats
    generator: GeneratorConfig

    def catalog(self) -> SqlCatalog:
        return SqlCatalog("default", **self.props)

    def config(self, tmp: Path, **fields: Any) -> JobConfig:
        """A JobConfig on this dataset; outputs and checkpoints under ``tmp``."""
        sink_kind = fields.pop("sink_time_column", None)
        output = fields.pop("output", "attributed_plays")
        base: dict[str, Any] = {
            "name": "job",
            "pipeline": "spark_app.examples.rmi:pipeline",
            "catalogs": {"default": {"type": "sql", **self.props}},
            "sinks": {output: {"kind": "parquet", "path": str(tmp / "out")}},
            "checkpoint": {"location": str(tmp / "ckpt")},
            "tracePath": str(tmp / "trace.jsonl"),
        }
        if sink_kind:
            base["sinks"][output]["timeColumn"] = sink_kind
        # Small data: with the default batchRowBudget a test's whole history would be one or two
        # batches. One round per batch keeps these tests crossing many batch boundaries (kills,
        # replays, watermarks); tests/spark/test_admission_rounds.py runs merged rounds. They
        # are tests of the streaming run: aligned unless they say (auto would run many of these
        # pipelines bounded; tests/spark/test_mode_choice.py tests what it chooses).
        fields["alignment"] = {"mode": "aligned", "batchRowBudget": 0, **fields.get("alignment", {})}
        base.update(fields)
        return parse_config(base)


def sources(kind: str, names: tuple[str, ...] = ("impressions", "playbacks"), **extra: Any) -> dict[str, Any]:
    out = {}
    for n in names:
        src: dict[str, Any] = {"kind": kind, "table": f"demo.{n}", **extra}
        if kind == "icebergLive":
            src.setdefault("startingPosition", "earliest")
            src.setdefault("readLimit", {"maxSnapshots": 1})
        out[n] = src
    return out


def make_dataset(root: Path, hours: float) -> Dataset:
    root.mkdir(parents=True, exist_ok=True)
    props = {"uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}
    gen = GeneratorConfig(start=T0, hours=hours, impressions_per_hour=3000, commit_interval=timedelta(minutes=5))
    stats = generate(SqlCatalog("default", **props), gen)
    return Dataset(root, props, stats, gen)


@pytest.fixture(scope="session")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    """Two hours of impressions and playbacks (read-only: tests that append use their own)."""
    return make_dataset(tmp_path_factory.mktemp("dataset"), hours=2)


@pytest.fixture
def fresh_dataset(tmp_path: Path) -> Callable[[float], Dataset]:
    return lambda hours: make_dataset(tmp_path / "data", hours)


@pytest.fixture(scope="session")
def rmi_window_reference(
    spark: SparkSession, dataset: Dataset, tmp_path_factory: pytest.TempPathFactory
) -> tuple[list[tuple[Any, ...]], int]:
    """rmi backfilled over ``test_coordinator_alignment.WINDOW``, aligned through the local
    state file, one round per batch: its output rows and micro-batches (shared by the tests
    that compare other ways of running the same backfill against it)."""
    from spark_app.apps.run import run
    from tests.spark.test_coordinator_alignment import output, rmi_config

    tmp = tmp_path_factory.mktemp("rmi-local")
    report = run(rmi_config(dataset, tmp, None, name="rmi-local"), spark)
    assert report.dropped_by_watermark == 0
    return output(spark, tmp), report.batches
