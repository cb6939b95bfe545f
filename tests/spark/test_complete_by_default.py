"""Complete by default (issue 29 item 7): a session-window backfill reads on past end + drain
while sessions that start in the window are still open and the history goes on, so every
session is written, equal to a batch computation over the whole history; when the history ends
first, the notice names where it ends instead of asking for more drain.

The table is written by hand so the sessions are known: profile ``long`` plays every 5 minutes
from 02:10 to ``long_until`` (one session that starts in the window [02:00, 03:00) and outlives
the default drain, watermark delay 30m + gap 10m, by far); ``short`` plays twice; ``clock``
plays every 15 minutes through the whole history (single-play sessions, closed quickly).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import SparkSession

from spark_app.apps.run import run
from spark_app.contract.config import parse_config
from spark_app.examples import reference, sessions

pytestmark = pytest.mark.spark

DAY = datetime(2026, 11, 1, tzinfo=UTC)
PROFILE, SESSION_END = 3, 4  # in rows sorted by column name (reference.rows)
START, END = DAY + timedelta(hours=2), DAY + timedelta(hours=3)


def at(hours: int, minutes: int = 0) -> datetime:
    return DAY + timedelta(hours=hours, minutes=minutes)


def plays(history_end: datetime, long_until: datetime) -> list[tuple[str, datetime]]:
    out = [("short", at(2, 20)), ("short", at(2, 25))]
    t = at(2, 10)
    while t <= long_until:
        out.append(("long", t))
        t += timedelta(minutes=5)
    t = at(0)
    while t <= history_end:
        out.append(("clock", t))
        t += timedelta(minutes=15)
    return sorted((p for p in out if p[1] <= history_end), key=lambda p: p[1])


def write_table(root: Path, rows: list[tuple[str, datetime]]) -> dict[str, str]:
    """One commit per 30 minutes of event time, as an ingestion job would write them."""
    root.mkdir(parents=True)
    props = {"uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}
    catalog = SqlCatalog("default", **props)
    catalog.create_namespace("demo")
    schema = pa.schema(
        [
            ("playback_id", pa.string()),
            ("profile_id", pa.string()),
            ("event_ts", pa.timestamp("us")),
            ("duration_s", pa.int64()),
        ]
    )
    table = catalog.create_table("demo.playbacks", schema)
    by_half_hour: dict[int, list[int]] = {}
    for i, (_, ts) in enumerate(rows):
        by_half_hour.setdefault(int((ts - DAY).total_seconds()) // 1800, []).append(i)
    for idx in sorted(by_half_hour):
        chunk = [rows[i] for i in by_half_hour[idx]]
        table.append(
            pa.table(
                {
                    "playback_id": [f"{p}-{ts.isoformat()}" for p, ts in chunk],
                    "profile_id": [p for p, _ in chunk],
                    "event_ts": [ts.replace(tzinfo=None) for _, ts in chunk],
                    "duration_s": [60] * len(chunk),
                },
                schema=schema,
            )
        )
    return props


def backfill(props: dict[str, str], tmp: Path, **window: Any) -> Any:
    cfg = parse_config(
        {
            "name": "complete",
            "pipeline": "spark_app.examples.sessions:pipeline",
            "mode": "backfill",
            "catalogs": {"default": {"type": "sql", **props}},
            "sources": {"playbacks": {"kind": "icebergBackfill", "table": "demo.playbacks"}},
            "sinks": {"sessions": {"kind": "parquet", "path": str(tmp / "out"), "timeColumn": "session_start"}},
            "checkpoint": {"location": str(tmp / "ckpt")},
            "window": {"start": START.isoformat(), "end": END.isoformat(), "warmup": "30m", **window},
            "alignment": {"mode": "aligned", "maxDrift": "5m"},
        }
    )
    return cfg


def expected(spark: SparkSession, props: dict[str, str]) -> list[tuple[Any, ...]]:
    history = reference.history(spark, SqlCatalog("default", **props).load_table("demo.playbacks"))
    return reference.in_window(sessions.pipeline({"playbacks": history})[sessions.OUTPUT], "session_start", START, END)


def test_sessions_outliving_the_drain_are_read_to_their_end(spark: SparkSession, tmp_path: Path) -> None:
    props = write_table(tmp_path / "table", plays(history_end=at(6), long_until=at(4, 30)))
    report = run(backfill(props, tmp_path), spark)
    got = reference.rows(spark.read.parquet(str(tmp_path / "out")))
    want = expected(spark, props)
    longest = [r for r in want if r[PROFILE] == "long"]
    end = longest[0][SESSION_END].replace(tzinfo=None)
    assert end > (END + timedelta(minutes=40)).replace(tzinfo=None), "precondition: a session outlives end + drain"
    assert got == want
    assert report.final and report.summary()["final"] is True
    assert report.edges.open_results == 0
    assert (tmp_path / "ckpt" / "drain-extensions.json").exists(), "it read on past end + drain"


def test_max_drain_bounds_the_reading_on(spark: SparkSession, tmp_path: Path) -> None:
    props = write_table(tmp_path / "table", plays(history_end=at(6), long_until=at(4, 30)))
    report = run(backfill(props, tmp_path, maxDrain="50m"), spark)
    assert not report.final
    notice = next(n for n in report.edges.notices if "maxDrain" in n)
    assert notice.startswith("not yet final: 1 windows or sessions") and "(50m)" in notice


def test_history_ending_first_is_named_in_the_notice(spark: SparkSession, tmp_path: Path) -> None:
    props = write_table(tmp_path / "table", plays(history_end=at(4), long_until=at(4, 30)))
    report = run(backfill(props, tmp_path), spark)
    assert not report.final and report.edges.open_results == 1
    notice = next(n for n in report.edges.notices if "history ends" in n)
    assert f"history ends at {at(4).isoformat()}" in notice
    assert "raise window.drain" not in " ".join(report.edges.notices)
    got = reference.rows(spark.read.parquet(str(tmp_path / "out")))
    assert got == [r for r in expected(spark, props) if r[PROFILE] != "long"]  # all but the open one


def test_the_output_window_is_never_pushed_below_the_session_aggregate(spark: SparkSession, tmp_path: Path) -> None:
    """The sink's window restriction keeps sessions by their start; pushed below the aggregate,
    Spark would filter the plays instead and cut the long session at the window's end."""
    from spark_app.sinks.warmup import restrict_to_window
    from spark_app.sources.iceberg.spec import micros

    props = write_table(tmp_path / "table", plays(history_end=at(6), long_until=at(4, 30)))
    history = reference.history(spark, SqlCatalog("default", **props).load_table("demo.playbacks"))
    out = restrict_to_window(
        sessions.pipeline({"playbacks": history})[sessions.OUTPUT], "session_start", micros(START), micros(END)
    )
    assert reference.rows(out) == expected(spark, props)
    assert "rand(0)" in out._jdf.queryExecution().optimizedPlan().toString().split("Aggregate")[0]


def test_a_kill_while_reading_on_resumes_the_same_plan(spark: SparkSession, tmp_path: Path) -> None:
    """Killed (SIGKILL, the driver's whole process group) once the first extension past
    end + drain is recorded, a restarted run reads on from the same plan: the same sessions as
    the batch computation, final."""
    import os
    import signal
    import subprocess
    import sys
    import time

    props = write_table(tmp_path / "table", plays(history_end=at(6), long_until=at(4, 30)))
    cfg = backfill(props, tmp_path)
    (tmp_path / "job.json").write_text(cfg.to_json())
    log = tmp_path / "driver.log"

    def spawn() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "spark_app", "--config", str(tmp_path / "job.json")],
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable},
            start_new_session=True,
        )

    proc = spawn()
    recorded = tmp_path / "ckpt" / "drain-extensions.json"
    deadline = time.monotonic() + 300
    while not recorded.exists():
        assert proc.poll() is None, f"ended before reading on: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, "no extension within 300 s"
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert spawn().wait(timeout=600) == 0, log.read_text()[-3000:]
    assert reference.rows(spark.read.parquet(str(tmp_path / "out"))) == expected(spark, props)
