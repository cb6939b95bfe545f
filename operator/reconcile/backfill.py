"""What to do for a Backfill (pure): resolve its job, launch it, follow it, finish it.

Phases: Pending (the StreamingJob is missing) -> Running (application submitted; progress is
the alignment group's global watermark between window start and end) -> Succeeded | Failed.
A failed backfill keeps its checkpoint and branch: deleting its application and letting the
operator recreate it resumes from where it stopped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from kappa_operator.models.backfill import Backfill
from kappa_operator.models.common import Condition, instant
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.phases import STATES, app_message, app_state, condition
from kappa_operator.reconcile.streaming_job import Event
from kappa_operator.render.jobconfig import backfill_branch, backfill_checkpoint, backfill_config, config_hash
from kappa_operator.render.spark_application import BACKFILL_RESTART, Launch, Owner, config_map, spark_application


@dataclass(frozen=True)
class Progress:
    """Where the group's global watermark is in the window, and when it will reach the end."""

    ratio: float
    eta: timedelta | None

    @property
    def percent(self) -> str:
        return f"{self.ratio * 100:.0f}%"


def progress(
    start: datetime,
    end: datetime,
    global_watermark: datetime | None,
    previous: tuple[datetime, float] | None,
    now: datetime,
) -> Progress:
    """``previous``: (when, ratio) of the last observation, for the rate behind the ETA."""
    if global_watermark is None:
        return Progress(0.0, None)
    span = (end - start).total_seconds()
    ratio = min(1.0, max(0.0, (global_watermark - start).total_seconds() / span))
    eta = None
    if previous is not None and ratio > previous[1] and now > previous[0]:
        rate = (ratio - previous[1]) / (now - previous[0]).total_seconds()
        eta = timedelta(seconds=round((1.0 - ratio) / rate))
    return Progress(ratio, eta)


@dataclass(frozen=True)
class BackfillPlan:
    config_map: dict[str, Any] | None = None
    create_app: dict[str, Any] | None = None
    status: dict[str, Any] = field(default_factory=dict)
    events: tuple[Event, ...] = ()
    retry_after: float | None = None
    """Look again later (the job is missing)."""


def plan_backfill(
    bf: Backfill,
    job: StreamingJob | None,
    app: dict[str, Any] | None,
    coordinator_url: str | None,
    now: str,
    token_secret: str | None = None,
) -> BackfillPlan:
    previous: list[Condition] = list(bf.status.conditions) if bf.status else []
    base: dict[str, Any] = {"observedGeneration": bf.metadata.generation, "branch": backfill_branch(bf)}

    def status(phase: str, ok: bool, reason: str, message: str, **extra: Any) -> dict[str, Any]:
        conds = condition(previous, "Succeeded" if phase == "Succeeded" else "Ready", ok, reason, message, now)
        return {
            **base,
            **extra,
            "phase": phase,
            "message": message,
            "conditions": [c.model_dump(by_alias=True) for c in conds],
        }

    if job is None:
        msg = f"StreamingJob {bf.spec.job_ref.name} not found in {bf.metadata.namespace}; waiting for it"
        changed = bf.status is None or bf.status.phase != "Pending"
        return BackfillPlan(
            status=status("Pending", False, "JobNotFound", msg),
            events=(Event("Warning", "JobNotFound", msg),) if changed else (),
            retry_after=30,
        )
    cfg = backfill_config(bf, job, coordinator_url)
    owner = Owner("Backfill", bf.metadata.name, bf.metadata.namespace, bf.metadata.uid)
    extra = {"applicationName": owner.name, "checkpoint": backfill_checkpoint(bf, job)}
    if app is None:
        if bf.status is not None and bf.status.phase in ("Succeeded", "Failed"):
            return BackfillPlan(status=bf.status.model_dump(by_alias=True, exclude_none=True))
        launch = Launch(
            bf.spec.image or job.spec.image,
            job.spec.driver,
            job.spec.executor,
            job.spec.service_account,
            BACKFILL_RESTART,
            token_secret,
        )
        window = f"{bf.spec.window.start} .. {bf.spec.window.end}"
        return BackfillPlan(
            config_map=config_map(owner, cfg),
            create_app=spark_application(owner, cfg, launch, config_hash(cfg)),
            status=status("Running", False, "Submitted", f"backfilling {window} into {backfill_branch(bf)}", **extra),
            events=(Event("Normal", "Submitted", f"created SparkApplication {owner.name} for {window}"),),
        )
    state = app_state(app) or ""
    phase, _, reason = STATES.get(state, ("Unknown", False, "Unknown"))
    mapped = {"Completed": "Succeeded", "Failed": "Failed"}.get(phase, "Running")
    message = app_message(app) or f"SparkApplication is {state or 'submitted'}"
    changed = bf.status is None or bf.status.application_state != state
    kind = "Warning" if mapped == "Failed" else "Normal"
    return BackfillPlan(
        status=status(mapped, mapped != "Failed", reason, message, applicationState=state, **extra),
        events=(Event(kind, reason, message),) if changed else (),
    )


def progress_status(bf: Backfill, global_watermark_us: int | None, lag_us: int | None, now: datetime) -> dict[str, Any]:
    """The status fields a person watches in `kubectl get bf` (from the coordinator's view)."""
    start, end = instant(bf.spec.window.start), instant(bf.spec.window.end)
    gw = (
        None
        if global_watermark_us is None or global_watermark_us < 0
        else datetime.fromtimestamp(global_watermark_us / 1e6, UTC)
    )
    prev = None
    extra = bf.status.model_extra if bf.status is not None and bf.status.model_extra else {}
    if extra.get("progressAt") and extra.get("progressRatio") is not None:
        prev = (datetime.fromisoformat(str(extra["progressAt"])), float(extra["progressRatio"]))
    p = progress(start, end, gw, prev, now)
    return {
        "progress": p.percent,
        "progressRatio": round(p.ratio, 6),
        "progressAt": now.isoformat(),
        "globalWatermark": gw.strftime("%Y-%m-%dT%H:%M:%SZ") if gw else None,
        "alignmentLag": None if lag_us is None else f"{lag_us / 1e6:.0f}s",
        "eta": None if p.eta is None else str(p.eta),
    }
