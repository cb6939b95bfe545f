"""The Kafka benchmark, on a real broker (Apache Kafka 4.1.1, KRaft, ``spark_app/jars``).

Four measurements, each against a baseline run in the same process:

* ``throughput``: ``--records`` JSON events in a topic of 2 partitions, read to the end
  (availableNow) and written to Parquet, once through our runtime (a ``kafka`` source of a live
  JobConfig: the value parsed into its schema with ``__metadata__`` from the record, the copy
  pipeline, our lag reporter listening) and once as the same query written directly against
  Spark's Kafka source (``from_json`` of the value, the same columns, the same sink). The
  ratio is the direct query's time in batches over ours (>= 0.9: our runtime reads at least
  90 % as many records a second); ``wall_ratio`` the same of the wall clock, which adds each
  query's start, paid once per start. Runs alternate, ``--repeat`` times each after one
  warm-up round not counted; medians are compared.
* ``avro``: the same records as Avro in the schema registry's wire format (the writer schema
  registered in a real registry, Apicurio's Confluent API), read by our ``valueFormat: avro``
  source (the writer's id looked up, one ``from_avro`` branch per registered version, the
  resolution into the value schema) and by Spark's own ``from_avro`` on the bytes after the
  five-byte header, given the one writer schema (what a user writes who knows it), writing the
  same columns, which may be null as ours may. Ratio: the direct query's time over ours
  (>= 0.9). Also, without a target, against ``from_avro``'s own columns that cannot be null
  (``vs_required_columns``: what that output schema alone saves in Parquet).
* ``secured``: the JSON topic read by our runtime through the broker's SASL_SSL listener
  (SCRAM-SHA-512 over TLS, the credentials from files as a mounted Secret gives them) and
  through its PLAINTEXT listener. Ratio: plaintext's time over secured's (>= 0.9).
* ``archive``: a producer thread writes ``--rate`` events/s for ``--seconds`` while the archive
  (the topic into an exactly-once Iceberg table, ``spark_app.examples.copy``, processingTime
  ``--interval``) runs; per record, the delay from its Kafka timestamp to the commit of the
  Iceberg snapshot holding it (the snapshot's timestamp), p50/p99/max, and whether every
  record arrived exactly once. The baseline is the trigger interval itself: a record waits on
  average half an interval before its batch starts.

    .venv/bin/python -m bench.kafka --json

``--json`` prints exactly one JSON object on stdout; everything else goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.source_throughput import MASTER, SPARK_CONF, machine, measured_parser, run_measured
from spark_app.examples.event_tables import KAFKA_ARCHIVE_METADATA_DDL, KAFKA_VALUE_DDL

log = logging.getLogger("bench.kafka")
VALUE_DDL = KAFKA_VALUE_DDL["impressions"]
METADATA = KAFKA_ARCHIVE_METADATA_DDL


def event(i: int, at: datetime) -> bytes:
    return json.dumps(
        {
            "impression_id": f"i{i}",
            "profile_id": i % 5000,
            "title_id": i % 300,
            "event_ts": at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        }
    ).encode()


def fill(bootstrap: str, topic: str, n: int) -> float:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1 << 20})
    started, now = time.monotonic(), datetime.now(UTC)
    for i in range(n):
        producer.produce(topic, key=str(i).encode(), value=event(i, now))
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return time.monotonic() - started


AVRO_SCHEMA = {
    "type": "record",
    "name": "Impression",
    "namespace": "kappa.bench",
    "fields": [
        {"name": "impression_id", "type": "string"},
        {"name": "profile_id", "type": "long"},
        {"name": "title_id", "type": "long"},
        {"name": "event_ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    ],
}


def fill_avro(bootstrap: str, topic: str, n: int, schema_id: int) -> float:
    """``n`` events in the wire format (a zero byte, the id, the record), as a serializer writes them."""
    import io

    import fastavro
    from confluent_kafka import Producer

    parsed, header = fastavro.parse_schema(AVRO_SCHEMA), b"\x00" + schema_id.to_bytes(4, "big")
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1 << 20})
    started, now = time.monotonic(), datetime.now(UTC)
    for i in range(n):
        body = io.BytesIO()
        record = {"impression_id": f"i{i}", "profile_id": i % 5000, "title_id": i % 300, "event_ts": now}
        fastavro.schemaless_writer(body, parsed, record)
        producer.produce(topic, key=str(i).encode(), value=header + body.getvalue())
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return time.monotonic() - started


def job_config(
    bootstrap: str,
    topic: str,
    out: Path,
    sink: dict[str, Any],
    trigger: dict[str, Any],
    job: dict[str, Any] | None = None,
    **source: Any,
) -> Any:
    """``job``: more of the JobConfig (a dead-letter table)."""
    from spark_app.contract.config import parse_config

    return parse_config(
        {
            "name": "bench-kafka",
            "pipeline": "spark_app.examples.copy:pipeline",
            "mode": "live",
            "catalogs": {
                "default": {"type": "sql", "uri": f"sqlite:///{out}/lake.db", "warehouse": f"file://{out}/wh"}
            },
            "sources": {
                "impressions": {
                    "kind": "kafka",
                    "bootstrapServers": bootstrap,
                    "topic": topic,
                    "schemaDdl": f"{VALUE_DDL}, {METADATA}",
                    "options": {"startingOffsets": "earliest"},
                    **source,
                }
            },
            "sinks": {"copy": sink},
            "checkpoint": {"location": str(out / "ckpt")},
            "trigger": trigger,
            **(job or {}),
        }
    )


class Timed(NamedTuple):
    """One run: its wall-clock time, the records its sink query read, and the time Spark spent
    in that query's batches (``durationMs.triggerExecution`` summed): the throughput, without
    what the query's start costs once (building the plan, a topic check, a registry's reads)."""

    seconds: float
    rows: int
    batches_s: float


def batch_seconds(progress: list[dict[str, Any]]) -> float:
    return sum(p.get("durationMs", {}).get("triggerExecution", 0) for p in progress) / 1000


def ours(spark: Any, bootstrap: str, topic: str, out: Path, job: dict[str, Any] | None = None, **source: Any) -> Timed:
    """Our runtime's copy of the topic into Parquet; its rows: the pipeline's (a dead-letter
    query's rows are not the sink's)."""
    from spark_app.apps.run import run

    sink, trigger = {"kind": "parquet", "path": str(out / "data")}, {"kind": "availableNow"}
    cfg = job_config(bootstrap, topic, out, sink, trigger, job, **source)
    started = time.monotonic()
    report = run(cfg, spark)
    progress = [p for p in report.progress if p.get("name") == f"{cfg.name}-copy"]
    rows = sum(p.get("numInputRows", 0) for p in progress)
    return Timed(time.monotonic() - started, rows, batch_seconds(progress))


def direct(spark: Any, bootstrap: str, topic: str, out: Path, avro: str | None = None, required: bool = False) -> Timed:
    """The query a user would write without us: Spark's Kafka source, from_json (or, given the
    writer's ``avro`` schema, from_avro of the bytes after the header), Parquet.

    Its columns are those of ``VALUE_DDL``, which may be null, as ours are. ``from_avro`` gives a
    writer's fields that are not unions with null as columns that cannot be null, and Parquet
    writes those without definition levels, measured at 5-6 % less time on its own
    (``required``: those columns as they come, a second baseline, reported without a target)."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro
    from pyspark.sql.types import DataType

    schema = DataType.fromDDL(VALUE_DDL)
    started = time.monotonic()
    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    if avro is None:
        value = F.from_json(F.col("value").cast("string"), schema)
    else:
        value = from_avro(F.expr("substring(value, 6)"), avro)
    nullable = avro is not None and not required

    def column(name: str) -> Any:
        field = F.col("v").getField(name)
        return (F.coalesce(field, F.lit(None)) if nullable else field).alias(name)

    parsed = raw.select(
        value.alias("v"), F.struct(F.col("timestamp"), F.col("topic"), F.col("partition"), F.col("offset")).alias("m")
    ).select(
        *(column(f.name) for f in schema.fields),
        F.struct(
            F.col("m.timestamp").alias("ingestion_ts"),
            F.col("m.topic").alias("topic"),
            F.col("m.partition").alias("partition"),
            F.col("m.offset").alias("offset"),
        ).alias("__metadata__"),
    )
    q = (
        parsed.writeStream.format("parquet")
        .option("path", str(out / "data"))
        .option("checkpointLocation", str(out / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    assert q.exception() is None, q.exception()
    progress = [json.loads(x.json) for x in q.recentProgress]
    rows = sum(p["numInputRows"] for p in progress)
    return Timed(time.monotonic() - started, rows, batch_seconds(progress))


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_used(cpu: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """Median CPU seconds per counted run (warm-up rounds left out), per process and side, and
    Spark's CPU for plaintext over secured: what TLS costs our job itself, without the broker."""
    counted = {side: runs[WARMUP_ROUNDS:] for side, runs in cpu.items()}
    medians = {
        f"{proc}_cpu_s": {side: round(statistics.median(r[proc] for r in runs), 2) for side, runs in counted.items()}
        for proc in ("broker", "spark")
    }
    spark_cpu = medians["spark_cpu_s"]
    return {**medians, "spark_cpu_ratio": round(spark_cpu["plaintext"] / spark_cpu["secured"], 3)}


def throughput(spark: Any, broker: Any, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions=2)
    produce_s = fill(broker.bootstrap, topic, args.records)
    times = alternating(
        {
            "ours": lambda out: ours(spark, broker.bootstrap, topic, out),
            "direct": lambda out: direct(spark, broker.bootstrap, topic, out),
        },
        args.repeat,
        args.records,
        work,
        "json",
    )
    produced = {"records": args.records, "produce_s": round(produce_s, 1)}
    return {**produced, **compared(times, args.records, "ours", "direct")}


def compared(times: dict[str, list[Timed]], records: int, ours: str, baseline: str) -> dict[str, Any]:
    """Each side's times and throughput, and the baseline's median batch time over ours
    (``ratio``, >= 0.9: ours reads at least 90 % as many records a second). ``wall_ratio``: the
    same of the wall-clock times, which add each query's start (paid once per start, not per
    record: a few tenths of a second, a tenth of a 4 s run)."""

    def median(name: str, field: str) -> float:
        return statistics.median(getattr(t, field) for t in times[name])

    ours_b, base_b = median(ours, "batches_s"), median(baseline, "batches_s")
    return {
        f"{ours}_s": [round(t.seconds, 2) for t in times[ours]],
        f"{baseline}_s": [round(t.seconds, 2) for t in times[baseline]],
        f"{ours}_batches_s": [round(t.batches_s, 2) for t in times[ours]],
        f"{baseline}_batches_s": [round(t.batches_s, 2) for t in times[baseline]],
        f"{ours}_records_per_s": round(records / ours_b),
        f"{baseline}_records_per_s": round(records / base_b),
        "ratio": round(base_b / ours_b, 3),
        "target_ratio": 0.9,
        "wall_ratio": round(median(baseline, "seconds") / median(ours, "seconds"), 3),
    }


WARMUP_ROUNDS = 1
"""Rounds run first and not counted: the first run of a query shape pays the JVM's class
loading and JIT, and a secured listener's first TLS and SCRAM set-up (11-31 s here against
3-9 s after), which falls on whichever side runs first."""


def alternating(runs: dict[str, Any], repeat: int, records: int, work: Path, label: str) -> dict[str, list[Timed]]:
    """Each of ``runs`` (name -> a function of the output directory giving its ``Timed``),
    ``repeat`` times, in alternating order, after ``WARMUP_ROUNDS`` rounds not counted."""
    times: dict[str, list[Timed]] = {name: [] for name in runs}
    for i in range(-WARMUP_ROUNDS, repeat):
        order = list(runs.items()) if i % 2 == 0 else list(reversed(runs.items()))
        for name, fn in order:
            timed = fn(work / f"{label}-{name}-{i}")
            assert timed.rows == records, f"{label} {name} read {timed.rows} of {records}"
            if i >= 0:
                times[name].append(timed)
            log.info(
                "%s %s %s %d: %.1f s, %.1f s in batches (%.0f records/s)",
                label,
                name,
                "warm-up" if i < 0 else "run",
                i,
                timed.seconds,
                timed.batches_s,
                records / timed.batches_s,
            )
    return times


def avro(spark: Any, broker: Any, registry: Any, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from spark_app.contract.schema_registry import SchemaRegistryAccess, register

    topic = f"bench-avro-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions=2)
    writer = json.dumps(AVRO_SCHEMA)
    schema_id = register(SchemaRegistryAccess(url=registry.url), f"{topic}-value", writer, "bench")
    produce_s = fill_avro(broker.bootstrap, topic, args.records, schema_id)
    source = {"valueFormat": "avro", "registry": {"url": registry.url, "subjects": [f"{topic}-value"]}}
    dead = {"deadLetters": {"table": "ops.dead_letters"}}
    runs = {
        "ours": lambda out: ours(spark, broker.bootstrap, topic, out, **source),
        "from_avro": lambda out: direct(spark, broker.bootstrap, topic, out, avro=writer),
        "from_avro_required": lambda out: direct(spark, broker.bootstrap, topic, out, avro=writer, required=True),
    }
    if args.dead_letters:  # the same job naming a dead-letter table: a second query per Avro source
        runs["dead_letters"] = lambda out: ours(spark, broker.bootstrap, topic, out, dead, **source)
    times = alternating(runs, args.repeat, args.records, work, "avro")
    produced = {"records": args.records, "produce_s": round(produce_s, 1)}
    result = {**produced, **compared(times, args.records, "ours", "from_avro")}
    # no target: Spark's own columns that cannot be null (what the output schema alone costs)
    required = compared(times, args.records, "ours", "from_avro_required")
    result["vs_required_columns"] = {**required, "target_ratio": None}
    if args.dead_letters:
        # no target: the topic is read and decoded twice (docs/operations.md says so); this is what it costs
        result["with_dead_letters"] = {**compared(times, args.records, "dead_letters", "ours"), "target_ratio": None}
    return result


def secured(spark: Any, broker: Any, args: argparse.Namespace, work: Path, user: tuple[str, str]) -> dict[str, Any]:
    from kappa_operator.local.kafka import SASL_SSL

    assert broker.secured is not None
    topic = f"bench-sec-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions=2)
    fill(broker.bootstrap, topic, args.records)
    files = work / "secrets"
    files.mkdir(parents=True, exist_ok=True)
    for name, value in (("username", user[0]), ("password", user[1])):
        (files / name).write_text(value)
    security = {
        "protocol": "SASL_SSL",
        "sasl": {
            "mechanism": "SCRAM-SHA-512",
            "usernameFile": str(files / "username"),
            "passwordFile": str(files / "password"),
        },
        "tls": {"caFile": str(broker.secured.authority.ca)},
    }
    # the CPU each run costs the broker and Spark's JVM: on 2 shared cores the broker's TLS work
    # (no zero-copy send, every byte encrypted) is taken from Spark's tasks, which a broker on
    # its own machines does not do
    pids = {"broker": broker.process.pid, "spark": spark.sparkContext._gateway.proc.pid}
    cpu: dict[str, list[dict[str, float]]] = {"secured": [], "plaintext": []}

    def measured(name: str, fn: Any) -> Any:
        def go(out: Path) -> Timed:
            before = {k: cpu_seconds(pid) for k, pid in pids.items()}
            timed = fn(out)
            cpu[name].append({k: cpu_seconds(pid) - before[k] for k, pid in pids.items()})
            return timed

        return go

    times = alternating(
        {
            "secured": measured(
                "secured", lambda out: ours(spark, broker.bootstrap_of(SASL_SSL), topic, out, security=security)
            ),
            "plaintext": measured("plaintext", lambda out: ours(spark, broker.bootstrap, topic, out)),
        },
        args.repeat,
        args.records,
        work,
        "secured",
    )
    return {
        "records": args.records,
        **compared(times, args.records, "secured", "plaintext"),
        "listener": "SASL_SSL, SCRAM-SHA-512 over TLS (the broker's own CA)",
        **cpu_used(cpu),
    }


def archive(spark: Any, broker: Any, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from confluent_kafka import Producer
    from pyiceberg.catalog.sql import SqlCatalog

    from spark_app.apps.run import run

    topic = f"archive-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions=2)
    out = work / "archive"
    out.mkdir(parents=True)
    sink = {"kind": "iceberg", "table": "archive.impressions", "partitionBy": ["hour(event_ts)"]}
    cfg = job_config(broker.bootstrap, topic, out, sink, {"kind": "processingTime", "interval": f"{args.interval}s"})
    produced = {"n": 0, "late_s": 0.0}

    def produce() -> None:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        started, i = time.monotonic(), 0
        while (elapsed := time.monotonic() - started) < args.seconds:
            due = int(elapsed * args.rate)
            while i < due:
                producer.produce(topic, key=str(i).encode(), value=event(i, datetime.now(UTC)))
                i += 1
            producer.poll(0)
            time.sleep(0.005)
        producer.flush(60)
        produced["n"] = i
        produced["late_s"] = max(0.0, time.monotonic() - started - args.seconds)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    report = run(cfg, spark, timeout=args.seconds + 4 * args.interval)
    producer.join()
    table = SqlCatalog("default", uri=f"sqlite:///{out}/lake.db", warehouse=f"file://{out}/wh").load_table(
        "archive.impressions"
    )
    commit_ms = {s.snapshot_id: s.timestamp_ms for s in table.snapshots()}
    delays: list[float] = []
    seen: set[tuple[int, int]] = set()
    duplicates = 0
    rows = table.scan().to_arrow()
    meta = rows.column("__metadata__").combine_chunks()
    positions = list(zip(meta.field("partition").to_pylist(), meta.field("offset").to_pylist(), strict=True))
    for p in positions:
        if p in seen:
            duplicates += 1
        seen.add(p)
    # the snapshot that added each record: the first snapshot whose table holds its offset
    stamps = [t.timestamp() * 1000 for t in meta.field("ingestion_ts").to_pylist()]
    by_snapshot = sorted(commit_ms.items(), key=lambda kv: kv[1])
    first_seen: dict[tuple[int, int], float] = {}
    for snapshot_id, ms in by_snapshot:
        held = table.scan(snapshot_id=snapshot_id).to_arrow().column("__metadata__").combine_chunks()
        for p in zip(held.field("partition").to_pylist(), held.field("offset").to_pylist(), strict=True):
            first_seen.setdefault(p, ms)
    for p, ingested in zip(positions, stamps, strict=True):
        delays.append((first_seen[p] - ingested) / 1000)
    q = statistics.quantiles(delays, n=100) if len(delays) > 1 else [delays[0]] * 99
    return {
        "rate_per_s": args.rate,
        "seconds": args.seconds,
        "interval_s": args.interval,
        "produced": produced["n"],
        "producer_behind_s": round(produced["late_s"], 2),
        "archived": len(positions),
        "distinct": len(seen),
        "duplicates": duplicates,
        "missing": produced["n"] - len(seen),
        "commits": len(commit_ms),
        "batches": report.batches,
        "delay_p50_s": round(q[49], 2),
        "delay_p99_s": round(q[98], 2),
        "delay_max_s": round(max(delays), 2),
        "baseline_half_interval_s": args.interval / 2,
    }


def bench(args: argparse.Namespace) -> dict[str, Any]:
    from pyspark.sql import SparkSession

    from kappa_operator.local.certificates import Authority
    from kappa_operator.local.kafka import KafkaBroker, Secured
    from kappa_operator.local.schema_registry import SchemaRegistry
    from spark_app import jars
    from spark_app.apps.session import session_jars

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Python workers: this venv's
    work = Path(args.out)
    user = ("bench", uuid.uuid4().hex)
    access = Secured(Authority.create(work / "pki"), scram={user[0]: user[1]})
    broker = KafkaBroker.start(work / "kafka", heap="1g", secured=access)
    registry = SchemaRegistry.start(work / "registry") if not args.skip_avro else None
    spark = None
    try:
        builder = SparkSession.builder.master(MASTER).appName("kappa-bench-kafka")
        for k, v in {
            **SPARK_CONF,
            "spark.jars": ",".join(str(j) for j in [*session_jars(), *jars.resolve("kafka-connector")]),
        }.items():
            builder = builder.config(k, v)
        spark = builder.getOrCreate()
        started = time.monotonic()
        result: dict[str, Any] = {}
        if not args.skip_throughput:
            result["throughput"] = throughput(spark, broker, args, work)
        if registry is not None:
            result["avro"] = avro(spark, broker, registry, args, work)
        if not args.skip_secured:
            result["secured"] = secured(spark, broker, args, work, user)
        if not args.skip_archive:
            result["archive"] = archive(spark, broker, args, work)
        result["total_seconds"] = round(time.monotonic() - started, 1)
        result["kafka"] = "Apache Kafka 4.1.1 (KRaft, one node, 127.0.0.1)"
        result["machine"] = machine()
        return result
    finally:
        if spark is not None:
            spark.stop()
        if registry is not None:
            registry.stop()
        broker.stop()


def main(argv: list[str] | None = None) -> int:
    p = measured_parser(__doc__)
    p.add_argument("--records", type=int, default=1_000_000, help="events in the topic for the throughput runs")
    p.add_argument("--repeat", type=int, default=3, help="runs of each query (alternating)")
    p.add_argument("--rate", type=int, default=10_000, help="events/s produced while the archive runs")
    p.add_argument("--seconds", type=int, default=60, help="how long the producer runs")
    p.add_argument("--interval", type=int, default=10, help="the archive's trigger interval (one commit each)")
    p.add_argument("--skip-throughput", action="store_true")
    p.add_argument("--skip-archive", action="store_true")
    p.add_argument("--skip-avro", action="store_true")
    p.add_argument("--skip-secured", action="store_true")
    p.add_argument(
        "--dead-letters", action="store_true", help="avro: also the job naming a dead-letter table (what it costs)"
    )
    args = p.parse_args(argv)
    return run_measured(args, bench, "kappa-bench-kafka-")


if __name__ == "__main__":
    sys.exit(main())
