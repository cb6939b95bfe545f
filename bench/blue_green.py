"""What a blue/green upgrade (issue 64) costs, against what the alternatives cost in the same run,
on a real broker (Apache Kafka, KRaft), real Spark and real Iceberg tables (SQLite catalog), on
this machine. Every config is the one the operator renders: the archive jobs from
examples/kafka-archive-streamingjob.yaml, blue and the promoted job from
examples/kafka-rmi-bootstrap-streamingjob.yaml (``streaming_job_config``), green and its steps
by ``render.blue_green``, the Backfill by ``backfill_config``; each run bounded (availableNow), as
``kappa run`` runs them.

Three hours of the rmi history at the profile's density (``quick``: 20,000 impressions an hour,
the benches' usual; ``default``: 50,000; ``dense``: 1,000,000, the density users have) go into
two topics of 2 partitions in arrival order; the archive jobs copy them into their history
tables; blue (v1) reads the topics. With ``--source icebergLive`` they are instead appended to
two Iceberg tables (a snapshot each 5 minutes of arrivals), and blue is
examples/rmi-streamingjob.yaml reading their appends, each table its own history. Then, timed:

* ``green``: v2 (a new column, a narrower attribution window) from the last **two hours** of the
  archives (``historyFrom``), then the topics up to where blue stands: green's catch-up (for
  ``icebergLive``: the tables pinned where blue read them whole, then their appends);
* ``compare``: the comparison step over a 20-minute overlap, an overlap after green's history
  starts, which both versions closed;
* ``switch``: the switch step (both at the seam), one Iceberg snapshot into main.

Baselines, in the same run, on the same tables:

* ``backfill_auto``, ``backfill_aligned``: a Backfill of the same two hours of the job (publish
  off), in ``alignment.mode: auto`` as users run it (a batch query where the planner proves it
  equal) and ``aligned`` (streamed, as green's history must be: green goes on live with its
  state): what rebuilding those hours costs without an upgrade around it;
* ``restart``: v2 started on a copy of blue's checkpoint with nothing new to read: what a
  ``last-state`` upgrade costs here (one query start on the state there is), for a v2 that
  can restore v1's state (this one cannot be trusted to: its join bound changed).

``green_vs_backfill_*`` is green's catch-up over each Backfill; ``upgrade_vs_restart`` is green,
compare and switch over the restart. Pod starts are not in these: on the node each step adds
one (bench/RESULTS.md, issue 64, has the node's figure).

    .venv/bin/python -m bench.blue_green --json [--profile quick|default|dense] [--source kafka|icebergLive]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.source_throughput import MASTER, SPARK_CONF, machine, measured_parser, run_measured
from spark_app.examples.event_tables import KAFKA_ARCHIVE_METADATA_DDL, KAFKA_VALUE_DDL

ROOT = Path(__file__).resolve().parent.parent
T0 = datetime(2026, 11, 1, 10, tzinfo=UTC)
HOURS = 3.0
HISTORY = timedelta(hours=2)
"""Green reads the archives' last two hours (the issue's figure is for two hours of history)."""
OVERLAP = timedelta(minutes=20)
PROFILES = {
    "quick": {"impressions_per_hour": 20_000},
    "default": {"impressions_per_hour": 50_000},
    "dense": {"impressions_per_hour": 1_000_000},  # bench/backfill.py's: the density users have (issue 15)
}
VALUES = KAFKA_VALUE_DDL
KAFKA_METADATA = KAFKA_ARCHIVE_METADATA_DDL
TABLE = "marts.rmi_bluegreen_bench"
LATENESS = "30 minutes"
"""Both versions' (green's bootstrap needs maxDrift 10m + a split's span under it): their
watermarks (the history's end less it) close the compared overlap, which ends two overlaps
after green's history starts, plus v1's 30-minute look-ahead."""
V2_ARGS = {"lateness": LATENESS, "attribution_window": "20 minutes", "time_to_play": "true"}


def example(name: str) -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "examples" / name).read_text()))


def on_this_machine(data: dict[str, Any], work: Path, props: dict[str, str], broker: str | None) -> dict[str, Any]:
    """An example's manifest with this run's catalog, broker (None: its sources are Iceberg
    tables) and checkpoint directory."""
    spec = data["spec"]
    spec["catalogs"] = {"default": {"type": "sql", **props}}
    spec["checkpoints"] = {"location": str(work / "checkpoints" / data["metadata"]["name"])}
    spec["sparkConf"] = {"spark.sql.shuffle.partitions": SPARK_CONF["spark.sql.shuffle.partitions"]}
    for source in spec["sources"].values():
        if broker is not None:
            source["live"]["bootstrapServers"] = broker
    data["metadata"].update(uid=f"uid-{data['metadata']['name']}", generation=1, annotations={})
    return data


def produced(props: dict[str, str], broker: str, per_hour: int) -> int:
    """The generated history, each topic's records in arrival order with their arrival times."""
    from confluent_kafka import Producer
    from pyiceberg.catalog.sql import SqlCatalog

    from spark_app.examples.generator import GeneratorConfig, generate

    truth = SqlCatalog("truth", **props)
    generate(truth, GeneratorConfig(start=T0, hours=HOURS, impressions_per_hour=per_hour, namespace="truth"))
    producer = Producer({"bootstrap.servers": broker, "enable.idempotence": True, "linger.ms": 20})
    count = 0
    for topic, ddl in VALUES.items():
        columns = [c.split()[0] for c in ddl.split(", ")]
        rows = truth.load_table(f"truth.{topic}").scan().to_arrow().to_pylist()
        for row in sorted(rows, key=lambda r: r["__metadata__"]["ingestion_ts"]):
            value = {c: row[c].isoformat() if isinstance(row[c], datetime) else row[c] for c in columns}
            arrived = row["__metadata__"]["ingestion_ts"].replace(tzinfo=UTC)
            producer.produce(topic, value=json.dumps(value).encode(), timestamp=int(arrived.timestamp() * 1000))
            producer.poll(0)
            count += 1
    assert producer.flush(60) == 0, "every record acknowledged"
    return count


def appended(props: dict[str, str], per_hour: int) -> int:
    """The generated history appended to the rmi example's own tables (``ingest.*``), one
    snapshot per table each 5 minutes of arrivals: what blue reads live and green as history."""
    from pyiceberg.catalog.sql import SqlCatalog

    from spark_app.examples.generator import GeneratorConfig, generate

    stats = generate(
        SqlCatalog("default", **props),
        GeneratorConfig(start=T0, hours=HOURS, impressions_per_hour=per_hour, namespace="ingest"),
    )
    return stats.impressions + stats.playbacks


def one_snapshot_a_batch(cfg: Any) -> Any:
    """``cfg`` with each ``icebergLive`` source reading at most one table snapshot per batch."""
    sources = {
        name: src.model_copy(update={"read_limit": src.read_limit.model_copy(update={"max_snapshots": 1})})
        if src.kind == "icebergLive"
        else src
        for name, src in cfg.sources.items()
    }
    return cfg.model_copy(update={"sources": sources})


def timed(what: str, run: Any) -> tuple[float, Any]:
    started = time.monotonic()
    out = run()
    seconds = round(time.monotonic() - started, 2)
    print(f"{what}: {seconds} s", file=sys.stderr)
    return seconds, out


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from pyspark.sql import SparkSession

    from kappa_operator.local.kafka import KafkaBroker
    from kappa_operator.models.backfill import Backfill
    from kappa_operator.models.streaming_job import StreamingJob
    from kappa_operator.models.streaming_job_status import UpgradeStatus
    from kappa_operator.render.blue_green import green_config
    from kappa_operator.render.jobconfig import CHECKPOINT_ANNOTATION, backfill_config, streaming_job_config
    from spark_app import jars
    from spark_app.apps.blue_green import run_compare, run_switch
    from spark_app.apps.run import run
    from spark_app.apps.session import session_jars
    from spark_app.contract.config import JobConfig, TriggerConfig
    from spark_app.contract.reports.blue_green import read_seam
    from spark_app.contract.storage import open_location

    def bounded(cfg: JobConfig) -> JobConfig:
        return cfg.model_copy(update={"trigger": TriggerConfig(kind="availableNow")})

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = Path(args.out)
    props = {"uri": f"sqlite:///{work}/lake.db", "warehouse": f"file://{work}/warehouse"}
    per_hour = PROFILES[args.profile]["impressions_per_hour"]
    broker = KafkaBroker.start(work / "kafka", heap="1g") if args.source == "kafka" else None
    spark = None
    try:
        if broker is not None:
            for topic in VALUES:
                broker.create_topic(topic, partitions=2, config={"retention.ms": "-1"})
            records = produced(props, broker.bootstrap, per_hour)
        else:
            records = appended(props, per_hour)
        builder = SparkSession.builder.master(MASTER).appName("kappa-bench-blue-green")
        connectors = jars.resolve("kafka-connector") if broker is not None else []
        jar_list = ",".join(str(j) for j in [*session_jars(), *connectors])
        for k, v in {**SPARK_CONF, "spark.jars": jar_list}.items():
            builder = builder.config(k, v)
        spark = builder.getOrCreate()

        if broker is not None:
            for topic, ddl in VALUES.items():  # the archive example, one job per topic
                archive = on_this_machine(example("kafka-archive-streamingjob.yaml"), work, props, broker.bootstrap)
                archive["metadata"]["name"] = f"archive-{topic}"
                archive["spec"]["checkpoints"]["location"] = str(work / "checkpoints" / f"archive-{topic}")
                source = archive["spec"]["sources"].pop("impressions")
                source["live"].update(topic=topic, valueSchema=f"{ddl}, {KAFKA_METADATA}")
                source["history"]["table"] = f"archive.{topic}"
                archive["spec"]["sources"] = {topic: source}
                archive["spec"]["sinks"]["copy"]["table"] = f"archive.{topic}"
                cfg = bounded(streaming_job_config(StreamingJob.model_validate(archive)))
                timed(f"archive {topic}", lambda c=cfg: run(c, spark))
            manifest = on_this_machine(example("kafka-rmi-bootstrap-streamingjob.yaml"), work, props, broker.bootstrap)
            manifest["spec"].pop("bootstrap")
        else:  # the rmi example as it is: each source a table's appends, the table its own history
            manifest = on_this_machine(example("rmi-streamingjob.yaml"), work, props, None)
            for gone in ("driver", "executor"):
                manifest["spec"].pop(gone, None)
        manifest["metadata"]["name"] = "rmi"
        manifest["spec"]["checkpoints"]["location"] = str(work / "checkpoints" / "rmi")
        spec = manifest["spec"]
        for source in spec["sources"].values():
            source["live"]["startingPosition"] = "earliest"
        spec["sinks"]["attributed_plays"]["table"] = TABLE
        spec["pipelineArgs"] = {"lateness": LATENESS}
        spec["upgrade"] = {"mode": "blueGreen", "overlap": "20m", "minMatchRatio": 0}
        v1 = StreamingJob.model_validate(manifest)
        v2_manifest = json.loads(json.dumps(manifest))
        v2_manifest["spec"].update(image="ghcr.io/kappa-dev/kappa-spark:0.2.0", pipelineArgs=V2_ARGS)
        v2_manifest["metadata"]["generation"] = 2
        v2 = StreamingJob.model_validate(v2_manifest)
        blue = bounded(streaming_job_config(v1))
        if broker is None:  # three hours of appends: a snapshot (5 minutes of them) a batch, as `kappa run
            blue = one_snapshot_a_batch(blue)  # --snapshots-per-batch 1` reads them, not all in one
        blue_s, _ = timed(f"blue (v1) over the {args.source} sources", lambda: run(blue, spark))

        history_from = T0 + timedelta(hours=HOURS) - HISTORY
        green_ckpt = work / "checkpoints" / "rmi" / "green-g2"
        up = UpgradeStatus.model_validate(
            {
                "mode": "blueGreen", "toHash": "v2", "step": "GreenStarting", "startedAt": T0.isoformat(),
                "generation": 2, "branch": "green-rmi-g2", "greenCheckpoint": str(green_ckpt),
                "blueCheckpoint": blue.checkpoint.location, "historyFrom": history_from.isoformat(),
            }
        )  # fmt: skip
        green = bounded(green_config(v2, up))
        green_s, _ = timed("green (v2): 2 h of history, then the live input", lambda: run(green, spark))
        seam = read_seam(open_location(str(green_ckpt)))
        assert seam is not None and seam.all_at_seam(), "green stands where blue does"
        start = history_from + OVERLAP
        window = (start.isoformat(), (start + OVERLAP).isoformat())
        comparing = bounded(green_config(v2, up, window))
        compare_s, compared = timed("compare", lambda: run_compare(comparing, spark))
        assert compared.state == "Matched", compared
        switch_s, switched = timed("switch", lambda: run_switch(green, spark))
        assert switched.state == "Switched", switched

        backfill_s: dict[str, float] = {}
        for mode in ("auto", "aligned"):  # auto: as users run it; aligned: streamed, as green's history is
            backfill = Backfill.model_validate(
                {
                    "apiVersion": "kappa.dev/v1alpha1", "kind": "Backfill",
                    "metadata": {"name": f"same-hours-{mode}", "namespace": "default", "uid": f"uid-{mode}",
                                 "generation": 1},
                    "spec": {
                        "jobRef": {"name": "rmi"}, "publish": {"enabled": False}, "alignment": {"mode": mode},
                        "window": {"start": history_from.isoformat(),
                                   "end": (T0 + timedelta(hours=HOURS)).isoformat(), "warmup": "30m"},
                    },
                }
            )  # fmt: skip
            bf_cfg = backfill_config(backfill, v2, None)
            backfill_s[mode], _ = timed(f"backfill of the same two hours ({mode})", lambda c=bf_cfg: run(c, spark))

        copy = work / "checkpoints" / "restart"
        shutil.copytree(blue.checkpoint.location, copy)
        restarted = v2.model_copy(
            update={"metadata": v2.metadata.model_copy(update={"annotations": {CHECKPOINT_ANNOTATION: str(copy)}})}
        )
        restart = bounded(streaming_job_config(restarted))
        restart_s, _ = timed("restart (last-state) on blue's state", lambda: run(restart, spark))
        upgrade_s = green_s + compare_s + switch_s
        return {
            "profile": args.profile,
            "source": args.source,
            "impressions_per_hour": PROFILES[args.profile]["impressions_per_hour"],
            "records": records,
            "history_hours": HISTORY.total_seconds() / 3600,
            "seconds": {
                "blue": blue_s, "green": green_s, "compare": compare_s, "switch": switch_s,
                "backfill_auto": backfill_s["auto"], "backfill_aligned": backfill_s["aligned"], "restart": restart_s,
            },
            "ratios": {
                "green_vs_backfill_auto": round(green_s / backfill_s["auto"], 2),
                "green_vs_backfill_aligned": round(green_s / backfill_s["aligned"], 2),
                "upgrade_vs_restart": round(upgrade_s / restart_s, 2),
            },
            "switched": switched.switched[0].model_dump(mode="json"),
            "compared": [
                t.model_dump(mode="json", include={"match_ratio", "main_rows", "branch_rows"}) for t in compared.tables
            ],
            "machine": machine(),
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
        }  # fmt: skip
    finally:
        if spark is not None:
            spark.stop()
        if broker is not None:
            broker.stop()


def main(argv: list[str] | None = None) -> int:
    p = measured_parser(__doc__)
    p.add_argument("--profile", choices=sorted(PROFILES), default="quick")
    p.add_argument("--source", choices=("kafka", "icebergLive"), default="kafka")
    return run_measured(p.parse_args(argv), measure, "kappa-bench-blue-green-")


if __name__ == "__main__":
    raise SystemExit(main())
