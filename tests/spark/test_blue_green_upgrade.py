"""Issue 64 with real Spark, a real broker and real Iceberg tables: the rmi StreamingJob on
Kafka upgraded blue/green to a v2 that adds a column and narrows the attribution window, with
records arriving throughout. Every config is the one the operator renders (blue's and the
promoted job's by ``streaming_job_config``, green's and the steps' by ``render.blue_green``);
each driver runs as ``kappa run`` runs it, in this process, one after the other in the order
the operator's steps give them:

blue runs -> green rebuilds from the archives and trails blue -> compare -> more records, blue
runs on and stops -> green drains to where blue stopped -> switch -> more records, the promoted
job runs on green's checkpoint.

With two faults on the way: green's driver killed during its catch-up (after its sink's
commit, before Spark's), and the switch's driver killed once it recorded B, before main's
snapshot; each run again as the Spark operator or a new operator leader would.

Then main holds each attribution once: v1's before the boundary, v2's (with the new column)
from it on, and nothing of the input is missing: compared with v1 and v2 each run over the
whole input from Kafka's first offset (the oracles)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import SparkSession

from kappa_operator.local.kafka import KafkaBroker
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.models.streaming_job_status import UpgradeStatus
from kappa_operator.render.blue_green import green_config
from kappa_operator.render.jobconfig import CHECKPOINT_ANNOTATION, streaming_job_config
from spark_app.apps.blue_green import FAULT_ENV as SWITCH_FAULT
from spark_app.apps.blue_green import run_compare, run_discard, run_switch
from spark_app.apps.run import run
from spark_app.bluegreen.switch import recorded_boundary
from spark_app.contract.config import JobConfig, TriggerConfig, parse_config
from spark_app.contract.reports.blue_green import read_seam
from spark_app.contract.storage import open_location
from spark_app.examples import rmi
from spark_app.examples.generator import GeneratorConfig, generate
from spark_app.sinks.iceberg.writer import FAULT_ENV as SINK_FAULT
from tests.spark.conftest import T0, Driver
from tests.spark.test_bootstrap import produce
from tests.spark.test_kafka_archive import TOPICS, Story

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
TABLE = "marts.rmi_bluegreen"
KEY = ("playback_id", "impression_id")
PHASES = (120, 150, 180, 210)
"""Arrival minutes after T0: archived before the first; each later one arrives during the upgrade."""
INPUT = GeneratorConfig(
    start=T0,
    hours=3.5,
    impressions_per_hour=300,
    late_fraction=0.02,
    min_lateness=timedelta(minutes=5),
    max_lateness=timedelta(minutes=40),
)
"""Three and a half hours of impressions and playbacks, a few late by up to 40 minutes."""
V2 = {
    "image": "ghcr.io/kappa-dev/kappa-spark:0.2.0",
    "pipelineArgs": {"lateness": "2 hours", "attribution_window": "20 minutes", "time_to_play": "true"},
}
"""v2: a new column (``time_to_play_s``) and a narrower attribution window."""
GREEN_KILLED_AT = 1
"""Green's batch whose driver is killed after its sink's commit (one of its catch-up batches)."""


def manifest(story: Story, root: Path, generation: int, **spec: Any) -> StreamingJob:
    data = yaml.safe_load((ROOT / "examples" / "kafka-rmi-bootstrap-streamingjob.yaml").read_text())
    data["metadata"].update(name="rmi", uid="u1", generation=generation, annotations={})
    s = data["spec"]
    s.pop("bootstrap")
    s["catalogs"] = story.catalogs()
    for name in TOPICS:
        s["sources"][name]["live"] = {
            "kind": "kafka",
            "bootstrapServers": story.broker.bootstrap,
            "topic": story.topic[name],
            "startingPosition": "earliest",
            "maxOffsetsPerTrigger": 400,
        }
    upgraded_here(s, root)
    s.update(spec)
    return StreamingJob.model_validate(data)


def upgraded_here(spec: dict[str, Any], root: Path) -> None:
    """A manifest's spec as these tests run it: their sink table, a checkpoint under ``root``, no
    late row dropped (the oracles are exact), blue/green with a 10-minute overlap, v2 meant to
    differ."""
    spec["sinks"][rmi.OUTPUT]["table"] = TABLE
    spec["sinks"][rmi.OUTPUT].pop("partitionBy")
    spec["checkpoints"] = {"location": str(root / "ckpt")}
    spec["pipelineArgs"] = {"lateness": "2 hours"}
    spec["upgrade"] = {"mode": "blueGreen", "overlap": "10m", "minMatchRatio": 0}
    spec["sparkConf"] = {"spark.sql.shuffle.partitions": "2"}


def bounded(cfg: JobConfig) -> JobConfig:
    """The rendered config, run to the end of what has arrived (``kappa run``'s trigger)."""
    return cfg.model_copy(update={"trigger": TriggerConfig(kind="availableNow")})


def green_starting(root: Path, blue: JobConfig) -> UpgradeStatus:
    """The upgrade as the operator records it at ``GreenStarting`` (generation 2)."""
    return UpgradeStatus.model_validate(
        {
            "mode": "blueGreen",
            "toHash": "v2",
            "step": "GreenStarting",
            "startedAt": "2026-12-04T12:00:00Z",
            "generation": 2,
            "branch": "green-rmi-g2",
            "greenCheckpoint": str(root / "ckpt" / "green-g2"),
            "blueCheckpoint": blue.checkpoint.location,
            "historyFrom": T0.isoformat(),
        }
    )


def promoted_config(v2: StreamingJob, up: UpgradeStatus) -> JobConfig:
    """``Promoting``: the job's own application, v2's spec, on green's checkpoint."""
    moved = v2.metadata.model_copy(update={"annotations": {CHECKPOINT_ANNOTATION: up.green_checkpoint}})
    promoted = bounded(streaming_job_config(v2.model_copy(update={"metadata": moved})))
    assert promoted.checkpoint.location == up.green_checkpoint and promoted.green is None
    return promoted


def arrivals(rows: dict[str, list[dict[str, Any]]], start: float, end: float) -> dict[str, list[dict[str, Any]]]:
    lo, hi = T0 + timedelta(minutes=start), T0 + timedelta(minutes=end)
    return {n: [r for r in rs if lo <= r["__metadata__"]["ingestion_ts"] < hi] for n, rs in rows.items()}


@pytest.fixture(scope="module")
def story(spark: SparkSession, kafka_broker: KafkaBroker, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("bluegreen")
    s = Story(root, kafka_broker, root.name.replace("_", "-").lower())
    truth = SqlCatalog("truth", uri=f"sqlite:///{root}/truth.db", warehouse=f"file://{root}/truth")
    generate(truth, INPUT)
    rows: dict[str, list[dict[str, Any]]] = {}
    for name in TOPICS:
        got = truth.load_table(f"demo.{name}").scan().to_arrow().to_pylist()
        for row in got:
            row["__metadata__"]["ingestion_ts"] = row["__metadata__"]["ingestion_ts"].replace(tzinfo=UTC)
        rows[name] = sorted(got, key=lambda r: r["__metadata__"]["ingestion_ts"])
        kafka_broker.create_topic(s.topic[name], partitions=2, config={"retention.ms": "-1"})
    produce(s, arrivals(rows, -60, PHASES[0]))
    for name in TOPICS:  # the archive jobs: each topic's history table (what green reads first)
        run(s.archive_config(name, root / f"archive-{name}"), spark)
    return {"story": s, "root": root, "rows": rows}


def main_rows(catalog: SqlCatalog, ref: str = "main") -> dict[tuple[Any, ...], dict[str, Any]]:
    table = catalog.load_table(TABLE)
    snap = table.snapshot_by_name(ref)
    assert snap is not None, ref
    got = table.scan(snapshot_id=snap.snapshot_id).to_arrow().to_pylist()
    out = {tuple(r[k] for k in KEY): r for r in got}
    assert len(out) == len(got), f"{ref}: each attribution once"
    return out


def oracle(spark: SparkSession, job: StreamingJob, where: Path) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The job's pipeline over the whole input from Kafka's first offset, in one run."""
    cfg = bounded(streaming_job_config(job))
    raw = cfg.model_dump(by_alias=True, exclude_none=True, mode="json")
    raw["sinks"] = {rmi.OUTPUT: {"kind": "parquet", "path": str(where / "out")}}
    raw["checkpoint"] = {"location": str(where / "ckpt")}
    run(parse_config(raw), spark)
    got = [r.asDict() for r in spark.read.parquet(str(where / "out")).collect()]
    for r in got:  # Spark gives the session's (UTC) wall time, without its zone
        r.update({k: v.replace(tzinfo=UTC) for k, v in r.items() if isinstance(v, datetime) and v.tzinfo is None})
    return {tuple(r[k] for k in KEY): r for r in got}


def test_rmi_v1_to_v2_switches_main_at_one_boundary_with_no_gap_and_no_duplicate(
    spark: SparkSession, story: dict[str, Any], tmp_path: Path
) -> None:
    s: Story = story["story"]
    rows = story["rows"]
    v1 = manifest(s, tmp_path, 1)
    v2 = manifest(s, tmp_path, 2, **V2)
    catalog = SqlCatalog("default", **s.props)

    # blue runs (v1), records arriving
    produce(s, arrivals(rows, PHASES[0], PHASES[1]))
    blue = bounded(streaming_job_config(v1))
    run(blue, spark)

    # the operator's GreenStarting: green's config, rendered from the recorded upgrade
    up = green_starting(tmp_path, blue)
    green = bounded(green_config(v2, up))
    assert green.green is not None and green.sinks[rmi.OUTPUT].branch == "green-rmi-g2"  # type: ignore[union-attr]
    # green's driver killed during its catch-up, after its sink committed a batch and before
    # Spark logged it done; run again on its checkpoint, as the Spark operator restarts it
    (tmp_path / "green-driver").mkdir()
    green_driver = Driver(green, tmp_path / "green-driver")
    killed = green_driver.run(**{SINK_FAULT: f"kill-after-commit:{GREEN_KILLED_AT}"})
    assert killed.returncode == -9, green_driver.tail()
    run(green, spark)  # the archives, then each topic up to where blue durably stands
    seam = read_seam(open_location(str(tmp_path / "ckpt" / "green-g2")))
    assert seam is not None and seam.all_at_seam(), "green stands where blue does"
    assert "time_to_play_s" in catalog.load_table(TABLE).schema().column_names, "green added its column"

    # Comparing: the first half hour, which both versions closed (their watermarks are 2 hours behind)
    window = (T0, T0 + timedelta(minutes=30))
    compared = run_compare(bounded(green_config(v2, up, (window[0].isoformat(), window[1].isoformat()))), spark)
    assert compared.state == "Matched", compared  # minMatchRatio 0: v2 is meant to differ
    (t,) = compared.tables
    assert t.new_columns == ["time_to_play_s"], "the added column is reported, not compared"
    assert t.main_rows > 0 and t.matched <= t.main_rows

    # StoppingBlue: blue read what arrived meanwhile, then stopped; Draining: green reaches it
    produce(s, arrivals(rows, PHASES[1], PHASES[2]))
    run(blue, spark)
    run(green, spark)
    seam = read_seam(open_location(str(tmp_path / "ckpt" / "green-g2")))
    assert seam is not None and seam.all_at_seam()
    blue_rows = main_rows(catalog)
    green_rows = main_rows(catalog, "green-rmi-g2")

    # Switching: its driver killed once B is recorded and the pending logs settled, before
    # main's snapshot; run again (a new pod, or a new operator leader's repeat of the step)
    (tmp_path / "switch-driver").mkdir()
    switch_driver = Driver(bounded(green_config(v2, up)), tmp_path / "switch-driver", "switch")
    assert switch_driver.run(**{SWITCH_FAULT: "kill-before-commit"}).returncode == -9, switch_driver.tail()
    recorded = recorded_boundary(open_location(str(tmp_path / "ckpt" / "green-g2")))
    assert recorded is not None and main_rows(catalog) == blue_rows, "B recorded; main not switched yet"
    switched = run_switch(bounded(green_config(v2, up)), spark)
    assert switched.state == "Switched", switched
    b = switched.boundary
    assert b == recorded, "the rerun switches at the B the killed run recorded"
    assert not switched.switched[0].earlier, "its snapshot is the rerun's"
    assert b is not None and T0 + timedelta(minutes=30) <= b <= T0 + timedelta(minutes=60), b
    assert not switched.notices
    assert run_switch(bounded(green_config(v2, up)), spark).switched[0].earlier, "run again: nothing committed"
    assert run_discard(bounded(green_config(v2, up))).removed == [], "the branch went with the switch"

    # Promoting: the job's own application, v2's spec, on green's checkpoint; records go on arriving
    promoted = promoted_config(v2, up)
    produce(s, arrivals(rows, PHASES[2], PHASES[3] + 120))
    run(promoted, spark)

    final = main_rows(catalog)
    assert_switched_once(spark, final, (blue_rows, green_rows), b, (v1, v2), tmp_path)
    totals = {n: len(rows[n]) for n in TOPICS}
    assert sum(totals.values()) > 0 and len(final) > 100, (totals, len(final))


Rows = dict[tuple[Any, ...], dict[str, Any]]


def assert_switched_once(
    spark: SparkSession,
    final: Rows,
    before: tuple[Rows, Rows],
    b: datetime,
    versions: tuple[StreamingJob, StreamingJob],
    root: Path,
) -> None:
    """Main after the switch and the promoted job's run: blue's rows before ``b`` untouched,
    green's from it on, and compared with each version run over the whole input (the oracles):
    v1's attributions before ``b``, v2's (with its new column) from it, each once, none missing.
    ``before``: main's and the branch's rows just before the switch."""
    blue_rows, green_rows = before
    time_of = rmi.TIME_COLUMN
    assert {k: r for k, r in final.items() if r[time_of] < b} == {
        k: r for k, r in blue_rows.items() if r[time_of] < b
    }, "blue's rows before the boundary, untouched"
    assert all(r["time_to_play_s"] is None for r in final.values() if r[time_of] < b)
    assert {k for k, r in green_rows.items() if r[time_of] >= b} <= set(final), "green's rows from it on"
    old, new = oracle(spark, versions[0], root / "v1"), oracle(spark, versions[1], root / "v2")
    assert set(old) > set(new), "v2's narrower window attributes fewer plays"
    expected = {k for k, r in old.items() if r[time_of] < b} | {k for k, r in new.items() if r[time_of] >= b}
    assert set(final) == expected, "each attribution once: v1's before the boundary, v2's from it on, none missing"
    for k, r in final.items():
        if r[time_of] >= b:
            assert r["time_to_play_s"] == new[k]["time_to_play_s"], k
