"""Issue 31 item 1, on the real broker and real Spark: a job that starts from its topics'
Iceberg archives and goes live on Kafka in the same query and checkpoint (a hybrid source).

Two topics (impressions, playbacks) carry 1.5 hours of the generator's events in arrival
order. The archive jobs archive what arrived in the first 50 minutes; the rest is only in
Kafka. A bootstrapped rmi job (archives read aligned under maxDrift, then the topics) must give
exactly the output of the same job reading Kafka from its first offset; a bootstrapped copy job
shows the seam record by record; a driver killed at the switch, before and after it is
recorded, resumes to the same records, each once.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import SparkSession

from kappa_operator.local.kafka import KafkaBroker
from spark_app.apps.run import run
from spark_app.bootstrap.steps import FAULT_ENV
from spark_app.contract.config import JobConfig, parse_config
from spark_app.contract.errors import ConfigError
from spark_app.contract.reports.bootstrap import read_record, record_location
from spark_app.examples import rmi
from spark_app.examples.generator import GeneratorConfig, generate
from tests.spark.conftest import T0, Driver
from tests.spark.test_kafka_archive import COLUMNS, LATENESS, TOPICS, VALUES, Story, _json

pytestmark = pytest.mark.spark

ARCHIVED_UNTIL = T0 + timedelta(minutes=50)
"""Records that arrived before this are in the archives too; the later ones only in Kafka."""


def produce(story: Story, rows: dict[str, list[dict[str, Any]]]) -> None:
    producer = Producer({"bootstrap.servers": story.broker.bootstrap, "enable.idempotence": True, "linger.ms": 20})
    for name, batch in rows.items():
        columns = [c.split()[0] for c in VALUES[name].split(", ")]
        for row in batch:
            arrived = row["__metadata__"]["ingestion_ts"]
            producer.produce(
                story.topic[name],
                key=str(row[columns[0]]).encode(),
                value=json.dumps({c: _json(row[c]) for c in columns}).encode(),
                timestamp=int(arrived.timestamp() * 1000),
            )
            producer.poll(0)
    assert producer.flush(60) == 0


def bootstrap_config(
    story: Story, run_dir: Path, pipeline: str = "rmi", sources: tuple[str, ...] = TOPICS
) -> JobConfig:
    """The job the operator renders for a StreamingJob with ``bootstrap: {from}``: its Kafka
    sources, each one's history table as its archive."""
    copy = pipeline == "copy"
    return parse_config(
        {
            "name": f"boot-{pipeline}",
            "pipeline": "spark_app.examples.copy:pipeline" if copy else "spark_app.examples.rmi:pipeline",
            "pipelineArgs": {} if copy else {"lateness": LATENESS},
            "mode": "live",
            "catalogs": story.catalogs(),
            "sources": {n: story.kafka(n, schemaFrom=f"default:archive.{n}") for n in sources},
            "sinks": {("copy" if copy else rmi.OUTPUT): {"kind": "parquet", "path": str(run_dir / "out")}},
            "checkpoint": {"location": str(run_dir / "ckpt")},
            "trigger": {"kind": "availableNow"},
            "alignment": {"maxDrift": "10m"},
            "bootstrap": {
                "from": T0.isoformat(),
                "archives": {
                    n: {"kind": "icebergBackfill", "table": f"archive.{n}", "split": {"maxBundleSpan": "2m"}}
                    for n in sources
                },
            },
            "sparkConf": {"spark.sql.shuffle.partitions": "2"},
        }
    )


