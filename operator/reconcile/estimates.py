"""A Backfill's plan as its status shows it, and the ETA from this cluster's own measurements
(pure).

Finished backfills that were planned record their throughput, rows read per second per
executor core, in their status and in the namespace's ConfigMap ``kappa-backfill-calibration``
(it outlives the Backfill objects). A plan's ETA divides its rows by the median of the newest
recorded runs times its own executor cores, and says which runs it used, or that there are
none yet."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from kappa_operator.models.backfill import Backfill, Calibration, PlanStatus, SourcePlanStatus
from kappa_operator.models.streaming_job import StreamingJob
from spark_app.config import format_duration
from spark_app.plan_report import PlanReport

CONFIG_MAP = "kappa-backfill-calibration"
KEEP = 20
"""Runs kept per namespace (the newest)."""
USED = 5
"""Runs an ETA is computed from (the newest; their median rate)."""


@dataclass(frozen=True)
class Run:
    """One finished backfill's measured throughput."""

    backfill: str
    rows: int
    seconds: float
    cores: int
    finished_at: str

    @property
    def rate(self) -> float:
        """Rows per second per executor core."""
        return self.rows / self.seconds / self.cores


def executor_cores(job: StreamingJob) -> int:
    return max(1, job.spec.executor.instances * job.spec.executor.cores)


def runs_from(data: dict[str, str] | None) -> list[Run]:
    """The recorded runs, newest first (entries that do not parse are skipped, not fatal)."""
    out = []
    for value in (data or {}).values():
        try:
            raw = json.loads(value)
            out.append(Run(raw["backfill"], int(raw["rows"]), float(raw["seconds"]), int(raw["cores"]), raw["at"]))
        except (ValueError, KeyError, TypeError):
            continue
    return sorted((r for r in out if r.seconds > 0 and r.cores > 0), key=lambda r: r.finished_at, reverse=True)


def recorded(data: dict[str, str] | None, key: str, run: Run) -> dict[str, str]:
    """``data`` with ``run`` added under ``key`` (the backfill's uid: a retry overwrites) and
    only the newest ``KEEP`` runs kept (a removed key is set to None: a merge patch drops it)."""
    entry = {"backfill": run.backfill, "rows": run.rows, "seconds": run.seconds, "cores": run.cores}
    merged: dict[str, Any] = {**(data or {}), key: json.dumps({**entry, "at": run.finished_at})}
    keep = {f"{r.backfill}|{r.finished_at}" for r in runs_from(merged)[:KEEP]}
    out: dict[str, Any] = {}
    for k, v in merged.items():
        parsed = runs_from({k: v})
        out[k] = v if parsed and f"{parsed[0].backfill}|{parsed[0].finished_at}" in keep else None
    return out


def eta(rows: int, cores: int, runs: list[Run]) -> tuple[timedelta | None, str]:
    """Expected duration of reading ``rows`` on ``cores`` executor cores, and its basis."""
    if not runs:
        return None, (
            "no calibration yet: no planned backfill has finished in this namespace (the first one that does "
            "records its rows/s per core for the next plans)"
        )
    used = runs[:USED]
    rate = statistics.median(r.rate for r in used)
    names = ", ".join(r.backfill for r in used)
    seconds = rows / (rate * cores)
    return timedelta(seconds=round(seconds)), (
        f"{rate:,.0f} rows/s per core (median of {len(used)} finished backfill(s): {names}) x {cores} cores"
    )


def measured(bf: Backfill, job: StreamingJob, finished: datetime) -> Run | None:
    """The throughput of ``bf``, planned and now finished: rows it read over its run time."""
    status = bf.status
    if status is None or status.plan is None or status.plan.error or not status.started_at:
        return None
    started = datetime.fromisoformat(status.started_at.replace("Z", "+00:00"))
    seconds = (finished - started).total_seconds()
    if seconds <= 0 or status.plan.rows <= 0:
        return None
    stamp = finished.strftime("%Y-%m-%dT%H:%M:%SZ")
    return Run(f"{bf.metadata.namespace}/{bf.metadata.name}", status.plan.rows, seconds, executor_cores(job), stamp)


def calibration(run: Run) -> dict[str, Any]:
    return Calibration(
        rows=run.rows, seconds=round(run.seconds, 1), cores=run.cores, rows_per_second_per_core=round(run.rate, 1)
    ).model_dump(by_alias=True)


def _d(seconds: float | None) -> str | None:
    return None if seconds is None else format_duration(timedelta(seconds=round(seconds)))


def plan_status(report: PlanReport, cores: int, runs: list[Run], now: str) -> dict[str, Any]:
    """``status.plan`` from the plan application's report, with the ETA."""
    took, basis = eta(report.rows_total, cores, runs)
    sources = [
        SourcePlanStatus(
            source=s.source,
            table=s.table,
            files=s.files,
            bytes=s.bytes,
            rows=s.rows,
            splits=s.splits,
            max_split_span=_d(s.max_split_span_s) or "0s",
            out_of_order=_d(s.out_of_order_s) or "0s",
            has_statistics=s.has_statistics,
        )
        for s in report.sources
    ]
    warnings = list(report.warnings) + [f"{s.source}: {w}" for s in report.sources for w in s.warnings]
    return PlanStatus(
        files=sum(s.files for s in report.sources),
        bytes=report.bytes_total,
        rows=report.rows_total,
        expected_batches=report.expected_batches,
        peak_state_rows=report.peak_state_rows,
        lateness_required=_d(report.lateness_required_s) or "0s",
        pipeline_lateness=_d(report.pipeline_lateness_s),
        lateness_ok=report.lateness_ok,
        lateness_message=report.lateness_message,
        max_drift_fitting=_d(report.max_drift_fitting_s),
        recommended_warmup=_d(report.recommended_warmup_s),
        eta=None if took is None else str(took),
        eta_basis=basis,
        warnings=warnings,
        sources=sources,
        planned_at=now,
        error=report.error if report.state == "Failed" else None,
    ).model_dump(by_alias=True, exclude_none=True)


def failed_plan(error: str, now: str) -> dict[str, Any]:
    """``status.plan`` when the plan application failed without a report."""
    return {
        "files": 0,
        "bytes": 0,
        "rows": 0,
        "expectedBatches": 0,
        "peakStateRows": 0,
        "latenessRequired": "0s",
        "latenessOk": False,
        "latenessMessage": "not planned",
        "etaBasis": "not planned",
        "plannedAt": now,
        "error": error,
    }
