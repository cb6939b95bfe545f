"""``python -m spark_app publish --config job.json``: validate a finished backfill's branches
against main and publish its window, in Spark, then leave a small report for the operator.

This is the application the operator renders after a Backfill's query completes (and what
``kappa run`` and ``kappa demo`` call in-process): the rows are read and rewritten by this
application's executors with the job's own credentials; the operator reads only the report
(a few KB: counts, match ratio, a sample of differing keys, the snapshot committed).

Resumable at any point: each table's publish is one atomic snapshot, a second run finds main
equal to the branch and commits nothing, and reports what the earlier run did (found by the
backfill's tag on main's snapshots). The report is written atomically, last."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from functools import partial
from typing import Any, Literal

from pyspark.sql import SparkSession

from spark_app.catalogs import load_table
from spark_app.contract.config import IcebergSink, JobConfig, PublishConfig
from spark_app.contract.errors import KappaError
from spark_app.contract.reports.publish import PublishReport, TableReport, report_location
from spark_app.sinks.iceberg import finality
from spark_app.sinks.iceberg.commit import branch_history
from spark_app.sinks.iceberg.publish import publish
from spark_app.sinks.iceberg.window import TimeWindow

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
    """The publish application: clear the last report, publish, write the report (also on a
    failure, naming it, before re-raising so the application fails)."""
    if cfg.mode != "backfill" or cfg.window is None:
        raise KappaError(f"job {cfg.name}: publish needs a backfill config (mode: backfill, a window)")
    settings = cfg.publish or PublishConfig()
    clear_report(cfg)
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
