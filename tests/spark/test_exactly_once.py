"""Exactly-once through a SIGKILL of the driver: the restarted backfill's output equals an
uninterrupted run's, row for row (no loss, no duplicate).

The driver (Python process and its JVM) is killed as a process group after a few batches
committed; the restart resumes from the checkpoint: the same offsets re-plan the same
splits, Spark re-runs the uncommitted batch, and the file sink's log keeps what committed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_app.apps.run import run
from tests.spark.conftest import T0, Dataset, sources

pytestmark = pytest.mark.spark

COLUMNS = ["playback_id", "impression_id", "profile_id", "title_id", "impression_ts", "playback_ts", "duration_s"]


def _config(dataset: Dataset, tmp: Path):  # type: ignore[no-untyped-def]
    return dataset.config(
        tmp,
        name="rmi-kill",
        mode="backfill",
        master="local[2]",
        sink_time_column="playback_ts",
        sparkConf={"spark.sql.shuffle.partitions": "2", "spark.ui.showConsoleProgress": "false"},
        sources=sources("icebergBackfill", split={"maxBundleSpan": "2m"}),
        window={
            "start": (T0 + timedelta(minutes=40)).isoformat(),
            "end": (T0 + timedelta(minutes=80)).isoformat(),
            "warmup": "30m",
        },
        alignment={"maxDrift": "6m"},  # a dozen batches: the kill after 3 lands mid-run
    )


def _spawn(config_path: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    return subprocess.Popen(
        [sys.executable, "-m", "spark_app", "--config", str(config_path)],
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


def _commits(ckpt: Path) -> int:
    d = ckpt / "attributed_plays" / "commits"
    return len([p for p in d.iterdir() if p.name.isdigit()]) if d.exists() else 0


def test_sigkill_mid_run_then_restart_gives_exactly_the_uninterrupted_output(
    spark: SparkSession, dataset: Dataset, tmp_path: Path
) -> None:
    killed_dir = tmp_path / "killed"
    cfg = _config(dataset, killed_dir)
    killed_dir.mkdir()
    cfg_path = killed_dir / "job.json"
    cfg_path.write_text(cfg.to_json())
    log = killed_dir / "driver.log"

    proc = _spawn(cfg_path, log)
    deadline = time.monotonic() + 240
    while _commits(killed_dir / "ckpt") < 3:
        assert proc.poll() is None, f"driver ended before the kill: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, "no progress within 240 s"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    committed_at_kill = _commits(killed_dir / "ckpt")

    restarted = _spawn(cfg_path, log)
    assert restarted.wait(timeout=600) == 0, log.read_text()[-3000:]

    reference_dir = tmp_path / "reference"
    reference = run(_config(dataset, reference_dir), spark)
    assert reference.dropped_by_watermark == 0
    total_batches = _commits(reference_dir / "ckpt")
    assert committed_at_kill < total_batches, "the kill must land mid-run"

    def out(d: Path) -> list[tuple[object, ...]]:
        df = spark.read.parquet(str(d / "out"))
        return sorted(tuple(r) for r in df.select(*COLUMNS).collect())

    expected = out(reference_dir)
    assert len(expected) > 50
    assert out(killed_dir) == expected
    assert _commits(killed_dir / "ckpt") == total_batches, "the restart replays the same batches"
