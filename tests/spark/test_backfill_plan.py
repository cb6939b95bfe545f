"""A Backfill's plan against the run it predicts, with real local Spark: the same backfill
planned (Iceberg metadata and the pipeline's analyzed plan, no Spark job) and then run on the
session's generated dataset; the guard's and the warm-up check's refusals predicted word for
word; `kappa plan` and `python -m spark_app plan` with a SparkSession."""

from __future__ import annotations

import io
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import SparkSession
from rich.console import Console

from kappa_operator.cli.commands import main as kappa
from kappa_operator.local.overrides import local_catalog
from kappa_operator.local.plan import PlanOptions, plan_manifest
from spark_app.__main__ import main as spark_app_main
from spark_app.apps.run import run
from spark_app.contract.errors import LatenessError, WarmupError
from spark_app.contract.reports.plan import PlanReport, read_report
from spark_app.contract.reports.run import read_report as read_run_report
from spark_app.contract.trace import read_trace
from spark_app.planning.plan import decide_backfill
from tests.spark.conftest import T0, Dataset, sources

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
WINDOW = {"start": (T0 + timedelta(minutes=40)).isoformat(), "end": (T0 + timedelta(minutes=80)).isoformat()}


def rmi(dataset: Dataset, tmp: Path, warmup: str = "30m", **alignment: Any) -> Any:
    return dataset.config(
        tmp,
        name="rmi-plan",
        mode="backfill",
        sink_time_column="playback_ts",
        sources=sources("icebergBackfill", split={"maxBundleSpan": "2m"}),
        window={**WINDOW, "warmup": warmup},
        alignment={"maxDrift": "4m", **alignment},
    )


def within(planned: float, actual: float, tolerance: float) -> bool:
    return abs(planned - actual) <= tolerance * actual


def test_the_plan_predicts_the_aligned_run(spark: SparkSession, dataset: Dataset, tmp_path: Path) -> None:
    cfg = rmi(dataset, tmp_path)
    plan = decide_backfill(cfg, spark)
    assert plan.state == "Planned" and plan.from_query_plan
    assert not (tmp_path / "trace.jsonl").exists(), "planning leaves the run's trace alone"
    report = run(cfg, spark)
    assert report.lateness is not None and report.dropped_by_watermark == 0
    # the guard's verdict, same function on the same inputs
    assert plan.lateness_ok == report.lateness.ok
    assert plan.lateness_message == report.lateness.message
    assert plan.lateness_required_s == report.lateness.required.total_seconds()
    span = plan.lateness_required_s - 240
    assert plan.pipeline_lateness_s == 1800 and plan.max_drift_fitting_s == math.floor(1800 - span)
    # the run's own planner made the same splits (its trace records each source's plan)
    planned = {e["source"]: e for e in read_trace(tmp_path / "trace.jsonl", "plan")}
    for src in plan.sources:
        assert src.splits == planned[src.source]["splits"] and src.rows == planned[src.source]["rows"]
        assert src.max_split_span_s * 1e6 == planned[src.source]["max_span_us"]
    # predictions: batches within 10% (or one), peak state within 30%, rows within 1%
    assert abs(plan.expected_batches - report.batches) <= max(1, 0.1 * report.batches), (plan, report.batches)
    assert within(plan.peak_state_rows, report.peak_state_rows, 0.3), (plan.peak_state_rows, report.peak_state_rows)
    assert within(plan.rows_total, report.input_rows, 0.01), (plan.rows_total, report.input_rows)
    # the range join's 30-minute bound: warm-up and state horizon from the analyzed plan
    assert plan.recommended_warmup_s == 1800 and plan.state_horizon_s == 3600 and plan.warmup_ok
    assert plan.horizon == "range join bound of 30m"
    # the driver's run report (next to its checkpoint) is what calibrates the operator's ETAs
    left = read_run_report(cfg)
    assert left is not None and left.backfill == cfg.name
    assert (left.costs.batches, left.costs.rows) == (report.batches, report.input_rows)
    assert 0 < left.costs.busy_s <= left.seconds and left.costs.per_batch_s >= 0 and left.costs.per_row_s >= 0


