"""What a finished backfill's driver measured of its own micro-batches, left for the operator
next to its checkpoint (``_kappa/run-report.json``): rows, batches, and its time split into a
fixed cost per micro-batch and a cost per row.

Why: a run's wall time is mostly fixed cost at low density (query start, then ~0.5-1.5 s per
stateful micro-batch whatever it carries), mostly rows at high density. Rows per second alone
is then a property of the run's density, not of the cluster, and an ETA made from it misses by
10x between a sparse and a dense backfill (bench/RESULTS.md, plan accuracy). The plan predicts
the batch count exactly, so the operator's ETA is ``outside + batches x per_batch + rows x
per_row`` with these costs. Light on purpose: the operator reads it without Spark."""

from __future__ import annotations

import logging
import statistics
from collections.abc import Sequence
from datetime import UTC, datetime
from itertools import combinations
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from spark_app.contract.config import JobConfig
from spark_app.contract.reports import located, read_located
from spark_app.contract.row_counts import delivered_rows, reused_rows, scanned_rows
from spark_app.contract.storage import Location

if TYPE_CHECKING:
    from spark_app.contract.alignment import ModeChoice

REPORT_NAME = "run-report.json"
log = logging.getLogger("kappa.run_report")


class BatchCosts(BaseModel):
    """One run's micro-batches: a least-squares line of trigger time against input rows."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    batches: int
    """Micro-batches that read rows."""
    rows: int
    busy_s: float
    """Time inside micro-batches (every trigger, empty ones too): the rest of a run's wall time
    is outside them (submission, planning, query start, publish)."""
    per_batch_s: float
    """The line's intercept: what a batch costs whatever it carries (>= 0)."""
    per_row_s: float
    """The line's slope: seconds per input row on this run's executors (>= 0)."""


class RunReport(BaseModel):
    """What a backfill application's driver leaves when its query finished."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backfill: str
    seconds: float
    """The driver's own run, from planning the sources to the last batch."""
    costs: BatchCosts
    finished_at: datetime
    mode: str | None = None
    """The alignment mode the run ran in (None: a driver older than ``auto``)."""
    mode_reason: str | None = None
    """Why: as set in the spec, or what ``auto`` proved or found."""
    scanned_rows: int | None = None
    """Rows the sources decoded from their files to deliver ``costs.rows`` (a file's rows
    outside the window and filter count; a row kept from a file's earlier read for a later
    time slice does not): None from a driver older than the count."""
    reused_rows: int | None = None
    """Rows delivered from a file's earlier read instead of decoding it again."""


FIT_POINTS = 300
"""Batches the fit looks at, at most (evenly spaced): its pairs grow with the square."""


def batch_costs(progress: Sequence[dict[str, Any]]) -> BatchCosts:
    """Fit trigger time = per_batch + per_row x rows over the batches that read rows, by
    Theil-Sen (the median of pairwise slopes, then the median intercept): batch times on a
    shared cluster have spikes (a GC, a slow commit, the query's start in the first trigger)
    that pull a least-squares line around and would be taken for per-batch or per-row cost.
    One batch, or batches of equal size, cannot be separated: all of it is then per row."""
    counted = [(delivered_rows(p), p) for p in progress]
    data = [(n, p["durationMs"]["triggerExecution"] / 1000) for n, p in counted if n]
    busy = sum(p.get("durationMs", {}).get("triggerExecution", 0) / 1000 for p in progress)
    rows = sum(x for x, _ in data)
    if not data:
        return BatchCosts(batches=0, rows=0, busy_s=round(busy, 3), per_batch_s=0.0, per_row_s=0.0)
    points = data if len(data) <= FIT_POINTS else [data[i * len(data) // FIT_POINTS] for i in range(FIT_POINTS)]
    slopes = [(y2 - y1) / (x2 - x1) for (x1, y1), (x2, y2) in combinations(points, 2) if x2 != x1]
    if slopes:
        slope = max(statistics.median(slopes), 0.0)
        intercept = max(statistics.median(y - slope * x for x, y in points), 0.0)
    else:
        slope, intercept = statistics.mean(y for _, y in points) / max(points[0][0], 1), 0.0
    return BatchCosts(
        batches=len(data), rows=rows, busy_s=round(busy, 3), per_batch_s=round(intercept, 4), per_row_s=slope
    )


def report_location(cfg: JobConfig) -> tuple[Location, str]:
    return located(cfg, None, REPORT_NAME)


def write_report(
    cfg: JobConfig, seconds: float, progress: Sequence[dict[str, Any]], choice: ModeChoice | None = None
) -> RunReport | None:
    """Leave the report; a failure (storage, or a progress it cannot read) is logged, not
    raised: the backfill's output is committed already, and only the next plans' ETAs lose
    this run."""
    try:
        costs = batch_costs(progress)
        report = RunReport(
            backfill=cfg.name,
            seconds=round(seconds, 3),
            costs=costs,
            finished_at=datetime.now(UTC),
            mode=None if choice is None else choice.mode,
            mode_reason=None if choice is None else choice.reason,
            scanned_rows=scanned_rows(progress),
            reused_rows=reused_rows(progress),
        )
        loc, name = report_location(cfg)
        loc.write_bytes(name, report.model_dump_json(indent=2).encode())
    except Exception:
        log.warning(
            "backfill %s: could not leave its run report (the next plans' ETAs miss it)", cfg.name, exc_info=True
        )
        return None
    return report


def read_report(cfg: JobConfig) -> RunReport | None:
    """The report of the backfill's last finished run (None: none, or from an older Spark side)."""
    return read_located(RunReport, report_location(cfg))
