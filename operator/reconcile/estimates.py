"""A Backfill's plan as its status shows it, and the ETA from this cluster's own measurements
(pure).

Finished backfills that were planned record their throughput in their status and in the
namespace's ConfigMap ``kappa-backfill-calibration`` (it outlives the Backfill objects): rows,
seconds and executor cores, and, from their driver's run report, their time split into a fixed
cost per micro-batch and a cost per row. A plan's ETA is ``outside + batches x per_batch +
rows x per_row`` with the medians of the newest recorded runs (the plan's batch count is the
source's own admission replayed): a backfill's wall time is mostly per-batch cost when sparse
and mostly rows when dense, so rows per second alone, the fallback for runs without a report,
misses by up to 10x between the two. The basis says which runs it used, or that there are none
yet."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from kappa_operator.models.backfill import Backfill, Calibration, PlanStatus, SourcePlanStatus
from kappa_operator.models.common import instant
from kappa_operator.models.streaming_job import StreamingJob
from spark_app.contract.durations import format_duration
from spark_app.contract.reports.plan import PlanReport
from spark_app.contract.reports.run import RunReport

CONFIG_MAP = "kappa-backfill-calibration"
KEEP = 20
"""Runs kept per namespace (the newest)."""
USED = 5
"""Runs an ETA is computed from (the newest; their median rate)."""
MAX_ETA_S = 10 * 365 * 86400


@dataclass(frozen=True)
class Costs:
    """A run's time by kind, from its driver's micro-batches (``spark_app.contract.reports.run``)."""

    batches: int
    per_batch_s: float
    core_s_per_row: float
    """Seconds per row x the run's executor cores: what a row costs one core."""
    outside_s: float
    """The run's time outside micro-batches: submission, planning, query start, publish."""


@dataclass(frozen=True)
class Run:
    """One finished backfill's measured throughput."""

    backfill: str
    rows: int
    seconds: float
    cores: int
    finished_at: str
    costs: Costs | None = None
    """None: its driver left no run report (an older Spark side, or storage refused it)."""
    mode: str | None = None
    """The alignment mode it ran in (None: its driver did not say): a bounded run's costs are a
    batch query's, an aligned run's a stream's, and an ETA takes them from runs of its own mode."""

    @property
    def rate(self) -> float:
        """Rows per second per executor core."""
        return self.rows / self.seconds / self.cores


def executor_cores(job: StreamingJob) -> int:
    if job.spec.executor.instances == 0:  # its tasks run in its driver
        return job.spec.driver.cores
    return max(1, job.spec.executor.instances * job.spec.executor.cores)


def runs_from(data: dict[str, str] | None) -> list[Run]:
    """The recorded runs, newest first. The ConfigMap is anyone's to edit: an entry that does
    not parse, or whose numbers could not be a run (not finite, not positive), is skipped."""
    out = []
    for value in (data or {}).values():
        try:
            run = _run(json.loads(value))
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError):
            continue
        if run is not None:
            out.append(run)
    return sorted(out, key=lambda r: r.finished_at, reverse=True)


def _positive(x: Any) -> float | None:
    v = float(x)
    return v if math.isfinite(v) and v > 0 else None


def _run(raw: dict[str, Any]) -> Run | None:
    name, at = raw["backfill"], raw["at"]
    rows, seconds, cores = _positive(raw["rows"]), _positive(raw["seconds"]), _positive(raw["cores"])
    if not (isinstance(name, str) and isinstance(at, str)) or rows is None or seconds is None or cores is None:
        return None
    if rows < 1 or cores < 1:
        return None
    costs = None
    if (c := raw.get("costs")) is not None:
        values = [float(c[k]) for k in ("perBatchS", "coreSPerRow", "outsideS")]
        if all(math.isfinite(v) and 0 <= v < 1e9 for v in values):
            costs = Costs(int(c["batches"]), *values)
    mode = raw.get("mode")
    return Run(name, int(rows), seconds, int(cores), at, costs, mode if isinstance(mode, str) else None)


def recorded(data: dict[str, str] | None, key: str, run: Run) -> dict[str, str]:
    """``data`` with ``run`` added under ``key`` (the backfill's uid: a retry overwrites) and
    only the newest ``KEEP`` runs kept (a removed key is set to None: a merge patch drops it)."""
    entry: dict[str, Any] = {"backfill": run.backfill, "rows": run.rows, "seconds": run.seconds, "cores": run.cores}
    if run.mode is not None:
        entry["mode"] = run.mode
    if run.costs is not None:
        c = run.costs
        entry["costs"] = {
            "batches": c.batches,
            "perBatchS": c.per_batch_s,
            "coreSPerRow": c.core_s_per_row,
            "outsideS": c.outside_s,
        }
    merged: dict[str, Any] = {**(data or {}), key: json.dumps({**entry, "at": run.finished_at})}
    keep = {f"{r.backfill}|{r.finished_at}" for r in runs_from(merged)[:KEEP]}
    out: dict[str, Any] = {}
    for k, v in merged.items():
        parsed = runs_from({k: v})
        out[k] = v if parsed and f"{parsed[0].backfill}|{parsed[0].finished_at}" in keep else None
    return out


