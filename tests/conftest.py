"""Fixtures shared by every test directory: a real S3 API (moto's server on loopback),
started once per session only when a test asks for it."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Every JVM the tests start (the Spark sessions, the drivers a kill test spawns, the Kafka
# broker) compiles with C1 only and collects with one thread: their runs are short, so the
# C2 compiler and parallel GC threads cost CPU they never pay back. Measured on the 2-core
# box: 31 % less CPU for the same Spark tests (112 -> 77 CPU s). Tests only: benchmarks and
# the product keep the JVM's defaults. Set JAVA_TOOL_OPTIONS to override. C1 alone shrinks the
# code cache to 48 MB, which a worker's one Spark session filled with the code Spark generates
# for each query (30,683 methods, 2026-11-28: "Out of space in CodeCache for method handle
# intrinsic", and a test failed): the JVM's default with both compilers, 240 MB, is kept.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=240m")

from harness.s3 import MotoS3
from kappa_operator.local.certificates import Authority
from kappa_operator.local.kafka import KafkaBroker, Secured
from kappa_operator.local.schema_registry import SchemaRegistry

KAFKA_USERS = {"SCRAM-SHA-512": {"alice": "alice-pass-7f3a"}, "PLAIN": {"bob": "bob-pass-91c2"}}
"""The session broker's users on its SASL_SSL listener, by mechanism: name -> password."""

SLOW_FIRST = (
    "tests/node/",
    "tests/spark/test_exactly_once.py",
    "tests/spark/test_iceberg_sink.py",
    "tests/spark/test_admission_rounds.py",
    "tests/spark/test_demo.py",
    "tests/spark/test_publish_in_spark.py",
    "tests/spark/test_kafka_archive.py",
    "tests/spark/",
    "tests/cluster/",
)
"""The longest files (kill-and-restart runs, measured: 2-5 min each), then the directories whose
files take a minute or more each (Spark runs, the control plane)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow files first (a stable sort: order within a file is kept): pytest-xdist
    hands files to its workers in this order, so the long files start at once and the
    many short ones fill in at the end, instead of one long file running alone last."""
    rank = {d: i for i, d in enumerate(SLOW_FIRST)}

    def key(item: pytest.Item) -> int:
        path = str(item.path)
        return next((r for d, r in rank.items() if f"/{d}" in path), len(SLOW_FIRST))

    items.sort(key=key)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``, with tests/node/ as one file: its tests share one cluster (the
    node's bridge, ports and kubelet are the machine's: a second worker cannot start another).
    Files are handed out in the collection's order (``SLOW_FIRST``): xdist's default reorders
    them by their count of tests, which started the node's file, the longest path, 34th."""
    if config.getoption("dist") != "loadfile":
        return None
    config.option.loadscopereorder = False
    from xdist.scheduler import LoadFileScheduling

    class NodeTestsTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "tests/node" if path.startswith("tests/node/") else path

    return NodeTestsTogether(config, log)


BEHIND_THE_NODE = Path("/sys/fs/cgroup/cpu/kappa-tests-behind")
"""The CPU cgroup (v1) the workers that do not run tests/node move into, with every process they
start after (their SparkSession, the drivers their kill tests spawn, their control plane and
broker): a small share against the node's groups (a kubelet's ``cgroupRoot``, 1,024 each) and
its control plane, and all of what these leave idle."""
BEHIND_SHARES = 128
BEHIND_NICE = 10
"""Where that cgroup cannot be made (not root, or cgroup v2 only): a nice value instead, which
only weighs against the other threads at the top level, not against the node's groups."""
_behind: list[str] = []


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """The node's tests wait on pods starting and faults healing: their chain is the run's
    longest path and needs little CPU, but what it needs it needs at once. The other workers'
    tests are CPU-bound and only need their total. So each other worker runs behind the node,
    before its first fixture starts a process: the cores the node's chain leaves idle go to
    them, and they do not slow it. Measured on 2 cores (2026-11-29, fresh clones): three
    workers side by side made the node's chain 2,190 s from 1,802 with two, and nice 10 alone
    did not help (2,142 s): a JVM's many threads outweigh a node's one group at the top level.
    The node's worker, once its directory is done, joins the others."""
    if _behind or not os.environ.get("PYTEST_XDIST_WORKER") or "/tests/node/" in f"/{item.nodeid}":
        return
    try:
        BEHIND_THE_NODE.mkdir(exist_ok=True)
        (BEHIND_THE_NODE / "cpu.shares").write_text(str(BEHIND_SHARES))
        (BEHIND_THE_NODE / "cgroup.procs").write_text(str(os.getpid()))  # every thread of this process
        _behind.append("cgroup")
    except OSError:
        os.setpriority(os.PRIO_PROCESS, 0, BEHIND_NICE)  # this thread, which starts the processes
        _behind.append("nice")


