"""The session broker's secured listeners, reached as a job's driver reaches them: SASL_SSL with
SCRAM-SHA-512 and PLAIN users, and MTLS (a client certificate required), every credential from
files as a mounted Secret gives them, certificates from the test's own CA. And each refusal a
team meets when connecting to its company's Kafka, said in one line that names the source, the
listener and the fix, with no secret in it."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from pyspark.sql import SparkSession

from kappa_operator.local.certificates import Authority
from kappa_operator.local.kafka import MTLS, SASL_SSL, KafkaBroker
from spark_app.apps.run import run
from spark_app.contract.config import parse_config
from spark_app.contract.kafka_reach import KafkaRefusedError, reach
from spark_app.contract.kafka_security import KafkaSecurity, client_config
from tests.conftest import KAFKA_USERS

((SCRAM_USER, SCRAM_PASSWORD),) = KAFKA_USERS["SCRAM-SHA-512"].items()
((PLAIN_USER, PLAIN_PASSWORD),) = KAFKA_USERS["PLAIN"].items()


def mounted(directory: Path, **values: str) -> dict[str, str]:
    """Each value as a file of its own, exactly (what a Secret's key is in its mount)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for key, value in values.items():
        (directory / key).write_text(value)
        paths[key] = str(directory / key)
    return paths


def sasl_ssl(
    broker: KafkaBroker, tmp: Path, mechanism: str, user: str, password: str, ca: Path | None = None
) -> KafkaSecurity:
    files = mounted(tmp / f"sasl-{uuid.uuid4().hex[:6]}", username=user, password=password)
    assert broker.secured is not None
    return KafkaSecurity.model_validate(
        {
            "protocol": "SASL_SSL",
            "sasl": {"mechanism": mechanism, "usernameFile": files["username"], "passwordFile": files["password"]},
            "tls": {"caFile": str(ca or broker.secured.authority.ca)},
        }
    )


def mtls(broker: KafkaBroker, name: str = "client-job", expired: bool = False, client: bool = True) -> KafkaSecurity:
    assert broker.secured is not None
    authority = broker.secured.authority
    tls: dict[str, Any] = {"caFile": str(authority.ca)}
    if client:
        issued = authority.issue(name, expired=expired)
        tls |= {"certFile": str(issued.cert), "keyFile": str(issued.key)}
    return KafkaSecurity.model_validate({"protocol": "SSL", "tls": tls})


def read_back(bootstrap: str, topic: str, count: int, security: KafkaSecurity | None = None) -> list[bytes]:
    """The first ``count`` records' values of ``topic`` (within a minute)."""
    settings = {"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"}
    consumer = Consumer({**settings, **client_config(security)})
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        for _ in range(60):
            record = consumer.poll(1.0)
            if record is not None and record.error() is None:
                got.append(record.value())
            if len(got) == count:
                break
    finally:
        consumer.close()
    return got


def new_topic(broker: KafkaBroker) -> str:
    topic = f"secured-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, config={"retention.ms": "-1"})
    return topic


def test_each_secured_listener_takes_a_client_configured_from_its_secret_files(
    kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    topic = new_topic(kafka_broker)
    scram = sasl_ssl(kafka_broker, tmp_path, "SCRAM-SHA-512", SCRAM_USER, SCRAM_PASSWORD)
    plain = sasl_ssl(kafka_broker, tmp_path, "PLAIN", PLAIN_USER, PLAIN_PASSWORD)
    certified = mtls(kafka_broker)
    for security, listener in ((scram, SASL_SSL), (plain, SASL_SSL), (certified, MTLS)):
        reach(kafka_broker.bootstrap_of(listener), security, "sources.plays")

    for n, security in enumerate((scram, plain)):
        producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_of(SASL_SSL), **client_config(security)})
        producer.produce(topic, key=f"k{n}".encode(), value=f"v{n}".encode())
        assert producer.flush(30) == 0

    assert sorted(read_back(kafka_broker.bootstrap_of(MTLS), topic, 2, certified)) == [b"v0", b"v1"]


def other_ca(tmp: Path) -> Path:
    return Authority.create(tmp / "other-ca", "some-other-ca").ca


