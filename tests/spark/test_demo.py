"""`kappa demo --hours 1` end to end, in-process on the session's SparkSession: the summary's
numbers must agree with the tables the run left behind (read here independently with
pyiceberg), and the plots must be real pictures of the series written beside them."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from matplotlib.image import imread
from pandas.api.types import is_datetime64_any_dtype as is_datetime
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from pyspark.sql import SparkSession
from rich.console import Console

from kappa_operator.demo import DemoSettings, run_demo
from kappa_operator.demo.jobs import RMI_TABLE, START
from kappa_operator.demo.story import BACKFILL
from spark_app.contract.trace import read_trace
from spark_app.sinks.iceberg.window import TimeWindow

pytestmark = pytest.mark.spark

KEY = ("playback_id", "impression_id")


@dataclass(frozen=True)
class Demo:
    summary: dict[str, Any]
    out: Path
    console: str
    settings: DemoSettings

    def catalog(self) -> SqlCatalog:
        return SqlCatalog("default", **self.settings.catalog_props)


@pytest.fixture(scope="module")
def demo(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Demo:
    settings = DemoSettings(out=tmp_path_factory.mktemp("demo") / "out", hours=1.0)
    console = Console(file=io.StringIO(), width=100)
    summary = run_demo(settings, console, spark)
    assert isinstance(console.file, io.StringIO)
    return Demo(summary, settings.out, console.file.getvalue(), settings)


def keys(table: Table, window: TimeWindow, ref: str | int) -> set[tuple[Any, ...]]:
    snapshot = ref if isinstance(ref, int) else table.snapshot_by_name(ref).snapshot_id  # type: ignore[union-attr]
    return {tuple(r[k] for k in KEY) for r in window.rows(table, snapshot).select(list(KEY)).to_pylist()}


def rows(table: Table, ref: str | int, window: TimeWindow | None = None) -> list[tuple[Any, ...]]:
    snapshot = ref if isinstance(ref, int) else table.snapshot_by_name(ref).snapshot_id  # type: ignore[union-attr]
    data = window.rows(table, snapshot) if window else table.scan(snapshot_id=snapshot).to_arrow()
    return sorted(tuple(r.values()) for r in data.to_pylist())


def test_summary_numbers_agree_with_the_tables(demo: Demo) -> None:
    s = demo.summary
    catalog = demo.catalog()
    start, end = demo.settings.window
    window = TimeWindow("playback_ts", start, end)
    plays = catalog.load_table(RMI_TABLE)
    bf, un, pub, out = s["backfill"], s["unaligned"], s["publish"], s["outage"]

    # the data: 4x skew, and the live job read every row of both tables
    impressions = catalog.load_table("demo.impressions").scan().to_arrow().num_rows
    playbacks = catalog.load_table("demo.playbacks").scan().to_arrow().num_rows
    assert (s["data"]["impressions"], s["data"]["playbacks"]) == (impressions, playbacks) == (4000, 1000)
    assert s["live"]["input_rows"] == impressions + playbacks
    # the seeded generator (DemoSettings, 1 h): the same data on every machine, so exact counts
    assert s["data"]["late_events"] == 94

    # the clean replay is main before the outage; the outage removed or corrupted all of its window
    clean = keys(plays, window, out["clean_snapshot"])
    assert len(clean) == out["clean_rows_in_window"] == out["missing_rows"] + out["corrupted_rows"] == 144
    assert (out["missing_rows"], out["corrupted_rows"]) == (65, 79), "down for the first half, then wrong"

    # the branch holds exactly the clean replay's rows; what was published is what the branch holds
    branch = keys(plays, window, bf["branch"])
    assert branch == clean
    assert pub["rows_added"] == len(branch) == bf["output_rows"] == bf["vs_clean_replay"]["rows"]
    assert pub["rows_removed"] == out["corrupted_rows"]
    assert bf["vs_clean_replay"]["match_ratio"] == 1.0 == bf["vs_clean_replay"]["matched"] / len(clean)
    assert rows(plays, bf["branch"], window) == rows(plays, out["clean_snapshot"], window)

    # main after publish equals the live output before the outage, row for row, everywhere
    assert rows(plays, "main") == rows(plays, out["clean_snapshot"])
    assert pub["main_vs_clean_replay_table"]["match_ratio"] == 1.0
    assert pub["main_vs_clean_replay_table"]["rows"] == s["live"]["output_rows"] == len(rows(plays, "main"))

    # alignment: no late drops, bounded state, throughput from the run's own clock
    assert bf["dropped_by_watermark"] == 0 and s["live"]["dropped_by_watermark"] == 0
    assert 0 < bf["peak_state_rows"] <= un["peak_state_rows"]
    assert bf["event_hours_per_wall_hour"] == pytest.approx(
        (end - start).total_seconds() / bf["seconds"], rel=0.01, abs=0.1
    )
    assert_admissions_obeyed_the_bound(demo, bf)
    assert keys(plays, window, un["branch"]) == clean, "unordered drops nothing either (one batch)"
    # each file decoded once: the aligned run reads its files over many batches, and decodes
    # exactly the rows the one-batch run does (later slices come from the first read's rows)
    assert bf["scanned_rows"] == un["scanned_rows"] and bf["reused_rows"] > 0 == un["reused_rows"]

    # the rewind restored a batch from before the outage, and its output equals a clean run's
    rw = s["rewind"]
    assert datetime.fromisoformat(rw["restored_batch_committed_at"]) < datetime.fromisoformat(rw["outage_started"])
    assert rw["restored_source_snapshot"] == rw["last_good_source_snapshot"]
    assert rw["resumed_at_batch"] == rw["restored_batch"] + 1
    assert rw["undone_batches"] and min(rw["undone_batches"]) > rw["restored_batch"]
    assert rw["bad_rows_before_rewind"] == 28
    columns = ["profile_id", "session_start", "session_end", "plays", "watch_s", "first_play_ts", "last_play_ts"]
    rewound = catalog.load_table("rewind.sessions").scan().to_arrow().select(columns).to_pylist()
    reference = catalog.load_table("rewind.sessions_clean").scan().to_arrow().select(columns).to_pylist()
    assert sorted(tuple(r.values()) for r in rewound) == sorted(tuple(r.values()) for r in reference)
    assert len(rewound) == rw["sessions_rows"] == rw["clean_rows"] == 99

    assert all(c["ok"] for c in s["checks"]), s["checks"]
    assert json.loads((demo.out / "summary.json").read_text())["checks"] == s["checks"]


def assert_admissions_obeyed_the_bound(demo: Demo, bf: dict[str, Any]) -> None:
    """The summary's alignment counts are the aligned run's own trace and coordinator exchanges,
    and every admission obeyed the alignment rule: each admitted split starts at or below the
    bound the coordinator gave (global watermark + maxDrift), and a throttled decision left
    splits for later. In the demo both sources are one query, so the count of reports is exact:
    each decision reports its watermark to get its bound, and reports again when it admitted
    something or was held (``IcebergSource.latestOffset``)."""
    decisions = read_trace(demo.settings.job_dir(BACKFILL) / "trace.jsonl", "admission")
    assert bf["admission_decisions"] == len(decisions) == 24, "seed 7, 1 h: 12 rounds of the two sources"
    assert bf["throttled_decisions"] == sum(d["throttled"] for d in decisions) == 17
    for d in decisions:
        if d["bound"] is None:  # every member finished: nothing is held any more
            assert d["end"] == d["total"], d
            continue
        assert all(lower <= d["bound"] for lower, _, _ in d["admitted"]), d
        assert not d["throttled"] or d["end"] < d["total"], d
    reported_again = sum(1 for d in decisions if d["throttled"] or d["end"] > d["start"])
    assert bf["coordinator_reports"] == len(decisions) + reported_again


def micros(df: pd.DataFrame, columns: list[str]) -> set[tuple[Any, ...]]:
    """Rows as tuples, timestamps as integer microseconds (pandas and Spark agree on those)."""
    out = pd.DataFrame(
        {c: df[c].astype("datetime64[us]").astype("int64") if is_datetime(df[c]) else df[c] for c in columns}
    )
    return {tuple(int(v) for v in r) for r in out.itertuples(index=False)}


def naive(iso: str) -> pd.Timestamp:
    return pd.Timestamp(datetime.fromisoformat(iso).astimezone(UTC).replace(tzinfo=None))


def test_windows_and_sessions_backfills_agree_with_batch(demo: Demo, spark: SparkSession) -> None:
    """Both shapes against an independent batch computation in pandas over the whole history:
    tumbling 10-minute windows per title, and per-profile sessions split by a 10-minute gap."""
    sh = demo.summary["shapes"]
    w, win, ses = sh["window"], sh["windows"], sh["sessions"]
    start, end = naive(w["start"]), naive(w["end"])
    gap = pd.Timedelta(minutes=10)
    history = (naive(START.isoformat()), naive((START + timedelta(hours=demo.settings.hours)).isoformat()))
    # in the middle: history before the warm-up, and after the drain
    assert (w["warmup"], w["lateness"], w["drain"]) == ("10m", "10m", "20m")
    assert history[0] < start - gap and end + 2 * gap < history[1]
    assert win["drain"] == ses["drain"] == w["drain"]
    assert "time window of 10m" in win["state_horizon"] and "session gap of 10m" in ses["state_horizon"]
    assert win["dropped_by_watermark"] == ses["dropped_by_watermark"] == 0
    # alignment.mode auto: windows and sessions run as one batch query each, the aligned run's
    # open/written rule applied (tests/spark/test_window_edges.py compares the two row for row)
    assert win["alignment_mode"] == ses["alignment_mode"] == "bounded", (win, ses)
    assert "no row is late" in win["lateness_guard"]

    plays = demo.catalog().load_table("demo.playbacks").scan().to_arrow().drop_columns(["__metadata__"]).to_pandas()

    # windows: exactly the batch's, each counted from the plays
    cols = ["window_start", "title_id", "plays", "watch_s"]
    p = plays.assign(window_start=plays["event_ts"].dt.floor("10min"))
    p = p[(p["window_start"] >= start) & (p["window_start"] < end)]
    expected = p.groupby(["window_start", "title_id"], as_index=False).agg(
        plays=("playback_id", "size"), watch_s=("duration_s", "sum")
    )
    written = spark.read.parquet(win["path"]).toPandas()
    assert (written["window_end"] - written["window_start"] == gap).all()
    assert micros(written, cols) == micros(expected, cols)
    assert len(written) == len(expected) == win["rows"] == win["batch_rows"] == win["matched"] > 50
    assert win["final"] is True and win["open_reported"] == 0 and win["match_ratio"] == 1.0

    # sessions: a part of the batch's; every one missing is one the run reported still open
    p = plays.sort_values(["profile_id", "event_ts"])
    step = p.groupby("profile_id")["event_ts"].diff()
    p = p.assign(session=(step.isna() | (step >= gap)).cumsum())
    all_sessions = p.groupby("session", as_index=False).agg(
        profile_id=("profile_id", "first"),
        session_start=("event_ts", "min"),
        last_play_ts=("event_ts", "max"),
        plays=("playback_id", "size"),
        watch_s=("duration_s", "sum"),
    )
    all_sessions["session_end"] = all_sessions["last_play_ts"] + gap
    in_window = all_sessions[(all_sessions["session_start"] >= start) & (all_sessions["session_start"] < end)]
    cols = ["profile_id", "session_start", "session_end", "plays", "watch_s", "last_play_ts"]
    expected_s, written_df = micros(in_window, cols), spark.read.parquet(ses["path"]).toPandas()
    written_s = micros(written_df, cols)
    assert len(written_s) == len(written_df) == ses["rows"] == ses["matched"] > 20
    assert written_s <= expected_s and len(expected_s) == ses["batch_rows"]
    missing = expected_s - written_s
    assert len(missing) == ses["open_reported"] == ses["only_batch"] > 0, "seed 7 has sessions open at the end"
    # complete by default: the backfill read on past end + drain to where the history ends, and
    # the sessions still going on there are what stays open
    notice = next(n for n in ses["notices"] if "history ends" in n)
    assert f"{len(missing)} windows or sessions that start in the window stay open" in notice and ses["final"] is False
    # open: not closed by the watermark when reading stopped; every one written was
    watermark = naive(ses["last_watermark"]).value // 1000
    end_at = cols.index("session_end")
    assert all(r[end_at] > watermark for r in missing) and all(r[end_at] <= watermark for r in written_s)


def test_plots_are_real_pictures_of_the_series_beside_them(demo: Demo) -> None:
    for name in ("watermarks", "state"):
        path = demo.out / f"{name}.png"
        assert path.stat().st_size > 20_000, f"{path} is suspiciously small"
        image = imread(path)
        assert image.shape[0] >= 400 and image.shape[1] >= 800
        pixels = image[..., :3].reshape(-1, 3)
        assert float(pixels.std()) > 0.05, f"{path} is blank"
        assert len(np.unique((pixels * 255).astype(np.uint8), axis=0)) > 50, f"{path} has hardly any colours"

    series = json.loads((demo.out / "plots.json").read_text())
    s = demo.summary
    wm = series["watermarks"]
    assert set(wm["sources"]) == {"impressions", "playbacks"}
    assert all(len(points) >= 3 for points in wm["sources"].values())
    global_wm = [datetime.fromisoformat(p[1]) for p in wm["global"]]
    assert len(global_wm) >= 3 and global_wm == sorted(global_wm), "the global watermark never goes back"
    assert global_wm[-1] > global_wm[0]
    lags = [p[1] for points in wm["lag_minutes"].values() for p in points]
    assert lags and min(lags) >= 0 and max(lags) > 0
    assert sum(len(p) for p in wm["sources"].values()) <= s["backfill"]["coordinator_reports"]
    state = series["state"]
    assert max(p[1] for p in state["aligned"]) == s["backfill"]["peak_state_rows"]
    assert max(p[1] for p in state["unaligned"]) == s["unaligned"]["peak_state_rows"]
    assert max(p[1] for p in state["live"]) == s["live"]["peak_state_rows"]


def test_console_shows_the_table_and_every_check(demo: Demo) -> None:
    text = demo.console
    labels = ("rmi live", "backfill aligned", "backfill unordered", "sessions rewound", "windows backfill")
    for label in (*labels, "sessions backfill", "event-h/"):
        assert label in text
    for check in demo.summary["checks"]:
        assert f"ok {check['name']}" in text
    assert "FAILED" not in text and "✗" not in text
