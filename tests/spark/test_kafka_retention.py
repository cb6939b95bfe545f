"""A Rewind of a Kafka job whose restore point's offsets retention has deleted: found from the
real checkpoint's offset log and the real broker's earliest offsets, before anything stops."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from pyspark.sql import SparkSession

from kappa_operator.local.kafka import KafkaBroker
from kappa_operator.observe.restore_points import earliest_offsets
from spark_app.contract.checkpoints.kafka_retention import Loss, kafka_offsets, losses, refusal
from spark_app.contract.checkpoints.layout import parse_offsets
from spark_app.contract.config import parse_config
from spark_app.contract.sources import KafkaSource
from spark_app.sources.kafka import kafka_frame

pytestmark = pytest.mark.spark


def produce(broker: KafkaBroker, topic: str, first: int, n: int, at: datetime) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(first, first + n):
        producer.produce(topic, value=json.dumps({"id": i}).encode(), timestamp=int(at.timestamp() * 1000))
    assert producer.flush(30) == 0


def test_offsets_deleted_by_retention_are_found_with_partition_and_range(
    spark: SparkSession, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    topic = f"retained-{uuid.uuid4().hex[:8]}"
    # a segment rolls after 1 s; a closed segment whose newest record is older than an hour goes
    # kept until the query has read offsets 0..9 (their timestamps are two days old: with the
    # hour's retention set at once, the broker could delete them before the query reads them)
    kafka_broker.create_topic(topic, config={"segment.ms": "1000", "retention.ms": "-1"})
    old = datetime.now(UTC) - timedelta(days=2)
    produce(kafka_broker, topic, 0, 10, old)
    cfg = parse_config(
        {
            "name": "retained",
            "pipeline": "spark_app.examples.copy:pipeline",
            "mode": "live",
            "sources": {
                "events": {
                    "kind": "kafka",
                    "bootstrapServers": kafka_broker.bootstrap,
                    "topic": topic,
                    "schemaDdl": "id BIGINT",
                    "options": {"startingOffsets": "earliest"},
                }
            },
            "sinks": {"copy": {"kind": "console"}},
            "checkpoint": {"location": str(tmp_path / "ck")},
        }
    )
    src = cfg.sources["events"]
    assert isinstance(src, KafkaSource)
    ck = tmp_path / "ck" / "copy"
    q = (
        kafka_frame(spark, cfg, "events", src)
        .writeStream.format("noop")
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(120)
    assert q.exception() is None
    stored = kafka_offsets(parse_offsets((ck / "offsets" / "0").read_text()), topics=[topic])
    assert stored == {topic: {0: 10}}, "batch 0 read offsets 0..9: a restore resumes at 10"

    produce(kafka_broker, topic, 10, 10, old)  # 10..19, not read by the checkpoint yet
    time.sleep(1.5)
    produce(kafka_broker, topic, 20, 1, datetime.now(UTC))  # rolls the old segment
    retention = ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
    admin = kafka_broker.admin()
    for future in admin.incremental_alter_configs(
        [ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[retention])]
    ).values():
        future.result(timeout=30)  # now a closed segment whose newest record is older than an hour goes
    deadline = time.monotonic() + 60
    earliest = earliest_offsets(kafka_broker.bootstrap, stored)
    while earliest[(topic, 0)] == 0 and time.monotonic() < deadline:
        time.sleep(0.5)
        earliest = earliest_offsets(kafka_broker.bootstrap, stored)
    assert earliest[(topic, 0)] == 20, "retention deleted the segment holding offsets 0..19"

    lost = losses(stored, earliest)
    assert lost == [Loss(topic, 0, resume_at=10, earliest=20)]
    why = refusal(lost, 0, {topic: "archive.events"})
    assert f"{topic}[0] offsets 10..19" in why and "(10 records)" in why and "archive.events" in why
