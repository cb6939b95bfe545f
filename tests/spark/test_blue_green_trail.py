"""A blue/green upgrade's green reads a topic no further than blue durably has: the gated Kafka
source under a trail file (``kappa.trail``), on a real broker. No file: nothing; a cap: up to
it, per partition; a later cap: on from there, in the same checkpoint."""

from __future__ import annotations

import uuid
from pathlib import Path

from confluent_kafka import Producer
from pyspark.sql import SparkSession

from kappa_operator.local.kafka import KafkaBroker
from spark_app.bluegreen.trail import write_trail
from spark_app.contract.blue_green import Position, kafka_offsets
from spark_app.contract.sources import KafkaSource
from spark_app.contract.storage import open_location
from spark_app.sources.kafka import kafka_records


def read_once(spark: SparkSession, src: KafkaSource, trail: Path, ckpt: Path) -> list[tuple[int, int]]:
    """One availableNow run of the gated, trailed source: the (partition, offset) it read."""
    out = ckpt.parent / "rows"
    raw = kafka_records(spark, "plays", src, gate="open", trail=str(trail))
    q = (
        raw.selectExpr("partition", "offset")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    assert q.exception() is None, q.exception()
    if not out.exists() or not any(out.glob("*.parquet")):
        return []
    return sorted((r.partition, r.offset) for r in spark.read.parquet(str(out)).collect())


def test_green_reads_no_further_than_the_trail_says(
    spark: SparkSession, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    topic = f"plays-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, partitions=2)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    for i in range(30):
        for partition in (0, 1):
            producer.produce(topic, value=f'{{"i": {i}}}'.encode(), partition=partition)
    assert producer.flush(30) == 0
    src = KafkaSource.model_validate(
        {
            "kind": "kafka",
            "bootstrapServers": kafka_broker.bootstrap,
            "topic": topic,
            "schemaDdl": "i INT",
            "options": {"startingOffsets": "earliest"},
        }
    )
    trail, ckpt = tmp_path / "_kappa" / "trail-attributed.json", tmp_path / "ckpt"
    assert read_once(spark, src, trail, ckpt) == []  # blue has no durable batch yet

    blue = Position(4, 0, {"0": {topic: {"0": 10, "1": 5}}, "1": {"other": {"0": 99}}})
    location = open_location(str(trail.parent))
    write_trail(location, trail.name, kafka_offsets(blue, [topic]))
    assert read_once(spark, src, trail, ckpt) == [(0, o) for o in range(10)] + [(1, o) for o in range(5)]

    blue = Position(9, 0, {"0": {topic: {"0": 30, "1": 30}}})
    write_trail(location, trail.name, kafka_offsets(blue, [topic]))
    assert read_once(spark, src, trail, ckpt) == [(p, o) for p in (0, 1) for o in range(30)]