@pytest.fixture(scope="module")
def story(spark: SparkSession, kafka_broker: KafkaBroker, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("bootstrap")
    s = Story(root, kafka_broker, root.name.replace("_", "-").lower())
    truth = SqlCatalog("truth", uri=f"sqlite:///{root}/truth.db", warehouse=f"file://{root}/truth")
    gen = GeneratorConfig(
        start=T0,
        hours=1.5,
        impressions_per_hour=600,
        late_fraction=0.02,
        min_lateness=timedelta(minutes=5),
        max_lateness=timedelta(minutes=40),
    )
    generate(truth, gen)
    early: dict[str, list[dict[str, Any]]] = {}
    late: dict[str, list[dict[str, Any]]] = {}
    for name in TOPICS:
        rows = truth.load_table(f"demo.{name}").scan().to_arrow().to_pylist()
        for row in rows:
            row["__metadata__"]["ingestion_ts"] = row["__metadata__"]["ingestion_ts"].replace(tzinfo=T0.tzinfo)
        rows.sort(key=lambda r: r["__metadata__"]["ingestion_ts"])
        early[name] = [r for r in rows if r["__metadata__"]["ingestion_ts"] < ARCHIVED_UNTIL]
        late[name] = rows[len(early[name]) :]
        kafka_broker.create_topic(s.topic[name], partitions=2, config={"retention.ms": "-1"})
    produce(s, early)
    for name in TOPICS:
        run(s.archive_config(name, root / f"archive-{name}"), spark)
    produce(s, late)  # arrived after the archive's last commit: only in Kafka
    boot = run(bootstrap_config(s, root / "boot"), spark)
    kafka_only = run(s.live_config(root / "kafka-only"), spark)
    return {"story": s, "root": root, "early": early, "late": late, "boot": boot, "kafka_only": kafka_only}


def rows_at(spark: SparkSession, path: Path) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in spark.read.parquet(str(path)).select(*COLUMNS).collect())


def test_a_bootstrapped_job_gives_the_output_of_the_job_that_read_kafka_from_the_start(
    spark: SparkSession, story: dict[str, Any]
) -> None:
    root: Path = story["root"]
    boot, kafka_only = story["boot"], story["kafka_only"]
    assert boot.dropped_by_watermark == 0 and kafka_only.dropped_by_watermark == 0, "no late drops in either"
    bootstrapped, reference = rows_at(spark, root / "boot" / "out"), rows_at(spark, root / "kafka-only" / "out")
    assert len(reference) > 100, "plays attributed on both sides of the switch"
    assert bootstrapped == reference
    switched = min(r["__metadata__"]["ingestion_ts"] for r in story["late"]["playbacks"]).replace(tzinfo=None)
    imps = {r["impression_id"]: r["event_ts"] for r in story["early"]["impressions"]}
    across = [r for r in reference if r[1] in imps and r[5] >= switched - timedelta(minutes=1)]
    assert across, "plays read from Kafka joined to impressions read from the archive: state carried over"

    record = read_record(*record_location(bootstrap_config(story["story"], root / "boot")))
    assert record is not None and record.switched and record.start == T0
    for name in TOPICS:
        archived = SqlCatalog("default", **story["story"].props).load_table(f"archive.{name}").scan().to_arrow()
        meta = archived.column("__metadata__").combine_chunks()
        counts: dict[int, int] = {}
        for p in meta.field("partition").to_pylist():
            counts[p] = counts.get(p, 0) + 1
        topic = story["story"].topic[name]
        assert record.offsets[name] == {topic: counts}, "the topic takes over after the last archived offset"
        assert sum(counts.values()) == len(story["early"][name])
    # aligned across both archives: the trace of the first leg admitted both sources in event-time order
    batches = [p for p in boot.progress if p.get("numInputRows", 0) > 0]
    assert len(batches) >= 3, "the archives read in several aligned batches, then Kafka"


def test_the_seam_record_by_record(spark: SparkSession, story: dict[str, Any], tmp_path: Path) -> None:
    """The copy pipeline over one topic: every record of the topic exactly once, those just
    before the switch from the archive and those just after from Kafka, equal to a batch read
    of the whole topic."""
    s: Story = story["story"]
    cfg = bootstrap_config(s, tmp_path, "copy", ("impressions",))
    run(cfg, spark)
    out = spark.read.parquet(str(tmp_path / "out"))
    topic = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", s.broker.bootstrap)
        .option("subscribe", s.topic["impressions"])
        .option("startingOffsets", "earliest")
        .load()
    )
    from spark_app.sources.kafka import deserialize, value_schema

    src = cfg.sources["impressions"]
    whole = deserialize(topic, value_schema(cfg, src, name="impressions"))  # type: ignore[arg-type]
    assert out.count() == whole.count() == len(story["early"]["impressions"]) + len(story["late"]["impressions"])
    assert out.exceptAll(whole).count() == 0 and whole.exceptAll(out).count() == 0, "the whole topic, each record once"
    record = read_record(*record_location(cfg))
    assert record is not None
    positions = out.select("__metadata__.partition", "__metadata__.offset").collect()
    seen = {(r[0], r[1]) for r in positions}
    assert len(seen) == len(positions), "no (partition, offset) twice"
    for partition, first_from_kafka in record.offsets["impressions"][s.topic["impressions"]].items():
        around = range(max(0, first_from_kafka - 5), first_from_kafka + 5)
        assert all((partition, o) in seen for o in around), f"partition {partition}: every record around the switch"