TIMELINE = "KAPPA_TEST_TIMELINE"
"""A file each worker appends a line to per test (its worker, the test, when its setup started and
its teardown ended): where a run's time goes over its workers, which the JUnit report's
durations alone cannot say (``docs/development.md``)."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    started = time.time()
    yield
    if path := os.environ.get(TIMELINE):
        line = {"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "test": item.nodeid}
        with open(path, "a") as f:  # one short write per line: the workers' lines do not interleave
            f.write(json.dumps({**line, "start": round(started, 1), "end": round(time.time(), 1)}) + "\n")


def pytest_unconfigure(config: pytest.Config) -> None:
    """The cgroup removed once its workers are gone (the controller ends last; empty, it goes)."""
    if not os.environ.get("PYTEST_XDIST_WORKER") and BEHIND_THE_NODE.is_dir():
        with contextlib.suppress(OSError):  # a process of a worker still in it: the next run reuses it
            BEHIND_THE_NODE.rmdir()


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """What tests measured (``record_property("measured", ...)``: the node's fault tests'
    recovery times) listed; and a skipped test is a promise nobody checked: each one ends the
    run in red with its reason (which names what to install), not only counted in the last line."""
    measured = [
        (report.nodeid.split("::")[-1], value)
        for report in terminalreporter.stats.get("passed", [])
        for key, value in report.user_properties
        if key == "measured"
    ]
    if measured:  # what the fault tests measured (recovery times), in every run's output
        terminalreporter.section("measured")
        for test, value in measured:
            terminalreporter.write_line(f"{test}: {value}")
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    terminalreporter.section(f"NOT RUN: {len(skipped)} skipped", sep="!", red=True, bold=True)
    for report in skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        terminalreporter.write_line(f"NOT RUN {report.nodeid}: {reason.removeprefix('Skipped: ')}", red=True)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[MotoS3]:
    server = MotoS3.threaded()
    yield server
    server.stop()


@pytest.fixture
def s3_bucket(s3_server: MotoS3) -> str:
    """A fresh, empty bucket for one test."""
    return s3_server.create_bucket()


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A real Apache Kafka broker (KRaft, the pinned 4.x of spark_app/jars/kafka-broker), one
    per test process, started when a test first asks for it. Tests name their own topics. It
    listens as a company's broker does too (SASL_SSL and MTLS, ``KAFKA_USERS``), beside the
    PLAINTEXT port most tests use."""
    work = Path(tmp_path_factory.mktemp("kafka"))
    secured = Secured(Authority.create(work / "pki"), scram=KAFKA_USERS["SCRAM-SHA-512"], plain=KAFKA_USERS["PLAIN"])
    broker = KafkaBroker.start(work / "broker", heap="256m", secured=secured)
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SchemaRegistry]:
    """A real schema registry with Confluent's API (Apicurio Registry, built from Maven Central
    once per machine: kappa_operator.local.schema_registry; CI prebuilds it, and a test that comes
    first waits for that build), one per test process, started when a test first asks for it. In
    memory: each session's starts empty. Tests name their own subjects."""
    registry = SchemaRegistry.start(Path(tmp_path_factory.mktemp("schema-registry")))
    yield registry
    registry.stop()
