"""Issue 30 item 3: a snapshot asked for by the operator (a trigger nonce, an upgrade), taken
by the running job's own driver. A real live query on the real broker: the requests file (the
control ConfigMap Kubernetes mounts) is there while it runs; each sink's answer names a
restorable snapshot of a committed batch, and retention keeps it however many come after."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from kappa_operator.local.kafka import KafkaBroker
from spark_app.apps.run import run
from spark_app.contract.checkpoints.snapshots import apply_retention, list_snapshots
from spark_app.contract.config import parse_config
from spark_app.contract.snapshot_requests import read_answer, requests_text
from spark_app.contract.storage import open_location
from tests.spark.test_kafka_broker import BASE, KEPT, VALUE_DDL, produce

pytestmark = pytest.mark.spark


def test_the_driver_answers_each_request_with_a_pinned_snapshot(
    spark: SparkSession, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    topic = f"snap-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, partitions=1, config=KEPT)
    events = [{"impression_id": f"i{i}", "event_ts": BASE.isoformat(), "user_id": i} for i in range(30)]
    produce(kafka_broker, topic, events, [BASE] * 30)
    requests = tmp_path / "control" / "snapshot-requests"
    requests.parent.mkdir()
    requests.write_text(requests_text(["trigger-1", "upgrade-abc"]))
    cfg = parse_config(
        {
            "name": "snap",
            "pipeline": "spark_app.examples.copy:pipeline",
            "mode": "live",
            "sources": {
                "impressions": {
                    "kind": "kafka",
                    "bootstrapServers": kafka_broker.bootstrap,
                    "topic": topic,
                    "schemaDdl": VALUE_DDL,
                    "options": {"startingOffsets": "earliest", "maxOffsetsPerTrigger": "10"},
                }
            },
            "sinks": {"copy": {"kind": "parquet", "path": str(tmp_path / "out")}},
            "checkpoint": {
                "location": str(tmp_path / "ck"),
                # an hour's interval: nothing would be copied but for the requests (and the end)
                "external": {"location": str(tmp_path / "ext"), "interval": "1h", "requestsFile": str(requests)},
            },
            "trigger": {"kind": "availableNow"},
        }
    )
    run(cfg, spark)

    external = open_location(str(tmp_path / "ext" / "copy"))
    restorable = {m.batch_id: m for m in list_snapshots(external)}
    answers = [read_answer(external, n) for n in ("trigger-1", "upgrade-abc")]
    assert all(a is not None for a in answers), "both requests answered"
    first = answers[0]
    assert first is not None and first.batch_id in restorable, "the answer names a restorable snapshot"
    assert first.committed_at == restorable[first.batch_id].committed_at
    assert read_answer(external, "trigger-2") is None, "no answer to what was not asked"

    # the job restarts (same requests still mounted) and reads on: answered requests stay answered
    produce(kafka_broker, topic, events, [BASE] * 30)
    run(cfg, spark)
    assert read_answer(external, "trigger-1") == first, "a restarted driver does not answer again"
    newest = max(m.batch_id for m in list_snapshots(external))
    assert newest > first.batch_id
    apply_retention(external, keep_last=1)
    kept = {m.batch_id for m in list_snapshots(external)}
    assert kept == {first.batch_id, newest}, "retention keeps the requested snapshot and the newest"
