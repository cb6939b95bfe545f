"""A Kafka job's consumer lag: from the driver's query progress to status and the gauge (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

from prometheus_client import generate_latest

from kappa_operator.reconcile.kafka_lag import SHOWN, lag_gauges, lag_status
from kappa_operator.service.metrics import OperatorMetrics
from spark_app.contract.reports.progress import PartitionLag, ProgressReport, partition_lags

# Two sources of one progress event, as Spark's Kafka source and ours report them.
SOURCES = [
    {
        "description": "KafkaV2[Subscribe[impressions]]",
        "startOffset": {"impressions": {"0": 10, "1": 4}},
        "endOffset": {"impressions": {"0": 20, "1": 9}},
        "latestOffset": {"impressions": {"1": 9, "0": 35}},
        "numInputRows": 15,
    },
    {"description": "KappaIcebergSource", "endOffset": '{"snapshotId": 3}', "latestOffset": None},
    {"description": "KafkaV2[SubscribePattern[plays-.*]]", "endOffset": '{"plays-eu": {"0": 7}}', "latestOffset": None},
]


def test_the_lag_is_the_newest_offset_minus_the_next_one_read_per_partition() -> None:
    lags = partition_lags(SOURCES)
    assert [(p.topic, p.partition, p.lag) for p in lags] == [
        ("impressions", 0, 15),
        ("impressions", 1, 0),
        ("plays-eu", 0, 0),
    ], "offsets as objects or JSON text; a source without latestOffset is not behind; Iceberg skipped"


def report(sink: str, *lags: tuple[str, int, int], at: int = 0) -> ProgressReport:
    parts = [PartitionLag(topic=t, partition=p, offset=100, latest=100 + n) for t, p, n in lags]
    return ProgressReport(sink=sink, batch_id=3, at=datetime(2026, 11, 1, 14, 0, at, tzinfo=UTC), partitions=parts)


def test_status_shows_the_total_and_the_partitions_furthest_behind() -> None:
    assert lag_status([]) is None, "no batch yet: nothing said"
    many = report("out", *((f"t{i:02d}", 0, i) for i in range(30)), at=5)
    status = lag_status([report("other", ("a", 0, 1000)), many])
    assert status is not None
    assert status["total"] == 1000 + sum(range(30)) and status["at"] == "2026-11-01T14:00:05Z"
    assert len(status["partitions"]) == SHOWN
    assert status["partitions"][0] == {"topic": "a", "partition": 0, "lag": 1000}
    assert status["partitions"][1]["topic"] == "t29", "furthest behind first"


def test_the_gauge_has_a_series_per_query_and_partition_and_forgets_a_deleted_job() -> None:
    metrics = OperatorMetrics()
    metrics.resources.kafka_lag("ads", "rmi", lag_gauges([report("out", ("impressions", 1, 42))]))
    text = generate_latest(metrics.registry).decode()
    assert (
        'kappa_streamingjob_kafka_lag_records{namespace="ads",partition="1",sink="out",'
        'streamingjob="rmi",topic="impressions"} 42.0'
    ) in text
    metrics.resources.forget("StreamingJob", "ads", "rmi")
    assert "kappa_streamingjob_kafka_lag_records{" not in generate_latest(metrics.registry).decode()
