"""Admission rounds merged into one micro-batch (``alignment.batchRowBudget``), real local Spark.

Each run against a reference run of the same backfill with one round per batch (which the
rest of the suite proves equal to the live run): same rows, no row dropped as late, fewer
batches. Shapes: the two-source stream-stream join (rmi) with and without a read limit that
cuts sources inside a round; two jobs (two queries) sharing one group through the HTTP
coordinator; the tumbling-windows pipeline into the exactly-once Iceberg sink, its driver
killed mid-backfill and restarted.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from kappa_operator.coordinator.server import EmbeddedCoordinator, Service
from spark_app.apps.run import run
from spark_app.contract.alignment import HELD, aligned_members
from spark_app.contract.config import JobConfig
from spark_app.contract.trace import read_trace
from spark_app.examples import windows
from spark_app.sinks.iceberg.writer import FAULT_ENV
from tests.spark.conftest import Dataset, Driver, sources
from tests.spark.test_backfill_levers import ROCKSDB, WINDOWS_KEY, branch_arrow, branch_rows, windows_backfill
from tests.spark.test_coordinator_alignment import TOKEN, WINDOW, copy_job, declare, output, run_together

pytestmark = pytest.mark.spark

DRIFT_US = 4 * 60 * 1_000_000


def rmi(dataset: Dataset, tmp: Path, name: str, budget: int, bundle: str = "2m", **extra: Any) -> JobConfig:
    """The reference's backfill (``rmi_config``) with a row budget; ``bundle`` 0s: one file a split."""
    return dataset.config(
        tmp,
        name=name,
        mode="backfill",
        sink_time_column="playback_ts",
        sources=sources("icebergBackfill", split={"maxBundleSpan": bundle}, **extra),
        window=WINDOW,
        alignment={"maxDrift": "4m", "batchRowBudget": budget},
    )


@pytest.fixture
def one_round(rmi_window_reference: tuple[list[tuple[Any, ...]], int]) -> tuple[list[tuple[Any, ...]], int]:
    """rmi over the same window, one round per batch (``conftest``): rows and batches."""
    return rmi_window_reference


def batches_of(trace: Path) -> list[list[dict[str, Any]]]:
    """Admission decisions grouped by micro-batch: each batch starts with its planner's."""
    out: list[list[dict[str, Any]]] = []
    for e in read_trace(trace, "admission"):
        if e["planner"] or not out:
            out.append([])
        out[-1].append(e)
    return out


def assert_no_row_late(trace: Path) -> None:
    """Every split admitted in a later batch starts at or after the newest upper bound admitted
    before it minus (maxDrift + the largest split span): what the lateness guard requires."""
    span = max(e["max_span_us"] for e in read_trace(trace, "plan"))
    newest = None
    for batch in batches_of(trace):
        admitted = [s for e in batch for s in e["admitted"]]
        if not admitted:
            continue
        if newest is not None:
            assert min(lo for lo, _, _ in admitted) >= newest - DRIFT_US - span
        newest = max([newest or HELD] + [hi for _, hi, _ in admitted])


def test_merged_rounds_read_the_same_rows_in_fewer_batches(
    spark: SparkSession, dataset: Dataset, tmp_path: Path, one_round: tuple[list[tuple[Any, ...]], int]
) -> None:
    expected, single_batches = one_round
    report = run(rmi(dataset, tmp_path, "rounds-merged", 2_500), spark)
    assert report.dropped_by_watermark == 0
    assert output(spark, tmp_path) == expected and len(expected) > 50
    decisions = read_trace(tmp_path / "trace.jsonl", "admission")
    assert max(d["rounds"] for d in decisions) > 1, "some batches took several rounds"
    assert report.batches < single_batches, (report.batches, single_batches)
    assert_no_row_late(tmp_path / "trace.jsonl")
    for batch in batches_of(tmp_path / "trace.jsonl"):  # a plan is applied by every source of its batch
        assert len({d["rounds"] for d in batch}) == 1 and len(batch) == 2, batch


def test_a_read_limit_cutting_a_source_inside_a_round_keeps_the_output(
    spark: SparkSession, dataset: Dataset, tmp_path: Path, one_round: tuple[list[tuple[Any, ...]], int]
) -> None:
    expected, _ = one_round
    cfg = rmi(dataset, tmp_path, "rounds-capped", 10**6, bundle="0s", readLimit={"maxFiles": 2})
    report = run(cfg, spark)
    assert report.dropped_by_watermark == 0
    assert output(spark, tmp_path) == expected
    decisions = read_trace(tmp_path / "trace.jsonl", "admission")
    assert all(len(d["admitted"]) <= 2 for d in decisions), "the plan kept every source within its limit"
    assert any(d["rounds"] > 1 for d in decisions) and any(len(d["admitted"]) == 2 for d in decisions)
    assert_no_row_late(tmp_path / "trace.jsonl")


