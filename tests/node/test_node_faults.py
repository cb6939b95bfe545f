"""Faults on the real cluster (issue 41): what a cluster does to a running Backfill or
StreamingJob (the broker restarted, a driver that fails on its own), and what the user sees (a
driver deleted between its write and its commit, the operator's pod, the API server, S3 and
nodes lost under one run: ``test_node_loss.py``). Each test names what
it kills and when; the Backfills' rows are compared with the same Backfill run by `kappa run`
(``by_kappa_run``), row for row."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import yaml
from confluent_kafka import Producer

from kappa_operator.local_cluster.cluster import LocalCluster
from kappa_operator.local_cluster.control_plane import ROOT, eventually
from spark_app.examples.generator import GeneratedStats
from spark_app.sinks.iceberg.publish import PUBLISHED_FROM
from tests.node.objects import (
    KAFKA_METADATA,
    VALUES,
    archive_job,
    backfill,
    branch_commits,
    kubectl,
    phase_of,
)

SINK = "marts.attributed_plays"


def finished(cluster: LocalCluster, name: str, timeout: float) -> dict[str, Any]:
    return eventually(
        lambda: phase_of(cluster, "Backfill", name, "Succeeded", "Failed"), f"Backfill {name}", timeout, every=2
    )


def published_once(catalog: Any, branch: str) -> int:
    """Snapshots of main published from ``branch`` (0: it equalled main, nothing to publish)."""
    table = catalog.load_table(SINK)
    props = [s.summary.additional_properties for s in table.snapshots() if s.summary is not None]
    return sum(1 for p in props if p.get(PUBLISHED_FROM) == branch)


def assert_exactly_once(catalog: Any, branch: str) -> None:
    """Each batch of the branch committed once: a replay after a restart finds its batch id
    and skips it."""
    counts = Counter(branch_commits(catalog, SINK, branch))
    assert counts and max(counts.values()) == 1, [c for c, n in counts.items() if n > 1]
    assert published_once(catalog, branch) <= 1


def backing_off(cluster: LocalCluster, name: str) -> dict[str, Any] | None:
    status = phase_of(cluster, "Backfill", name, "Running") or {}
    return status if status.get("nextRestartAt") else None


def test_the_broker_restarted_under_a_live_job_loses_no_record_and_writes_none_twice(
    cluster: LocalCluster, history: GeneratedStats, record_property: Callable[[str, object], None]
) -> None:
    """Kills the Kafka broker (a controlled shutdown and a start on the same log directory)
    under the example's archive job (a topic copied into an Iceberg table, each record with its
    partition and offset): records produced before, during the restart's aftermath and after
    are each in the table exactly once."""
    topic = "restarted"
    cluster.broker.create_topic(topic, partitions=2, config={"retention.ms": "-1"})
    rows = catalog_rows(cluster, "ingest.impressions")
    produce(cluster, topic, rows[:1000])
    job = archive_job(cluster, topic, f"{VALUES['impressions']}, {KAFKA_METADATA}")
    kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump(job))
    catalog = cluster.host_catalog()
    table = f"archive.{topic}"

    def archived(count: int) -> bool:
        return catalog.table_exists(table) and catalog.load_table(table).scan().to_arrow().num_rows >= count

    eventually(lambda: archived(1000), "the first records archived", timeout=300, every=2)
    started = time.monotonic()
    cluster.restart_broker()
    produce(cluster, topic, rows[1000:2000])
    eventually(lambda: archived(2000), "the records after the restart archived", timeout=300, every=2)
    caught_up = time.monotonic() - started
    copied = catalog.load_table(table).scan().to_arrow().to_pylist()
    offsets = Counter((r["__metadata__"]["partition"], r["__metadata__"]["offset"]) for r in copied)
    assert len(copied) == 2000 and max(offsets.values()) == 1, "each record once"
    assert {r["impression_id"] for r in copied} == {r["impression_id"] for r in rows[:2000]}, "none lost"
    kubectl(cluster, "delete", "streamingjob", job["metadata"]["name"], "--wait=true", "--timeout=120s")
    record_property("measured", json.dumps({"broker_restart_to_caught_up_s": round(caught_up, 1)}))


def catalog_rows(cluster: LocalCluster, table: str) -> list[dict[str, Any]]:
    loaded = cluster.host_catalog().load_table(table)
    return loaded.scan().to_arrow().drop_columns(["__metadata__"]).to_pylist()


def produce(cluster: LocalCluster, topic: str, rows: list[dict[str, Any]]) -> None:
    producer = Producer({"bootstrap.servers": cluster.broker.bootstrap, "enable.idempotence": True})
    for row in rows:
        producer.produce(topic, value=json.dumps(row, default=lambda v: v.isoformat()).encode())
    assert producer.flush(60) == 0


def test_a_run_that_fails_on_its_own_says_why_in_one_line_and_stops_after_its_restarts(
    cluster: LocalCluster, history: GeneratedStats, record_property: Callable[[str, object], None]
) -> None:
    """Not killed: two suspended StreamingJobs (no live application), each Backfilled with
    spec.restart.maxAttempts 1: one whose pipeline module is not in the image (its driver's
    error, written to its termination log, follows the Spark operator's exit code in the
    condition; the driver refused its configuration, exit code 2, so it is not restarted at
    all), one with a Spark conf the API server refuses for the driver pod (spark-submit's
    error, on one line: restarted once, as a submission may fail for a passing reason). Both
    end Failed and stay so: no restart loop."""
    cases = {
        "missing-module": (
            {"pipeline": "pipelines.missing:pipeline"},
            ("No module named", "pipelines", "refused its configuration"),
        ),
        "bad-conf": ({"sparkConf": {"spark.kubernetes.driver.request.cores": "lots"}}, ("spark-submit",)),
    }
    restarts = {"missing-module": 0, "bad-conf": 1}
    for name, (change, _) in cases.items():
        example = yaml.safe_load((ROOT / "examples" / "rmi-streamingjob.yaml").read_text())
        example["metadata"]["name"] = name  # first: its checkpoint's location is named after it
        job = cluster.streaming_job(example, executors=0)  # fails in its driver: no executor needed
        conf = {**job["spec"]["sparkConf"], **change.pop("sparkConf", {})}
        job["spec"].update(change, sparkConf=conf, suspend=True)
        kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump(job))
        body = backfill(f"{name}-window", jobRef={"name": name}, restart={"maxAttempts": 1, "initialBackoff": "5s"})
        kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump(body))
    for name, (_, said) in cases.items():
        status = finished(cluster, f"{name}-window", timeout=600)
        message = status["message"]
        assert status["phase"] == "Failed" and "\n" not in message, status
        assert all(word in message for word in said), message
        if name == "bad-conf":  # the refusal itself, from the end of spark-submit's output
            assert "lots" in message or "quantit" in message.lower(), message
        assert status.get("restarts", 0) == restarts[name], status
        if restarts[name]:
            assert "not restarted again after 1 restarts" in message, status
        record_property("measured", json.dumps({name: message[:300]}))
    time.sleep(20)
    for name in cases:
        again = phase_of(cluster, "Backfill", f"{name}-window", "Failed")
        assert again is not None and again.get("restarts", 0) == restarts[name], "no restart loop"
        kubectl(cluster, "delete", "backfill", f"{name}-window", "--wait=true", "--timeout=120s")
        kubectl(cluster, "delete", "streamingjob", name, "--wait=true", "--timeout=120s")
