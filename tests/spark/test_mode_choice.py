"""``alignment.mode: auto`` with real local Spark: the mode the plan and the run choose on each
example shape, and why. The same function decides in ``kappa plan`` and at the run's start
(``spark_app.apps.mode_choice.chosen``): bounded where the output is provably the aligned run's (a
stateless copy, an inner range join whose every row arrived before the live watermark passed
it, windows and sessions), aligned otherwise, naming the operator (a dedup, an aggregation
whose window end the output drops) or the late arrivals that the archive's ingestion time
shows (rmi with a watermark shorter than the dataset's 10-minute late events). A run keeps
what it chose: a restart does not choose again."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark_app.apps.mode_choice import MODE_FILE, decided
from spark_app.apps.run import run
from spark_app.contract.reports.run import read_report
from spark_app.planning.plan import decide_backfill
from tests.spark.conftest import T0, Dataset, sources

pytestmark = pytest.mark.spark

WINDOW = {"start": (T0 + timedelta(minutes=40)).isoformat(), "end": (T0 + timedelta(minutes=80)).isoformat()}


def auto(dataset: Dataset, tmp: Path, pipeline: str, output: str, time_column: str | None, **fields: Any) -> Any:
    names = fields.pop("names", ("impressions", "playbacks"))
    return dataset.config(
        tmp,
        name=fields.pop("name", "auto"),
        pipeline=pipeline,
        output=output,
        mode="backfill",
        sink_time_column=time_column,
        sources=sources("icebergBackfill", names, split={"maxBundleSpan": "2m"}),
        window={**WINDOW, "warmup": fields.pop("warmup", "30m")},
        alignment={"mode": "auto", "maxDrift": "4m"},
        **fields,
    )


@pytest.mark.parametrize(
    ("pipeline", "output", "time_column", "fields", "mode", "said"),
    [
        pytest.param(
            "spark_app.examples.rmi:pipeline", "attributed_plays", "playback_ts", {}, "bounded",
            "no row arrived behind the live watermark", id="range-join",
        ),
        pytest.param(
            "spark_app.examples.copy:pipeline", "copy", "event_ts", {"names": ("playbacks",)}, "bounded",
            "stateless steps", id="copy",
        ),
        pytest.param(
            "spark_app.examples.rmi:pipeline", "attributed_plays", "playback_ts",
            {"pipelineArgs": {"lateness": "3 minutes"}}, "aligned", "arrived behind the live watermark (source",
            id="late-arrivals",
        ),
        pytest.param(
            "spark_app.examples.windows:pipeline", "title_windows", "window_start", {"names": ("playbacks",)},
            "bounded", "windows and sessions written once the final watermark passed their end", id="windows",
        ),
        pytest.param(
            "spark_app.examples.sessions:pipeline", "sessions", "session_start",
            {"names": ("playbacks",), "warmup": "1h"}, "bounded", "windows and sessions written once", id="sessions",
        ),
        pytest.param(
            "tests.spark.test_mode_choice:top_titles", "top_titles", "window_start", {"names": ("playbacks",)},
            "aligned", "an aggregation whose window or session end is not in its output", id="window-end-dropped",
        ),
        pytest.param(
            "spark_app.examples.dedup:pipeline", "deduplicated", "event_ts",
            {"names": ("playbacks",), "pipelineArgs": {"key": "playback_id"}}, "aligned",
            "dropDuplicatesWithinWatermark", id="dedup",
        ),
    ],
)  # fmt: skip
def test_the_plan_names_the_mode_auto_picks_and_why(
    spark: SparkSession,
    dataset: Dataset,
    tmp_path: Path,
    pipeline: str,
    output: str,
    time_column: str,
    fields: dict[str, Any],
    mode: str,
    said: str,
) -> None:
    report = decide_backfill(auto(dataset, tmp_path, pipeline, output, time_column, **fields), spark)
    assert report.state == "Planned" and report.from_query_plan, report.error
    assert report.mode == mode and report.mode_reason is not None and said in report.mode_reason, report.mode_reason
    if mode == "bounded":
        assert report.expected_batches == 1 and report.peak_state_rows == 0


def test_late_arrivals_are_counted_from_the_archive_not_guessed(dataset: Dataset) -> None:
    """The other side of the rule, from the generated history itself: the rows whose arrival
    was more than 3 minutes after their event time exist (the dataset's late events reach 10
    minutes), and none more than 30 (the example's own watermark)."""
    table = dataset.catalog().load_table("demo.playbacks").scan().to_arrow()
    lag = [
        (m["ingestion_ts"] - e).total_seconds()
        for m, e in zip(table["__metadata__"].to_pylist(), table["event_ts"].to_pylist(), strict=True)
    ]
    assert any(x > 180 for x in lag) and max(lag) < 1800, max(lag)


def test_an_auto_run_runs_what_it_chose_reports_why_and_keeps_it_on_a_restart(
    spark: SparkSession, dataset: Dataset, tmp_path: Path
) -> None:
    cfg = auto(dataset, tmp_path, "spark_app.examples.rmi:pipeline", "attributed_plays", "playback_ts")
    report = run(cfg, spark)
    assert report.mode_choice is not None and report.mode_choice.mode == "bounded", report.mode_choice
    assert report.batches == 1 and report.summary()["alignment_mode"] == "bounded"
    left = read_report(cfg)
    assert left is not None and left.mode == "bounded" and "no row arrived" in (left.mode_reason or "")
    saved = tmp_path / "ckpt" / MODE_FILE
    assert json.loads(saved.read_text())["mode"] == "bounded"
    # a restart goes on in the mode chosen first (here: as if the first attempt chose aligned),
    # whatever it would choose now
    saved.write_text(json.dumps({"requested": "auto", "mode": "aligned", "reason": "not bounded: earlier"}))
    again, probes = decided(spark, cfg, {"attributed_plays": "Project [a#1]"}, None, {})  # type: ignore[arg-type]
    assert probes == {}, "an aligned choice leaves nothing to prove"
    assert (again.mode, again.reason) == ("aligned", "not bounded: earlier")


def top_titles(sources: dict[str, Any]) -> dict[str, Any]:
    """Plays per title and 10-minute window, the window's end not kept: which windows the
    streaming run has written cannot be told from the output."""
    from pyspark.sql import functions as F

    plays = sources["playbacks"].withWatermark("event_ts", "30 minutes")
    counts = plays.groupBy(F.window("event_ts", "10 minutes").alias("w"), "title_id").count()
    return {"top_titles": counts.select(F.col("w.start").alias("window_start"), "title_id", "count")}