def test_a_bootstrap_takes_over_its_topic_through_a_sasl_ssl_listener(
    spark: SparkSession, story: dict[str, Any], tmp_path: Path
) -> None:
    """The same copy bootstrap as above with the topic read through the broker's SASL_SSL
    listener (SCRAM over TLS, credentials from files as a Secret's mount gives them): the gated
    Kafka source takes the security block's options as Spark's own does, and the output is the
    plaintext run's, record for record."""
    from kappa_operator.local.kafka import SASL_SSL
    from tests.conftest import KAFKA_USERS
    from tests.spark.test_kafka_listeners import sasl_ssl

    s: Story = story["story"]
    ((user, password),) = KAFKA_USERS["SCRAM-SHA-512"].items()
    security = sasl_ssl(s.broker, tmp_path, "SCRAM-SHA-512", user, password)
    plain = bootstrap_config(s, tmp_path / "plain", "copy", ("impressions",))
    raw = bootstrap_config(s, tmp_path / "secured", "copy", ("impressions",)).model_dump(
        by_alias=True, exclude_none=True, mode="json"
    )
    raw["sources"]["impressions"].update(
        bootstrapServers=s.broker.bootstrap_of(SASL_SSL), security=security.model_dump(by_alias=True, exclude_none=True)
    )
    run(plain, spark)
    run(parse_config(raw), spark)
    secured_rows = rows_of(spark, tmp_path / "secured" / "out")
    assert secured_rows == rows_of(spark, tmp_path / "plain" / "out") and secured_rows
    record = read_record(*record_location(parse_config(raw)))
    assert record is not None and record.switched, "it switched to the topic, through SASL_SSL"


def rows_of(spark: SparkSession, path: Path) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in spark.read.parquet(str(path)).drop("__metadata__").collect())


def test_a_driver_killed_at_the_switch_resumes_to_every_record_once(
    spark: SparkSession, story: dict[str, Any], tmp_path: Path
) -> None:
    """A driver process killed (SIGKILL) after the archive leg ended but before the switch was
    recorded; the next one runs the archive leg again (it reads nothing) and is killed right
    after recording the switch; the third run (in this process, the same code) reads Kafka
    from the checkpoint's offsets. Every record of the topic once."""
    s: Story = story["story"]
    cfg = bootstrap_config(s, tmp_path, "copy", ("impressions",))
    driver = Driver(cfg, tmp_path)
    assert driver.run(**{FAULT_ENV: "kill-before-switch"}).returncode == -9, driver.tail()
    record = read_record(*record_location(cfg))
    assert record is not None and not record.switched, "killed before the switch was recorded"
    assert driver.run(**{FAULT_ENV: "kill-after-switch"}).returncode == -9, driver.tail()
    record = read_record(*record_location(cfg))
    assert record is not None and record.switched
    run(cfg, spark)
    import pyarrow.parquet as pq

    table = pq.read_table(str(tmp_path / "out"))
    meta = table.column("__metadata__").combine_chunks()
    positions = list(zip(meta.field("partition").to_pylist(), meta.field("offset").to_pylist(), strict=True))
    produced = len(story["early"]["impressions"]) + len(story["late"]["impressions"])
    assert len(positions) == len(set(positions)) == produced, "each record once, none missing"


def test_a_bootstrap_from_past_the_archive_is_refused_before_anything_is_written(
    spark: SparkSession, story: dict[str, Any], tmp_path: Path
) -> None:
    """Issue 44, case 1: ``from`` after the archive's newest event ran, read nothing of the
    archive, and let Kafka take over at the archive's end: records before ``from`` in the
    output, the later ones missing. Now refused, naming the archive's end and the fix."""
    s: Story = story["story"]
    cfg = bootstrap_config(s, tmp_path / "late")
    assert cfg.bootstrap is not None
    late = cfg.bootstrap.model_copy(update={"start": T0 + timedelta(hours=5)})
    with pytest.raises(ConfigError) as refused:
        run(cfg.model_copy(update={"bootstrap": late}), spark)
    text = str(refused.value)
    assert text.startswith(f"bootstrap.from {(T0 + timedelta(hours=5)).isoformat()} is after the end of the archive")
    assert "Set bootstrap.from to at most" in text and "startingOffsets" in text
    assert not (tmp_path / "late" / "out").exists(), "nothing written to the sink"
    location, name = record_location(cfg)
    assert read_record(location, name) is None, "no bootstrap record: a corrected spec starts afresh"


