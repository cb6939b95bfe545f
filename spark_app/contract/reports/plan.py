"""The report a plan application leaves for the operator (``python -m spark_app plan``): what a
Backfill will read and do, computed from Iceberg metadata (manifests, column statistics) and
the pipeline's analyzed plan, never by reading rows. Light on purpose, like
``reports.publish``: the operator reads it without Spark or pyiceberg, and copies it (with an
ETA from its calibration) into ``status.plan``."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from spark_app.contract.config import JobConfig
from spark_app.contract.reports import located, read_located
from spark_app.contract.storage import Location

REPORT_NAME = "plan-report.json"


class SourcePlan(BaseModel):
    """One source's history over the window (and its warm-up), from manifests only."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str
    table: str
    snapshot_id: int | None
    """The snapshot planned (None: the table is empty)."""
    files: int
    bytes: int
    rows: int
    """Rows of the files the backfill reads (window + warm-up; files are read whole or by slice)."""
    rows_in_window: int
    """Of ``rows``, an estimate of those whose event time is in the window (per-file statistics)."""
    splits: int
    max_split_span_s: float
    """The largest event-time span of one split (a split is read as one unit: disorder within it)."""
    out_of_order_s: float
    """The out-of-orderliness the data implies: how far behind the newest event time already
    read (in the order the backfill reads splits) an event can come."""
    has_statistics: bool
    """The ordering column has lower/upper bounds in the manifests (without them every file spans
    everything: one split per file, no pruning, no ordering)."""
    warnings: list[str] = []
    sliced_files: int = 0
    """Files wider than ``split.sliceSpan`` whose ordering column the planner reads to cut them into
    time slices, as the run's own planner does (the only data a plan reads; 0 in unordered mode)."""


class PlanReport(BaseModel):
    """What a Backfill will do, before it runs (``status.plan`` is built from it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backfill: str | None
    """``namespace/name`` (None: a local plan of a manifest)."""
    state: Literal["Planned", "Failed"]
    error: str | None = None
    """Failed: what and where (the source, the reason, the fix)."""
    sources: list[SourcePlan] = []
    mode: str
    """The alignment mode the run would run in (``auto`` resolved)."""
    mode_reason: str | None = None
    """Why: as set in the spec, or what ``auto`` proved or found."""
    max_drift_s: float
    lateness_required_s: float
    """The watermark delay the chosen maxDrift needs: maxDrift + the largest split span."""
    pipeline_lateness_s: float | None
    """The pipeline's watermark delay (alignment.lateness, or from its plan); None: no watermark."""
    lateness_ok: bool
    """The lateness guard's verdict at start (the same function, ``spark_app.window.lateness``)."""
    lateness_message: str
    """The guard's message: with the fix when it fails."""
    max_drift_fitting_s: float | None
    """The largest maxDrift the pipeline's lateness allows (None: any, no watermark)."""
    expected_batches: int
    """Micro-batches the aligned (or unordered) admission will make, simulated on the splits."""
    peak_state_rows: int
    """Estimated peak rows in the pipeline's state (rows within the state horizon at once)."""
    state_horizon_s: float | None
    """How long the pipeline keeps a row in state (its lateness + window/session length)."""
    recommended_warmup_s: float | None
    """Warm-up that lets state at the window's start be complete (the state horizon)."""
    rows_total: int
    bytes_total: int
    warnings: list[str] = []
    planned_at: datetime
    drain_s: float = 0.0
    """How far past the window's end the run reads so results inside it close (the drain, as the
    runtime resolves it; the splits above include it)."""
    warmup_ok: bool = True
    """The warm-up check's verdict at start (``horizon.check_warmup``): False, the run is refused."""
    warmup_message: str = ""
    """The warm-up check's message: with the fix when it fails."""
    horizon: str = ""
    """What sets the state horizon and the warm-up: the plan's window lengths, session gaps and
    join bounds, and what the pipeline declares (``StateHorizon.describe``)."""
    from_query_plan: bool = True
    """The delay and horizon were read from the pipeline's analyzed plan, as the run reads them
    (False: a driver-only plan, from ``alignment.lateness``/``pipelineArgs`` and ``state_horizon()``)."""


def report_location(cfg: JobConfig) -> tuple[Location, str]:
    """Next to the backfill's checkpoint (``<checkpoint>/_kappa/plan-report.json``)."""
    return located(cfg, None, REPORT_NAME)


def read_report(cfg: JobConfig) -> PlanReport | None:
    """The report of the last finished plan run of ``cfg`` (None: none finished yet)."""
    return read_located(PlanReport, report_location(cfg))