def test_two_jobs_in_one_group_merge_rounds_without_running_ahead_of_each_other(
    spark: SparkSession, dataset: Dataset, tmp_path: Path
) -> None:
    with EmbeddedCoordinator(Service(TOKEN)) as c:
        budget = {"group": "rounds", "batchRowBudget": 10**6, "bundle": "0s"}
        a = copy_job(dataset, tmp_path, "imp-rounds", "impressions", c, **budget)
        b = copy_job(dataset, tmp_path, "play-rounds", "playbacks", c, **budget)
        declare(c, "rounds", aligned_members(a) + aligned_members(b))
        run_together(spark, (a, b))
    merged = 0
    for name in ("imp-rounds", "play-rounds"):
        for d in read_trace(tmp_path / name / "trace.jsonl", "admission"):
            merged += d["rounds"] > 1
            # the other job's member does not move within this batch: rounds stop at its
            # watermark + maxDrift, so no job runs further ahead of the other than that
            if d["admitted"] and d["outside"] not in (None, HELD):
                assert max(lo for lo, _, _ in d["admitted"]) <= max(d["outside"] + DRIFT_US, d["bound"]), d
    assert merged > 0, "some batches merged rounds"
    counts = {n: spark.read.parquet(str(tmp_path / n / "out")).count() for n in ("imp-rounds", "play-rounds")}
    assert counts["imp-rounds"] > 3 * counts["play-rounds"] > 0  # 4x skew, both read to the end


def test_a_backfill_killed_mid_run_on_rocksdb_state_with_merged_rounds_resumes_to_the_same_output(
    spark: SparkSession, dataset: Dataset, tmp_path: Path
) -> None:
    """The rounds record is per query run: the restarted driver plans afresh from its
    checkpoint's offsets, and the replayed batch is the one the checkpoint logged. The killed
    run keeps its state in RocksDB with changelog checkpointing (both levers at once); the
    reference run, uninterrupted, in the default store."""
    budget = {"maxDrift": "4m", "batchRowBudget": 300}  # ~1.4k rows in the window: ~5 batches
    reference_cfg = windows_backfill(dataset, tmp_path / "reference", "out.rounds_reference", alignment=budget)
    report = run(reference_cfg, spark)
    assert report.dropped_by_watermark == 0
    expected = branch_rows(dataset, "out.rounds_reference", reference_cfg.sink_branch(windows.OUTPUT))
    trace = read_trace(tmp_path / "reference" / "trace.jsonl")
    assert max(e["rounds"] for e in trace if e["event"] == "admission") > 1
    writes = [e["batch"] for e in trace if e["event"] == "commit" and e.get("files") and e["batch"] > 0]
    assert len(writes) >= 3, "the backfill commits output in several batches"

    cfg = windows_backfill(
        dataset, tmp_path / "killed", "out.rounds_killed", alignment=budget, master="local[2]",
        sparkConf={**ROCKSDB, "spark.ui.showConsoleProgress": "false"},
    )  # fmt: skip
    driver = Driver(cfg, tmp_path)
    kill_at = writes[len(writes) // 2]
    killed = driver.run(**{FAULT_ENV: f"kill-after-commit:{kill_at}"})
    assert killed.returncode == -9, driver.tail()
    ckpt = tmp_path / "killed" / "ckpt" / windows.OUTPUT
    assert (ckpt / "offsets" / str(kill_at)).exists() and not (ckpt / "commits" / str(kill_at)).exists()
    assert any((ckpt / "state").rglob("*.changelog")), "the state is RocksDB's, checkpointed as changelogs"
    assert driver.run().returncode == 0, driver.tail()
    replays = [e for e in read_trace(tmp_path / "killed" / "trace.jsonl") if e["event"] == "commit"]
    assert [e["skipped"] for e in replays if e["batch"] == kill_at] == [False, True], "replayed and skipped"
    arrow = branch_arrow(dataset, "out.rounds_killed", cfg.sink_branch(windows.OUTPUT))
    keys = Counter(zip(*(arrow[k].to_pylist() for k in WINDOWS_KEY), strict=True))
    assert max(keys.values()) == 1, "no window written twice"
    assert branch_rows(dataset, "out.rounds_killed", cfg.sink_branch(windows.OUTPUT)) == expected
    assert_no_row_late(tmp_path / "killed" / "trace.jsonl")
