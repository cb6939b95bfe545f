"""Issue 44, cases 4 and 5, on the real broker and real Spark: a topic the cluster does not have
is refused before the query starts, naming the source, the topic and the brokers; records the
topic lost before a job's first read from its earliest offset are said (in the run's notices, the
driver's progress report the operator reads, and nothing is written twice or made up)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from kappa_operator.local.kafka import KafkaBroker
from spark_app.apps.run import run
from spark_app.contract.config import JobConfig, parse_config
from spark_app.contract.errors import ConfigError
from spark_app.contract.reports.progress import read_reports
from spark_app.contract.storage import open_location
from spark_app.sources.kafka import gone_notice

pytestmark = pytest.mark.spark

DDL = "impression_id STRING, user_id BIGINT"


def copy_job(broker: KafkaBroker, topic: str, tmp: Path) -> JobConfig:
    """An archive-like job: the topic from its earliest offset, copied to Parquet."""
    return parse_config(
        {
            "name": "edges",
            "pipeline": "spark_app.examples.copy:pipeline",
            "mode": "live",
            "sources": {
                "clicks": {
                    "kind": "kafka",
                    "bootstrapServers": broker.bootstrap,
                    "topic": topic,
                    "schemaDdl": DDL,
                    "options": {"startingOffsets": "earliest"},
                }
            },
            "sinks": {"copy": {"kind": "parquet", "path": str(tmp / "out")}},
            "checkpoint": {"location": str(tmp / "ck")},
            "trigger": {"kind": "availableNow"},
            "sparkConf": {"spark.sql.shuffle.partitions": "2"},
        }
    )


def produce(broker: KafkaBroker, topic: str, n: int, partition: int) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for i in range(n):
        producer.produce(
            topic, value=json.dumps({"impression_id": f"p{partition}-{i}", "user_id": i}), partition=partition
        )
    assert producer.flush(30) == 0


def test_a_topic_the_cluster_does_not_have_is_refused_naming_source_topic_and_brokers(
    spark: SparkSession, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    real = f"clicks-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(real)
    typo = real.replace("clicks", "clickz")
    with pytest.raises(ConfigError) as refused:
        run(copy_job(kafka_broker, typo, tmp_path), spark)
    text = str(refused.value)
    assert text.startswith(
        f"sources.clicks.topic: topic '{typo}' does not exist on the Kafka cluster at {kafka_broker.bootstrap} (it has "
    )
    assert real in text and "correct sources.clicks.topic, or create the topic" in text
    assert "Exception" not in text and "\n" not in text, "one line, no Java trace"
    assert not (tmp_path / "out").exists() and not (tmp_path / "ck").exists(), "nothing written"


def test_records_removed_before_the_first_read_are_said_with_each_partition(
    spark: SparkSession, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    topic = f"gone-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, partitions=2, config={"retention.ms": "-1"})
    produce(kafka_broker, topic, 30, partition=0)
    produce(kafka_broker, topic, 20, partition=1)
    # what retention does to old segments, done at once and exactly: partition 0 starts at 12
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    (done,) = admin.delete_records([TopicPartition(topic, 0, 12)]).values()
    assert done.result(30).low_watermark == 12

    report = run(copy_job(kafka_broker, topic, tmp_path), spark)

    (notice,) = report.notices
    assert notice == gone_notice("clicks", {(topic, 0): 12, (topic, 1): 0})
    assert (
        notice.startswith("source clicks: 12 records were removed from the topic")
        and f"{topic}[0] from offset 12" in notice
    )
    assert f"{topic}[1]" not in notice, "a partition that lost nothing is not named"
    assert report.summary()["notices"] == [notice]
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert len(rows) == 18 + 20, "what the topic still holds, each once"
    assert not any(r.impression_id in {f"p0-{i}" for i in range(12)} for r in rows)
    (progress,) = read_reports(open_location(str(tmp_path / "ck" / "_kappa")), ["copy"])
    assert progress.notices == [notice], "the report the operator turns into the RecordsLost condition"

    again = run(copy_job(kafka_broker, topic, tmp_path), spark)
    assert again.notices == [], "said at the first start only: a restart reads from its checkpoint"


def test_a_topic_that_lost_nothing_says_nothing(kafka_broker: KafkaBroker) -> None:
    assert gone_notice("clicks", {("t", 0): 0, ("t", 1): 0}) is None
