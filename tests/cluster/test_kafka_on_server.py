"""A Kafka job's consumer lag through the operator on the real server (issue 28): the driver's
report next to the checkpoint becomes ``status.kafkaLag``, the "Kafka Lag" column of
``kubectl get sj`` (the server's own Table rendering of the CRD's printer columns) and the
``kappa_streamingjob_kafka_lag_records`` gauge. The report's making is tested on a real broker
in tests/spark/test_kafka_broker.py."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from kappa_operator.local.kafka import KafkaBroker
from kappa_operator.local_cluster.control_plane import ControlPlane, eventually
from kappa_operator.local_cluster.rest import path_of
from kappa_operator.render.jobconfig import PAUSED_ANNOTATION
from spark_app.contract.checkpoints.snapshots import externalize
from spark_app.contract.reports.progress import PartitionLag, ProgressReport, report_name
from spark_app.contract.storage import open_location
from tests.cluster.conftest import LIVE_PROGRESS_INTERVAL
from tests.cluster.operator_runs import InProcess
from tests.cluster.spark_operator import create, example, get, in_phase, status
from tests.conftest import KAFKA_USERS
from tests.secured_kafka import secured

pytestmark = pytest.mark.usefixtures("never_forbidden")

SJ = "StreamingJob"


def table(plane: ControlPlane, ns: str, name: str) -> dict[str, Any]:
    """What `kubectl get sj` asks the server for: the object as a Table of printer columns."""
    rest = plane.admin
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io"
    r = rest.http.get(
        rest.server + path_of(SJ, ns, name),
        headers={"Authorization": f"Bearer {rest.token}", "Accept": accept},
        verify=str(rest.ca),
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_the_drivers_lag_report_shows_in_status_kubectl_get_and_the_gauge(
    control_plane: ControlPlane, in_process_operator: InProcess, fresh_namespace: str, tmp_path: Path
) -> None:
    plane, ns = control_plane, fresh_namespace
    job = example("kafka-rmi-streamingjob.yaml", ns, checkpoints={"location": str(tmp_path / "ck")})
    sink = next(iter(job["spec"]["sinks"]))
    report = ProgressReport(
        sink=sink,
        batch_id=41,
        at=datetime(2026, 11, 25, 12, 0, 5, tzinfo=UTC),
        partitions=[
            PartitionLag(topic="impressions", partition=0, offset=100, latest=105),
            PartitionLag(topic="playbacks", partition=1, offset=20, latest=27),
            PartitionLag(topic="playbacks", partition=0, offset=30, latest=30),
        ],
    )
    reports = tmp_path / "ck" / "live" / "_kappa"
    reports.mkdir(parents=True)
    (reports / report_name(sink)).write_text(report.model_dump_json())
    create(plane, job)

    lag = eventually(
        lambda: status(plane, SJ, ns, "rmi-kafka").get("kafkaLag"),
        "status.kafkaLag",
        timeout=2 * LIVE_PROGRESS_INTERVAL + 15,
    )
    assert lag == {
        "total": 12,
        "at": "2026-11-25T12:00:05Z",
        "partitions": [
            {"topic": "playbacks", "partition": 1, "lag": 7},
            {"topic": "impressions", "partition": 0, "lag": 5},
            {"topic": "playbacks", "partition": 0, "lag": 0},
        ],
    }
    shown = table(plane, ns, "rmi-kafka")
    columns = [c["name"] for c in shown["columnDefinitions"]]
    assert shown["rows"][0]["cells"][columns.index("Kafka Lag")] == 12, "kubectl get sj shows the lag"

    metrics = in_process_operator.context.metrics
    assert metrics is not None
    text = generate_latest(metrics.registry).decode()
    assert (
        f'kappa_streamingjob_kafka_lag_records{{namespace="{ns}",partition="1",sink="{sink}",'
        'streamingjob="rmi-kafka",topic="playbacks"} 7.0'
    ) in text


def handmade_checkpoint(root: Path, offsets: dict[str, dict[str, int]]) -> None:
    """A stateless query's checkpoint with batch 0 committed, as Spark writes one."""
    root.mkdir(parents=True)
    (root / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}))
    (root / "offsets").mkdir()
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1764000000000, "conf": {}}
    (root / "offsets" / "0").write_text(f"v1\n{json.dumps(meta)}\n{json.dumps(offsets)}")
    (root / "commits").mkdir()
    (root / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}')