def test_unordered_is_one_batch_with_everything_in_state(spark: SparkSession, dataset: Dataset, tmp_path: Path) -> None:
    cfg = rmi(dataset, tmp_path, mode="unordered")
    plan = decide_backfill(cfg, spark)
    report = run(cfg, spark)
    assert plan.expected_batches == report.batches == 1
    assert plan.peak_state_rows == plan.rows_total and within(plan.peak_state_rows, report.peak_state_rows, 0.3)
    assert report.lateness is not None and plan.lateness_message == report.lateness.message
    aligned = decide_backfill(rmi(dataset, tmp_path / "aligned"), spark)
    assert aligned.peak_state_rows < 0.9 * plan.peak_state_rows, "alignment bounds the state"
    assert any("mode unordered admits the whole window at once" in w for w in plan.warnings)


def test_the_guards_refusals_are_predicted_word_for_word(spark: SparkSession, dataset: Dataset, tmp_path: Path) -> None:
    too_far = rmi(dataset, tmp_path / "drift", maxDrift="30m")
    plan = decide_backfill(too_far, spark)
    assert plan.state == "Planned" and not plan.lateness_ok
    assert any("lower alignment.maxDrift to at most" in w for w in plan.warnings)
    with pytest.raises(LatenessError) as refused:
        run(too_far, spark)
    assert str(refused.value) == plan.lateness_message

    cold = rmi(dataset, tmp_path / "warmup", warmup="0s")
    plan = decide_backfill(cold, spark)
    assert plan.state == "Planned" and not plan.warmup_ok and plan.recommended_warmup_s == 1800
    with pytest.raises(WarmupError) as refused_warmup:
        run(cold, spark)
    assert str(refused_warmup.value) == plan.warmup_message


def test_python_m_spark_app_plan_with_a_session(
    spark: SparkSession, dataset: Dataset, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = rmi(dataset, tmp_path)
    job = tmp_path / "job.json"
    job.write_text(cfg.to_json())
    assert spark_app_main(["plan", "--config", str(job)]) == 0
    printed = PlanReport.model_validate_json(capsys.readouterr().out)
    assert printed.from_query_plan and read_report(cfg) == printed
    missing = cfg.model_copy(update={"sources": {**cfg.sources, "playbacks": cfg.sources["playbacks"].model_copy(
        update={"table": "demo.nope"})}})  # fmt: skip
    job.write_text(missing.to_json())
    assert spark_app_main(["plan", "--config", str(job)]) == 3
    failed = read_report(missing)
    assert failed is not None and failed.state == "Failed" and "demo.nope" in (failed.error or "")


def test_kappa_plan_of_the_example_backfill(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from spark_app.examples.generator import GeneratorConfig, generate

    monkeypatch.setenv("COLUMNS", "250")
    root = (tmp_path / "local").resolve()
    job = yaml.safe_load((EXAMPLES / "rmi-streamingjob.yaml").read_text())
    props = local_catalog("default", job["spec"]["catalogs"]["default"], root)
    (root / "catalogs").mkdir(parents=True)
    gen = GeneratorConfig(
        start=datetime(2026, 11, 1, 14, tzinfo=UTC), hours=1, impressions_per_hour=2000, namespace="ingest"
    )
    generate(SqlCatalog("default", uri=props["uri"], warehouse=props["warehouse"]), gen)
    assert kappa(["plan", str(EXAMPLES / "rmi-backfill.yaml"), "--local", str(root), "--json"]) == 0
    report = PlanReport.model_validate_json(capsys.readouterr().out)
    assert report.from_query_plan and report.lateness_ok and report.rows_total == 2500
    assert report.recommended_warmup_s == 1800, "the range join's bound, read from the query plan"
    out = io.StringIO()
    code = plan_manifest(EXAMPLES / "rmi-backfill.yaml", None, PlanOptions(local=root), Console(file=out, width=250))
    text = " ".join(out.getvalue().split())
    assert code == 0 and "range join bound of 30m" in text, text
    # the example leaves alignment.mode at auto: its range join runs bounded, and the plan says why
    assert report.mode == "bounded" and "no row arrived behind the live watermark" in (report.mode_reason or "")
    assert "why this mode" in text and "stateless steps, stream-static and inner joins" in text, text