REFUSALS = {
    "wrong password": (SASL_SSL, "refused the SASL username or password", "check the username and password keys"),
    "untrusted CA": (SASL_SSL, "not signed by the CA the job trusts", "name the CA that signed the broker's"),
    "mechanism not offered": (SASL_SSL, "does not offer this SASL mechanism (it offers SCRAM-SHA-512,PLAIN)", "set"),
    "expired client certificate": (MTLS, "refused the client certificate", "renew the certificate"),
    "no client certificate": (MTLS, "requires a client certificate", "security.tls.client"),
    "plaintext to a TLS listener": (SASL_SSL, "it expects TLS or SASL", "name a security block whose protocol"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_refusal_is_one_line_naming_the_source_the_listener_and_the_fix(
    kafka_broker: KafkaBroker, tmp_path: Path, case: str
) -> None:
    listener, meaning, fix = REFUSALS[case]
    security = {
        "wrong password": lambda: sasl_ssl(kafka_broker, tmp_path, "SCRAM-SHA-512", SCRAM_USER, "not-the-password"),
        "untrusted CA": lambda: sasl_ssl(
            kafka_broker, tmp_path, "SCRAM-SHA-512", SCRAM_USER, SCRAM_PASSWORD, ca=other_ca(tmp_path)
        ),
        "mechanism not offered": lambda: sasl_ssl(kafka_broker, tmp_path, "SCRAM-SHA-256", SCRAM_USER, SCRAM_PASSWORD),
        "expired client certificate": lambda: mtls(kafka_broker, "client-expired", expired=True),
        "no client certificate": lambda: mtls(kafka_broker, client=False),
        "plaintext to a TLS listener": lambda: KafkaSecurity(),
    }[case]()
    bootstrap = kafka_broker.bootstrap_of(listener)
    with pytest.raises(KafkaRefusedError) as refused:
        reach(bootstrap, security, "sources.plays", timeout=30)
    line = str(refused.value)
    assert "\n" not in line
    assert line.startswith(f"sources.plays: {security.protocol} listener {bootstrap}: "), line
    assert meaning in line and fix in line, line
    assert SCRAM_PASSWORD not in line and "not-the-password" not in line


@pytest.mark.spark
def test_a_live_job_reads_a_sasl_ssl_topic_and_writes_through_mtls_with_no_secret_in_its_conf_or_progress(
    spark: SparkSession, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    """Spark's own Kafka client, given only file references (``${kappadir:...}``), reads with
    SCRAM over TLS and writes with a client certificate."""
    source, sink = new_topic(kafka_broker), new_topic(kafka_broker)
    scram = sasl_ssl(kafka_broker, tmp_path, "SCRAM-SHA-512", SCRAM_USER, SCRAM_PASSWORD)
    certified = mtls(kafka_broker)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_of(SASL_SSL), **client_config(scram)})
    for i in range(10):
        producer.produce(source, value=json.dumps({"impression_id": f"i{i}", "user_id": i}).encode())
    assert producer.flush(30) == 0
    cfg = parse_config(
        {
            "name": "secured",
            "pipeline": "spark_app.examples.copy:pipeline",
            "mode": "live",
            "sources": {
                "impressions": {
                    "kind": "kafka",
                    "bootstrapServers": kafka_broker.bootstrap_of(SASL_SSL),
                    "topic": source,
                    "schemaDdl": "impression_id STRING, user_id BIGINT",
                    "options": {"startingOffsets": "earliest"},
                    "security": scram.model_dump(by_alias=True, exclude_none=True),
                }
            },
            "sinks": {
                "copy": {
                    "kind": "kafka",
                    "bootstrapServers": kafka_broker.bootstrap_of(MTLS),
                    "topic": sink,
                    "key": ["impression_id"],
                    "security": certified.model_dump(by_alias=True, exclude_none=True),
                }
            },
            "checkpoint": {"location": str(tmp_path / "ck")},
            "trigger": {"kind": "availableNow"},
        }
    )

    result = run(cfg, spark)

    rows = [json.loads(value) for value in read_back(kafka_broker.bootstrap, sink, 10)]
    assert {r["impression_id"]: r["user_id"] for r in rows} == {f"i{i}": i for i in range(10)}
    said = str(result.progress) + str(spark.sparkContext.getConf().getAll())
    assert SCRAM_PASSWORD not in said and "BEGIN PRIVATE KEY" not in said
    # nor in anything the run wrote: the checkpoint, its offsets and commits, the `_kappa`
    # reports (progress, lag) and the sink's produced-offsets records
    assert certified.tls is not None and certified.tls.key_file is not None
    key = Path(certified.tls.key_file).read_text().splitlines()[1]  # a line of the key itself
    written = {p: p.read_bytes() for p in (tmp_path / "ck").rglob("*") if p.is_file()}
    assert any("_kappa" in str(p) for p in written), "the live run's reports are among them"
    leaked = [str(p) for p, data in written.items() if SCRAM_PASSWORD.encode() in data or key.encode() in data]
    assert leaked == [], "a secret in what the run wrote"