def rewound_to_batch_0(
    plane: ControlPlane, ns: str, job: dict[str, Any], tmp_path: Path, offsets: dict[str, dict[str, int]]
) -> dict[str, Any]:
    """``job`` created with a snapshot of batch 0 that had read to ``offsets``, and a Rewind to
    it, refused by the retention check: the Rewind's status."""
    sink = next(iter(job["spec"]["sinks"]))
    handmade_checkpoint(tmp_path / "ck" / "live" / sink, offsets)
    assert externalize(open_location(str(tmp_path / "ck" / "live" / sink)), open_location(str(tmp_path / "ext" / sink)))
    create(plane, job)
    rewind = example("rmi-rewind.yaml", ns, "rmi-kafka-back", jobRef={"name": "rmi-kafka"}, target={"batchId": 0})
    create(plane, rewind)
    s = eventually(lambda: in_phase(plane, "Rewind", ns, "rmi-kafka-back", "Failed"), "the Rewind refused", 60)
    assert [c["reason"] for c in s["conditions"] if c["type"] == "Failed"] == ["KafkaOffsetsExpired"], s
    return dict(s)


def test_a_rewind_whose_kafka_offsets_are_gone_fails_before_stopping_the_job(
    control_plane: ControlPlane,
    in_process_operator: InProcess,
    fresh_namespace: str,
    kafka_broker: KafkaBroker,
    tmp_path: Path,
) -> None:
    """The restore point reads a topic the broker no longer has (deleted, or every segment gone
    to retention): the Rewind fails with KafkaOffsetsExpired naming the partition and offsets,
    and the job is never paused. Retention deleting a segment for real is in
    tests/spark/test_kafka_retention.py."""
    plane, ns = control_plane, fresh_namespace
    topic = f"gone-{uuid.uuid4().hex[:8]}"  # never created: auto-creation is off on the broker
    live = {"kind": "kafka", "bootstrapServers": kafka_broker.bootstrap, "topic": topic}
    job = example(
        "kafka-rmi-streamingjob.yaml",
        ns,
        checkpoints={"location": str(tmp_path / "ck"), "externalLocation": str(tmp_path / "ext")},
    )
    job["spec"]["sources"]["impressions"]["live"] = live
    s = rewound_to_batch_0(plane, ns, job, tmp_path, {topic: {"0": 5, "1": 3}})
    assert f"{topic}[0] from offset 5 (the partition no longer exists)" in s["message"]
    assert f"{topic}[1] from offset 3" in s["message"]
    assert "Nothing was stopped" in s["message"] and "Backfill" in s["message"]
    annotations = (get(plane, SJ, ns, "rmi-kafka") or {})["metadata"].get("annotations") or {}
    assert PAUSED_ANNOTATION not in annotations, "the job was never paused"


def test_a_rewind_asks_a_secured_listener_with_the_jobs_secrets_and_finds_the_deleted_records(
    control_plane: ControlPlane,
    in_process_operator: InProcess,
    fresh_namespace: str,
    kafka_broker: KafkaBroker,
    tmp_path: Path,
) -> None:
    """The retention check is the operator's own read of the job's brokers: through the SASL_SSL
    listener the job names, with the values of its Secrets (read into memory for the call). The
    broker deleted records 0-4 of partition 0 (as retention does): the Rewind fails naming them."""
    from confluent_kafka import Producer, TopicPartition

    plane, ns = control_plane, fresh_namespace
    topic = f"kept-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, partitions=2)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    for i in range(8):
        producer.produce(topic, value=b"x", partition=i % 2)
    assert producer.flush(30) == 0
    admin = kafka_broker.admin()  # held: a client collected before its answer fails the future
    for future in admin.delete_records([TopicPartition(topic, 0, 3)]).values():
        future.result(timeout=30)  # partition 0 holds offsets 3 and on

    (user, password), authority = next(iter(KAFKA_USERS["SCRAM-SHA-512"].items())), kafka_broker.secured
    assert authority is not None
    for name, data in (
        ("kafka-user", {"username": user, "password": password}),
        ("kafka-ca", {"ca.crt": authority.authority.ca.read_text()}),
    ):
        create(
            plane,
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns}, "stringData": data},
        )
    job = secured(
        example(
            "kafka-rmi-streamingjob.yaml",
            ns,
            checkpoints={"location": str(tmp_path / "ck"), "externalLocation": str(tmp_path / "ext")},
        )
    )
    job["spec"]["sources"]["impressions"]["live"].update(
        bootstrapServers=kafka_broker.bootstrap_of("SASL_SSL"), topic=topic
    )
    s = rewound_to_batch_0(plane, ns, job, tmp_path, {topic: {"0": 1, "1": 2}})
    assert f"(2 records): {topic}[0] offsets 1..2." in s["message"], s["message"]
    assert f"{topic}[1]" not in s["message"], "partition 1 still holds offset 2"
    events = plane.admin.get(path_of("Event", ns)).body["items"]
    assert all(password not in json.dumps(w) for w in [s, *events]), "the password stays in its Secret"