def test_green_reads_its_topic_no_further_than_blue_durably_has(
    spark: SparkSession, story: dict[str, Any], tmp_path: Path
) -> None:
    """A blue/green upgrade's green (a bootstrapped job with ``green.blueCheckpoint``): the
    archive, then the topic only up to where blue's checkpoint durably stands; once blue is
    further, green goes on from where it stopped, each record once."""
    from spark_app.bluegreen.position import durable_position
    from spark_app.contract.blue_green import GreenConfig, kafka_offsets
    from spark_app.contract.storage import open_location

    s: Story = story["story"]
    topic = s.topic["impressions"]
    blue = parse_config(
        {
            "name": "blue-copy",
            "pipeline": "spark_app.examples.copy:pipeline",
            "mode": "live",
            "catalogs": s.catalogs(),
            "sources": {
                "impressions": s.kafka(
                    "impressions", {"maxOffsetsPerTrigger": "100"}, schemaFrom="default:archive.impressions"
                )
            },
            "sinks": {"copy": {"kind": "parquet", "path": str(tmp_path / "blue" / "out")}},
            "checkpoint": {"location": str(tmp_path / "blue" / "ckpt")},
            "trigger": {"kind": "availableNow"},
        }
    )
    run(blue, spark)
    query = tmp_path / "blue" / "ckpt" / "copy"
    batches = sorted(int(p.name) for p in (query / "commits").iterdir() if p.name.isdigit())
    assert len(batches) >= 5, batches
    held = tmp_path / "held"  # blue as it stood two batches before its end
    held.mkdir()
    for b in batches[-2:]:
        for log in ("offsets", "commits"):
            (query / log / str(b)).rename(held / f"{log}-{b}")
    blue_at = durable_position(open_location(str(query)))
    assert blue_at is not None and blue_at.batch_id == batches[-3]
    cap = kafka_offsets(blue_at, [topic])[topic]

    green = bootstrap_config(s, tmp_path / "green", "copy", ("impressions",))
    green = green.model_copy(update={"green": GreenConfig(blue_checkpoint=str(tmp_path / "blue" / "ckpt"))})
    run(green, spark)
    record = read_record(*record_location(green))
    assert record is not None and record.switched
    switch_at = record.offsets["impressions"][topic]

    def read_from_kafka() -> set[tuple[int, int]]:
        out = spark.read.parquet(str(tmp_path / "green" / "out"))
        out = out.select("__metadata__.partition", "__metadata__.offset")
        return {(r[0], r[1]) for r in out.collect() if r[1] >= switch_at[r[0]]}

    expected = {(int(p), o) for p, end in cap.items() for o in range(switch_at[int(p)], end)}
    assert expected, "blue was past the archive's end: green has some of the topic to read"
    assert read_from_kafka() == expected, "green read the topic up to blue's durable offsets, no further"

    for b in batches[-2:]:  # blue moves on to its end
        for log in ("offsets", "commits"):
            (held / f"{log}-{b}").rename(query / log / str(b))
    run(green, spark)
    total = len(story["early"]["impressions"]) + len(story["late"]["impressions"])
    rows = spark.read.parquet(str(tmp_path / "green" / "out")).select("__metadata__.partition", "__metadata__.offset")
    assert rows.count() == rows.distinct().count() == total, "every record of the topic once"


