"""Kafka for real: the pinned Apache Kafka broker (KRaft) and Spark's Kafka connector resolved
by spark_app.jars, read through ``kafka_frame`` (what a StreamingJob's kafka source runs)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from itertools import accumulate
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession

from kappa_operator.local.kafka import KafkaBroker
from spark_app.apps.run import run
from spark_app.apps.session import connector_jars
from spark_app.contract.config import JobConfig, parse_config
from spark_app.contract.reports.progress import partition_lags, read_reports
from spark_app.contract.sources import KafkaSource
from spark_app.contract.storage import open_location
from spark_app.sources.kafka import kafka_frame

pytestmark = pytest.mark.spark

BASE = datetime(2026, 11, 1, 14, tzinfo=UTC)
VALUE_DDL = "impression_id STRING, event_ts TIMESTAMP, user_id BIGINT"
KEPT = {"retention.ms": "-1"}
"""The records' timestamps are weeks old: Kafka's default retention (7 days, by record time)
would delete them within seconds."""
METADATA_DDL = "__metadata__ STRUCT<ingestion_ts: TIMESTAMP, topic: STRING, partition: INT, offset: BIGINT>"


def produce(broker: KafkaBroker, topic: str, events: list[dict[str, Any]], stamps: list[datetime]) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for event, stamp in zip(events, stamps, strict=True):
        producer.produce(
            topic,
            key=event["impression_id"].encode(),
            value=json.dumps(event).encode(),
            timestamp=int(stamp.timestamp() * 1000),
        )
    assert producer.flush(30) == 0


def config(broker: KafkaBroker, topic: str, ddl: str, tmp: Path) -> JobConfig:
    return parse_config(
        {
            "name": "ads-live",
            "pipeline": "pkg.pipelines:build",
            "mode": "live",
            "sources": {
                "impressions": {
                    "kind": "kafka",
                    "bootstrapServers": broker.bootstrap,
                    "topic": topic,
                    "schemaDdl": ddl,
                    "options": {"startingOffsets": "earliest"},
                }
            },
            "sinks": {"out": {"kind": "console"}},
            "checkpoint": {"location": str(tmp / "ck")},
        }
    )


def drain(spark: SparkSession, cfg: JobConfig, tmp: Path) -> list[dict[str, Any]]:
    """Everything in the topic now, read by a streaming query to its end (availableNow)."""
    src = cfg.sources["impressions"]
    assert isinstance(src, KafkaSource)
    frame = kafka_frame(spark, cfg, "impressions", src)
    out = tmp / "out"
    query = (
        frame.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp / "query-ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None, query.exception()
    return [r.asDict(recursive=True) for r in spark.read.schema(frame.schema).parquet(str(out)).collect()]


def test_a_topic_is_read_from_a_real_broker_with_its_kafka_metadata(
    spark: SparkSession, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    topic = f"impressions-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, partitions=2, config=KEPT)
    events = [
        {"impression_id": f"i{i}", "event_ts": (BASE + timedelta(seconds=i)).isoformat(), "user_id": i}
        for i in range(40)
    ]
    stamps = [BASE + timedelta(seconds=i, milliseconds=250) for i in range(40)]
    produce(kafka_broker, topic, events, stamps)

    got = drain(spark, config(kafka_broker, topic, f"{VALUE_DDL}, {METADATA_DDL}", tmp_path), tmp_path)

    assert len(got) == 40, "every record once"
    by_id = {r["impression_id"]: r for r in got}
    assert set(by_id) == {e["impression_id"] for e in events}
    for i, event in enumerate(events):
        row = by_id[event["impression_id"]]
        assert row["user_id"] == event["user_id"]
        assert row["event_ts"].astimezone(UTC) == datetime.fromisoformat(event["event_ts"])
        meta = row["__metadata__"]
        assert meta["topic"] == topic and meta["partition"] in (0, 1)
        assert meta["ingestion_ts"].astimezone(UTC) == stamps[i], "the Kafka timestamp of the record"
    offsets = sorted((r["__metadata__"]["partition"], r["__metadata__"]["offset"]) for r in got)
    for partition in (0, 1):
        mine = [o for p, o in offsets if p == partition]
        assert mine == list(range(len(mine))), "each partition's offsets, none skipped or repeated"


def test_a_value_that_is_not_json_gives_nulls_not_a_failed_query(
    spark: SparkSession, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    topic = f"broken-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    producer.produce(topic, value=b"not json")
    producer.produce(topic, value=json.dumps({"impression_id": "ok", "user_id": 7}).encode())
    assert producer.flush(30) == 0

    got = drain(spark, config(kafka_broker, topic, VALUE_DDL, tmp_path), tmp_path)

    assert sorted((r["impression_id"] or "", r["user_id"] or 0) for r in got) == [("", 0), ("ok", 7)]


def test_a_local_session_of_a_kafka_job_gets_the_pinned_connector(tmp_path: Path) -> None:
    """What build_session adds to spark.jars: the pinned connector, only when it is needed."""
    broker_less = parse_config(
        {
            "name": "j",
            "pipeline": "pkg.pipelines:build",
            "mode": "live",
            "sources": {"k": {"kind": "kafka", "bootstrapServers": "b:9092", "topic": "t", "schemaDdl": "a INT"}},
            "sinks": {"out": {"kind": "console"}},
            "checkpoint": {"location": str(tmp_path / "ck")},
        }
    )
    bare = tmp_path / "spark-jars"
    bare.mkdir()
    added = connector_jars(broker_less, bare)
    assert any(j.name.startswith("spark-sql-kafka-0-10_2.13-4.2.0") for j in added)
    assert any(j.name.startswith("kafka-clients-") for j in added)
    (bare / "spark-sql-kafka-0-10_2.13-4.2.0.jar").touch()
    assert connector_jars(broker_less, bare) == [], "a Spark image that ships it: nothing added"
    asked = broker_less.model_copy(update={"spark_conf": {"spark.jars.packages": "org.apache.spark:spark-sql-kafka"}})
    assert connector_jars(asked, tmp_path / "none") == [], "the job's own spark.jars.packages wins"


def test_a_live_kafka_job_reports_its_lag_per_partition_for_the_operator(
    spark: SparkSession, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    """The driver's report next to the checkpoint (what the operator shows in status and as a
    gauge), from the real Kafka source's progress: lag = newest offset - next offset read."""
    topic = f"lagging-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, partitions=2, config=KEPT)
    events = [{"impression_id": f"i{i}", "event_ts": BASE.isoformat(), "user_id": i} for i in range(60)]
    produce(kafka_broker, topic, events, [BASE] * 60)
    cfg = parse_config(
        {
            "name": "lagging",
            "pipeline": "spark_app.examples.copy:pipeline",
            "mode": "live",
            "sources": {
                "impressions": {
                    "kind": "kafka",
                    "bootstrapServers": kafka_broker.bootstrap,
                    "topic": topic,
                    "schemaDdl": VALUE_DDL,
                    "options": {"startingOffsets": "earliest", "maxOffsetsPerTrigger": "20"},
                }
            },
            "sinks": {"copy": {"kind": "parquet", "path": str(tmp_path / "out")}},
            "checkpoint": {"location": str(tmp_path / "ck")},
            "trigger": {"kind": "availableNow"},
        }
    )
    result = run(cfg, spark)

    batches = [p for p in result.progress if p["numInputRows"]]
    behind = [sum(lag.lag for lag in partition_lags(p["sources"])) for p in batches]
    read = list(accumulate(p["numInputRows"] for p in batches))
    assert len(batches) >= 3 and behind == [60 - n for n in read], "what is left after each batch of ~20"
    assert behind[-1] == 0
    (report,) = read_reports(open_location(str(tmp_path / "ck" / "_kappa")), ["copy"])
    assert report.sink == "copy" and report.total == 0, "the last batch's lag: caught up"
    assert {(p.topic, p.partition) for p in report.partitions} == {(topic, 0), (topic, 1)}
    assert sum(p.offset for p in report.partitions) == 60
    last = result.progress[-1]
    assert report.batch_id == last["batchId"] and report.input_rows == last["numInputRows"], "the last batch's"
    assert report.batch_duration_ms == last["batchDuration"] > 0, "what status.progress and the gauges show"
