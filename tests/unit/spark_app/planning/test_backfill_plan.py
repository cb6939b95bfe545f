"""A Backfill's plan without Spark: the admission replay, peak state and disorder on hand-made
splits (pure), then driver-only plans of real pyiceberg SQLite tables whose files are known
(statistics present or not, an empty window, a wide file, a warm-up the pipeline declares too
short), the report the plan application leaves, `python -m spark_app plan`'s exit codes and
`kappa plan --no-spark` on the example manifests."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, TimestampType
from rich.console import Console

from kappa_operator.cli.commands import main as kappa
from kappa_operator.local.overrides import local_catalog
from kappa_operator.local.plan import PlanOptions, plan_manifest
from spark_app.__main__ import main as spark_app_main
from spark_app.contract.config import JobConfig, parse_config
from spark_app.contract.reports.plan import PlanReport, read_report
from spark_app.planning import forecast
from spark_app.planning.admission import Limits
from spark_app.planning.forecast import Member, simulate
from spark_app.planning.plan import decide_backfill
from spark_app.planning.run import run_plan
from spark_app.planning.splits import FilePiece, Split
from spark_app.window.horizon import StateHorizon
from spark_app.window.lateness import check_lateness

S = 1_000_000
T0 = datetime(2026, 11, 1, 10, tzinfo=UTC)
ROOT = Path(__file__).resolve().parents[4]
EXAMPLES = ROOT / "examples"


def split(lower_s: float, upper_s: float, rows: int = 10, path: str = "f") -> Split:
    lo, hi = int(lower_s * S), int(upper_s * S)
    return Split(lo, hi, (FilePiece(f"{path}-{lo}", None, rows, 100),), rows, 100)


def every(starts: list[float], span: float, rows: int = 10) -> tuple[Split, ...]:
    return tuple(split(s, s + span, rows) for s in starts)


# --- the admission replay (pure) ----------------------------------------------------------


def test_two_aligned_sources_replay_the_readers_rules_batch_by_batch() -> None:
    a = Member("j/out/a", "out", "a", every([0, 10, 20, 30], 5))
    b = Member("j/out/b", "out", "b", every([0, 10, 20, 30], 5))
    sim = simulate([a, b], "aligned", timedelta(seconds=10))
    # batch 1: a asks first and is held (b has not reported); b admits lower <= 0 + 10
    # batch 2: a admits to 10 (global 0), b to 30 (global 20); batch 3: a alone (b finished)
    assert [batch.admitted for batch in sim.batches] == [
        {"j/out/b": (0, 2)},
        {"j/out/a": (0, 2), "j/out/b": (2, 4)},
        {"j/out/a": (2, 4)},
    ]
    assert sim.positions == {"j/out/a": 4, "j/out/b": 4} and sim.stalled == ()
    assert forecast.data_batches(sim, [a, b]) == 3
    # the other order of the query's sources shifts who waits in the first batch
    first = simulate([b, a], "aligned", timedelta(seconds=10)).batches[0]
    assert first.admitted == {"j/out/a": (0, 2)}


def test_strict_lockstep_unordered_one_batch_and_read_limits() -> None:
    a = Member("j/out/a", "out", "a", every([0, 10, 20, 30], 5))
    assert len(simulate([a], "strict", timedelta(0)).batches) == 4, "no drift: one split per batch here"
    assert len(simulate([a], "aligned", timedelta(seconds=15)).batches) == 2
    assert len(simulate([a], "unordered", timedelta(minutes=10)).batches) == 1
    capped = Member("j/out/a", "out", "a", a.splits, Limits(max_files=3))
    assert [batch.admitted for batch in simulate([capped], "unordered", timedelta(0)).batches] == [
        {"j/out/a": (0, 3)},
        {"j/out/a": (3, 4)},
    ]


def test_an_empty_first_batch_does_not_end_a_query_a_later_one_does() -> None:
    """Spark runs batch 0 on the sources' first offsets whatever they admit (measured:
    tests/spark/test_alignment_start.py); a later batch in which nothing is admitted ends the
    query under availableNow."""
    a = Member("j/one/a", "one", "a", every([0, 100], 5))
    b = Member("j/two/b", "two", "b", every([0, 100], 5))
    sim = simulate([a, b], "aligned", timedelta(seconds=10))
    # query one meets b missing in its batch 0: held by another query, a waits; query two's b
    # admits 0; then query one's batch 0 goes on (a at 0 is the minimum), and both read to the end
    assert not sim.stalled and sim.batches[0] == forecast.Batch("two", {"j/two/b": (0, 1)})
    late = Member("j/one/c", "one", "c", every([500], 5))
    held = simulate([a, late], "strict", timedelta(0))
    # strict: a, asked first, is held in batch 0 (c has not reported) and c (500) is past the
    # bound of a's 0, so batch 0 is empty; then a admits 0, then 100 and, a finished, c 500
    assert not held.stalled and [b.admitted for b in held.batches] == [
        {"j/one/a": (0, 1)},
        {"j/one/a": (1, 2), "j/one/c": (0, 1)},
    ]


def test_peak_state_follows_the_watermark_one_batch_behind() -> None:
    m = Member("j/out/a", "out", "a", every([0, 10, 20], 10))
    sim = simulate([m], "strict", timedelta(0))
    assert len(sim.batches) == 3
    # batch 1: no watermark yet (10 rows); batch 2: watermark 10 - 5 = 5 -> half of the first + 10;
    # batch 3: watermark 15 -> the first gone, half of the second + 10
    assert forecast.peak_state(sim, [m], timedelta(seconds=5), timedelta(0), True) == 15
    assert forecast.peak_state(sim, [m], timedelta(seconds=5), timedelta(seconds=5), True) == 20
    assert forecast.peak_state(sim, [m], None, timedelta(0), True) == 30, "no watermark: nothing is evicted"
    assert forecast.peak_state(sim, [m], timedelta(seconds=5), timedelta(0), False) == 0, "stateless"
    whole = simulate([m], "unordered", timedelta(0))
    assert forecast.peak_state(whole, [m], timedelta(seconds=5), timedelta(0), True) == 30


def test_out_of_order_counts_a_batch_as_read_in_any_order() -> None:
    m = Member("j/out/a", "out", "a", (split(0, 20), split(5, 8), split(30, 31)))
    strict = simulate([m], "strict", timedelta(0))
    assert forecast.out_of_order(strict, [m]) == {"a": 20 * S}, "batch 1 holds [0, 20]"
    aligned = simulate([m], "aligned", timedelta(seconds=40))
    assert forecast.out_of_order(aligned, [m]) == {"a": 31 * S}, "one batch: 31 s from first to newest"


def test_rows_within_and_from_spread_a_split_evenly() -> None:
    s = split(0, 100, rows=50)
    assert forecast.rows_within(s, 0, 50 * S) == 25 and forecast.rows_within(s, 200 * S, 300 * S) == 0
    assert forecast.rows_from(s, None) == 50 and forecast.rows_from(s, 80 * S) == 10
    assert forecast.rows_within(split(5, 5, rows=7), 0, 10 * S) == 7, "a point split is in or out"


def test_largest_drift_that_fits_is_what_the_guard_passes() -> None:
    delay, span = timedelta(minutes=30), timedelta(minutes=6, seconds=43, microseconds=500_000)
    fit = forecast.max_drift_fitting(delay, span, "aligned")
    assert fit == timedelta(minutes=23, seconds=16)
    assert check_lateness(delay, fit, span, "aligned", False).ok
    assert not check_lateness(delay, fit + timedelta(seconds=1), span, "aligned", False).ok
    assert forecast.max_drift_fitting(None, span, "aligned") is None
    assert forecast.max_drift_fitting(delay, span, "unordered") is None
    assert forecast.max_drift_fitting(timedelta(minutes=5), span, "aligned") == timedelta(0)


def test_stateful_operators_are_found_in_analyzed_plans() -> None:
    assert forecast.stateful("~Project [a#1]\n+- ~Join Inner, (a#1 = b#2)\n   :- ~EventTimeWatermark x")
    assert forecast.stateful("+- ~Aggregate [window#32-T1800000ms, title_id#17L], [count(1)]")
    assert forecast.stateful("~DeduplicateWithinWatermark [playback_id#63]")
    assert not forecast.stateful("~Project [a#1]\n+- ~Filter (a#1 > 0)\n   +- ~StreamingRelationV2 kappa-iceberg")
    assert not forecast.stateful("kappa-iceberg")


def test_warnings_name_the_table_and_the_fix() -> None:
    wide = forecast.split_warnings([split(0, 3 * 3600), split(0, 60)], "demo.t")
    assert len(wide) == 1 and "1 split(s) of demo.t span more than 1h (the widest 3h" in wide[0]
    assert "sliceSpan" in wide[0] and forecast.split_warnings([split(0, 3600)], "demo.t") == []
    stats = forecast.statistics_warning(3, 4, "demo.t", "event_ts")
    assert "3 of 4 data files of demo.t" in stats and "write.metadata.metrics.column.event_ts" in stats
    late = forecast.lateness_warning(
        timedelta(minutes=37), timedelta(minutes=30), timedelta(minutes=30), timedelta(minutes=23)
    )
    assert "needs a watermark delay of at least 37m" in late and "at most 23m" in late


# --- driver-only plans of real tables -----------------------------------------------------

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True), NestedField(2, "event_ts", TimestampType(), required=True)
)
ARROW = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("event_ts", pa.timestamp("us"), False)])


def catalog_props(root: Path) -> dict[str, str]:
    root.mkdir(parents=True, exist_ok=True)
    return {"uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}


def make_table(props: dict[str, str], name: str, files: list[list[float]], **properties: str) -> None:
    """One data file per entry of ``files`` (event times in minutes after T0), in that order."""
    catalog = SqlCatalog("default", **props)
    catalog.create_namespace_if_not_exists("demo")
    table = catalog.create_table(f"demo.{name}", schema=SCHEMA, properties=properties)
    n = 0
    for minutes in files:
        ts = [int((T0 + timedelta(minutes=m)).timestamp() * S) for m in minutes]
        ids = list(range(n, n + len(ts)))
        n += len(ts)
        table.append(pa.Table.from_arrays([pa.array(ids, pa.int64()), pa.array(ts, pa.timestamp("us"))], schema=ARROW))


def config(tmp: Path, props: dict[str, str], tables: list[str], **fields: Any) -> JobConfig:
    base: dict[str, Any] = {
        "name": "plan",
        "pipeline": "spark_app.examples.copy:pipeline",
        "mode": "backfill",
        "catalogs": {"default": {"type": "sql", **props}},
        "sources": {t: {"kind": "icebergBackfill", "table": f"demo.{t}"} for t in tables},
        "sinks": {"copy": {"kind": "parquet", "path": str(tmp / "out")}},
        "checkpoint": {"location": str(tmp / "ckpt")},
        "window": {"start": T0.isoformat(), "end": (T0 + timedelta(hours=1)).isoformat()},
        "alignment": {"maxDrift": "10m", "lateness": "30m"},
    }
    base.update(fields)
    return parse_config(base)


FILES = [[m, m + 4] for m in range(0, 60, 5)]
"""Twelve files of two rows, 5 minutes apart, each spanning 4 minutes."""


def test_driver_only_plan_of_known_files(tmp_path: Path) -> None:
    props = catalog_props(tmp_path / "data")
    make_table(props, "a", FILES)
    make_table(props, "b", [[m + 1, m + 3] for m in range(0, 60, 5)])
    cfg = config(tmp_path, props, ["a", "b"], sources={
        t: {"kind": "icebergBackfill", "table": f"demo.{t}", "split": {"maxBundleSpan": "0s", "openFileCost": 10**9}}
        for t in ("a", "b")
    })  # fmt: skip
    report = decide_backfill(cfg, None)
    assert report.state == "Planned" and not report.from_query_plan
    a, b = report.sources
    assert (a.files, a.rows, a.rows_in_window, a.splits, a.has_statistics) == (12, 24, 24, 12, True)
    assert a.max_split_span_s == 240 and b.max_split_span_s == 120 and a.sliced_files == 0
    assert report.rows_total == 48 and report.bytes_total == a.bytes + b.bytes > 0
    # the guard's own function on the same inputs: 30m >= 10m + 4m
    assert report.lateness_ok and report.pipeline_lateness_s == 1800 and report.lateness_required_s == 840
    assert (
        report.lateness_message
        == check_lateness(timedelta(minutes=30), timedelta(minutes=10), timedelta(minutes=4), "aligned", False).message
    )
    assert report.max_drift_fitting_s == 1560
    # Merged admission rounds (the default batchRowBudget): batch 1 is one round (the planner, a,
    # has no lookahead of b yet); batch 2 takes every remaining round (46 rows < the budget).
    assert report.expected_batches == 2
    assert report.peak_state_rows > 0
    # the pipeline declares no state_horizon(): its look-back is the query plan's to say
    assert report.state_horizon_s is None and report.recommended_warmup_s is None
    assert report.horizon.startswith("unknown") and "without --no-spark" in report.horizon
    assert any("driver-only" in w for w in report.warnings)
    one_round = decide_backfill(cfg.model_copy(update={"alignment": cfg.alignment.model_copy(
        update={"batch_row_budget": 0})}), None)  # fmt: skip
    # One round per batch: a (lowers 0, 5, .., 55 min) asks first: held in batch 1 while b admits
    # 1 and 6; then a: 0-10, 15-25, 30-40, 45-55 and b: 11-21, 26-36, 41-51, 56: five batches.
    assert one_round.expected_batches == 5


def test_a_table_without_statistics_on_the_ordering_column_warns_and_still_plans(tmp_path: Path) -> None:
    props = catalog_props(tmp_path / "data")
    make_table(props, "nostats", FILES, **{"write.metadata.metrics.column.event_ts": "none"})
    make_table(props, "stats", FILES)
    report = decide_backfill(config(tmp_path, props, ["nostats"]), None)
    with_stats = decide_backfill(config(tmp_path, props, ["stats"]), None).sources[0]
    assert report.state == "Planned"
    (src,) = report.sources
    assert not src.has_statistics and src.files == 12 and src.rows == 24
    (warning,) = src.warnings
    assert "12 of 12 data files of demo.nostats have no lower/upper bounds on the ordering column event_ts" in warning
    assert "write.metadata.metrics.column.event_ts=full" in warning
    # as the run's planner does: each file is read on its ordering column and cut to its true range,
    # so the splits are those of the same files with statistics
    assert src.sliced_files == 12 and with_stats.sliced_files == 0 and with_stats.has_statistics
    assert (src.splits, src.max_split_span_s) == (with_stats.splits, with_stats.max_split_span_s) == (6, 540)
    unordered = decide_backfill(config(tmp_path, props, ["nostats"], alignment={"mode": "unordered"}), None)
    (src,) = unordered.sources
    assert src.sliced_files == 0 and src.max_split_span_s == pytest.approx(3600), "unordered: each spans the window"
    assert unordered.expected_batches == 1 and unordered.max_drift_fitting_s is None


def test_a_window_the_history_does_not_hold_is_refused_naming_the_history(tmp_path: Path) -> None:
    props = catalog_props(tmp_path / "data")
    make_table(props, "a", FILES)
    later = {"start": (T0 + timedelta(days=2)).isoformat(), "end": (T0 + timedelta(days=2, hours=1)).isoformat()}
    report = decide_backfill(config(tmp_path, props, ["a"], window=later), None)
    assert report.state == "Failed" and report.error is not None
    assert report.error.startswith("spec.window [2026-11-03T10:00:00Z, 2026-11-03T11:00:00Z) holds no history: ")
    assert "source a (demo.a) holds 2026-11-01T10:00:00Z to 2026-11-01T10:59:00Z" in report.error
    assert "set the window within the history" in report.error


def test_a_window_the_history_covers_in_part_is_planned_with_the_missing_part(tmp_path: Path) -> None:
    props = catalog_props(tmp_path / "data")
    make_table(props, "a", FILES)  # rows from 10:00 to 10:59
    half = {"start": (T0 + timedelta(minutes=30)).isoformat(), "end": (T0 + timedelta(minutes=150)).isoformat()}
    report = decide_backfill(config(tmp_path, props, ["a"], window=half), None)
    assert report.state == "Planned"
    (notice,) = [w for w in report.warnings if "is not in its history" in w]
    assert "source a (demo.a) holds 2026-11-01T10:00:00Z to 2026-11-01T10:59:00Z" in notice
    assert "[2026-11-01T10:59:00Z, 2026-11-01T12:30:00Z) of spec.window" in notice


def test_a_wide_split_and_a_drift_too_large_for_the_lateness_are_warned(tmp_path: Path) -> None:
    props = catalog_props(tmp_path / "data")
    make_table(props, "a", [*FILES, [0, 90]])  # a file of two rows 90 minutes apart
    split_cfg = {"sliceSpan": None}
    cfg = config(
        tmp_path,
        props,
        ["a"],
        window={"start": T0.isoformat(), "end": (T0 + timedelta(hours=2)).isoformat()},
        sources={"a": {"kind": "icebergBackfill", "table": "demo.a", "split": split_cfg}},
        alignment={"maxDrift": "10m", "lateness": "30m"},
    )
    report = decide_backfill(cfg, None)
    assert report.sources[0].max_split_span_s == 90 * 60
    assert any("span more than 1h (the widest 1h30m" in w for w in report.sources[0].warnings)
    assert not report.lateness_ok and "Raise the watermark delay" in report.lateness_message
    (late,) = [w for w in report.warnings if "needs a watermark delay" in w]
    assert "no maxDrift fits" in late, "a 90-minute split alone exceeds a 30-minute delay"


def pipeline(sources: dict[str, Any], **args: Any) -> dict[str, Any]:
    """This module as a pipeline (a copy) that declares its horizon below."""
    return {"copy": next(iter(sources.values()))}


def state_horizon(**args: Any) -> StateHorizon:
    """The look-back this module declares as a pipeline, from its pipelineArgs."""
    span = timedelta(minutes=int(args.get("look_back_minutes", 0)))
    return StateHorizon(span, timedelta(0), (f"declared look-back of {span}",))


def test_a_declared_look_back_sets_the_recommended_warm_up_and_refuses_a_short_one(tmp_path: Path) -> None:
    props = catalog_props(tmp_path / "data")
    make_table(props, "a", FILES)
    window = {"start": (T0 + timedelta(minutes=30)).isoformat(), "end": (T0 + timedelta(hours=1)).isoformat()}
    fields = {"pipeline": f"{__name__}:pipeline", "pipelineArgs": {"look_back_minutes": 20}, "window": window}
    short = decide_backfill(config(tmp_path, props, ["a"], **fields), None)
    assert short.state == "Planned" and short.recommended_warmup_s == 1200
    assert not short.warmup_ok and "Set window.warmup to at least 20m" in short.warmup_message
    assert any(w.startswith("the run would be refused at start: window.warmup is 0s") for w in short.warnings)
    assert short.state_horizon_s == 1800 + 1200, "lateness + look-back"
    ok = decide_backfill(config(tmp_path, props, ["a"], **{**fields, "window": {**window, "warmup": "20m"}}), None)
    assert ok.warmup_ok and ok.sources[0].rows > short.sources[0].rows, "the warm-up is read too"


def test_a_missing_table_or_one_without_snapshot_is_a_failed_report_naming_the_source(tmp_path: Path) -> None:
    props = catalog_props(tmp_path / "data")
    make_table(props, "a", FILES)
    catalog = SqlCatalog("default", **props)
    catalog.create_table("demo.empty", schema=SCHEMA)
    cfg = config(tmp_path, props, ["a"], sources={"a": {"kind": "icebergBackfill", "table": "demo.nope"}})
    missing = decide_backfill(cfg, None)
    assert missing.state == "Failed" and missing.error is not None
    assert missing.error.startswith("source a: ") and "demo.nope" in missing.error
    empty = decide_backfill(config(tmp_path, props, ["empty"]), None)
    assert empty.state == "Failed" and empty.error is not None
    assert "source empty: demo.empty has no snapshot" in empty.error and "run would fail" in empty.error


def test_run_plan_writes_the_report_and_the_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    props = catalog_props(tmp_path / "data")
    make_table(props, "a", FILES)
    cfg = config(tmp_path, props, ["a"])
    report = run_plan(cfg, None)
    assert read_report(cfg) == report and report.state == "Planned"
    job = tmp_path / "job.json"
    job.write_text(cfg.to_json())
    assert spark_app_main(["plan", "--config", str(job), "--no-spark"]) == 0
    assert PlanReport.model_validate_json(capsys.readouterr().out).expected_batches == report.expected_batches
    bad = config(tmp_path, props, ["a"], sources={"a": {"kind": "icebergBackfill", "table": "demo.nope"}})
    job.write_text(bad.to_json())
    assert spark_app_main(["plan", "--config", str(job), "--no-spark"]) == 3
    failed = read_report(bad)
    assert failed is not None and failed.state == "Failed" and "demo.nope" in (failed.error or "")
    capsys.readouterr()
    job.write_text(json.dumps({**json.loads(cfg.to_json()), "window": {"start": "yesterday"}}))
    assert spark_app_main(["plan", "--config", str(job), "--no-spark"]) == 2
    assert "window" in capsys.readouterr().err


def test_an_unexpected_error_still_leaves_a_failed_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_app.planning import run as planning_run

    props = catalog_props(tmp_path / "data")
    make_table(props, "a", FILES)
    cfg = config(tmp_path, props, ["a"])
    run_plan(cfg, None)

    def broken(*args: Any) -> PlanReport:
        raise RuntimeError("the object store went away\nat line 2")

    monkeypatch.setattr(planning_run, "decide_backfill", broken)
    with pytest.raises(RuntimeError):
        run_plan(cfg, None)
    report = read_report(cfg)
    assert report is not None and report.state == "Failed"
    assert report.error == "plan of backfill plan failed: RuntimeError: the object store went away"
    bad = config(tmp_path, props, ["a"], pipeline="spark_app.examples.nothing_here:pipeline")
    refused = decide_backfill(bad, None)
    assert refused.state == "Failed" and "cannot import module 'spark_app.examples.nothing_here'" in (
        refused.error or ""
    )


# --- kappa plan on the examples ------------------------------------------------------------


def example_data(root: Path) -> None:
    """An hour of the examples' tables (ingest.impressions, ingest.playbacks) in the window."""
    from spark_app.examples.generator import GeneratorConfig, generate

    job = yaml.safe_load((EXAMPLES / "rmi-streamingjob.yaml").read_text())
    props = local_catalog("default", job["spec"]["catalogs"]["default"], root)
    (root / "catalogs").mkdir(parents=True, exist_ok=True)
    gen = GeneratorConfig(
        start=datetime(2026, 11, 1, 14, tzinfo=UTC), hours=1, impressions_per_hour=2000, namespace="ingest"
    )
    generate(SqlCatalog("default", uri=props["uri"], warehouse=props["warehouse"]), gen)