def test_a_blue_green_upgrade_compares_then_switches_main_at_one_boundary(
    spark: SparkSession, story: dict[str, Any], tmp_path: Path
) -> None:
    """The step applications on green's config (``python -m spark_app compare|switch|discard``):
    blue (rmi v1) wrote main from Kafka; green (v2: a narrower attribution window, so its output
    differs) rebuilt it from the archives into a branch, trailing blue to the same offsets. The
    comparison reports the difference and refuses it under a ratio; with ratio 0 it reports
    only. The switch then cuts main at one boundary in one snapshot: blue's rows before it,
    green's from it on, each key once; run again it commits nothing."""
    from pyiceberg.catalog import load_catalog

    from spark_app.__main__ import main
    from spark_app.apps.blue_green import run_compare, run_switch
    from spark_app.contract.blue_green import CompareWindow, GreenConfig

    s: Story = story["story"]
    table, branch, key = "marts.bluegreen_plays", "green-rmi-g2", ["playback_id", "impression_id"]
    sink = {"kind": "iceberg", "table": table, "timeColumn": rmi.TIME_COLUMN, "key": key}
    blue = parse_config(
        {
            "name": "rmi",
            "pipeline": "spark_app.examples.rmi:pipeline",
            "pipelineArgs": {"lateness": "20 minutes"},
            "mode": "live",
            "catalogs": s.catalogs(),
            "sources": {
                n: s.kafka(n, {"maxOffsetsPerTrigger": "500"}, schemaFrom=f"default:archive.{n}") for n in TOPICS
            },
            "sinks": {rmi.OUTPUT: sink},
            "checkpoint": {"location": str(tmp_path / "blue")},
            "trigger": {"kind": "availableNow"},
            "sparkConf": {"spark.sql.shuffle.partitions": "2"},
        }
    )
    run(blue, spark)
    v2 = bootstrap_config(s, tmp_path / "green").model_dump(by_alias=True, exclude_none=True)
    v2.update(
        name="rmi",
        pipelineArgs={"lateness": "20 minutes", "attribution_window": "20 minutes"},
        sinks={rmi.OUTPUT: {**sink, "branch": branch}},
        checkpoint={"location": str(tmp_path / "green")},
        green={"blueCheckpoint": str(tmp_path / "blue"), "upgrade": "default/rmi g2", "minMatchRatio": 0},
    )
    green = parse_config(v2)
    run(green, spark)

    catalog = load_catalog("default", **s.props, type="sql")

    def rows(ref: str) -> dict[tuple[str, str], dict[str, Any]]:
        got = catalog.load_table(table).scan(snapshot_id=catalog.load_table(table).snapshot_by_name(ref).snapshot_id)
        out = {(r["playback_id"], r["impression_id"]): r for r in got.to_arrow().to_pylist()}
        assert len(out) == got.to_arrow().num_rows, f"{ref}: each key once"
        return out

    blue_rows, green_rows = rows("main"), rows(branch)
    assert blue_rows and green_rows and blue_rows != green_rows, "v2 attributes differently"

    assert isinstance(green.green, GreenConfig)
    window = CompareWindow(start=T0 + timedelta(minutes=30), end=T0 + timedelta(minutes=60))
    reported = run_compare(
        green.model_copy(update={"green": green.green.model_copy(update={"compare_window": window})}), spark
    )
    assert reported.state == "Matched", reported  # ratio 0: the output is meant to change
    (t,) = reported.tables
    assert t.table == table and t.match_ratio < 1 and t.differing_keys
    strict = green.green.model_copy(update={"compare_window": window, "min_match_ratio": 0.999})
    refused = run_compare(green.model_copy(update={"green": strict}), spark)
    assert refused.state == "Refused" and refused.error is not None and table in refused.error

    before = {snap.snapshot_id for snap in catalog.load_table(table).snapshots()}
    switched = run_switch(green, spark)
    assert switched.state == "Switched", switched
    b = switched.boundary
    assert b is not None and T0 < b < T0 + timedelta(minutes=90)
    assert not switched.notices, "both versions reported their look-ahead"
    main_rows = rows("main")
    time_of = rmi.TIME_COLUMN
    assert {k: r for k, r in main_rows.items() if r[time_of] < b} == {
        k: r for k, r in blue_rows.items() if r[time_of] < b
    }, "blue's rows before the boundary"
    assert {k: r for k, r in main_rows.items() if r[time_of] >= b} == {
        k: r for k, r in green_rows.items() if r[time_of] >= b
    }, "green's rows from the boundary on"
    after = catalog.load_table(table)
    new = [snap for snap in after.snapshots() if snap.snapshot_id not in before]
    assert [snap.snapshot_id for snap in new] == [switched.switched[0].snapshot_id], "one snapshot on main"
    assert branch not in after.metadata.refs, "green's branch removed"

    again = run_switch(green, spark)
    assert again.state == "Switched" and again.boundary == b and again.switched[0].earlier
    assert len(catalog.load_table(table).snapshots()) == len(after.snapshots()), "a rerun commits nothing"

    config = tmp_path / "green.json"
    config.write_text(green.model_dump_json(by_alias=True))
    assert main(["discard", "--config", str(config)]) == 0  # the branch is gone already: nothing to remove
