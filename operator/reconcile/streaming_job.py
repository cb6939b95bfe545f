"""What to do for a StreamingJob, from the job and its SparkApplication as observed (pure).

Like the Flink Kubernetes Operator's last-state upgrade: a changed spec (a different JobConfig
hash) deletes the application, and the next reconcile starts it again from the same
checkpoint location. Suspend deletes it and keeps the checkpoint; resume recreates it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kappa_operator.models.common import Condition
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.conditions import Verdict, live, set_conditions
from kappa_operator.reconcile.phases import STATES, app_message, app_state
from kappa_operator.render.jobconfig import PAUSED_ANNOTATION, config_hash, live_checkpoint, streaming_job_config
from kappa_operator.render.spark_application import LIVE_RESTART, Owner, config_map, job_launch, spark_application
from spark_app.errors import KappaError


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True)
class JobPlan:
    config_map: dict[str, Any] | None = None
    """Apply (create or replace) this ConfigMap."""
    create_app: dict[str, Any] | None = None
    """Create this SparkApplication."""
    delete_app: bool = False
    """Delete the current SparkApplication (suspend, or a restart after a spec change)."""
    status: dict[str, Any] = field(default_factory=dict)
    events: tuple[Event, ...] = ()


def owner_of(job: StreamingJob) -> Owner:
    return Owner("StreamingJob", job.metadata.name, job.metadata.namespace, job.metadata.uid)


def plan_streaming_job(job: StreamingJob, app: dict[str, Any] | None, now: str) -> JobPlan:
    owner = owner_of(job)
    previous: list[Condition] = list(job.status.conditions) if job.status else []
    base: dict[str, Any] = {"observedGeneration": job.metadata.generation, "applicationName": owner.app_name}

    def status(phase: str, ready: bool, reason: str, message: str, state: str | None) -> dict[str, Any]:
        verdict = Verdict(phase, reason, message)
        conds = set_conditions(previous, live(ready), verdict, now, job.metadata.generation)
        return {
            **base,
            "phase": phase,
            "applicationState": state,
            "message": message,
            "conditions": [c.model_dump(by_alias=True) for c in conds],
        }

    try:
        cfg = streaming_job_config(job)
    except (ValueError, KappaError) as exc:
        # A spec the schema let through but the pipeline's config refuses (an unknown catalog,
        # a bad partition transform): said on the object, not retried (an edit is re-handled).
        msg = f"cannot run this StreamingJob: {exc}"
        if app is not None:  # a bad edit does not stop what runs: it keeps its previous config
            msg += f"; SparkApplication {owner.app_name} keeps running with the previous spec"
        changed = job.status is None or job.status.message != msg
        return JobPlan(
            status=status("Failed", False, "InvalidSpec", msg, None),
            events=(Event("Warning", "InvalidSpec", msg),) if changed else (),
        )
    digest = config_hash(cfg)
    base.update(configHash=digest, checkpointLocation=live_checkpoint(job))
    running_hash = ((app or {}).get("metadata", {}).get("annotations") or {}).get("kappa.dev/config-hash")

    paused = job.metadata.annotations.get(PAUSED_ANNOTATION)
    if paused:
        msg = f"stopped by {paused}; the live checkpoint is kept"
        if app is not None:
            return JobPlan(
                delete_app=True,
                status=status("Rewinding", False, "Rewinding", msg, None),
                events=(Event("Normal", "Rewinding", f"{paused}: deleted the SparkApplication"),),
            )
        return JobPlan(status=status("Rewinding", False, "Rewinding", msg, None))

    if job.spec.suspend:
        if app is not None:
            # Straight to Suspended (not "Suspending"): the application's DELETED event reports
            # the same status, so whichever of the two status writes lands last, they agree.
            return JobPlan(
                delete_app=True,
                status=status("Suspended", False, "Suspended", "suspended; the checkpoint is kept", None),
                events=(Event("Normal", "Suspended", "spec.suspend: deleted the SparkApplication, checkpoint kept"),),
            )
        return JobPlan(status=status("Suspended", False, "Suspended", "suspended; the checkpoint is kept", None))

    if app is None:
        launch = job_launch(job, LIVE_RESTART)
        return JobPlan(
            config_map=config_map(owner, cfg),
            create_app=spark_application(owner, cfg, launch, digest),
            status=status("Submitted", False, "Submitted", "SparkApplication created", None),
            events=(Event("Normal", "Submitted", f"created SparkApplication {owner.app_name} (config {digest})"),),
        )

    if running_hash != digest:
        return JobPlan(
            delete_app=True,
            status=status("Restarting", False, "SpecChanged", "spec changed: restarting from the checkpoint", None),
            events=(
                Event(
                    "Normal",
                    "SpecChanged",
                    f"config {running_hash} -> {digest}: restarting the application from its checkpoint",
                ),
            ),
        )

    state = app_state(app) or ""
    if not state and job.status is not None and job.status.phase == "Submitted" and not job.status.application_state:
        # created by us and not yet taken by the Spark operator: its first event says nothing
        # the status does not already say (no second "Submitted" Event, no status write)
        return JobPlan()
    phase, ready, reason = STATES.get(state, ("Unknown", False, "Unknown"))
    message = app_message(app) or f"SparkApplication is {state or 'submitted'}"
    changed = job.status is None or job.status.application_state != state
    events = ()
    if changed:
        kind = "Warning" if phase == "Failed" else "Normal"
        events = (Event(kind, reason, message),)
    return JobPlan(status=status(phase, ready, reason, message, state), events=events)