def test_kappa_plan_of_the_example_backfill_without_spark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    root = (tmp_path / "local").resolve()
    local = ["--local", str(root), "--no-spark"]
    assert kappa(["plan", str(EXAMPLES / "rmi-backfill.yaml"), *local]) == 3, "no tables yet"
    text = " ".join(capsys.readouterr().out.split())
    assert "plan failed: source impressions: " in text and "ingest.impressions" in text
    example_data(root)
    assert kappa(["plan", str(EXAMPLES / "rmi-backfill.yaml"), *local, "--json"]) == 0
    report = PlanReport.model_validate_json(capsys.readouterr().out)
    assert report.state == "Planned" and {s.table for s in report.sources} == {"ingest.impressions", "ingest.playbacks"}
    assert report.rows_total == 2500, "2000 impressions + 500 playbacks, all in 14:00-15:00"
    assert report.pipeline_lateness_s == 1800, "pipelineArgs.lateness of the StreamingJob"
    assert report.max_drift_s == 600 and report.expected_batches >= 2  # merged rounds: few rows, few batches
    out = io.StringIO()
    code = plan_manifest(EXAMPLES / "rmi-backfill.yaml", None, PlanOptions(local=root, spark=False), Console(file=out))
    text = " ".join(out.getvalue().split())
    assert code == 0
    for shown in ("ingest.impressions", "expected micro-batches", "largest maxDrift that fits", "no row is dropped"):
        assert shown in text
    assert kappa(["plan", str(EXAMPLES / "rmi-streamingjob.yaml"), *local]) == 2
    assert "kappa plan plans a Backfill" in capsys.readouterr().out
