"""``python -m spark_app plan --config job.json``: a Backfill's plan, computed where the job's
credentials are (the short application the operator renders for ``spec.dryRun``, or ``kappa
plan`` in-process), left as a small report for the operator.

Like publish and restore: the last report is cleared first (a report on storage is always this
run's), the new one is written atomically, last, and a refusal is a Failed report naming the
source and the fix; an unexpected error is reported too, then re-raised so the application
fails."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from spark_app.contract.config import JobConfig
from spark_app.contract.errors import KappaError
from spark_app.contract.reports.plan import PlanReport, report_location
from spark_app.planning.plan import decide_backfill, failed

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("kappa.plan")


def _write(cfg: JobConfig, report: PlanReport) -> None:
    loc, name = report_location(cfg)
    loc.write_bytes(name, report.model_dump_json(indent=2).encode())


def run_plan(cfg: JobConfig, spark: SparkSession | None) -> PlanReport:
    """The plan application: clear the last report, plan, write the report. ``spark`` None
    plans driver-only (no query plan: see ``spark_app.planning.plan``)."""
    if cfg.mode != "backfill" or cfg.window is None:
        raise KappaError(f"job {cfg.name}: plan needs a backfill config (mode: backfill, a window)")
    tag = cfg.publish.tag if cfg.publish is not None else None
    loc, name = report_location(cfg)
    loc.delete(name)
    try:
        report = decide_backfill(cfg, spark, tag)
    except Exception as exc:
        first = (str(exc).splitlines() or [""])[0][:500]
        _write(cfg, failed(cfg, tag, f"plan of backfill {cfg.name} failed: {type(exc).__name__}: {first}"))
        raise
    _write(cfg, report)
    done = f"{report.expected_batches} micro-batches, {report.rows_total} rows"
    log.info("plan of %s: %s (%s)", cfg.name, report.state, report.error or done)
    return report
