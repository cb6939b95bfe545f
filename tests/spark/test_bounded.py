"""``alignment.mode: bounded`` with real local Spark: the job's own pipeline over batch reads
of the backfill's read, one batch query per sink. It writes the rows the aligned run writes
(an inner range join: rmi), into a Parquet path or an Iceberg branch committed once by its
batch id under a query id kept in the checkpoint (a rerun after the commit skips it); and it
refuses, naming the operator, a pipeline whose result depends on when the watermark passed
(a dedup within the watermark). Windows and sessions: tests/spark/test_window_edges.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark_app.apps.bounded import STATE_FILE, BoundedState
from spark_app.apps.run import run
from spark_app.contract.config import parse_config
from spark_app.contract.errors import ConfigError
from spark_app.contract.trace import read_trace
from spark_app.sinks.iceberg.commit import BATCH_ID, QUERY_ID
from spark_app.sinks.iceberg.writer import FAULT_ENV
from tests.spark.conftest import T0, Dataset, Driver, sources

pytestmark = pytest.mark.spark

WINDOW = {"start": (T0 + timedelta(minutes=40)).isoformat(), "end": (T0 + timedelta(minutes=80)).isoformat()}
RMI_COLUMNS = ["playback_id", "impression_id", "profile_id", "title_id", "impression_ts", "playback_ts", "duration_s"]


def rmi(dataset: Dataset, tmp: Path, mode: str, **fields: Any) -> Any:
    return dataset.config(
        tmp,
        name=f"rmi-{mode}",
        mode="backfill",
        sink_time_column="playback_ts",
        sources=sources("icebergBackfill", split={"maxBundleSpan": "2m"}),
        window={**WINDOW, "warmup": "30m"},
        alignment={"mode": mode, "maxDrift": fields.pop("drift", "4m")},
        **fields,
    )


def rows(spark: SparkSession, path: Path) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in spark.read.parquet(str(path)).select(*RMI_COLUMNS).orderBy(*RMI_COLUMNS).collect()]


@pytest.fixture(scope="module")
def aligned(spark: SparkSession, dataset: Dataset, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The aligned run of the window, and its rows: what every bounded run here must write."""
    tmp = tmp_path_factory.mktemp("aligned")
    return run(rmi(dataset, tmp, "aligned"), spark), rows(spark, tmp / "out")


def test_a_bounded_backfill_writes_the_aligned_runs_rows_in_one_batch(
    spark: SparkSession, dataset: Dataset, tmp_path: Path, aligned: Any
) -> None:
    aligned, expected = aligned
    bounded = run(rmi(dataset, tmp_path / "bounded", "bounded"), spark)
    assert len(expected) > 50 and aligned.batches >= 5
    assert rows(spark, tmp_path / "bounded" / "out") == expected
    assert bounded.batches == 1 and bounded.peak_state_rows == 0
    assert bounded.input_rows == aligned.input_rows, "the same rows read: the window, its warm-up, the filter"
    assert bounded.lateness is not None and "bounded" in bounded.lateness.message


def test_each_sources_bounded_frame_is_made_once_for_the_proof_the_watermark_and_the_write(
    spark: SparkSession, dataset: Dataset, tmp_path: Path
) -> None:
    from spark_app.sources.frames import source_spec
    from spark_app.sources.iceberg.frame import iceberg_batch_frame

    cfg = rmi(dataset, tmp_path, "bounded")
    sid = dataset.catalog().load_table("demo.impressions").current_snapshot().snapshot_id
    first = iceberg_batch_frame(spark, source_spec(cfg, "attributed_plays", "impressions", 2, ()), sid)
    # another sink's spec of the source (its member and rounds file differ) reads the same rows
    again = iceberg_batch_frame(spark, source_spec(cfg, "other", "impressions", 2, ()), sid)
    assert again is first
    end = int(cfg.window.read_end.timestamp() * 1_000_000)
    drained = iceberg_batch_frame(
        spark, source_spec(cfg, "attributed_plays", "impressions", 2, (), (end + 600_000_000,)), sid
    )
    assert drained is not first and drained.count() > first.count(), "a drain extension reads more"
    playbacks = dataset.catalog().load_table("demo.playbacks").current_snapshot().snapshot_id
    assert iceberg_batch_frame(spark, source_spec(cfg, "attributed_plays", "playbacks", 2, ()), playbacks) is not first


def into_iceberg(cfg: Any, table: str, **fields: Any) -> Any:
    raw = cfg.model_dump(by_alias=True, exclude_none=True)
    raw["sinks"] = {
        "attributed_plays": {
            "kind": "iceberg",
            "table": table,
            "timeColumn": "playback_ts",
            "key": ["playback_id", "impression_id"],
        }
    }
    return parse_config({**raw, **fields})