MARKER = "pw-7c1e-marker"
"""A Secret's value that must appear nowhere the operator writes."""


ROTATED = "pw-4d2a-rotated"
"""The password a rotation sets: nowhere either."""


def test_a_missing_kafka_secret_is_said_then_the_job_starts_with_it_mounted_and_its_value_nowhere(
    control_plane: ControlPlane, in_process_operator: InProcess, fresh_namespace: str, tmp_path: Path
) -> None:
    plane, ns = control_plane, fresh_namespace
    job = secured(example("kafka-rmi-streamingjob.yaml", ns, checkpoints={"location": str(tmp_path / "ck")}))
    create(plane, job)

    waiting = eventually(
        lambda: status(plane, SJ, ns, "rmi-kafka").get("missingSecrets") and status(plane, SJ, ns, "rmi-kafka"),
        "the job waiting for its Secrets",
        timeout=60,
    )
    assert waiting["phase"] == "Pending" and waiting["missingSecrets"] == ["kafka-user", "kafka-ca"], waiting
    assert "waiting for Secret kafka-user, kafka-ca" in waiting["message"]
    assert get(plane, "SparkApplication", ns, "rmi-kafka") is None, "nothing runs without its Secrets"

    for name, data in (("kafka-user", {"username": "alice", "password": MARKER}), ("kafka-ca", {"ca.crt": "PEM"})):
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns}, "stringData": data}
        create(plane, secret)
    app = eventually(lambda: get(plane, "SparkApplication", ns, "rmi-kafka"), "the application", timeout=60)
    driver = app["spec"]["driver"]
    mounted = {m["mountPath"] for m in driver["volumeMounts"] if m["name"].startswith("kafka-")}
    assert mounted == {"/etc/kappa/kafka/kafka-user", "/etc/kappa/kafka/kafka-ca"}
    assert eventually(lambda: "missingSecrets" not in status(plane, SJ, ns, "rmi-kafka"), "unset", timeout=30)

    # The password rotated: the running job is restarted with the Secret's new version (the
    # operator looks at a running job's Secrets every SECRET_LOOK_S; no event tells it).
    first = json.loads(app["metadata"]["annotations"]["kappa.dev/secret-versions"])
    secret = plane.admin.merge(path_of("Secret", ns, "kafka-user"), {"stringData": {"password": ROTATED}})
    version = plane.admin.ok(secret, "the rotated Secret")["metadata"]["resourceVersion"]
    assert version != first["kafka-user"]

    def restarted() -> dict[str, Any] | None:
        now = get(plane, "SparkApplication", ns, "rmi-kafka")
        said = ((now or {}).get("metadata", {}).get("annotations") or {}).get("kappa.dev/secret-versions")
        return now if said and json.loads(said) == {**first, "kafka-user": version} else None

    again = eventually(restarted, "the application created again with the rotated Secret", timeout=120)
    assert again["metadata"]["uid"] != app["metadata"]["uid"]
    events = plane.admin.get(path_of("Event", ns)).body["items"]
    said = [e["message"] for e in events if e.get("reason") == "SecretChanged"]
    assert said == [
        f"Secret kafka-user (resourceVersion {first['kafka-user']} -> {version}) changed: restarting from the "
        "checkpoint with the new values"
    ], said
    assert eventually(
        lambda: status(plane, SJ, ns, "rmi-kafka").get("secretVersions") == {**first, "kafka-user": version},
        "the status naming the versions mounted",
        timeout=30,
    )

    written = [
        app,
        again,
        get(plane, SJ, ns, "rmi-kafka"),
        *plane.admin.get(path_of("ConfigMap", ns)).body["items"],
        *plane.admin.get(path_of("Event", ns)).body["items"],
    ]
    for value in (MARKER, ROTATED):
        assert all(value not in json.dumps(w) for w in written), "the value is only in its Secret"
