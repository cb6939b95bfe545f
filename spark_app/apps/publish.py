"""A finished backfill's validation of its branches against main and the publish of its
window, in Spark, leaving a small report for the operator.

Where it runs: in the backfill's own driver, once its query has written the window
(``run_and_publish``: the ``run`` command of a backfill config with ``publish``, which the
operator renders only when spec.publish.enabled), on the same SparkSession. A second
application only for this cost its pods, JVMs and spark-submit again (~42 s of a 121 s Backfill
on the cluster, issue 58). ``python -m spark_app publish`` (``run_publish``) remains the command
of the separate publish application the operator still creates where one is needed: a backfill
application that completed without leaving a report of its run (an image from before this
change, or a lost report). ``kappa run`` calls the same functions in-process.

The rows are read and rewritten by the application's executors with the job's own
credentials; the operator reads only the report (a few KB: counts, match ratio, a sample of
differing keys, the snapshot committed).

Resumable at any point: each table's publish is one atomic snapshot, a second run finds main
equal to the branch and commits nothing, and reports what the earlier run did (found by the
backfill's tag on main's snapshots). The report is cleared when a run starts and written
atomically, last."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from pyspark.sql import SparkSession

from spark_app.catalogs import load_table
from spark_app.contract.config import JobConfig, PublishConfig
from spark_app.contract.errors import KappaError
from spark_app.contract.reports.publish import PublishReport, TableReport, report_location
from spark_app.contract.sinks import IcebergSink
from spark_app.sinks.iceberg import finality
from spark_app.sinks.iceberg.commit import branch_history
from spark_app.sinks.iceberg.publish import publish
from spark_app.sinks.iceberg.window import TimeWindow

if TYPE_CHECKING:  # run.py is the query's whole machinery: imported when a run starts
    from spark_app.apps.result import RunResult

log = logging.getLogger("kappa.publishing")

BACKFILL = "kappa.backfill"
"""Snapshot property naming the backfill (``namespace/name``) whose publish made it."""


def clear_report(cfg: JobConfig) -> None:
    """Before a publish run: a report on storage is always this run's, never a stale one."""
    loc, name = report_location(cfg)
    loc.delete(name)


def _write(cfg: JobConfig, report: PublishReport) -> None:
    loc, name = report_location(cfg)
    loc.write_bytes(name, report.model_dump_json(indent=2).encode())


def _earlier(cfg: JobConfig, sink: IcebergSink, tag: str | None) -> dict[str, Any] | None:
    """This backfill's publish already in main: what that snapshot did, and the validation it
    was made on (recorded with it), not the second run's comparison of equal sides."""
    if tag is None:
        return None
    table = load_table(sink.catalog, cfg.catalogs[sink.catalog].properties(), sink.table)
    for snap in branch_history(table, "main"):
        props = snap.summary.additional_properties if snap.summary else {}
        if props.get(BACKFILL) != tag or "kappa.rows-added" not in props:
            continue
        earlier: dict[str, Any] = {
            "rows_removed": int(props["kappa.rows-removed"]),
            "rows_added": int(props["kappa.rows-added"]),
            "snapshot_id": snap.snapshot_id,
            "earlier": True,
            "match_ratio": float(props.get("kappa.match-ratio", "1")),
        }
        for field, prop in (("main_rows", "kappa.main-rows"), ("branch_rows", "kappa.branch-rows")):
            if prop in props:
                earlier[field] = int(props[prop])
        if "kappa.matched" in props:
            earlier["matched"] = int(props["kappa.matched"])
        if "kappa.differing-keys" in props:
            earlier["differing_keys"] = list(json.loads(props["kappa.differing-keys"]))
        return earlier
    return None


