"""A backfill's edges with real Spark: windows and sessions that close after the window's
end are emitted (drain), a too-short warm-up is refused, a configured source the pipeline
does not read holds nobody, and a history that does not reach far enough is reported.

Every expectation is a *batch* computation of the same pipeline over the whole history,
restricted to the window: what a live job that kept reading would have written.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from spark_app.apps.result import RunResult
from spark_app.apps.run import run
from spark_app.contract.errors import ConfigError, WarmupError
from spark_app.examples import reference, sessions, windows
from tests.spark.conftest import T0, Dataset, sources

pytestmark = pytest.mark.spark

# In the middle of two hours of history: 30 min of history before, 50 min after.
START, END = T0 + timedelta(minutes=30), T0 + timedelta(minutes=70)
SPLIT = {"maxBundleSpan": "2m"}


def history(spark: SparkSession, dataset: Dataset, table: str) -> DataFrame:
    return reference.history(spark, dataset.catalog().load_table(table))


def in_window(df: DataFrame, column: str) -> list[tuple[Any, ...]]:
    return reference.in_window(df, column, START, END)


def backfill(
    spark: SparkSession,
    dataset: Dataset,
    tmp: Path,
    module: Any,
    names: tuple[str, ...] = ("playbacks",),
    **fields: Any,
) -> RunResult:
    window = fields.pop("window", {"start": START.isoformat(), "end": END.isoformat(), "warmup": "10m"})
    cfg = dataset.config(
        tmp,
        name=fields.pop("name", "edges"),
        pipeline=f"{module.__name__}:pipeline",
        output=module.OUTPUT,
        mode="backfill",
        sink_time_column=module.TIME_COLUMN,
        sources=sources("icebergBackfill", names, split=SPLIT),
        window=window,
        alignment=fields.pop("alignment", {"maxDrift": "4m"}),
        **fields,
    )
    return run(cfg, spark)


def written(spark: SparkSession, tmp: Path) -> list[tuple[Any, ...]]:
    return reference.rows(spark.read.parquet(str(tmp / "out")))


def bounded_does_what_aligned_did(
    spark: SparkSession, dataset: Dataset, tmp: Path, module: Any, aligned: RunResult, **fields: Any
) -> None:
    """The open/written rule in one batch query (``alignment.mode: bounded``, which ``auto``
    picks for windows and sessions): the results whose end the final watermark passed are
    written, row for row the aligned run's in ``tmp``; those still open are counted the same,
    read on as far (the same extensions), and named in the same notices."""
    bounded = backfill(spark, dataset, tmp / "one-query", module, alignment={"mode": "bounded"}, name="b", **fields)
    assert written(spark, tmp / "one-query") == written(spark, tmp)
    assert bounded.batches == 1 and aligned.batches > 1
    assert aligned.edges is not None and bounded.edges is not None
    assert bounded.edges.open_results == aligned.edges.open_results
    assert bounded.extended_to == aligned.extended_to and bounded.final == aligned.final
    assert bounded.edges.notices == aligned.edges.notices
    assert bounded.summary()["last_watermark"] == aligned.summary()["last_watermark"]


def test_windows_closing_after_the_end_are_emitted(spark: SparkSession, dataset: Dataset, tmp_path: Path) -> None:
    report = backfill(spark, dataset, tmp_path, windows)
    plays = history(spark, dataset, "demo.playbacks")
    expected = in_window(windows.pipeline({"playbacks": plays})[windows.OUTPUT], windows.TIME_COLUMN)
    assert len(expected) > 100
    assert written(spark, tmp_path) == expected
    assert report.dropped_by_watermark == 0
    # lateness 30m + the window's 10m: the read went on 40m past the end
    assert report.edges is not None and report.edges.drain == timedelta(minutes=40)
    assert report.final and report.summary()["final"] is True
    bounded_does_what_aligned_did(spark, dataset, tmp_path, windows, report)


def test_sessions_are_emitted_or_counted_as_open(spark: SparkSession, dataset: Dataset, tmp_path: Path) -> None:
    """Sessions closing within the drain (lateness 30m + gap 10m) are written exactly; a
    session that chains on longer is read on (complete by default) until the history ends, and
    one still open there is not written: the report counts it and names the history's end, so
    nothing is lost silently. With ``maxDrain`` the reading on stops there instead."""
    report = backfill(spark, dataset, tmp_path, sessions)
    plays = history(spark, dataset, "demo.playbacks")
    expected = in_window(sessions.pipeline({"playbacks": plays})[sessions.OUTPUT], sessions.TIME_COLUMN)
    got = written(spark, tmp_path)
    assert len(got) > 100 and set(got) <= set(expected)
    assert report.edges is not None and report.edges.drain == timedelta(minutes=40)
    history_end = report.edges.history_end
    assert history_end is not None and history_end > END + report.edges.drain, "precondition: history to read on"
    cols = sorted(["profile_id", "session_start", "session_end", "plays", "watch_s", "first_play_ts", "last_play_ts"])
    # open: their last play is within the gap of the history's end (the watermark's lag aside)
    long_ones = [
        r for r in set(expected) - set(got) if r[cols.index("session_end")] > history_end - timedelta(minutes=30)
    ]
    assert len(long_ones) == len(expected) - len(got), "every session not written is one still open"
    assert report.edges.open_results == len(long_ones)
    if long_ones:
        assert not report.final
        notice = next(n for n in report.edges.notices if "history ends" in n)
        assert (
            f"history ends at {history_end.isoformat()}" in notice and f"{len(long_ones)} windows or sessions" in notice
        )
    bounded_does_what_aligned_did(spark, dataset, tmp_path, sessions, report)
    # capped: reading stops at end + drain, and the sessions open there are counted, naming maxDrain
    capped = {"start": START.isoformat(), "end": END.isoformat(), "warmup": "10m", "maxDrain": "40m"}
    stopped = backfill(spark, dataset, tmp_path / "capped", sessions, window=capped)
    got_bounded = set(written(spark, tmp_path / "capped"))
    assert got_bounded <= set(got)
    assert stopped.edges is not None and len(expected) - len(got_bounded) == stopped.edges.open_results
    if stopped.edges.open_results:
        assert any("window.maxDrain (40m)" in n for n in stopped.edges.notices)


def test_without_the_drain_the_last_results_are_lost(spark: SparkSession, dataset: Dataset, tmp_path: Path) -> None:
    """What the drain fixes: stopping at the end (drain 0) leaves the windows that close after
    it in state, and they are never written."""
    window = {"start": START.isoformat(), "end": END.isoformat(), "warmup": "10m", "drain": "0s"}
    aligned = backfill(spark, dataset, tmp_path, windows, window=window)
    bounded_does_what_aligned_did(spark, dataset, tmp_path, windows, aligned, window=window)
    expected = in_window(
        windows.pipeline({"playbacks": history(spark, dataset, "demo.playbacks")})[windows.OUTPUT], windows.TIME_COLUMN
    )
    got = written(spark, tmp_path)
    missing = set(expected) - set(got)
    assert missing and set(got) <= set(expected)
    start_at = sorted(["window_start", "window_end", "title_id", "plays", "watch_s"]).index("window_start")
    # lost: the windows the watermark (30m behind the last event read) had not passed
    assert min(r[start_at] for r in missing) >= END - timedelta(minutes=40)


def test_an_unused_configured_source_holds_nobody(
    spark: SparkSession, dataset: Dataset, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """windows reads playbacks only; impressions is configured too. It used to be declared a
    member, hold the group at -inf, and the run 'succeeded' with nothing read."""
    with caplog.at_level(logging.WARNING, logger="spark_app.window.edges"):
        report = backfill(spark, dataset, tmp_path, windows, names=("impressions", "playbacks"))
    expected = in_window(
        windows.pipeline({"playbacks": history(spark, dataset, "demo.playbacks")})[windows.OUTPUT],
        windows.TIME_COLUMN,
    )
    assert written(spark, tmp_path) == expected and len(expected) > 20
    assert report.edges is not None and report.edges.unused == ("impressions",)
    assert any("source impressions is configured but no output reads it" in r.message for r in caplog.records)


@pytest.mark.parametrize(
    ("module", "warmup", "need", "why"),
    [
        (sessions, "2m", "10m", "session gap of 10m"),
        (windows, "0s", "10m", "time window of 10m"),
        (pytest.importorskip("spark_app.examples.rmi"), "10m", "30m", "range join bound of 30m"),
    ],
    ids=["sessions", "tumbling-windows", "range-join"],
)
def test_a_warmup_shorter_than_the_look_back_is_refused(
    spark: SparkSession, dataset: Dataset, tmp_path: Path, module: Any, warmup: str, need: str, why: str
) -> None:
    names = ("impressions", "playbacks") if module.OUTPUT == "attributed_plays" else ("playbacks",)
    window = {"start": START.isoformat(), "end": END.isoformat(), "warmup": warmup}
    with pytest.raises(WarmupError) as err:
        backfill(spark, dataset, tmp_path, module, names=names, window=window)
    msg = str(err.value)
    assert f"window.warmup is {warmup}" in msg and f"looks back {need}" in msg and why in msg
    assert f"Set window.warmup to at least {need}" in msg and "allowShortWarmup" in msg
    assert not (tmp_path / "out").exists(), "refused before anything was written"


def test_history_that_ends_too_soon_is_reported_not_final(
    spark: SparkSession, dataset: Dataset, tmp_path: Path
) -> None:
    end = T0 + timedelta(minutes=100)  # + drain 40m is past the last event (~2h)
    window = {"start": (T0 + timedelta(minutes=60)).isoformat(), "end": end.isoformat(), "warmup": "10m"}
    report = backfill(spark, dataset, tmp_path, windows, window=window)
    assert report.final is False
    notice = next(n for n in report.edges.notices if n.startswith("not yet final"))  # type: ignore[union-attr]
    assert (end + timedelta(minutes=40)).isoformat() in notice
    assert report.summary()["final"] is False


def test_a_window_the_history_does_not_hold_is_refused_before_anything_is_written(
    spark: SparkSession, dataset: Dataset, tmp_path: Path
) -> None:
    """Issue 44, case 2: it ended Succeeded at 100 % with 0 rows and no word."""
    later = {"start": (T0 + timedelta(days=2)).isoformat(), "end": (T0 + timedelta(days=2, hours=1)).isoformat()}
    with pytest.raises(ConfigError) as refused:
        backfill(spark, dataset, tmp_path, windows, window=later)
    text = str(refused.value)
    assert text.startswith("spec.window [") and " holds no history: source playbacks (demo.playbacks) holds " in text
    assert "set the window within the history" in text
    assert not (tmp_path / "out").exists() and not any((tmp_path / "ckpt").glob("*/commits/*")), "nothing written"


def test_a_window_the_history_covers_in_part_runs_and_says_what_is_missing(
    spark: SparkSession, dataset: Dataset, tmp_path: Path
) -> None:
    """Issue 44, case 3: only the publish gate's match ratio said it, and not at all with a
    lowered minMatchRatio. The part that is there is written as the full run writes it."""
    half = {
        "start": (T0 + timedelta(minutes=60)).isoformat(),
        "end": (T0 + timedelta(minutes=150)).isoformat(),
        "warmup": "10m",
    }
    report = backfill(spark, dataset, tmp_path, windows, window=half)
    (gap,) = [n for n in report.summary()["notices"] if "is not in its history" in n]
    assert gap.startswith("not yet final: source playbacks (demo.playbacks) holds ")
    assert "2026-" in gap and "run the backfill again once the history holds it" in gap
    assert report.final is False, "the run says it is not final: publish and status say so too"
    assert written(spark, tmp_path), "what the history holds of the window is written"
