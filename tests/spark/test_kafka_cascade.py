"""The cascade of seed 003 (caveat 3), on the real broker and real Spark, through `kappa run`
(the operator's own decisions, the restore application in-process).

job1 reads `events` and writes `scaled` (a Kafka sink); job2 reads `scaled` and keeps windowed
totals in an Iceberg table. A bad deploy of job1 writes wrong values for an hour of events;
job2 consumes them. The fix: one Rewind of job1 with `downstream: true`. job1 goes back to
its last good batch and re-emits the hour; the child Rewind it creates takes job2 back to the
newest snapshot that had read none of job1's bad records, resets its table, and resumes it
skipping exactly those records. job2's table then equals a clean run's, where no bad deploy
happened (same pipelines, same input)."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer, Producer
from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import SparkSession

from kappa_operator.cli.commands import main
from kappa_operator.local.kafka import KafkaBroker
from kappa_operator.local.overrides import local_catalog
from spark_app.contract.checkpoints.kafka_offsets import end_offsets
from spark_app.contract.sinks import KafkaSink
from spark_app.contract.storage import open_location
from spark_app.sinks.kafka import KafkaBatchWriter, Produced, read_produced

pytestmark = pytest.mark.spark

T0 = datetime(2026, 11, 1, 13, tzinfo=UTC)
CATALOG = {"type": "rest", "uri": "http://iceberg-rest.data.svc:8181", "warehouse": "s3://lake/warehouse"}
EVENTS = "id BIGINT, grp STRING, v BIGINT, event_ts TIMESTAMP"
EVENTS_NO_V = "id BIGINT, grp STRING, event_ts TIMESTAMP"
PER_HOUR = 240


def produce(broker: KafkaBroker, topic: str, hour: int) -> None:
    """An hour of events from T0 + hour, in event-time order, keyed by group."""
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(PER_HOUR):
        n = hour * PER_HOUR + i
        ts = T0 + timedelta(hours=hour, seconds=i * 3600 // PER_HOUR)
        value = {"id": n, "grp": f"g{n % 3}", "v": 1 + n % 7, "event_ts": ts.isoformat()}
        producer.produce(topic, key=value["grp"].encode(), value=json.dumps(value).encode())
    assert producer.flush(30) == 0


def streaming_job(name: str, source: dict[str, Any], sink: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kappa.dev/v1alpha1",
        "kind": "StreamingJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "image": "kappa-spark:test",
            "catalogs": {"default": CATALOG},
            "sources": source,
            "sinks": sink,
            "checkpoints": {
                "location": f"s3a://lake/checkpoints/{name}",
                "externalLocation": f"s3://lake/snapshots/{name}",
            },
            "triggerInterval": "10s",
            **spec,
        },
    }


def kafka_source(name: str, bootstrap: str, topic: str, schema: str) -> dict[str, Any]:
    live = {
        "kind": "kafka",
        "bootstrapServers": bootstrap,
        "topic": topic,
        "startingPosition": "earliest",
        "maxOffsetsPerTrigger": 120,
        "valueSchema": schema,
    }
    return {name: {"live": live, "history": {"table": f"archive.{topic.replace('-', '_')}"}}}


def job1(bootstrap: str, name: str, events: str, scaled: str, factor: str = "1") -> dict[str, Any]:
    sink = {"scaled": {"kind": "kafka", "bootstrapServers": bootstrap, "topic": scaled, "key": ["id"]}}
    return streaming_job(
        name,
        kafka_source("events", bootstrap, events, EVENTS),
        sink,
        pipeline="tests.spark.cascade_pipelines:scale",
        pipelineArgs={"factor": factor},
    )


def job2(bootstrap: str, name: str, scaled: str, table: str) -> dict[str, Any]:
    sink = {"totals": {"kind": "iceberg", "table": table, "timeColumn": "window_start", "key": ["window_start", "grp"]}}
    return streaming_job(
        name, kafka_source("scaled", bootstrap, scaled, EVENTS), sink, pipeline="tests.spark.cascade_pipelines:totals"
    )


def write(path: Path, *docs: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def kappa(capsys: pytest.CaptureFixture[str], root: Path, *args: str) -> str:
    code = main(["run", *args, "--local", str(root)])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0, out[-3000:]
    return out


def committed(root: Path, job: str, sink: str) -> list[int]:
    (commits,) = root.glob(f"**/checkpoints/{job}/live/{sink}/commits")
    return sorted(int(p.name) for p in commits.iterdir() if p.name.isdigit())


def table_rows(catalog: SqlCatalog, table: str) -> list[tuple[Any, ...]]:
    t = catalog.load_table(table).scan().to_arrow()
    return sorted(tuple(r.values()) for r in t.select(["window_start", "grp", "total", "n"]).to_pylist())


def test_one_rewind_with_downstream_gives_job2_the_output_of_a_clean_run(
    spark: SparkSession,
    kafka_broker: KafkaBroker,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    run = uuid.uuid4().hex[:6]
    events, scaled, clean_scaled = f"events-{run}", f"scaled-{run}", f"scaled-clean-{run}"
    for topic in (events, scaled, clean_scaled):
        kafka_broker.create_topic(topic, partitions=2, config={"retention.ms": "-1"})
    bootstrap = kafka_broker.bootstrap
    root = (tmp_path / "local").resolve()
    (root / "catalogs").mkdir(parents=True)
    props = local_catalog("default", CATALOG, root)
    catalog = SqlCatalog("default", uri=props["uri"], warehouse=props["warehouse"])

    fixed = tmp_path / "deployed"  # what is deployed after the fix (and before the bad deploy)
    up = write(fixed / "job1.yaml", job1(bootstrap, "job1", events, scaled))
    down = write(fixed / "job2.yaml", job2(bootstrap, "job2", scaled, "marts.totals"))
    bad = write(tmp_path / "bad" / "job1.yaml", job1(bootstrap, "job1", events, scaled, factor="-1"))

    # 1. an hour runs through both jobs
    produce(kafka_broker, events, 0)
    kappa(capsys, root, str(up))
    kappa(capsys, root, str(down))
    (last_good,) = committed(root, "job1", "scaled")[-1:]
    good_end = end_offsets(bootstrap, scaled)
    assert sum(good_end.values()) == PER_HOUR

    # 2. the bad deploy: the next hour's values negated, consumed by job2
    produce(kafka_broker, events, 1)
    kappa(capsys, root, str(bad))
    kappa(capsys, root, str(down))
    bad_end = end_offsets(bootstrap, scaled)
    assert sum(bad_end.values()) == 2 * PER_HOUR
    broken = table_rows(catalog, "marts.totals")
    assert any(total < 0 for _, _, total, _ in broken), "job2 took in job1's bad output"

    # 3. the fix: one Rewind of job1, downstream included
    rewind = {
        "apiVersion": "kappa.dev/v1alpha1",
        "kind": "Rewind",
        "metadata": {"name": "fix", "namespace": "default"},
        "spec": {"jobRef": {"name": "job1"}, "target": {"batchId": last_good}, "downstream": True},
    }
    out = kappa(capsys, root, str(write(fixed / "rewind.yaml", rewind)))
    assert "Succeeded" in out
    record = json.loads((root / "objects" / "rewind" / "default" / "fix.json").read_text())
    (restore,) = record["status"]["restores"]
    undone = restore["undoneRecords"]
    assert undone["topic"] == scaled
    assert {r["partition"]: (r["start"], r["end"]) for r in undone["partitions"]} == {
        p: (good_end[p], bad_end[p]) for p in bad_end if bad_end[p] > good_end[p]
    }, "exactly the records job1 wrote after its restored batch"
    assert sum(end_offsets(bootstrap, scaled).values()) == 3 * PER_HOUR, "job1 re-emitted the hour, fixed"
    (child,) = root.glob("**/created/fix-job2.yaml")
    child_spec = yaml.safe_load(child.read_text())["spec"]
    assert child_spec["target"] == {"beforeSkippedOffsets": True} and child_spec["skipOffsets"] == [undone]

    out = kappa(capsys, root, str(child), "--job", str(down))
    assert "Succeeded" in out and "skipping" in out
    job2_record = json.loads((root / "objects" / "streamingjob" / "default" / "job2.json").read_text())
    assert json.loads(job2_record["annotations"]["kappa.dev/skip-offsets"]) == [
        {"topic": scaled, **r} for r in undone["partitions"]
    ]

    # 4. the clean run: the same pipelines, the same input, no bad deploy
    clean = tmp_path / "clean"
    kappa(capsys, root, str(write(clean / "job1.yaml", job1(bootstrap, "clean1", events, clean_scaled))))
    kappa(capsys, root, str(write(clean / "job2.yaml", job2(bootstrap, "clean2", clean_scaled, "marts.clean"))))
    expected = table_rows(catalog, "marts.clean")
    assert len(expected) > 10 and all(total > 0 for _, _, total, _ in expected)
    assert table_rows(catalog, "marts.totals") == expected, "job2's output equals the clean run's"
    assert broken != expected


def test_the_kafka_sink_records_each_batch_and_does_not_write_a_recorded_one_again(
    spark: SparkSession, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    topic = f"sink-{uuid.uuid4().hex[:6]}"
    kafka_broker.create_topic(topic, partitions=2, config={"retention.ms": "-1"})
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "metadata").write_text('{"id":"q-sink"}\n')  # what Spark writes first in a checkpoint
    sink = KafkaSink(kind="kafka", bootstrapServers=kafka_broker.bootstrap, topic=topic, key=["id"])
    writer = KafkaBatchWriter("out", sink, str(ckpt))
    ts = datetime(2026, 11, 1, 13, 0, 0, 123456, tzinfo=UTC)
    batch = spark.createDataFrame([(i, f"g{i % 2}", ts + timedelta(minutes=i)) for i in range(10)], EVENTS_NO_V)

    writer(batch, 0)
    first = read_produced(open_location(str(ckpt)), 0)
    assert first is not None and first.end is not None and first.query_id == "q-sink"
    assert sum(first.end.values()) - sum(first.start.get(p, 0) for p in first.end) == 10
    writer(batch, 0)  # Spark replays batch 0 after a restart: recorded, so not written again
    assert sum(end_offsets(kafka_broker.bootstrap, topic).values()) == 10

    # a driver killed after recording the intent of batch 1 and (maybe) writing: written
    # again, and the record says from where
    ckpt_loc = open_location(str(ckpt))
    intent = Produced(batch_id=1, query_id="q-sink", topic=topic, start=first.end)
    ckpt_loc.write_bytes("kafka-produced/1", intent.model_dump_json().encode())
    writer(batch, 1)
    again = read_produced(ckpt_loc, 1)
    assert again is not None and again.again_from == first.end and again.end is not None
    assert sum(end_offsets(kafka_broker.bootstrap, topic).values()) == 20

    consumer = Consumer(
        {"bootstrap.servers": kafka_broker.bootstrap, "group.id": topic, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 20 and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is not None and msg.error() is None:
            got.append(msg)
    consumer.close()
    assert len(got) == 20
    first_record = min(got, key=lambda m: (json.loads(m.value())["id"], m.offset()))
    assert json.loads(first_record.key()) == {"id": 0}, "the key is the row's key columns"
    assert dict(first_record.headers()) == {"kappa.query": b"q-sink", "kappa.batch": b"0"}
    value = json.loads(first_record.value())
    assert datetime.fromisoformat(value["event_ts"]) == ts, "microseconds kept"
