"""The pattern the product exists for, on a real broker: Kafka live, an Iceberg archive of every
topic, and a backfill from the archive that the same pipeline cannot tell from Kafka.

Two topics (impressions, playbacks) are filled in arrival order with the generator's events
(1% of them 30-90 minutes late, the Kafka timestamp being the arrival). An archive job per
topic (``spark_app.examples.copy`` from the ``kafka`` source into an exactly-once Iceberg
table, value columns plus ``__metadata__`` {ingestion_ts, topic, partition, offset}) archives
them; the rmi pipeline runs live from Kafka, then as an aligned backfill of a window from the
archive tables. The backfill's output equals the live output in the window and a batch
computation over the archive; the rows the pipeline gets from Kafka equal the archive's.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kappa_operator.local.kafka import KafkaBroker
from spark_app.apps.run import run
from spark_app.contract.config import JobConfig, parse_config
from spark_app.contract.sources import KafkaSource
from spark_app.examples import rmi
from spark_app.examples.event_tables import KAFKA_ARCHIVE_METADATA_DDL
from spark_app.examples.generator import GeneratorConfig, generate
from spark_app.sinks.iceberg.writer import FAULT_ENV
from spark_app.sources.kafka import kafka_frame
from tests.spark.conftest import T0, Driver

pytestmark = pytest.mark.spark

TOPICS = ("impressions", "playbacks")
METADATA = KAFKA_ARCHIVE_METADATA_DDL
VALUES = {
    "impressions": "impression_id STRING, profile_id BIGINT, title_id BIGINT, event_ts TIMESTAMP",
    "playbacks": "playback_id STRING, profile_id BIGINT, title_id BIGINT, duration_s DOUBLE, event_ts TIMESTAMP",
}
LATENESS = "2 hours"  # the pipeline's watermark delay: above the 90 minutes of the latest arrival
WINDOW = {"start": (T0 + timedelta(minutes=40)).isoformat(), "end": (T0 + timedelta(minutes=80)).isoformat()}
COLUMNS = ["playback_id", "impression_id", "profile_id", "title_id", "impression_ts", "playback_ts", "duration_s"]


class Story:
    def __init__(self, root: Path, broker: KafkaBroker, suffix: str) -> None:
        self.root, self.broker = root, broker
        self.topic = {name: f"{name}-{suffix}" for name in TOPICS}
        self.props = {"uri": f"sqlite:///{root}/lake.db", "warehouse": f"file://{root}/warehouse"}

    def catalogs(self) -> dict[str, Any]:
        return {"default": {"type": "sql", **self.props}}

    def kafka(self, name: str, options: dict[str, str] | None = None, **fields: Any) -> dict[str, Any]:
        return {
            "kind": "kafka",
            "bootstrapServers": self.broker.bootstrap,
            "topic": self.topic[name],
            "options": {"startingOffsets": "earliest", **(options or {})},
            **fields,
        }

    def archive_config(
        self, name: str, run_dir: Path, table: str | None = None, options: dict[str, str] | None = None
    ) -> JobConfig:
        """The routing service of the talk: a topic, unchanged, into its archive table."""
        return parse_config(
            {
                "name": f"archive-{name}",
                "pipeline": "spark_app.examples.copy:pipeline",
                "mode": "live",
                "master": "local[2]",
                "catalogs": self.catalogs(),
                "sources": {name: self.kafka(name, options, schemaDdl=f"{VALUES[name]}, {METADATA}")},
                "sinks": {
                    "copy": {"kind": "iceberg", "table": table or f"archive.{name}", "partitionBy": ["hour(event_ts)"]}
                },
                "checkpoint": {"location": str(run_dir / "ckpt")},
                "trigger": {"kind": "availableNow"},
                "sparkConf": {"spark.sql.shuffle.partitions": "2", "spark.ui.showConsoleProgress": "false"},
            }
        )

    def live_config(self, run_dir: Path) -> JobConfig:
        return parse_config(
            {
                "name": "rmi-live",
                "pipeline": "spark_app.examples.rmi:pipeline",
                "pipelineArgs": {"lateness": LATENESS},
                "mode": "live",
                "catalogs": self.catalogs(),
                "sources": {n: self.kafka(n, schemaFrom=f"default:archive.{n}") for n in TOPICS},
                "sinks": {rmi.OUTPUT: {"kind": "parquet", "path": str(run_dir / "out")}},
                "checkpoint": {"location": str(run_dir / "ckpt")},
                "trigger": {"kind": "availableNow"},
            }
        )

    def backfill_config(self, run_dir: Path) -> JobConfig:
        """What the operator renders for a Backfill of the live job: each source's history
        (here its archive table) in its place, aligned, the same pipeline and arguments."""
        return parse_config(
            {
                "name": "rmi-backfill",
                "pipeline": "spark_app.examples.rmi:pipeline",
                "pipelineArgs": {"lateness": LATENESS},
                "mode": "backfill",
                "catalogs": self.catalogs(),
                "sources": {
                    n: {"kind": "icebergBackfill", "table": f"archive.{n}", "split": {"maxBundleSpan": "2m"}}
                    for n in TOPICS
                },
                "sinks": {rmi.OUTPUT: {"kind": "parquet", "path": str(run_dir / "out"), "timeColumn": "playback_ts"}},
                "checkpoint": {"location": str(run_dir / "ckpt")},
                "window": {**WINDOW, "warmup": "30m"},
                "alignment": {"mode": "aligned", "maxDrift": "4m"},
            }
        )


def _json(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return value


def produce_in_arrival_order(story: Story, truth: SqlCatalog) -> dict[str, int]:
    """Every generated event into its topic in ingestion order, keyed by its id (two
    partitions), the Kafka timestamp being its ingestion time."""
    producer = Producer({"bootstrap.servers": story.broker.bootstrap, "enable.idempotence": True, "linger.ms": 20})
    counts = {}
    for name in TOPICS:
        rows = truth.load_table(f"demo.{name}").scan().to_arrow().to_pylist()
        rows.sort(key=lambda r: r["__metadata__"]["ingestion_ts"])
        columns = [c.split()[0] for c in VALUES[name].split(", ")]
        for row in rows:
            arrived = row["__metadata__"]["ingestion_ts"].replace(tzinfo=UTC)
            producer.produce(
                story.topic[name],
                key=str(row[columns[0]]).encode(),
                value=json.dumps({c: _json(row[c]) for c in columns}).encode(),
                timestamp=int(arrived.timestamp() * 1000),
            )
            producer.poll(0)
        counts[name] = len(rows)
    assert producer.flush(60) == 0
    return counts


def in_window(df: DataFrame) -> DataFrame:
    start, end = (datetime.fromisoformat(WINDOW[k]) for k in ("start", "end"))
    return df.where((F.col("playback_ts") >= F.lit(start)) & (F.col("playback_ts") < F.lit(end)))


def rows_of(df: DataFrame) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.select(*COLUMNS).collect())


@pytest.fixture(scope="module")
def story(spark: SparkSession, kafka_broker: KafkaBroker, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("kafka-story")
    s = Story(root, kafka_broker, root.name.replace("_", "-").lower())
    truth = SqlCatalog("truth", uri=f"sqlite:///{root}/truth.db", warehouse=f"file://{root}/truth")
    gen = GeneratorConfig(
        start=T0,
        hours=1.5,
        impressions_per_hour=1500,
        late_fraction=0.01,
        min_lateness=timedelta(minutes=30),
        max_lateness=timedelta(minutes=90),
    )
    stats = generate(truth, gen)
    for name in TOPICS:
        # kept forever: the events are weeks old, and a topic's default retention (7 days) by
        # record timestamp would delete them within seconds
        kafka_broker.create_topic(s.topic[name], partitions=2, config={"retention.ms": "-1"})
    produced = produce_in_arrival_order(s, truth)
    archived = {name: run(s.archive_config(name, root / f"archive-{name}"), spark) for name in TOPICS}
    live = run(s.live_config(root / "live"), spark)
    backfill = run(s.backfill_config(root / "backfill"), spark)
    return {
        "story": s,
        "stats": stats,
        "produced": produced,
        "archived": archived,
        "live": live,
        "backfill": backfill,
        "root": root,
    }


def test_the_archive_holds_every_event_once_with_its_kafka_metadata(story: dict[str, Any]) -> None:
    s: Story = story["story"]
    lake = SqlCatalog("default", **s.props)
    late: dict[str, int] = {}
    for name in TOPICS:
        table = lake.load_table(f"archive.{name}").scan().to_arrow()
        assert table.num_rows == story["produced"][name]
        meta = table.column("__metadata__").combine_chunks()
        assert set(meta.field("topic").to_pylist()) == {s.topic[name]}
        positions = sorted(zip(meta.field("partition").to_pylist(), meta.field("offset").to_pylist(), strict=True))
        assert len(set(positions)) == len(positions), "no (partition, offset) twice"
        for partition in (0, 1):
            offsets = [o for p, o in positions if p == partition]
            assert offsets == list(range(len(offsets))), "every offset of the partition, none skipped"
        delays = [
            ingested.replace(tzinfo=UTC) - event.replace(tzinfo=UTC)
            for ingested, event in zip(
                meta.field("ingestion_ts").to_pylist(), table.column("event_ts").to_pylist(), strict=True
            )
        ]
        late[name] = sum(timedelta(minutes=30) <= d <= timedelta(minutes=91) for d in delays)
    assert sum(late.values()) >= 0.005 * sum(story["produced"].values()), f"~1% of the events 30-90 min late: {late}"


def test_the_pipeline_gets_the_same_rows_from_kafka_and_from_the_archive(
    spark: SparkSession, story: dict[str, Any], tmp_path: Path
) -> None:
    s: Story = story["story"]
    cfg = s.live_config(tmp_path)
    for name in TOPICS:
        src = cfg.sources[name]
        assert isinstance(src, KafkaSource)
        live = kafka_frame(spark, cfg, name, src)
        out = tmp_path / f"from-kafka-{name}"
        q = (
            live.writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(tmp_path / f"ck-{name}"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(180)
        assert q.exception() is None
        from_kafka = spark.read.schema(live.schema).parquet(str(out))
        archive = spark.createDataFrame(
            SqlCatalog("default", **s.props).load_table(f"archive.{name}").scan().to_arrow()
        )
        assert from_kafka.schema == archive.schema, "same columns, types and nesting"
        assert from_kafka.count() == archive.count() == story["produced"][name]
        assert from_kafka.exceptAll(archive).count() == 0 and archive.exceptAll(from_kafka).count() == 0


def test_a_backfill_from_the_archive_equals_the_live_kafka_output_and_a_batch_computation(
    spark: SparkSession, story: dict[str, Any]
) -> None:
    root: Path = story["root"]
    s: Story = story["story"]
    assert story["live"].dropped_by_watermark == 0 and story["backfill"].dropped_by_watermark == 0, "0 late drops"
    live = rows_of(in_window(spark.read.parquet(str(root / "live" / "out"))))
    backfilled = rows_of(spark.read.parquet(str(root / "backfill" / "out")))
    lake = SqlCatalog("default", **s.props)
    batch_sources = {n: spark.createDataFrame(lake.load_table(f"archive.{n}").scan().to_arrow()) for n in TOPICS}
    batch = rows_of(in_window(rmi.pipeline(batch_sources, lateness=LATENESS)[rmi.OUTPUT]))
    assert len(batch) > 50, "a window with plays in it"
    assert backfilled == batch, "the backfill from the archive equals a batch computation over it"
    assert live == batch, "and the live run from Kafka, in the window"


def test_an_archive_killed_between_its_commit_and_sparks_archives_nothing_twice_and_nothing_less(
    story: dict[str, Any], tmp_path: Path
) -> None:
    """SIGKILL of the archive's driver right after its Iceberg commit of batch 2, before Spark
    logged it: the restart re-reads batch 2's offsets from Kafka and the sink skips it."""
    s: Story = story["story"]
    cfg = s.archive_config("impressions", tmp_path, "archive.killed", {"maxOffsetsPerTrigger": "300"})
    driver = Driver(cfg, tmp_path)
    killed = driver.run(**{FAULT_ENV: "kill-after-commit:2"})
    assert killed.returncode == -9, driver.tail()
    ckpt = tmp_path / "ckpt" / "copy"
    assert (ckpt / "offsets" / "2").exists() and not (ckpt / "commits" / "2").exists(), "killed mid-commit"
    lake = SqlCatalog("default", **s.props)
    before = lake.load_table("archive.killed").scan().to_arrow().num_rows
    assert 800 < before < story["produced"]["impressions"], "3 batches of ~300 committed, the rest not read"

    assert driver.run().returncode == 0, driver.tail()
    table = lake.load_table("archive.killed").scan().to_arrow()
    meta = table.column("__metadata__").combine_chunks()
    positions = list(zip(meta.field("partition").to_pylist(), meta.field("offset").to_pylist(), strict=True))
    assert len(positions) == len(set(positions)) == story["produced"]["impressions"], "each record once"
    reference = lake.load_table("archive.impressions").scan().to_arrow()
    assert sorted(table.column("impression_id").to_pylist()) == sorted(reference.column("impression_id").to_pylist())