def eta(
    rows: int, cores: int, runs: list[Run], batches: int | None = None, mode: str | None = None
) -> tuple[timedelta | None, str]:
    """Expected duration of reading ``rows`` in ``batches`` micro-batches on ``cores`` executor
    cores, and its basis. Batch-aware from the newest runs that have costs; rows per second per
    core from the others (or when the batch count is unknown). With ``mode``, from runs of that
    mode when there are any: a batch query's row costs nothing like a stream's."""
    if not runs:
        return None, (
            "no calibration yet: no planned backfill has finished in this namespace (the first one that does "
            "records its costs for the next plans)"
        )
    same = [r for r in runs if r.mode == mode] if mode is not None else runs
    if not same:
        took, basis = eta(rows, cores, runs, batches)
        return took, f"no {mode} run recorded yet, from runs of other modes: {basis}"
    runs = same
    costed = [r for r in runs if r.costs is not None][:USED]
    if batches is not None and costed:
        return _batch_aware(rows, batches, cores, costed)
    used = runs[:USED]
    rate = statistics.median(r.rate for r in used)
    names = ", ".join(r.backfill for r in used)
    seconds = rows / (rate * cores)
    return _duration(seconds), (
        f"{rate:,.0f} rows/s per core (median of {len(used)} finished backfill(s): {names}) x {cores} cores"
    )


def _duration(seconds: float) -> timedelta:
    """An ETA as a timedelta, at most ten years (recorded runs are anyone's to edit)."""
    return timedelta(seconds=round(min(max(seconds, 0.0), MAX_ETA_S)))


def _batch_aware(rows: int, batches: int, cores: int, runs: list[Run]) -> tuple[timedelta, str]:
    costs = [r.costs for r in runs if r.costs is not None]
    outside = statistics.median(c.outside_s for c in costs)
    per_batch = statistics.median(c.per_batch_s for c in costs)
    core_s_per_row = statistics.median(c.core_s_per_row for c in costs)
    seconds = outside + batches * per_batch + rows * core_s_per_row / cores
    names = ", ".join(r.backfill for r in runs)
    return _duration(seconds), (
        f"{outside:,.0f}s outside micro-batches + {batches} batches x {per_batch:.2f}s + {rows:,} rows x "
        f"{core_s_per_row * 1e6:.1f} core-us / {cores} cores (medians of {len(runs)} finished backfill(s): {names})"
    )


def run_costs(report: RunReport | None, seconds: float, cores: int) -> Costs | None:
    """What ``report`` (the driver's) says of a run the operator timed at ``seconds``."""
    if report is None or report.costs.batches == 0:
        return None
    c = report.costs
    return Costs(c.batches, c.per_batch_s, c.per_row_s * cores, max(seconds - c.busy_s, 0.0))


def measured(bf: Backfill, job: StreamingJob, finished: datetime, report: RunReport | None = None) -> Run | None:
    """The throughput of ``bf``, planned and now finished: rows it read over its run time, and
    its costs by kind when its driver left a run report."""
    status = bf.status
    if status is None or status.plan is None or status.plan.error or not status.started_at:
        return None
    started = instant(status.started_at)
    seconds = (finished - started).total_seconds()
    if seconds <= 0 or status.plan.rows <= 0:
        return None
    stamp = finished.strftime("%Y-%m-%dT%H:%M:%SZ")
    cores = executor_cores(job)
    name = f"{bf.metadata.namespace}/{bf.metadata.name}"
    mode = None if report is None else report.mode
    return Run(name, status.plan.rows, seconds, cores, stamp, run_costs(report, seconds, cores), mode)


def calibration(run: Run) -> dict[str, Any]:
    c = run.costs
    return Calibration(
        rows=run.rows,
        seconds=round(run.seconds, 1),
        cores=run.cores,
        rows_per_second_per_core=round(run.rate, 1),
        batches=None if c is None else c.batches,
        seconds_per_batch=None if c is None else round(c.per_batch_s, 3),
        core_microseconds_per_row=None if c is None else round(c.core_s_per_row * 1e6, 3),
        seconds_outside_batches=None if c is None else round(c.outside_s, 1),
        mode=run.mode,
    ).model_dump(by_alias=True, exclude_none=True)


def _d(seconds: float | None) -> str | None:
    return None if seconds is None else format_duration(timedelta(seconds=round(seconds)))


def plan_status(report: PlanReport, cores: int, runs: list[Run], now: str) -> dict[str, Any]:
    """``status.plan`` from the plan application's report, with the ETA."""
    took, basis = eta(report.rows_total, cores, runs, report.expected_batches, report.mode)
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
        mode=report.mode,
        mode_reason=report.mode_reason,
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