def publish_tables(spark: SparkSession, cfg: JobConfig, settings: PublishConfig) -> PublishReport:
    """Each Iceberg sink's branch, validated and published in turn; the first refusal stops."""
    assert cfg.window is not None
    started = datetime.now(UTC)
    tables: list[TableReport] = []

    def done(state: Literal["Published", "Refused", "Failed"], error: str | None = None) -> PublishReport:
        return PublishReport(
            backfill=settings.tag,
            state=state,
            tables=tables,
            error=error,
            started_at=started,
            finished_at=datetime.now(UTC),
        )

    for name, sink in cfg.sinks.items():
        if not isinstance(sink, IcebergSink):
            continue
        if sink.time_column is None:
            return done("Refused", f"sinks.{name}: set timeColumn on the StreamingJob's sink to publish a window")
        catalog = cfg.catalogs[sink.catalog].properties()
        branch = cfg.sink_branch(name)
        load = partial(load_table, sink.catalog, catalog, sink.table)
        try:
            result = publish(
                spark,
                load,
                catalog,
                branch,
                TimeWindow(sink.time_column, cfg.window.start, cfg.window.end),
                key=sink.key,
                min_match_ratio=settings.min_match_ratio,
                properties={BACKFILL: settings.tag} if settings.tag else None,
            )
        except KappaError as exc:
            return done("Refused", str(exc))
        c = result.comparison
        fields: dict[str, Any] = {
            "match_ratio": round(c.match_ratio, 6),
            "main_rows": c.main_rows,
            "branch_rows": c.branch_rows,
            "matched": c.matched,
            "differing_keys": [json.dumps(k, default=str, sort_keys=True) for k in c.differing],
            "rows_removed": result.rows_removed,
            "rows_added": result.rows_added,
            "snapshot_id": result.snapshot_id,
        }
        if result.snapshot_id is None:
            fields.update(_earlier(cfg, sink, settings.tag) or {})
        tables.append(
            TableReport(table=sink.table, branch=branch, not_final=finality.notices(load(), branch), **fields)
        )
    return done("Published")


def run_publish(cfg: JobConfig, spark: SparkSession) -> PublishReport:
    """The ``publish`` command (the separate publish application): clear the last report,
    then ``publish_and_report``."""
    _require_backfill(cfg)
    clear_report(cfg)
    return publish_and_report(cfg, spark)


def run_and_publish(
    cfg: JobConfig,
    spark: SparkSession | None = None,
    timeout: float | None = None,
    publishing: Callable[[str], None] | None = None,
) -> tuple[RunResult, PublishReport | None]:
    """The ``run`` command: the job's query, then, for a backfill whose config has ``publish``,
    its validation and publish in the same driver, on the same SparkSession (None: no publish).

    The last report is cleared before the query starts, so a report on storage is always this
    run's: the operator reads it once the application completed and ends the Backfill on it. A
    Refused validation returns normally (the application completes; the operator fails the
    Backfill from the report, without a restart). An error in publish leaves a Failed report
    and is raised, so the application fails and the operator's restart resumes it from the
    checkpoint: the query has nothing left to read, and the publish, idempotent, runs again. A
    query that fails, or ends without reading its window, publishes nothing and leaves no
    report. ``publishing``: told (one line) when the publish starts; by default, logged."""
    from spark_app.apps.run import run
    from spark_app.apps.session import build_session

    if cfg.mode != "backfill" or cfg.publish is None:
        return run(cfg, spark, timeout), None
    _require_backfill(cfg)
    spark = spark or build_session(cfg)  # first: its executors start while the rest is prepared
    clear_report(cfg)
    result = run(cfg, spark, timeout)
    (publishing or log.info)(publishing_line(cfg))
    return result, publish_and_report(cfg, spark)


def publishing_line(cfg: JobConfig) -> str:
    """What a person is told while a backfill validates and publishes (driver log, ``kappa run``)."""
    branches = sorted({cfg.sink_branch(n) for n, s in cfg.sinks.items() if isinstance(s, IcebergSink)})
    return f"validating {', '.join(branches) or 'no branch'} against main and publishing"


def _require_backfill(cfg: JobConfig) -> None:
    if cfg.mode != "backfill" or cfg.window is None:
        raise KappaError(f"job {cfg.name}: publish needs a backfill config (mode: backfill, a window)")


def publish_and_report(cfg: JobConfig, spark: SparkSession) -> PublishReport:
    """Validate and publish (``publish_tables``), then write the report: also on a failure,
    naming it, before re-raising so that the application fails."""
    settings = cfg.publish or PublishConfig()
    started = datetime.now(UTC)
    try:
        report = publish_tables(spark, cfg, settings)
    except Exception as exc:
        first = (str(exc).splitlines() or [""])[0][:500]
        error = f"publish of backfill {cfg.name} failed: {type(exc).__name__}: {first}"
        _write(
            cfg,
            PublishReport(
                backfill=settings.tag,
                state="Failed",
                tables=[],
                error=error,
                started_at=started,
                finished_at=datetime.now(UTC),
            ),
        )
        raise
    _write(cfg, report)
    log.info("publish of %s: %s%s", cfg.name, report.state, f" ({report.error})" if report.error else "")
    return report