def branch_rows(dataset: Dataset, cfg: Any, table: str) -> list[tuple[Any, ...]]:
    loaded = dataset.catalog().load_table(table)
    written = loaded.scan(snapshot_id=loaded.refs()[cfg.sink_branch("attributed_plays")].snapshot_id)
    rows = written.to_arrow().select(RMI_COLUMNS).to_pylist()
    return sorted(tuple(v.replace(tzinfo=None) if hasattr(v, "tzinfo") else v for v in r.values()) for r in rows)


def test_a_bounded_run_killed_mid_write_or_after_its_commit_gives_the_same_rows_committed_once(
    dataset: Dataset, tmp_path: Path, aligned: Any
) -> None:
    """Its own driver process, killed (the process group, SIGKILL) once its files are written
    and before its commit, then after its commit: each restart reads the same snapshots
    (fixed in the checkpoint) and commits under the same query id, so the branch holds the
    uninterrupted run's rows, committed once; the files of the killed write are not in it."""
    cfg = into_iceberg(
        rmi(dataset, tmp_path, "bounded"),
        "marts.bounded_killed",
        master="local[2]",
        sparkConf={"spark.sql.shuffle.partitions": "2", "spark.ui.showConsoleProgress": "false"},
    )
    driver = Driver(cfg, tmp_path)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, FAULT_ENV: "pause-before-commit:0:600"}
    with driver.log.open("ab") as out:
        paused = subprocess.Popen(driver.cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 900  # a bound on a wait, not a measure: a loaded machine takes its time
    while "fault point reached" not in driver.log.read_text():
        assert paused.poll() is None and time.monotonic() < deadline, driver.tail()
        time.sleep(0.2)
    os.killpg(paused.pid, signal.SIGKILL)
    paused.wait()
    table = dataset.catalog().load_table("marts.bounded_killed")
    assert cfg.sink_branch("attributed_plays") not in table.refs(), "killed before its commit"
    assert driver.run(**{FAULT_ENV: "kill-after-commit:0"}).returncode == -9, driver.tail()
    assert driver.run().returncode == 0, driver.tail()
    commits = [e for e in read_trace(tmp_path / "trace.jsonl") if e["event"] == "commit"]
    assert [e["skipped"] for e in commits] == [False, True], "committed once, then found and skipped"
    assert branch_rows(dataset, cfg, "marts.bounded_killed") == aligned[1], "the aligned run's rows"


def test_a_bounded_backfill_into_an_iceberg_branch_commits_once_and_a_rerun_skips_the_commit(
    spark: SparkSession, dataset: Dataset, tmp_path: Path, aligned: Any
) -> None:
    cfg = into_iceberg(rmi(dataset, tmp_path, "bounded"), "marts.bounded_plays")
    run(cfg, spark)
    assert (tmp_path / "ckpt" / STATE_FILE).exists(), "snapshots and query id fixed before the write"
    run(cfg, spark)  # a restart after the commit: the same query id and batch id, found, skipped
    table = dataset.catalog().load_table("marts.bounded_plays")
    commits = [
        s.summary.additional_properties
        for s in table.snapshots()
        if s.summary is not None and BATCH_ID in s.summary.additional_properties
    ]
    assert len(commits) == 1 and commits[0][BATCH_ID] == "0" and commits[0][QUERY_ID]
    assert branch_rows(dataset, cfg, "marts.bounded_plays") == aligned[1], "the aligned run's rows, in the branch"


def test_a_pipeline_whose_result_depends_on_when_the_watermark_passed_is_refused_naming_the_operator(
    spark: SparkSession, dataset: Dataset, tmp_path: Path
) -> None:
    cfg = dataset.config(
        tmp_path,
        name="dedup-bounded",
        pipeline="spark_app.examples.dedup:pipeline",
        pipelineArgs={"key": "playback_id"},
        output="deduplicated",
        mode="backfill",
        sink_time_column="event_ts",
        sources=sources("icebergBackfill", ("playbacks",)),
        window={**WINDOW, "warmup": "1h"},
        alignment={"mode": "bounded"},
    )
    with pytest.raises(ConfigError, match=r"dropDuplicatesWithinWatermark") as refused:
        run(cfg, spark)
    assert "set alignment.mode to auto or aligned" in str(refused.value)
    assert not (tmp_path / "out").exists(), "nothing written"


def test_a_bounded_read_of_many_local_files_is_indexed_without_a_listing_job(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Past 32 paths Spark lists files in a distributed job; the manifests named them already."""
    from spark_app.sources.iceberg.frame import LISTING_THRESHOLD, listed_on_driver

    spark.range(0, 40, 1, 40).write.parquet(str(tmp_path / "files"))  # a file per partition
    paths = sorted(str(p) for p in (tmp_path / "files").glob("*.parquet"))
    assert len(paths) == 40
    tracker = spark.sparkContext.statusTracker()

    def jobs_to_index(group: str, driver_listing: bool) -> int:
        spark.sparkContext.setJobGroup(group, group)
        try:
            if driver_listing:
                with listed_on_driver(spark, len(paths)):
                    spark.read.schema("id long").parquet(*paths)
            else:
                spark.read.schema("id long").parquet(*paths)
        finally:
            spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
        return len(tracker.getJobIdsForGroup(group))

    assert jobs_to_index("listing-default", driver_listing=False) == 1, "Spark's own listing job, past 32 paths"
    before = spark.conf.get(LISTING_THRESHOLD, None)
    assert jobs_to_index("listing-driver", driver_listing=True) == 0
    assert spark.conf.get(LISTING_THRESHOLD, None) == before, "the setting as it was after the block"


def test_files_known_from_the_manifests_are_read_without_asking_the_store_for_a_status(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The Backfill's bounded read makes each file's status from its manifest entry (path and
    size): no listing job, whatever the number of files, and the rows, ``_metadata`` and filters
    Spark's own read gives."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StructField, StructType

    from spark_app.planning.splits import DataFileInfo
    from spark_app.sources.iceberg.frame import read_known_files

    spark.range(0, 4000, 1, 40).selectExpr("id", "id % 7 AS k").write.parquet(str(tmp_path / "files"))
    paths = sorted(tmp_path.joinpath("files").glob("*.parquet"))
    assert len(paths) == 40
    files = [DataFileInfo(str(p), 100, p.stat().st_size, None, None) for p in paths]
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("known-files", "known-files")
    try:
        schema = StructType([StructField("id", LongType()), StructField("k", LongType())])
        frame = read_known_files(spark, files, schema, {})
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert len(tracker.getJobIdsForGroup("known-files")) == 0, "no listing job"
    read = spark.read.schema("id long, k long").parquet(*map(str, paths))
    assert sorted(frame.where("k = 3").collect()) == sorted(read.where("k = 3").collect())
    assert frame.count() == 4000

    def named(df: Any) -> set[str]:
        return {r.f for r in df.select(F.col("_metadata.file_path").alias("f")).distinct().collect()}

    assert named(frame) == named(read) and len(named(frame)) == 40


def test_auto_whose_write_finds_late_rows_commits_nothing_and_runs_aligned_to_the_aligned_runs_rows(
    spark: SparkSession, dataset: Dataset, tmp_path: Path
) -> None:
    """``auto`` leaves the proof that no row was late to the bounded write's own observation
    (no pass of its own). With an 8-minute watermark some of the dataset's late events (up to
    10 minutes) were late live: the write finds them before its commit, removes its files, and
    the run goes on aligned, writing what an aligned run writes, dropped rows and all (a drift
    of 1m keeps the aligned run's own lateness guard satisfied: 1m + the files' 6m43s span)."""
    from spark_app.apps.mode_choice import MODE_FILE
    from spark_app.sinks.iceberg import batch_tags

    late = {"pipelineArgs": {"lateness": "8 minutes"}, "drift": "1m"}
    cfg = into_iceberg(rmi(dataset, tmp_path / "auto", "auto", **late), "marts.auto_late")
    report = run(cfg, spark)
    choice = report.mode_choice
    assert choice is not None and choice.mode == "aligned", choice
    assert "arrived behind the live watermark (source" in choice.reason and not choice.proving, choice.reason
    assert report.batches > 1, "the streaming run's micro-batches"
    assert '"mode": "aligned"' in (tmp_path / "auto" / "ckpt" / MODE_FILE).read_text(), "a restart runs aligned"
    table = dataset.catalog().load_table("marts.auto_late")
    state = BoundedState.from_json((tmp_path / "auto" / "ckpt" / STATE_FILE).read_bytes())
    bounded_write = batch_tags.tag(state.query_ids["attributed_plays"], 0)
    data = Path(table.location().removeprefix("file://")) / "data"
    assert not [d for d in data.iterdir() if d.name.startswith(bounded_write)], "the bounded write's files removed"
    reference = into_iceberg(rmi(dataset, tmp_path / "aligned", "aligned", **late), "marts.aligned_late")
    run(reference, spark)
    assert branch_rows(dataset, cfg, "marts.auto_late") == branch_rows(dataset, reference, "marts.aligned_late")
